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
//! - **An admission budget per gap.** While requests are in flight, the
//!   loop sends new ones for at most [`admission_budget`] of a gap (a fifth
//!   of the last step, at least 1 ms) and the rest after the next step, so a burst of due requests (a
//!   replay's ramp: hundreds of long first turns at once) is spread over
//!   steps instead of stalling one gap for hundreds of milliseconds
//!   (issue 46). A request held back keeps as its send time the start of
//!   the gap in which it was due, so the wait counts in its TTFT and E2EL
//!   as a server's queue would count it.
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
    /// Sends, through `admit`, requests due at `now_s` that may go now
    /// (`in_flight` requests are in the engine), in order, while
    /// [`Admit::open`] says the gap has room: a schedule asks before it
    /// builds each request and stops at the first "no", leaving that
    /// request and the rest due (the driver polls again after the next
    /// step).
    ///
    /// Errors: whatever `admit` or building a prompt returned.
    fn poll(&mut self, now_s: f64, in_flight: usize, admit: &mut dyn Admit) -> Result<()>;
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

/// The driver's side of [`Schedule::poll`]: whether another request may
/// go in this gap between two steps, and the send itself.
pub trait Admit {
    /// Whether the gap has room for one more request: always while nothing
    /// is in flight, else while the gap has spent less than its admission
    /// budget ([`admission_budget`]). A "no" is final for this poll.
    fn open(&mut self) -> bool;
    /// Sends `req`, which became due at `due_s` (s on the driver's clock:
    /// its arrival, the finish that freed its slot, its timer); returns its
    /// record index (send order, from 0 in this loop). A request that the
    /// budget held back keeps as its send time the start of the gap in which
    /// it was first due, where it would have gone without the budget.
    ///
    /// Errors: the engine refused the request.
    fn send(&mut self, req: Request<'_>, due_s: f64) -> Result<usize>;
}

/// Free slots of a closed loop at a fixed concurrency (`vllm bench serve
/// --max-concurrency`'s semaphore), with the time each freed, so a request
/// sent into one knows when it became due: the later of its own release
/// and its slot's freeing.
#[derive(Debug, Clone)]
pub struct Slots {
    /// Times the free slots freed, oldest first (0.0: free from the start).
    free: std::collections::VecDeque<f64>,
}

impl Slots {
    /// `n` slots, all free at 0 s.
    pub fn new(n: usize) -> Self {
        Slots { free: std::iter::repeat_n(0.0, n).collect() }
    }
    /// Whether a slot is free.
    pub fn any(&self) -> bool {
        !self.free.is_empty()
    }
    /// Takes the oldest free slot; returns when it freed, s (`None`: none free).
    pub fn take(&mut self) -> Option<f64> {
        self.free.pop_front()
    }
    /// A request finished at `now_s`: its slot is free.
    pub fn release(&mut self, now_s: f64) {
        self.free.push_back(now_s);
    }
}

/// A fixed list of requests, closed loop at `max_in_flight`, optionally
/// released on arrival times (request-rate mode).
pub struct ListSchedule<'a> {
    requests: &'a [Request<'a>],
    arrivals: Option<&'a [f64]>,
    slots: Slots,
    next: usize,
}

impl<'a> ListSchedule<'a> {
    pub fn new(requests: &'a [Request<'a>], max_in_flight: usize, arrivals: Option<&'a [f64]>) -> Self {
        ListSchedule { requests, arrivals, slots: Slots::new(max_in_flight.max(1)), next: 0 }
    }
}

impl Schedule for ListSchedule<'_> {
    fn poll(&mut self, now_s: f64, _in_flight: usize, admit: &mut dyn Admit) -> Result<()> {
        while self.slots.any()
            && self.next < self.requests.len()
            && self.arrivals.is_none_or(|a| a[self.next] <= now_s)
            && admit.open()
        {
            let freed = self.slots.take().expect("a slot is free");
            let due = self.arrivals.map_or(freed, |a| a[self.next].max(freed));
            admit.send(self.requests[self.next], due)?;
            self.next += 1;
        }
        Ok(())
    }

    fn finished(&mut self, _record: usize, now_s: f64, _ok: bool) {
        self.slots.release(now_s);
    }

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
    drive_admitting(engine, schedule, stop, ids, on_done, after_step, admission_budget)
}

