//! The request driver: the one loop that sends requests when a
//! [`Schedule`] says they are due, steps the engine while any is in flight,
//! and timestamps every step's return on Rust's monotonic clock.
//! [`ListSchedule`] is a fixed list (closed loop at a concurrency, or
//! released on arrival times: request-rate mode); the replay of multi-turn
//! sessions is another schedule (`super::replay`).
//!
//! # Between two steps, the least work (issues 34 and 37)
//!
//! The product measures the engine's step. On a GPU a decode step at high
//! concurrency takes a few milliseconds, and everything the loop does
//! between two `step()` calls is time the engine is not stepping. The loop
//! and the engine layer under it are built so that this time is the
//! smallest it can be, and nothing of ours runs beside the engine:
//!
//! - **The engine's own step, nothing else.** On vLLM the shim drives the
//!   in-process engine core directly (python-shim/enginebench_shim/steppath.py,
//!   "core" step path): a step is `EngineCore`'s schedule/execute/update, its
//!   outputs go to Rust as they are and [`crate::engine::vllm`] reads the
//!   few fields the figures need (no `RequestOutput`, no detokenization, no
//!   stat loggers). Text requests (the eval, stop strings) still go through
//!   vLLM's output processor, only theirs. `LLMEngine.step()` is the
//!   fallback path, named in `doctor` and the result (`engine.step_path`).
//! - **Prompts before the clock.** A fixed list (every sweep point, warm-ups
//!   included) is handed to [`StepEngine::prepare_tokens`] before the loop
//!   starts: vLLM's input processor makes each `EngineCoreRequest` then, and
//!   a send only stamps its id and arrival time. Token ids reach Python as
//!   lists of shared int objects (one per vocabulary id), the form vLLM
//!   0.23-0.33 takes in-process (its core copies and appends to the list).
//!   A replay's prompts are made when due, by the [`Schedule`] (the seam
//!   where a replay builds the next turn of a session ahead of time).
//! - **Per step, only what the figures need.** One reused [`StepOutput`];
//!   each delta appends one (request, tokens, time) entry to a sequential
//!   log, and the per-request records (TTFT, ITLs) are filled after the
//!   loop: no per-request cache line touched, no allocation per token.
//!   Progress goes to the orchestrator at most 10 times a second (the
//!   worker), nothing is written per step.
//! - **Whether to step** is one question, [`StepEngine::keep_stepping`]:
//!   requests of this loop in flight, or (data parallel) work anywhere in
//!   the engine's group, whose ranks must step together.
//!
//! What each part costs is measured by bench/harness_overhead.sh (the null
//! engine at a GPU's step time, and the real engine against a pure-Python
//! loop and `vllm bench throughput`); figures in docs/benchmarks.md.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::engine::StepEngine;
use crate::protocol::{EngineTiming, Prompt, RequestRecord, StepOutput, StepRecord};

/// One request to submit.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// A perf request: token-id prompt, `max_tokens` new tokens.
    Tokens { prompt: &'a [u32], max_tokens: u32, ignore_eos: bool },
    /// An eval request: text or chat prompt, greedy until a stop string or `max_tokens`.
    Text { prompt: &'a Prompt, max_tokens: u32, stop: &'a [String] },
}

/// Hands out request ids that are unique for the engine's lifetime.
#[derive(Debug, Default)]
pub struct RequestIds {
    next: u64,
}

impl RequestIds {
    /// Reserves `n` consecutive ids and returns the first.
    pub fn reserve(&mut self, n: usize) -> u64 {
        let base = self.next;
        self.next += n as u64;
        base
    }

    /// The id the next [`RequestIds::reserve`] gives.
    pub fn peek(&self) -> u64 {
        self.next
    }
}

/// How requests are released to the engine.
#[derive(Debug, Clone, Copy)]
pub struct Pacing<'a> {
    /// At most this many requests in the engine (the concurrency; bench
    /// serve's `--max-concurrency`).
    pub max_in_flight: usize,
    /// Request-rate mode: request i may not be sent before `arrivals[i]` s
    /// after the start. `None`: all at once, bounded by `max_in_flight`.
    pub arrivals: Option<&'a [f64]>,
    /// When set (a graceful stop was asked for), no request is added, the
    /// ones in flight are aborted, and the loop returns what it has.
    pub stop: Option<&'a AtomicBool>,
}

