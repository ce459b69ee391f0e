//! The decode worker's engine as the driver sees it: [`PdEngine`] sends
//! each request's prompt to a prefill worker, then the same token ids with
//! the returned `kv_transfer_params` to its own (decode) engine, and records
//! each request's way through the pair.

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use super::link::{Link, wait};
use super::prefill::IDLE_WAIT;
use crate::engine::{ChatMessage, EngineInfo, KvTransfer, Profiler, ProfileStop, Prompt, SpecCounts, StepEngine, StepOutput, WorkerEngine};
use crate::protocol::knobs::{KnobReport, KnobRequest};
use crate::protocol::pd::{DecodeSide, FromPrefill, PdRaw, PdRequest, ToPrefill};

/// One prefill worker as the proxy holds it.
struct PrefillLink {
    link: Link,
    /// How errors name it: "prefill worker 0 (log worker.prefill0.log)".
    name: String,
}

/// A request whose prefill is under way.
struct AtPrefill {
    prompt: Vec<u32>,
    max_tokens: u32,
    ignore_eos: bool,
    sent: Instant,
    worker: usize,
}

/// The proxy: a decode engine plus links to the prefill workers.
pub struct PdEngine<E> {
    decode: E,
    prefill: Vec<PrefillLink>,
    /// Round robin over live prefill workers, in send order (decode worker
    /// j starts at j mod N).
    next: usize,
    recompute: bool,
    at_prefill: HashMap<u64, AtPrefill>,
    /// Requests at the decode engine (the decode side steps for them).
    at_decode: usize,
    /// Per request (by id) its path, until [`WorkerEngine::pd_point`] takes it.
    paths: HashMap<u64, PdRequest>,
    /// Failed this step, handed to the driver with the step's output.
    failures: Vec<(u64, String)>,
    prefill_devices: u32,
    /// Decode workers of the job (this one among them).
    decode_workers: u32,
}

