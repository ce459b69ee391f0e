//! A prefill worker's loop: accept the decode worker's link, run each
//! prompt it sends as a prefill-only request, send back vLLM's transfer
//! parameters, and keep stepping until the decode worker hangs up.

use std::collections::HashMap;
use std::net::TcpListener;
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

/// Serves prefills on `listener` until the decode worker closes its link
/// (or `stop` is set), then returns.
///
/// Errors: no decode worker connected within `connect_timeout`; the
/// engine failed (a Python exception); a message that is not one.
pub fn serve<E: KvTransfer>(engine: &mut E, listener: &TcpListener, connect_timeout: Duration, stop: &AtomicBool) -> Result<()> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + connect_timeout;
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    bail!("no decode worker connected within {} s", connect_timeout.as_secs());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e).context("accepting the decode worker's link"),
        }
    };
    let mut link = Link::new(stream)?;
    // Requests at the engine: when their line was read.
    let mut pending: HashMap<u64, Instant> = HashMap::new();
    let mut queued: HashMap<u64, f64> = HashMap::new();
    let mut out = StepOutput::default();
    while !stop.load(Ordering::Relaxed) {
        if pending.is_empty() {
            wait(&[link.fd()], libc::POLLIN, IDLE_WAIT);
        }
        for msg in link.recv::<ToPrefill>()? {
            let ToPrefill::Add { rid, prompt } = msg;
            match engine.add_prefill(rid, &prompt) {
                Ok(()) => {
                    pending.insert(rid, Instant::now());
                }
                // The engine refused this prompt: that request fails, the rest go on.
                Err(e) => link.send(&FromPrefill::Done(PrefillDone { rid, error: Some(format!("{e:#}")), ..PrefillDone::default() }))?,
            }
        }
        if link.closed {
            break;
        }
        engine.step(&mut out)?;
        for t in &out.timings {
            queued.insert(t.rid, t.queued_s);
        }
        let mut params: HashMap<u64, &str> = out.kv_params.iter().map(|(r, p)| (*r, p.as_str())).collect();
        for d in out.deltas.iter().filter(|d| d.finished) {
            let Some(read) = pending.remove(&d.rid) else { continue };
            let kv_transfer_params = match params.remove(&d.rid) {
                Some(p) => Some(serde_json::from_str(p).context("the prefill engine's kv_transfer_params")?),
                None => None,
            };
            let error = kv_transfer_params.is_none().then(|| "the prefill engine finished the request without kv_transfer_params".to_string());
            let done = PrefillDone { rid: d.rid, kv_transfer_params, prefill_s: read.elapsed().as_secs_f64(), queued_s: queued.remove(&d.rid), error };
            if link.send(&FromPrefill::Done(done)).is_err() {
                return Ok(()); // the decode worker is gone: nothing left to serve
            }
        }
    }
    Ok(())
}