/// The least time the driver may spend sending new requests in one gap
/// between two steps while requests are in flight (the budget is the larger
/// of this and [`ADMISSION_SHARE`] of the last step, [`admission_budget`]);
/// the rest go after the next step.
///
/// Why 1 ms: on a GPU a decode step at high concurrency takes ~5 ms, and
/// every moment between two steps is time the GPU idles. Without a bound,
/// a replay's ramp (the first turns of hundreds of AgentX sessions, tens of
/// thousands of tokens each, all due together) was sent in one gap: 226
/// requests between two steps, gaps of up to 829 ms at 256 sessions
/// (issue 46, docs/benchmarks.md). A server takes new requests in its API
/// process while the engine core steps; the budget bounds what our
/// in-process loop adds to a gap to a fifth of such a step, so a ramp is
/// spread over steps as a server's admission would spread it, and the
/// deferral counts in the deferred requests' latency ([`Admit::send`]).
/// A gap always sends until something is in flight (an idle engine has
/// nothing to lose), and finishes the send it started: a gap can run over
/// the budget by one request's send.
pub const ADMISSION_BUDGET: Duration = Duration::from_millis(1);

/// The share of the last step's time a gap may spend sending (when more
/// than [`ADMISSION_BUDGET`]): a fifth, as 1 ms is of a 5 ms GPU step. On
/// a slow engine (a CPU step of ~300 ms) a 1 ms budget would admit about
/// one request per step and stretch a ramp over as many steps, which a
/// server, admitting while the engine steps, would not; a fifth of its
/// step keeps the engine busy at least 5/6 of the time as well.
pub const ADMISSION_SHARE: f64 = 0.2;

/// The admission budget of a gap after a step that took `last_step_s`
/// seconds (0 before the first step): the larger of [`ADMISSION_BUDGET`]
/// and [`ADMISSION_SHARE`] of the step, s.
pub fn admission_budget(last_step_s: f64) -> f64 {
    ADMISSION_BUDGET.as_secs_f64().max(ADMISSION_SHARE * last_step_s)
}

/// The gaps the admission budget cut short, for the send times of the
/// requests they held back ([`Admit::send`]).
#[derive(Debug, Default)]
pub struct Backlog {
    /// Starts of the gaps cut short since the last gap that sent everything
    /// due, s, ascending.
    held_since: Vec<f64>,
}

impl Backlog {
    /// The send time of a request that became due at `due_s` and goes now
    /// (`now_s`): the start of the first gap cut short by which it was due
    /// (it was held back), else `now_s`.
    pub fn send_s(&self, due_s: f64, now_s: f64) -> f64 {
        let first = self.held_since.partition_point(|&g| g < due_s);
        self.held_since.get(first).copied().unwrap_or(now_s)
    }

    /// The gap that started at `start_s` ended; `cut_short`: the budget
    /// held some due request back in it (the backlog goes on), else
    /// everything due went (the backlog is over).
    pub fn gap_ended(&mut self, start_s: f64, cut_short: bool) {
        if cut_short {
            self.held_since.push(start_s);
        } else {
            self.held_since.clear();
        }
    }
}

/// The driver's [`Admit`] for one gap: sends through the engine, counts
/// the gap's time against `budget` while anything is in flight.
struct Gap<'g, E> {
    engine: &'g mut E,
    ids: &'g mut RequestIds,
    out: &'g mut LoopOutcome,
    finished_flags: &'g mut Vec<bool>,
    got_token: &'g mut Vec<bool>,
    awaiting_first_token: &'g mut usize,
    in_flight: &'g mut usize,
    origin: Instant,
    /// When the gap's sending began.
    start: Instant,
    budget: Duration,
    backlog: &'g Backlog,
    /// The budget said no in this gap.
    closed: bool,
}

impl<E> Gap<'_, E> {
    fn in_flight_now(&self) -> usize {
        *self.in_flight
    }
}

impl<E: StepEngine> Admit for Gap<'_, E> {
    fn open(&mut self) -> bool {
        if !self.closed && *self.in_flight > 0 && self.start.elapsed() >= self.budget {
            self.closed = true;
        }
        !self.closed
    }

    fn send(&mut self, req: Request<'_>, due_s: f64) -> Result<usize> {
        let idx = self.out.records.len();
        let rid = self.ids.reserve(1);
        let now_s = self.origin.elapsed().as_secs_f64();
        let send_s = self.backlog.send_s(due_s, now_s);
        let mut record = RequestRecord { send_s, held_s: now_s - send_s, ..RequestRecord::default() };
        match req {
            Request::Tokens { prompt, max_tokens, ignore_eos } => {
                record.input_tokens = prompt.len() as u32;
                self.engine.add_tokens(rid, prompt, max_tokens, ignore_eos)?;
            }
            Request::Text { prompt, max_tokens, stop } => {
                self.engine.add_text(rid, prompt, max_tokens, stop)?;
            }
        }
        self.out.records.push(record);
        self.out.completions.push(None);
        self.out.engine_timings.push(None);
        self.finished_flags.push(false);
        self.got_token.push(false);
        *self.awaiting_first_token += 1;
        *self.in_flight += 1;
        Ok(idx)
    }
}

