//! The fake engine's DP group: what a vLLM DP group of MoE ranks does to
//! the loop, without vLLM. Ranks meet over TCP on `VLLM_DP_MASTER_PORT`
//! (rank 0 listens, the others connect), and [`FakeDpGroup::all_reduce_max`]
//! is a blocking all-reduce of one byte, as vLLM's `has_unfinished_dp` is
//! over gloo. The fake engine calls it in `keep_stepping`, in `sync_ranks`
//! and once in every step (a MoE forward's DP sync): ranks that fall out of
//! step block for ever, exactly as vLLM's do, so a loop that is not in
//! lockstep shows as a hang (ended by `--point-timeout`), and a rank that
//! dies ends its peers with an error (the socket closes).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// One rank's end of the group.
pub struct FakeDpGroup {
    pub rank: u32,
    pub size: u32,
    /// Rank 0: a stream per other rank (rank order); others: the one to rank 0.
    links: Vec<TcpStream>,
}

impl FakeDpGroup {
    /// The group of this process from vLLM's variables (`VLLM_DP_SIZE`,
    /// `VLLM_DP_RANK`, `VLLM_DP_MASTER_PORT`), `None` without a group.
    ///
    /// Errors: a variable that is not a number, or the ranks did not meet
    /// within `wait`.
    pub fn from_env(wait: Duration) -> Result<Option<FakeDpGroup>> {
        let var = |k: &str| std::env::var(k).ok().map(|v| v.trim().parse::<u32>().with_context(|| format!("{k}={v}"))).transpose();
        let size = var("VLLM_DP_SIZE")?.unwrap_or(1);
        if size <= 1 {
            return Ok(None);
        }
        let rank = var("VLLM_DP_RANK")?.unwrap_or(0);
        let port = var("VLLM_DP_MASTER_PORT")?.context("VLLM_DP_MASTER_PORT is not set")?;
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + wait;
        let links = if rank == 0 {
            let listener = TcpListener::bind(&addr).with_context(|| format!("listening on {addr}"))?;
            let mut links: Vec<Option<TcpStream>> = (1..size).map(|_| None).collect();
            for _ in 1..size {
                let (mut s, _) = listener.accept()?;
                let mut r = [0u8; 4];
                s.read_exact(&mut r)?;
                let peer = u32::from_le_bytes(r);
                let slot = links.get_mut(peer as usize - 1).context("a peer rank out of range")?;
                *slot = Some(s);
            }
            links.into_iter().map(|s| s.expect("every rank met")).collect()
        } else {
            let mut s = loop {
                match TcpStream::connect(&addr) {
                    Ok(s) => break s,
                    Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                    Err(e) => bail!("rank {rank} could not reach rank 0 at {addr}: {e}"),
                }
            };
            s.write_all(&rank.to_le_bytes())?;
            vec![s]
        };
        for l in &links {
            l.set_nodelay(true)?;
        }
        Ok(Some(FakeDpGroup { rank, size, links }))
    }

    /// The largest `v` of every rank; blocks until every rank called it.
    ///
    /// Errors: a peer's connection closed (that rank died).
    pub fn all_reduce_max(&mut self, v: u8) -> Result<u8> {
        let peer_gone = |e: std::io::Error| anyhow::anyhow!("fake DP group: a peer rank is gone ({e})");
        if self.rank == 0 {
            let mut m = v;
            for l in &mut self.links {
                let mut b = [0u8];
                l.read_exact(&mut b).map_err(peer_gone)?;
                m = m.max(b[0]);
            }
            for l in &mut self.links {
                l.write_all(&[m]).map_err(peer_gone)?;
            }
            Ok(m)
        } else {
            let l = &mut self.links[0];
            l.write_all(&[v]).map_err(peer_gone)?;
            let mut b = [0u8];
            l.read_exact(&mut b).map_err(peer_gone)?;
            Ok(b[0])
        }
    }
}