impl<E: KvTransfer + WorkerEngine> PdEngine<E> {
    /// Connects to every prefill worker of `side`, retrying while its engine
    /// loads (it listens once its engine is built).
    ///
    /// Errors: a prefill worker that exited, or did not listen within
    /// `side.connect_timeout_s` (both name it and its log).
    pub fn connect(decode: E, side: &DecodeSide, prefill_devices: u32) -> Result<PdEngine<E>> {
        let deadline = Instant::now() + Duration::from_secs_f64(side.connect_timeout_s);
        let mut prefill = Vec::new();
        for (i, addr) in side.prefill.iter().enumerate() {
            let name = format!("prefill worker {i} (pid {}, log {})", addr.pid, addr.log);
            let stream = loop {
                match TcpStream::connect((addr.host.as_str(), addr.port)) {
                    Ok(s) => break s,
                    Err(_) if !alive(addr.pid) => bail!("{name} ended before it served: see its log"),
                    Err(e) if Instant::now() > deadline => {
                        bail!("{name} did not accept the decode worker within {} s: {e}", side.connect_timeout_s)
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            };
            prefill.push(PrefillLink { link: Link::new(stream)?, name });
        }
        Ok(PdEngine {
            decode,
            next: side.decode_index as usize % side.prefill.len().max(1),
            prefill,
            recompute: side.on_prefill_failure == "recompute",
            at_prefill: HashMap::new(),
            at_decode: 0,
            paths: HashMap::new(),
            failures: Vec::new(),
            prefill_devices,
            decode_workers: side.decode_workers.max(1),
        })
    }

    /// Reads every finished prefill and hands each on to the decode engine
    /// (or, failed, to the failure policy); a worker that hung up fails or
    /// recomputes every request still at it.
    fn collect_prefills(&mut self) -> Result<()> {
        for w in 0..self.prefill.len() {
            if self.prefill[w].link.closed {
                continue;
            }
            let done = match self.prefill[w].link.recv::<FromPrefill>() {
                Ok(d) => d,
                Err(e) => {
                    self.prefill[w].link.closed = true;
                    self.lose_worker(w, &format!("{e:#}"))?;
                    continue;
                }
            };
            for FromPrefill::Done(d) in done {
                let Some(req) = self.at_prefill.remove(&d.rid) else { continue };
                let path = self.paths.entry(d.rid).or_default();
                path.prefill_s = Some(d.prefill_s);
                path.prefill_queued_s = d.queued_s;
                match (d.kv_transfer_params, d.error) {
                    (Some(params), None) => {
                        path.to_decode_s = Some(req.sent.elapsed().as_secs_f64());
                        self.decode.add_decode(d.rid, &req.prompt, req.max_tokens, req.ignore_eos, &params)?;
                        self.at_decode += 1;
                    }
                    (_, error) => {
                        let why = error.unwrap_or_else(|| "no kv_transfer_params".into());
                        self.prefill_failed(d.rid, req, &format!("{}: {why}", self.prefill[w].name))?;
                    }
                }
            }
            if self.prefill[w].link.closed {
                self.lose_worker(w, "it hung up")?;
            }
        }
        Ok(())
    }

    /// Worker `w` is gone: every request still at it goes to the policy.
    fn lose_worker(&mut self, w: usize, why: &str) -> Result<()> {
        let lost: Vec<u64> = self.at_prefill.iter().filter(|(_, r)| r.worker == w).map(|(&rid, _)| rid).collect();
        for rid in lost {
            let req = self.at_prefill.remove(&rid).expect("listed above");
            self.prefill_failed(rid, req, &format!("{} ended: {why}", self.prefill[w].name))?;
        }
        Ok(())
    }

    /// A request whose prefill failed: the decode engine computes its
    /// prompt (`kv_load_failure_policy` "recompute"), or it fails.
    fn prefill_failed(&mut self, rid: u64, req: AtPrefill, why: &str) -> Result<()> {
        if self.recompute {
            let path = self.paths.entry(rid).or_default();
            path.recomputed = true;
            path.to_decode_s = Some(req.sent.elapsed().as_secs_f64());
            self.decode.add_tokens(rid, &req.prompt, req.max_tokens, req.ignore_eos)?;
            self.at_decode += 1;
        } else {
            self.failures.push((rid, format!("prefill failed: {why}")));
        }
        Ok(())
    }

    fn live_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.prefill.iter().filter(|p| !p.link.closed).map(|p| p.link.fd()).collect()
    }
}

/// Whether process `pid` is still running. A prefill worker that died is
/// a zombie until the orchestrator reaps it at the job's end, and a zombie
/// still answers signal 0: read its state instead.
fn alive(pid: u32) -> bool {
    crate::serve::process::pid_alive(pid as i32)
}

impl<E: KvTransfer + WorkerEngine> StepEngine for PdEngine<E> {
    fn add_tokens(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, ignore_eos: bool) -> Result<()> {
        let live = self.prefill.len();
        let Some(w) = (0..live).map(|k| (self.next + k) % live).find(|&w| !self.prefill[w].link.closed) else {
            self.failures.push((rid, "prefill failed: no prefill worker is left".into()));
            return Ok(());
        };
        self.next = w + 1;
        self.paths.insert(rid, PdRequest { prefill_worker: w as u32, ..PdRequest::default() });
        let req = AtPrefill { prompt: prompt.to_vec(), max_tokens, ignore_eos, sent: Instant::now(), worker: w };
        if let Err(e) = self.prefill[w].link.send(&ToPrefill::Add { rid, prompt: req.prompt.clone() }) {
            let why = format!("{}: {e:#}", self.prefill[w].name);
            self.prefill_failed(rid, req, &why)?;
            return self.lose_worker(w, "its link failed");
        }
        self.at_prefill.insert(rid, req);
        Ok(())
    }

