//! A prefill worker's loop: accept the decode workers' links, run each
//! prompt they send as a prefill-only request, send back vLLM's transfer
//! parameters, and keep stepping until every decode worker has hung up.

use std::collections::HashMap;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::link::{Link, wait};
use crate::engine::{KvTransfer, StepOutput};
use crate::protocol::pd::{FromPrefill, PrefillDone, ToPrefill};

/// How long an idle prefill worker waits for a prompt before it steps
/// anyway: its engine frees the blocks the decode side has read inside
/// steps (vLLM's NixlConnector), and on a shared CPU a busy-stepping idle
/// engine would take the core the other engines compute on.
pub const IDLE_WAIT: Duration = Duration::from_millis(5);

/// Serves prefills on `listener` to `decode_workers` decode workers, each
/// over its own link, until every one has hung up (or `stop` is set), then
/// returns. Links are accepted while serving: a decode worker whose engine
/// is still loading does not hold up one that is ready. The engine sees
/// its own request ids (several decode workers number their requests
/// alike); each reply goes back on the link its prompt came from, with the
/// decode worker's id.
///
/// Errors: fewer than `decode_workers` connected within
/// `connect_timeout`; the engine failed (a Python exception); a message
/// that is not one.
pub fn serve<E: KvTransfer>(engine: &mut E, listener: &TcpListener, decode_workers: usize, connect_timeout: Duration, stop: &AtomicBool) -> Result<()> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + connect_timeout;
    let mut links: Vec<Link> = Vec::new();
    // The engine's request id -> (link, the decode worker's id, when its line was read).
    let mut pending: HashMap<u64, (usize, u64, Instant)> = HashMap::new();
    let mut queued: HashMap<u64, f64> = HashMap::new();
    let mut next_id = 0u64;
    let mut out = StepOutput::default();
    while !stop.load(Ordering::Relaxed) {
        if links.len() < decode_workers {
            accept_waiting(listener, &mut links)?;
            if links.len() < decode_workers && Instant::now() > deadline {
                bail!("{} of {decode_workers} decode worker(s) connected within {} s", links.len(), connect_timeout.as_secs());
            }
        }
        if pending.is_empty() {
            let mut fds: Vec<_> = links.iter().filter(|l| !l.closed).map(Link::fd).collect();
            if links.len() < decode_workers {
                fds.push(listener.as_raw_fd());
            }
            wait(&fds, libc::POLLIN, IDLE_WAIT);
        }
        for (l, link) in links.iter_mut().enumerate() {
            for msg in link.recv::<ToPrefill>()? {
                let ToPrefill::Add { rid, prompt } = msg;
                let id = next_id;
                next_id += 1;
                match engine.add_prefill(id, &prompt) {
                    Ok(()) => {
                        pending.insert(id, (l, rid, Instant::now()));
                    }
                    // The engine refused this prompt: that request fails, the rest go on.
                    Err(e) => {
                        let _ = link.send(&FromPrefill::Done(PrefillDone { rid, error: Some(format!("{e:#}")), ..PrefillDone::default() }));
                    }
                }
            }
        }
        if links.len() == decode_workers && links.iter().all(|l| l.closed) {
            break;
        }
        if links.is_empty() {
            continue;
        }
        engine.step(&mut out)?;
        for t in &out.timings {
            queued.insert(t.rid, t.queued_s);
        }
        let mut params: HashMap<u64, &str> = out.kv_params.iter().map(|(r, p)| (*r, p.as_str())).collect();
        for d in out.deltas.iter().filter(|d| d.finished) {
            let Some((l, rid, read)) = pending.remove(&d.rid) else { continue };
            let kv_transfer_params = match params.remove(&d.rid) {
                Some(p) => Some(serde_json::from_str(p).context("the prefill engine's kv_transfer_params")?),
                None => None,
            };
            let error = kv_transfer_params.is_none().then(|| "the prefill engine finished the request without kv_transfer_params".to_string());
            let done = PrefillDone { rid, kv_transfer_params, prefill_s: read.elapsed().as_secs_f64(), queued_s: queued.remove(&d.rid), error };
            // A decode worker that is gone takes nothing more; the others go on.
            let _ = links[l].send(&FromPrefill::Done(done));
        }
    }
    Ok(())
}

/// Accepts every decode worker waiting on `listener` (non-blocking).
fn accept_waiting(listener: &TcpListener, links: &mut Vec<Link>) -> Result<()> {
    loop {
        match listener.accept() {
            Ok((s, _)) => links.push(Link::new(s)?),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("accepting a decode worker's link"),
        }
    }
}