/// What a run of requests measured.
#[derive(Debug, Default)]
pub struct LoopOutcome {
    /// One record per request, in submission order.
    pub records: Vec<RequestRecord>,
    /// Completion (text, token ids) per request (text requests only).
    pub completions: Vec<Option<(String, Vec<u32>)>>,
    /// vLLM's own timing per request, where the engine reported it.
    pub engine_timings: Vec<Option<EngineTiming>>,
    /// From before the first `add_request` to the last token, s.
    pub duration_s: f64,
    /// Every `step()` call.
    pub steps: Vec<StepRecord>,
    /// Generated token ids per request, in submission order; empty unless the
    /// engine returns them (`VllmEngine::record_token_ids`).
    pub token_ids: Vec<Vec<u32>>,
    /// Stopped early by `Pacing::stop`: unsent requests have no send time
    /// and in-flight ones carry an "aborted" error.
    pub stopped: bool,
}

/// Decides which requests the driver sends and when: the seam between the
/// one driver loop and the workloads (a fixed list of prompts, a replay of
/// multi-turn sessions). The driver owns the clock (seconds since the loop
/// started) and the engine; a schedule only says what is due.
pub trait Schedule {
    /// Sends, through `send`, every request due at `now_s` that may go now
    /// (`in_flight` requests are in the engine). `send` returns the new
    /// request's record index (send order, from 0 in this loop).
    ///
    /// Errors: whatever `send` or building a prompt returned.
    fn poll(&mut self, now_s: f64, in_flight: usize, send: &mut dyn FnMut(Request<'_>) -> Result<usize>) -> Result<()>;
    /// Request `record` finished at `now_s` (`ok`: normally, with tokens).
    fn finished(&mut self, record: usize, now_s: f64, ok: bool);
    /// When the next unsent request becomes due if nothing else finishes, s;
    /// `None`: nothing is waiting on the clock (only on finishes, or nothing left).
    fn next_due(&self) -> Option<f64>;
    /// Nothing more will be sent.
    fn done(&self) -> bool;
    /// Requests known but not sent yet (recorded as "not sent" on a stop);
    /// 0 for schedules that make requests as they go.
    fn unsent(&self) -> usize {
        0
    }
}

/// A fixed list of requests, closed loop at `max_in_flight`, optionally
/// released on arrival times (request-rate mode).
pub struct ListSchedule<'a> {
    requests: &'a [Request<'a>],
    arrivals: Option<&'a [f64]>,
    max_in_flight: usize,
    next: usize,
}

impl<'a> ListSchedule<'a> {
    pub fn new(requests: &'a [Request<'a>], max_in_flight: usize, arrivals: Option<&'a [f64]>) -> Self {
        ListSchedule { requests, arrivals, max_in_flight: max_in_flight.max(1), next: 0 }
    }
}

impl Schedule for ListSchedule<'_> {
    fn poll(&mut self, now_s: f64, mut in_flight: usize, send: &mut dyn FnMut(Request<'_>) -> Result<usize>) -> Result<()> {
        while in_flight < self.max_in_flight
            && self.next < self.requests.len()
            && self.arrivals.is_none_or(|a| a[self.next] <= now_s)
        {
            send(self.requests[self.next])?;
            self.next += 1;
            in_flight += 1;
        }
        Ok(())
    }

    fn finished(&mut self, _record: usize, _now_s: f64, _ok: bool) {}

    fn next_due(&self) -> Option<f64> {
        self.arrivals.and_then(|a| a.get(self.next).copied())
    }

    fn done(&self) -> bool {
        self.next == self.requests.len()
    }

    fn unsent(&self) -> usize {
        self.requests.len() - self.next
    }
}