    fn add_text(&mut self, _rid: u64, _prompt: &Prompt, _max_tokens: u32, _stop: &[String]) -> Result<()> {
        bail!("text requests (the eval) do not run through a P/D pair: run the eval on an aggregated recipe")
    }

    fn sync_ranks(&mut self) -> Result<()> {
        self.decode.sync_ranks()
    }

    fn step(&mut self, out: &mut StepOutput) -> Result<()> {
        // Nothing to decode yet: wait (briefly) for a prefill to come back
        // rather than spin empty steps on the cores the prefill computes on.
        if self.at_decode == 0 && self.failures.is_empty() && !self.at_prefill.is_empty() {
            wait(&self.live_fds(), libc::POLLIN, IDLE_WAIT);
        }
        self.collect_prefills()?;
        self.decode.step(out)?;
        self.at_decode -= out.deltas.iter().filter(|d| d.finished).count().min(self.at_decode);
        for &(rid, n) in &out.external_cached {
            self.paths.entry(rid).or_default().external_cached_tokens = Some(n);
        }
        out.failures.append(&mut self.failures);
        Ok(())
    }

    fn abort(&mut self, rids: &[u64]) -> Result<()> {
        // A prefill under way finishes on its side and its blocks expire
        // there (vLLM's kv lease); the decode side aborts the rest.
        let at_decode: Vec<u64> = rids.iter().copied().filter(|r| self.at_prefill.remove(r).is_none()).collect();
        self.at_decode = self.at_decode.saturating_sub(at_decode.len());
        self.decode.abort(&at_decode)
    }
}

impl<E: KvTransfer + WorkerEngine> Profiler for PdEngine<E> {
    fn profile_start(&mut self) -> Result<Vec<String>> {
        self.decode.profile_start()
    }
    fn profile_stop(&mut self, trace: &std::path::Path) -> Result<ProfileStop> {
        self.decode.profile_stop(trace)
    }
}

impl<E: KvTransfer + WorkerEngine> WorkerEngine for PdEngine<E> {
    fn info(&self) -> &EngineInfo {
        self.decode.info()
    }
    fn allowed_token_ids(&self) -> &[u32] {
        self.decode.allowed_token_ids()
    }
    fn record_token_ids(&mut self, on: bool) -> Result<()> {
        self.decode.record_token_ids(on)
    }
    fn spec_counters(&self) -> Option<SpecCounts> {
        self.decode.spec_counters()
    }
    fn shutdown(&mut self) -> Result<()> {
        self.decode.shutdown()
    }
    fn reset_prefix_cache(&mut self) -> Result<Option<bool>> {
        self.decode.reset_prefix_cache()
    }
    fn chat_frame(&mut self) -> Result<(Vec<u32>, Vec<u32>)> {
        self.decode.chat_frame()
    }
    fn tokenize_chat(&mut self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        self.decode.tokenize_chat(messages)
    }
    fn count_tokens(&mut self, text: &str) -> Result<u32> {
        self.decode.count_tokens(text)
    }
    fn knob_report(&self, argv: &[String], request: &KnobRequest) -> Option<Result<KnobReport>> {
        self.decode.knob_report(argv, request)
    }
    fn pd_point(&mut self, rids: std::ops::Range<u64>) -> Result<Option<PdRaw>> {
        let requests = rids.clone().map(|r| self.paths.remove(&r).unwrap_or_default()).collect();
        // Paths of requests outside the range (warm-ups) are dropped.
        self.paths.retain(|r, _| *r >= rids.end);
        let info = self.decode.info();
        let devices = info.tensor_parallel_size.unwrap_or(1) * info.pipeline_parallel_size.unwrap_or(1);
        Ok(Some(PdRaw {
            requests,
            transfers: self.decode.take_kv_transfer_stats()?,
            prefill_workers: self.prefill.len() as u32,
            decode_workers: self.decode_workers,
            prefill_devices_per_worker: self.prefill_devices,
            decode_devices_per_worker: devices,
        }))
    }
}