/// [`drive_stepwise`] with the admission budget of a gap given by
/// `budget(last step's duration, s)`, s.
fn drive_admitting<E: StepEngine>(
    engine: &mut E,
    schedule: &mut dyn Schedule,
    stop: Option<&AtomicBool>,
    ids: &mut RequestIds,
    on_done: &mut dyn FnMut(usize),
    after_step: &mut StepHook<'_, E>,
    budget: fn(f64) -> f64,
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
    let mut arrivals: ChunkedLog<Arrival> = ChunkedLog::default();
    // The same for the step records: a duration replay runs ~100k steps,
    // and a Vec of them would copy megabytes between two steps as it grows.
    let mut steps: ChunkedLog<StepRecord> = ChunkedLog::default();
    let mut backlog = Backlog::default();
    let mut last_step_s = 0.0;

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
            let mut gap = Gap {
                engine: &mut *engine,
                ids: &mut *ids,
                out: &mut out,
                finished_flags: &mut finished_flags,
                got_token: &mut got_token,
                awaiting_first_token: &mut awaiting_first_token,
                in_flight: &mut in_flight,
                origin,
                start: Instant::now(),
                budget: Duration::from_secs_f64(budget(last_step_s).min(1e9)),
                backlog: &backlog,
                closed: false,
            };
            schedule.poll(now, gap.in_flight_now(), &mut gap)?;
            let closed = gap.closed;
            backlog.gap_ended(now, closed);
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
        last_step_s = now - started;

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
        steps.push(record);
        if finished > before {
            on_done(finished);
        }
        let after = AfterStep { step: steps.last().expect("just pushed"), awaiting_first_token, finished };
        ended_by_hook = !after_step(engine, &after)?;
    }
    for a in arrivals.iter() {
        out.records[a.idx as usize].on_tokens(a.now_s, a.new_tokens);
    }
    out.steps = steps.into_vec();
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

/// An append-only log kept in fixed-size chunks, so that a push never
/// moves what is logged. The loop's token arrivals (one per request per
/// step) were one Vec, and its doubling copied the whole log between two
/// steps: at 2^18 and 2^19 arrivals (4 and 8 MiB) that was the replay's
/// largest gap, 14 ms at 256 and 28 ms at 512 AgentX sessions on the null
/// engine (issue 46). The loop's step records go to one too.
struct ChunkedLog<T> {
    chunks: Vec<Vec<T>>,
}

impl<T> Default for ChunkedLog<T> {
    fn default() -> Self {
        ChunkedLog { chunks: Vec::new() }
    }
}

impl<T> ChunkedLog<T> {
    /// Items per chunk: 16k arrivals, 256 KiB.
    const CHUNK: usize = 1 << 14;

    fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < Self::CHUNK => chunk.push(item),
            _ => {
                let mut chunk = Vec::with_capacity(Self::CHUNK);
                chunk.push(item);
                self.chunks.push(chunk);
            }
        }
    }

    /// The items in the order they were pushed.
    fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// The item pushed last; `None` when empty.
    fn last(&self) -> Option<&T> {
        self.chunks.last().and_then(|c| c.last())
    }

    /// The items in push order as one Vec (one copy, after the loop).
    fn into_vec(self) -> Vec<T> {
        let mut all = Vec::with_capacity(self.chunks.iter().map(Vec::len).sum());
        for chunk in self.chunks {
            all.extend(chunk);
        }
        all
    }
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
    fn the_chunked_log_keeps_the_push_order_across_chunks() {
        let mut log = ChunkedLog::default();
        let n = 2 * ChunkedLog::<u32>::CHUNK + 5;
        for i in 0..n as u32 {
            log.push(i);
        }
        let lens: Vec<usize> = log.chunks.iter().map(Vec::len).collect();
        assert_eq!(lens, [ChunkedLog::<u32>::CHUNK, ChunkedLog::<u32>::CHUNK, 5], "a full chunk is never grown");
        assert!(log.iter().copied().eq(0..n as u32));
        assert_eq!(log.last(), Some(&(n as u32 - 1)));
        assert_eq!(log.into_vec(), (0..n as u32).collect::<Vec<_>>());
        assert_eq!(ChunkedLog::<u32>::default().last(), None);
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

    /// [`OneTokenPerStep`] whose `add_tokens` takes at least `add` of real
    /// time, recording how many steps came before each add.
    struct SlowAdd {
        inner: OneTokenPerStep,
        add: Duration,
        steps: usize,
        added_after_step: Vec<usize>,
    }

    impl StepEngine for SlowAdd {
        fn add_tokens(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, e: bool) -> Result<()> {
            let t = Instant::now();
            while t.elapsed() < self.add {
                std::hint::spin_loop();
            }
            self.added_after_step.push(self.steps);
            self.inner.add_tokens(rid, prompt, max_tokens, e)
        }
        fn add_text(&mut self, rid: u64, p: &Prompt, max_tokens: u32, s: &[String]) -> Result<()> {
            self.inner.add_text(rid, p, max_tokens, s)
        }
        fn abort(&mut self, rids: &[u64]) -> Result<()> {
            self.inner.abort(rids)
        }
        fn step(&mut self, out: &mut StepOutput) -> Result<()> {
            self.steps += 1;
            self.inner.step(out)
        }
    }

    /// A burst of 40 requests due at once, each send taking >= 0.4 ms: with
    /// requests in flight a gap stops admitting after the budget (1 ms), so
    /// at most 4 go in any gap (1 while nothing is in flight, then 3 by
    /// 0.8 ms; a slower machine fits fewer), every request is sent and
    /// finishes, and the held ones keep the first gap's start as their
    /// send time. Without a budget all 40 go before the first step.
    #[test]
    fn admission_budget_spreads_a_burst_over_steps() {
        let prompt = [1u32, 2];
        let reqs = vec![Request::Tokens { prompt: &prompt, max_tokens: 30, ignore_eos: true }; 40];
        let run = |budget: fn(f64) -> f64| {
            let mut engine =
                SlowAdd { inner: OneTokenPerStep::default(), add: Duration::from_micros(400), steps: 0, added_after_step: Vec::new() };
            let mut schedule = ListSchedule::new(&reqs, 40, None);
            let out = drive_admitting(&mut engine, &mut schedule, None, &mut RequestIds::default(), &mut |_| {}, &mut |_, _| Ok(true), budget)
                .unwrap();
            (out, engine.added_after_step)
        };
        // The engine's steps take microseconds: the 1 ms floor applies.
        let (out, added) = run(admission_budget);
        assert_eq!(out.records.len(), 40);
        assert!(out.records.iter().all(|r| r.ok() && r.output_tokens == 30), "every request sent and finished");
        let mut per_gap = std::collections::BTreeMap::new();
        for g in &added {
            *per_gap.entry(*g).or_insert(0) += 1;
        }
        assert!(per_gap.values().all(|&n| n <= 4), "requests sent per gap (by steps before): {per_gap:?}");
        assert!(per_gap.len() >= 10, "the burst is spread over at least 10 gaps: {per_gap:?}");
        // All 40 were due at the first gap: the held ones keep its start
        // (taken before its first send).
        let held: Vec<&RequestRecord> = out.records.iter().zip(&added).filter(|(_, g)| **g > 0).map(|(r, _)| r).collect();
        assert!(held.len() >= 30);
        let first_gap = held[0].send_s;
        assert!(held.iter().all(|r| r.send_s == first_gap), "held requests keep the first gap's start");
        assert!(first_gap <= out.records[0].send_s);
        assert!(out.records.iter().all(|r| r.send_s <= out.steps[0].t_s));
        // Their latency counts the wait: the last one's first step started
        // after the steps before its send, and its TTFT spans them.
        let last = out.records.last().unwrap();
        assert!(added[39] >= 9);
        assert!(last.ttft_s().unwrap() >= out.steps[added[39]].t_s - first_gap);
        // Each record says how long it was held: nothing for the first
        // gap's sends, for the others at least the steps before their send.
        for (r, &g) in out.records.iter().zip(&added) {
            match g {
                0 => assert_eq!(r.held_s, 0.0, "{r:?}"),
                g => assert!(r.held_s >= out.steps[g - 1].t_s - first_gap && r.held_s > 0.0, "{r:?}"),
            }
        }
        // No budget: one gap sends the whole burst.
        let (out, added) = run(|_| f64::INFINITY);
        assert!(added.iter().all(|&g| g == 0) && out.records.iter().all(|r| r.ok()));
    }
}