/// Runs `requests` through `engine`. A request is added as soon as fewer than
/// `max_in_flight` are running and its arrival time (if any) has come: the
/// closed loop of `vllm bench serve --max-concurrency` (a semaphore), or its
/// request-rate mode. `on_done(n)` is called with the number finished so far
/// after each step that finished some. The token requests are handed to
/// [`StepEngine::prepare_tokens`] before the loop's clock starts.
///
/// Errors: see [`drive_schedule`]; preparing a request failed.
pub fn drive<E: StepEngine>(
    engine: &mut E,
    requests: &[Request<'_>],
    pacing: Pacing<'_>,
    ids: &mut RequestIds,
    on_done: &mut dyn FnMut(usize),
) -> Result<LoopOutcome> {
    // Every request is known before the clock starts: the engine gets them
    // ready now (vLLM: its input processor's work), not between two steps.
    let ahead: Vec<(&[u32], u32, bool)> = requests
        .iter()
        .filter_map(|r| match *r {
            Request::Tokens { prompt, max_tokens, ignore_eos } => Some((prompt, max_tokens, ignore_eos)),
            Request::Text { .. } => None,
        })
        .collect();
    engine.prepare_tokens(&ahead)?;
    let mut schedule = ListSchedule::new(requests, pacing.max_in_flight, pacing.arrivals);
    let outcome = drive_schedule(engine, &mut schedule, pacing.stop, ids, on_done);
    engine.prepare_tokens(&[])?;
    outcome
}

/// Where a loop stands after a step, for a [`StepHook`].
#[derive(Debug)]
pub struct AfterStep<'a> {
    /// The step just taken.
    pub step: &'a StepRecord,
    /// Requests in flight that have no output token yet (in prefill).
    pub awaiting_first_token: usize,
    /// Requests finished so far in this loop.
    pub finished: usize,
}

/// Runs after each step, with the engine (e.g. to turn a profiler on or
/// off between two steps); returns whether the loop goes on: `false` ends
/// it as a stop does (in-flight requests aborted, `LoopOutcome::stopped`).
pub type StepHook<'h, E> = dyn FnMut(&mut E, &AfterStep<'_>) -> Result<bool> + 'h;

/// Longest single sleep while every request waits on the clock, so a stop
/// is seen within this time.
const MAX_IDLE_SLEEP: Duration = Duration::from_millis(100);

/// The driver loop: sends what `schedule` says is due, steps the engine
/// while anything is in flight, timestamps every step's return on the
/// harness's monotonic clock, and tells the schedule what finished. When
/// nothing is in flight and the next request is due later, it sleeps (never
/// spins, never adds work to a step). With `stop` set, in-flight requests
/// are aborted and the loop returns what it has.
///
/// Errors: the engine failed (a Python exception), the engine reported a
/// request id it was never given, or the schedule has nothing in flight,
/// nothing due and is not done (a schedule bug: it would wait forever).
pub fn drive_schedule<E: StepEngine>(
    engine: &mut E,
    schedule: &mut dyn Schedule,
    stop: Option<&AtomicBool>,
    ids: &mut RequestIds,
    on_done: &mut dyn FnMut(usize),
) -> Result<LoopOutcome> {
    drive_stepwise(engine, schedule, stop, ids, on_done, &mut |_, _| Ok(true))
}

/// [`drive_schedule`] with `after_step` run after every step (the profile
/// pass brackets its window of steps with the profiler this way).
///
/// Errors: as [`drive_schedule`], and whatever `after_step` returned.
pub fn drive_stepwise<E: StepEngine>(
    engine: &mut E,
    schedule: &mut dyn Schedule,
    stop: Option<&AtomicBool>,
    ids: &mut RequestIds,
    on_done: &mut dyn FnMut(usize),
    after_step: &mut StepHook<'_, E>,
) -> Result<LoopOutcome> {
    let mut out = LoopOutcome::default();
    let base = ids.next;
    engine.sync_ranks()?;
    let origin = Instant::now();
    let mut in_flight = 0usize;
    let mut finished = 0usize;
    let mut step = StepOutput::default();
    let mut finished_flags: Vec<bool> = Vec::new();
    // Whether each request got a token yet, and how many in flight have none.
    let mut got_token: Vec<bool> = Vec::new();
    let mut awaiting_first_token = 0usize;
    let mut ended_by_hook = false;
    // Token arrivals go to one sequential log and reach the per-request
    // records after the loop: writing each request's record (and its ITL
    // list) in the loop touched one cold cache line per request per step,
    // measured as the loop's largest cost after a step that evicted the
    // caches (bench/harness_overhead.py --null-engine --evict-mb).
    let mut arrivals: Vec<Arrival> = Vec::new();

    loop {
        if ended_by_hook || stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            out.stopped = true;
            let aborted: Vec<u64> = (0..out.records.len())
                .filter(|&i| out.records[i].error.is_none() && !finished_flags[i])
                .map(|i| base + i as u64)
                .collect();
            engine.abort(&aborted)?;
            let why = if ended_by_hook { "aborted: the loop was ended" } else { "aborted: interrupted" };
            for rid in aborted {
                out.records[(rid - base) as usize].error = Some(why.into());
            }
            let unsent = RequestRecord { error: Some(crate::protocol::NOT_SENT.into()), ..RequestRecord::default() };
            out.records.extend(std::iter::repeat_n(unsent, schedule.unsent()));
            break;
        }
        {
            let now = origin.elapsed().as_secs_f64();
            let running = in_flight;
            let mut send = |req: Request<'_>| -> Result<usize> {
                let idx = out.records.len();
                let rid = ids.reserve(1);
                let mut record = RequestRecord { send_s: origin.elapsed().as_secs_f64(), ..RequestRecord::default() };
                match req {
                    Request::Tokens { prompt, max_tokens, ignore_eos } => {
                        record.input_tokens = prompt.len() as u32;
                        engine.add_tokens(rid, prompt, max_tokens, ignore_eos)?;
                    }
                    Request::Text { prompt, max_tokens, stop } => {
                        engine.add_text(rid, prompt, max_tokens, stop)?;
                    }
                }
                out.records.push(record);
                out.completions.push(None);
                out.engine_timings.push(None);
                finished_flags.push(false);
                got_token.push(false);
                awaiting_first_token += 1;
                in_flight += 1;
                Ok(idx)
            };
            schedule.poll(now, running, &mut send)?;
        }
        if !engine.keep_stepping(in_flight, !schedule.done())? {
            if schedule.done() {
                break;
            }
            // Every request waits on the clock: sleep until the next is due.
            let Some(at) = schedule.next_due() else {
                bail!("the request schedule has nothing in flight, nothing due and is not done");
            };
            let wait = at - origin.elapsed().as_secs_f64();
            if wait > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(wait).min(MAX_IDLE_SLEEP));
            }
            continue;
        }

        let started = origin.elapsed().as_secs_f64();
        engine.step(&mut step)?;
        let now = origin.elapsed().as_secs_f64();

        let n = out.records.len();
        let before = finished;
        let mut delivered = 0u32;
        for (di, d) in step.deltas.iter().enumerate() {
            let Some(idx) = index_of(d.rid, base, n) else {
                bail!("engine returned unknown request id {}", d.rid);
            };
            if let Some(ids) = step.token_ids.get(di) {
                if out.token_ids.len() < n {
                    out.token_ids.resize(n, Vec::new());
                }
                out.token_ids[idx].extend_from_slice(ids);
            }
            arrivals.push(Arrival { idx: idx as u32, new_tokens: d.new_tokens, now_s: now });
            delivered += d.new_tokens;
            if d.new_tokens > 0 && !got_token[idx] {
                got_token[idx] = true;
                awaiting_first_token -= 1;
            }
            if d.finished {
                finished_flags[idx] = true;
                finished += 1;
                in_flight -= 1;
                if !got_token[idx] {
                    awaiting_first_token -= 1;
                }
                // Tokens reach the records after the loop: a request that
                // finishes with none at all failed, for the schedule too.
                schedule.finished(idx, now, got_token[idx]);
            }
        }
        // Requests that failed outside the engine (a P/D request whose
        // prefill failed): finished, with their reason.
        for (rid, why) in step.failures.drain(..) {
            let Some(idx) = index_of(rid, base, n) else {
                bail!("engine returned unknown request id {rid}");
            };
            if finished_flags[idx] {
                continue;
            }
            out.records[idx].error = Some(why);
            finished_flags[idx] = true;
            finished += 1;
            in_flight -= 1;
            if !got_token[idx] {
                awaiting_first_token -= 1;
            }
            schedule.finished(idx, now, false);
        }
        for c in step.completions.drain(..) {
            if let Some(idx) = index_of(c.rid, base, n) {
                out.completions[idx] = Some((c.text, c.token_ids));
            }
        }
        for t in &step.timings {
            if let Some(idx) = index_of(t.rid, base, n) {
                out.engine_timings[idx] = Some(*t);
            }
        }
        for &(rid, cached) in &step.cached {
            if let Some(idx) = index_of(rid, base, n) {
                out.records[idx].cached_tokens = Some(cached);
            }
        }
        let done_now = (finished - before) as u32;
        let mut record = StepRecord::new(started, now - started, &step.stats, delivered, done_now);
        record.spec = step.spec.take();
        out.steps.push(record);
        if finished > before {
            on_done(finished);
        }
        let after = AfterStep { step: out.steps.last().expect("just pushed"), awaiting_first_token, finished };
        ended_by_hook = !after_step(engine, &after)?;
    }
    for a in &arrivals {
        out.records[a.idx as usize].on_tokens(a.now_s, a.new_tokens);
    }
    for (r, &done) in out.records.iter_mut().zip(&finished_flags) {
        if done && r.output_tokens == 0 && r.error.is_none() {
            r.error = Some("finished without output tokens".into());
        }
    }
    if !out.token_ids.is_empty() {
        out.token_ids.resize(out.records.len(), Vec::new());
    }
    out.duration_s = out
        .records
        .iter()
        .filter_map(|r| r.last_token_s)
        .fold(0.0, f64::max);
    Ok(out)
}

/// `new_tokens` of request `idx` arrived when the step that returned at `now_s` did.
struct Arrival {
    idx: u32,
    new_tokens: u32,
    now_s: f64,
}

fn index_of(rid: u64, base: u64, n: usize) -> Option<usize> {
    rid.checked_sub(base).map(|i| i as usize).filter(|&i| i < n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::testkit::OneTokenPerStep;

    #[test]
    fn keeps_conc_in_flight_and_counts_tokens() {
        let mut engine = OneTokenPerStep::default();
        let prompt = [1u32, 2, 3];
        let reqs = vec![Request::Tokens { prompt: &prompt, max_tokens: 4, ignore_eos: true }; 10];
        let mut ids = RequestIds::default();
        let mut done_calls = Vec::new();
        let pacing = Pacing { max_in_flight: 3, arrivals: None, stop: None };
        let out = drive(&mut engine, &reqs, pacing, &mut ids, &mut |n| done_calls.push(n)).unwrap();
        assert_eq!(engine.max_seen_running, 3);
        assert_eq!(out.records.len(), 10);
        assert!(out.records.iter().all(|r| r.ok() && r.output_tokens == 4 && r.input_tokens == 3));
        assert!(out.records.iter().all(|r| r.itl_s.len() == 3));
        assert_eq!(*done_calls.last().unwrap(), 10);
        // 10 requests of 4 tokens at 3 in flight: 4 waves, 4 steps each (refill same step).
        assert_eq!(out.steps.len(), 16);
        assert_eq!(out.steps.iter().map(|s| s.output_tokens).sum::<u32>(), 40);
        assert_eq!(out.steps.iter().map(|s| s.finished).sum::<u32>(), 10);
        assert!(out.duration_s > 0.0);
        // Every request was prepared before the loop, and freed after it.
        assert_eq!(engine.prepared, vec![10, 0]);
        // Ids continue across loops on one engine.
        let one = Pacing { max_in_flight: 1, arrivals: None, stop: None };
        let out2 = drive(&mut engine, &reqs[..1], one, &mut ids, &mut |_| {}).unwrap();
        assert!(out2.records[0].ok());
    }

    #[test]
    fn stop_aborts_in_flight_and_keeps_what_finished() {
        let mut engine = OneTokenPerStep::default();
        let prompt = [1u32];
        let mut reqs = vec![Request::Tokens { prompt: &prompt, max_tokens: 6, ignore_eos: true }; 6];
        reqs[0] = Request::Tokens { prompt: &prompt, max_tokens: 3, ignore_eos: true };
        let stop = AtomicBool::new(false);
        let pacing = Pacing { max_in_flight: 2, arrivals: None, stop: Some(&stop) };
        // Stop when the first request finished (step 3): the second is in flight.
        let mut seen = 0;
        let out = drive(&mut engine, &reqs, pacing, &mut RequestIds::default(), &mut |n| {
            seen = n;
            stop.store(true, Ordering::Relaxed);
        })
        .unwrap();
        assert!(out.stopped);
        assert_eq!(seen, 1);
        assert!(out.records[0].ok());
        assert_eq!(out.records[1].error.as_deref(), Some("aborted: interrupted"));
        assert!(out.records[2..].iter().all(|r| r.error.as_deref() == Some("not sent: interrupted")));
        assert!(engine.running.is_empty(), "in-flight requests were aborted in the engine");
    }

    /// The step hook sees each step, the requests still without a token
    /// and the finished count, and ends the loop as a stop does.
    #[test]
    fn step_hook_sees_every_step_and_can_end_the_loop() {
        let mut engine = OneTokenPerStep::default();
        let prompt = [1u32];
        let reqs = vec![Request::Tokens { prompt: &prompt, max_tokens: 5, ignore_eos: true }; 3];
        let mut schedule = ListSchedule::new(&reqs, 2, None);
        let mut seen = Vec::new();
        let mut hook = |_: &mut OneTokenPerStep, a: &AfterStep<'_>| -> Result<bool> {
            seen.push((a.step.output_tokens, a.awaiting_first_token, a.finished));
            Ok(seen.len() < 6)
        };
        let out = drive_stepwise(&mut engine, &mut schedule, None, &mut RequestIds::default(), &mut |_| {}, &mut hook).unwrap();
        // Two in flight get a token per step; the third is sent when the
        // first two finish (step 5), and the hook ends the loop after step 6.
        assert_eq!(seen, [(2, 0, 0), (2, 0, 0), (2, 0, 0), (2, 0, 0), (2, 0, 2), (1, 0, 2)]);
        assert!(out.stopped);
        assert!(out.records[..2].iter().all(|r| r.ok()));
        assert_eq!(out.records[2].error.as_deref(), Some("aborted: the loop was ended"));
        assert!(engine.running.is_empty(), "the request in flight was aborted");
    }

    #[test]
    fn arrivals_hold_requests_back() {
        let mut engine = OneTokenPerStep::default();
        let prompt = [1u32];
        let reqs = vec![Request::Tokens { prompt: &prompt, max_tokens: 1, ignore_eos: true }; 3];
        let arrivals = [0.0, 0.05, 0.10];
        let pacing = Pacing { max_in_flight: 8, arrivals: Some(&arrivals), stop: None };
        let out = drive(&mut engine, &reqs, pacing, &mut RequestIds::default(), &mut |_| {}).unwrap();
        for (r, at) in out.records.iter().zip(arrivals) {
            assert!(r.send_s >= at, "sent at {} before arrival {at}", r.send_s);
        }
        assert_eq!(engine.max_seen_running, 1);
    }

    #[test]
    fn text_requests_return_completions() {
        let mut engine = OneTokenPerStep::default();
        let stop = vec!["Question:".to_string()];
        let q = Prompt::Text("Q".into());
        let reqs: Vec<Request> = (0..3).map(|_| Request::Text { prompt: &q, max_tokens: 2, stop: &stop }).collect();
        let mut ids = RequestIds::default();
        let pacing = Pacing { max_in_flight: 8, arrivals: None, stop: None };
        let out = drive(&mut engine, &reqs, pacing, &mut ids, &mut |_| {}).unwrap();
        let texts: Vec<String> = out.completions.into_iter().map(|c| c.unwrap().0).collect();
        assert_eq!(texts, vec!["done 0", "done 1", "done 2"]);
        // Text requests are never prepared (the eval goes through vLLM's output processor).
        assert_eq!(engine.prepared, vec![0, 0]);
    }
}
