//! The worker process: runs inside the chosen Python (loaded there as the
//! extension module `enginebench_native`), reads a [`Job`] from stdin, builds one
//! vLLM engine in that process, runs the points and the eval on it, and reports [`Message`]s.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::protocol::{CheckJob, DpRank, EvalCompletion, EvalJob, FlagCheck, Job, LmEvalJob, MaxTokensPolicy, Message, PointSpec, RawPoint, Task, Workload};
use crate::eval::lmeval::{bridge, load_by_task};
use crate::engine::pyerror::PythonError;
use crate::engine::vllm::VllmEngine;
use crate::engine::fake::{FakeConfig, FakeEngine};
use crate::engine::{StepEngine, WorkerEngine};
use crate::protocol::STOP_SIGNAL;
use crate::telemetry::mono_now_s;
use crate::workload::arrivals::arrival_times;
use crate::workload::driver::drive_schedule;
use crate::workload::replay::SessionReplay;
use crate::workload::replay_config::ReplayConfig;
use crate::workload::synth::MARKER_TOKENS;
use crate::workload::{Pacing, Request, RequestIds, conversation, drive, trace};

/// The message channel: the worker's original stdout. Everything else that
/// writes to fd 1 (Python, vLLM, C libraries) is sent to stderr instead.
/// Its fd is kept from children ([`super::private_fd`]): a copy in vLLM's
/// forked workers would hold off the end-of-file the orchestrator waits for
/// when this process dies.
struct Channel(super::private_fd::PrivateFd);

impl Channel {
    fn take_stdout() -> Result<Channel> {
        // SAFETY: plain fd juggling at start-up, before any other thread exists.
        unsafe {
            // A copy of stdout, close-on-exec from the start (F_DUPFD_CLOEXEC).
            let fd = libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3);
            if fd < 0 || libc::dup2(2, 1) < 0 {
                anyhow::bail!("cannot redirect stdout: {}", std::io::Error::last_os_error());
            }
            Ok(Channel(super::private_fd::PrivateFd::new(fd)?))
        }
    }

    fn send(&mut self, msg: &Message) {
        let mut line = serde_json::to_vec(msg).expect("messages serialise");
        line.push(b'\n');
        // If the orchestrator is gone there is nobody to tell; stop quietly.
        if self.0.file().write_all(&line).and_then(|_| self.0.file().flush()).is_err() {
            std::process::exit(1);
        }
    }
}

/// Progress messages of one phase, at most one per [`Progress::EVERY`] (the
/// first and the last always): the orchestrator only draws a bar from them,
/// and each one costs the measuring loop a write.
struct Progress {
    phase: String,
    total: u64,
    last: Option<Instant>,
}

impl Progress {
    const EVERY: Duration = Duration::from_millis(100);

    /// A phase that starts now: says so at once (done 0), so that the
    /// orchestrator's marker of the phase (in the telemetry series) is its
    /// start, not its first finished request.
    fn start(phase: String, total: u64, channel: &mut Channel) -> Progress {
        channel.send(&Message::Progress { phase: phase.clone(), done: 0, total });
        Progress { phase, total, last: None }
    }

    fn on_done(&mut self, channel: &mut Channel, done: usize) {
        let done = done as u64;
        if done < self.total && self.last.is_some_and(|t| t.elapsed() < Self::EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        channel.send(&Message::Progress { phase: self.phase.clone(), done, total: self.total });
    }
}

/// Set by SIGUSR1: the orchestrator asks for a graceful stop (Ctrl-C).
static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Entry point of the worker (`enginebench_native.worker_main()`, called by
/// the bootstrap that [`super::spawn`] starts in the chosen interpreter).
/// Returns the process exit code.
pub fn main() -> i32 {
    // SAFETY: prctl with PR_SET_PDEATHSIG only sets a flag of this process:
    // if the orchestrator dies, the worker (and its engine) is killed too.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    if let Err(e) = signal_hook::flag::register(STOP_SIGNAL, Arc::clone(&STOP)) {
        errln!("enginebench worker: cannot install the stop signal handler: {e}");
    }
    let mut channel = match Channel::take_stdout() {
        Ok(c) => c,
        Err(e) => {
            errln!("enginebench worker: {e:#}");
            return 1;
        }
    };
    match run(&mut channel) {
        Ok(()) => {
            channel.send(&Message::Done);
            0
        }
        Err(e) => {
            let py = e.downcast_ref::<PythonError>();
            let traceback = py.and_then(|p| p.traceback.clone());
            let bad_input = py.is_some_and(PythonError::is_bad_input)
                || e.downcast_ref::<crate::error::UsageError>().is_some();
            let message = format!("{e:#}");
            errln!("enginebench worker failed: {message}");
            channel.send(&Message::Error { message, traceback, bad_input });
            1
        }
    }
}

fn run(channel: &mut Channel) -> Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    match serde_json::from_str(&input).context("reading the task from stdin")? {
        Task::Run(job) => run_job(&job, channel),
        Task::Check(check) => run_check(&check, channel),
        Task::Prefill(job) => run_prefill(&job, channel),
        Task::Doctor => {
            let report = crate::engine::vllm::doctor()?;
            channel.send(&Message::Doctor { report: Box::new(report) });
            Ok(())
        }
    }
}

fn run_check(check: &CheckJob, channel: &mut Channel) -> Result<()> {
    let results = check
        .items
        .iter()
        .map(|item| {
            let report = crate::engine::vllm::check_args(&item.argv, &item.env_names)?;
            let mut check: FlagCheck = serde_json::from_str(&report)?;
            // The knob report parses the same flags: only when they parse.
            if let Some(request) = item.knobs.as_ref().filter(|_| check.error.is_none()) {
                match crate::engine::vllm::knob_report(&item.argv, request) {
                    Ok(k) => check.knobs = Some(k),
                    Err(e) => check.knobs_error = Some(format!("{e:#}")),
                }
            }
            Ok(check)
        })
        .collect::<Result<Vec<FlagCheck>>>()?;
    channel.send(&Message::Checked { results });
    Ok(())
}

fn run_job(job: &Job, channel: &mut Channel) -> Result<()> {
    let started = Instant::now();
    match FakeConfig::from_env()? {
        // The stand-in engine (tests of the runner; see crate::engine::fake).
        Some(cfg) => drive_maybe_pd(FakeEngine::build(&job.engine_argv, cfg)?, job, channel, started),
        None => {
            let profile_dir = crate::profile::worker_trace_dir(&job.profile);
            let engine = VllmEngine::build(&job.engine_argv, profile_dir.as_deref()).context("building the vLLM engine")?;
            drive_maybe_pd(engine, job, channel, started)
        }
    }
}

/// A P/D job's decode worker drives its engine through the proxy
/// (crate::pd::proxy) once every prefill worker has accepted it; any
/// other job drives the engine itself.
fn drive_maybe_pd<E: WorkerEngine + crate::engine::KvTransfer>(engine: E, job: &Job, channel: &mut Channel, started: Instant) -> Result<()> {
    match &job.pd {
        None => drive_job(engine, job, channel, started),
        Some(side) => {
            let pd = crate::pd::proxy::PdEngine::connect(engine, side, side.prefill_devices)?;
            drive_job(pd, job, channel, started)
        }
    }
}

/// A P/D job's prefill worker: builds its engine, says it is ready, then
/// listens for its decode workers and serves them (crate::pd::prefill).
fn run_prefill(job: &crate::protocol::pd::PrefillJob, channel: &mut Channel) -> Result<()> {
    let started = Instant::now();
    let timeout = Duration::from_secs_f64(job.connect_timeout_s);
    let serve = |mut engine: Box<dyn PrefillEngine>, channel: &mut Channel| -> Result<()> {
        channel.send(&Message::Ready { engine: Box::new(engine.info().clone()), engine_start_s: started.elapsed().as_secs_f64() });
        let listener = std::net::TcpListener::bind(("127.0.0.1", job.port))
            .with_context(|| format!("prefill worker {}: listening on 127.0.0.1:{}", job.index, job.port))?;
        engine.serve(&listener, job.decode_workers.max(1) as usize, timeout)?;
        engine.shutdown()
    };
    match FakeConfig::from_env()? {
        Some(cfg) => serve(Box::new(FakeEngine::build(&job.engine_argv, cfg)?), channel),
        None => serve(Box::new(VllmEngine::build(&job.engine_argv, None).context("building the prefill engine")?), channel),
    }
}

/// What a prefill worker needs of its engine, object-safe so the vLLM and
/// fake engines share one path.
trait PrefillEngine {
    fn info(&self) -> &crate::protocol::EngineInfo;
    fn serve(&mut self, listener: &std::net::TcpListener, decode_workers: usize, timeout: Duration) -> Result<()>;
    fn shutdown(&mut self) -> Result<()>;
}

impl<E: WorkerEngine + crate::engine::KvTransfer> PrefillEngine for E {
    fn info(&self) -> &crate::protocol::EngineInfo {
        WorkerEngine::info(self)
    }
    fn serve(&mut self, listener: &std::net::TcpListener, decode_workers: usize, timeout: Duration) -> Result<()> {
        crate::pd::prefill::serve(self, listener, decode_workers, timeout, &STOP)
    }
    fn shutdown(&mut self) -> Result<()> {
        WorkerEngine::shutdown(self)
    }
}

fn drive_job(mut engine: impl WorkerEngine, job: &Job, channel: &mut Channel, started: Instant) -> Result<()> {
    channel.send(&Message::Ready {
        engine: Box::new(engine.info().clone()),
        engine_start_s: started.elapsed().as_secs_f64(),
    });
    // What each knob did, on the engine's own vLLM (rank 0 of a DP job):
    // a failure is reported, never fatal.
    if let Some(request) = job.knobs.as_ref().filter(|_| job.dp.is_none_or(|d| d.rank == 0)) {
        if let Some(made) = engine.knob_report(&job.engine_argv, request) {
            let (report, error) = match made {
                Ok(r) => (Some(Box::new(r)), None),
                Err(e) => (None, Some(format!("{e:#}"))),
            };
            channel.send(&Message::Knobs { report, error });
        }
    }

    check_lengths(&job.points, engine.info().max_model_len)?;
    let mut ids = RequestIds::default();
    if job.record_token_ids {
        engine.record_token_ids(true)?;
    }
    let mut files = SessionFiles::default();
    for (index, spec) in job.points.iter().enumerate() {
        let p = &spec.point;
        let raw = run_point(&mut engine, spec, job.dp, &mut ids, &mut files, channel)
            .with_context(|| format!("point isl={} osl={} conc={}", p.isl, p.osl, p.conc))?;
        let partial = raw.partial;
        channel.send(&Message::Point { raw: Box::new(raw) });
        if partial {
            break;
        }
        // --profile: the point's profile pass, after its measured requests.
        for target in job.profile.iter().filter(|t| t.point == index) {
            let allowed = engine.allowed_token_ids().to_vec();
            let pass = crate::profile::pass::profile_point(&mut engine, spec, target, &allowed, &mut ids, Some(&STOP))
                .with_context(|| format!("profile pass of point isl={} osl={} conc={}", p.isl, p.osl, p.conc))?;
            if let Some(raw) = pass {
                channel.send(&Message::Profile { raw: Box::new(raw) });
            }
        }
    }
    let stopped = STOP.load(Ordering::Relaxed);
    // Data parallel: rank 0 runs the eval; the other ranks of a lockstep
    // group step beside it with no questions (dummy batches), dense ranks
    // have nothing to do.
    let eval_share = match job.dp {
        Some(d) if d.rank > 0 => d.lockstep.then_some(0),
        _ => Some(usize::MAX),
    };
    if let Some((eval, share)) = job.eval.as_ref().filter(|_| !stopped).zip(eval_share) {
        if job.record_token_ids {
            engine.record_token_ids(false)?; // eval completions carry their ids anyway
        }
        let max_len = engine.info().max_model_len;
        if !eval.prompts.is_empty() {
            run_eval(&mut engine, max_len, eval, share, &mut ids, channel).context("running the eval")?;
        }
        // lm-eval runs on rank 0 only (plan refuses lm-eval tasks on a
        // lockstep group, whose other ranks would have to step beside it).
        if let Some(lm) = eval.lm_eval.as_ref().filter(|_| share > 0 && !STOP.load(Ordering::Relaxed)) {
            run_lm_eval(&mut engine, max_len, eval.concurrency, lm, &mut ids, channel).context("running the lm-eval tasks")?;
        }
    }
    engine.shutdown()?;
    Ok(())
}

/// Every point's longest request must fit the engine's max_model_len; a
/// clear error before any request is better than vLLM rejecting each one.
/// The orchestrator checks the same before the engine starts
/// ([`super::plan`]); this catches a limit only the built engine knows.
fn check_lengths(points: &[PointSpec], max_model_len: Option<u64>) -> Result<()> {
    let Some(max) = max_model_len else { return Ok(()) };
    for spec in points.iter().filter(|s| !s.workload.is_sessions()) {
        if let Some(e) = super::lengths::too_long(&spec.dataset, max, "the engine's max_model_len") {
            return Err(crate::error::usage(e));
        }
    }
    Ok(())
}

fn run_point(
    engine: &mut impl WorkerEngine,
    spec: &PointSpec,
    dp: Option<DpRank>,
    ids: &mut RequestIds,
    files: &mut SessionFiles,
    channel: &mut Channel,
) -> Result<RawPoint> {
    let p = &spec.point;
    let prefix_cache_reset = if spec.reset_prefix_cache { reset_prefix_cache(engine)? } else { None };
    if spec.workload.is_sessions() {
        return run_sessions(engine, spec, prefix_cache_reset, ids, files, channel);
    }
    let total = (p.warmups + p.num_prompts) as usize;
    let mut workload = spec.dataset.draw(total, engine.allowed_token_ids());
    if spec.workload == Workload::ChatRandom {
        let (prefix, suffix) = engine.chat_frame().context("the chat template's frame of a user message")?;
        crate::workload::chat::frame_prompts(&mut workload.prompts, &prefix, &suffix)?;
    }
    let requests: Vec<Request> = workload
        .prompts
        .iter()
        .zip(&workload.output_lens)
        .map(|(prompt, &max_tokens)| Request::Tokens { prompt, max_tokens, ignore_eos: spec.ignore_eos })
        .collect();
    let (warmup, measured) = requests.split_at(p.warmups as usize);
    let mut output_lens = workload.output_lens[p.warmups as usize..].to_vec();
    let mut arrivals = spec
        .request_rate
        .map(|rate| arrival_times(measured.len(), rate, spec.burstiness, spec.dataset.seed));
    // Data parallel: this rank's share of the point (every rank draws the
    // same prompts and keeps its own).
    let (warmup, measured, conc) = match dp {
        Some(d) => {
            let mine = |list: &[Request<'_>]| -> Vec<usize> { (0..list.len()).filter(|&i| d.owns(i, p.conc)).collect() };
            let (w, m) = (mine(warmup), mine(measured));
            output_lens = m.iter().map(|&i| output_lens[i]).collect();
            arrivals = arrivals.map(|a| m.iter().map(|&i| a[i]).collect());
            let (w, m): (Vec<Request<'_>>, Vec<Request<'_>>) = (w.iter().map(|&i| warmup[i]).collect(), m.iter().map(|&i| measured[i]).collect());
            (w, m, d.conc(p.conc) as usize)
        }
        None => (warmup.to_vec(), measured.to_vec(), p.conc as usize),
    };
    let (warmup, measured) = (warmup.as_slice(), measured.as_slice());

    // A lockstep rank runs the warm-up loop even with no warm-up of its own:
    // every rank of a DP group must run the same loops.
    if !warmup.is_empty() || (dp.is_some_and(|d| d.lockstep) && p.warmups > 0) {
        // Warm-ups run closed-loop at the point's concurrency, excluded from figures.
        let phase = format!("warm-up conc {}", p.conc);
        let total = warmup.len() as u64;
        let pacing = Pacing { max_in_flight: conc, arrivals: None, stop: Some(&STOP) };
        let mut progress = Progress::start(phase, total, channel);
        drive(engine, warmup, pacing, ids, &mut |done| progress.on_done(channel, done))?;
    }
    let pacing = Pacing { max_in_flight: conc, arrivals: arrivals.as_deref(), stop: Some(&STOP) };
    let phase = format!("{}/{} conc {}", p.isl, p.osl, p.conc);
    let total = measured.len() as u64;
    let started_mono_s = mono_now_s();
    let mut progress = Progress::start(phase, total, channel);
    // vLLM's own totals around the measured requests only (warm-ups done).
    let spec_before = engine.spec_counters();
    // P/D: the proxy's figures of the measured requests only.
    let first_rid = ids.peek();
    engine.pd_point(first_rid..first_rid)?;
    let outcome = drive(engine, measured, pacing, ids, &mut |done| progress.on_done(channel, done))?;
    let pd = engine.pd_point(first_rid..ids.peek())?;
    let vllm_spec = spec_before.zip(engine.spec_counters()).map(|(before, after)| after.since(&before));
    Ok(RawPoint {
        spec: spec.clone(),
        records: outcome.records,
        engine_timings: outcome.engine_timings,
        requested_output_lens: output_lens,
        duration_s: outcome.duration_s,
        started_mono_s,
        steps: outcome.steps,
        vllm_spec,
        token_ids: outcome.token_ids,
        partial: outcome.stopped || STOP.load(Ordering::Relaxed),
        prefix_cache_reset,
        turns: Vec::new(),
        trace_names: Vec::new(),
        measure_start_s: None,
        replay_stop: None,
        file_requests: None,
        pd,
    })
}

/// The session files of a job's points, each loaded (and checked against
/// the engine's context) once: the points of a sweep replay one file at
/// several concurrencies.
#[derive(Default)]
struct SessionFiles {
    loaded: Vec<(Workload, crate::workload::sessions::SessionSet)>,
}

impl SessionFiles {
    /// The set of `workload`'s file, loaded on first use. A trace is read in
    /// the worker again (the plan checked it in the orchestrator), and
    /// conversations are tokenized here, with the engine's chat template.
    ///
    /// Errors (usage): see `trace::load_trace`, `conversation::load_conversations`
    /// and `trace::check_context`.
    fn get(&mut self, engine: &mut impl WorkerEngine, workload: &Workload) -> Result<&crate::workload::sessions::SessionSet> {
        // What loading depends on: not a point's request budget.
        let key = match workload {
            Workload::Trace(t) => Workload::Trace(crate::protocol::TraceSpec { max_requests: None, ..t.clone() }),
            w => w.clone(),
        };
        if let Some(i) = self.loaded.iter().position(|(k, _)| *k == key) {
            return Ok(&self.loaded[i].1);
        }
        let max_len = engine.info().max_model_len;
        let set = match workload {
            Workload::Trace(t) => {
                let (set, _) = trace::load_trace(t)?;
                if let Some(max) = max_len {
                    trace::check_context(&set, max, if t.cache_bust { MARKER_TOKENS } else { 0 })?;
                }
                set
            }
            Workload::Conversation(c) => {
                let (set, _) = {
                    let engine = std::cell::RefCell::new(&mut *engine);
                    conversation::load_conversations(
                        c,
                        &mut |m| engine.borrow_mut().tokenize_chat(m),
                        &mut |t| engine.borrow_mut().count_tokens(t),
                    )?
                };
                if let Some(max) = max_len {
                    trace::check_context(&set, max, 0)?;
                }
                set
            }
            other => anyhow::bail!("{} is not a session workload", other.name()),
        };
        self.loaded.push((key, set));
        Ok(&self.loaded.last().expect("just pushed").1)
    }
}

/// A point of a session workload: its file's set ([`SessionFiles`])
/// replayed in one driver loop: primers and warm-ups first, then the
/// measured phase.
fn run_sessions(
    engine: &mut impl WorkerEngine,
    spec: &PointSpec,
    prefix_cache_reset: Option<bool>,
    ids: &mut RequestIds,
    files: &mut SessionFiles,
    channel: &mut Channel,
) -> Result<RawPoint> {
    let p = &spec.point;
    let lanes = p.conc as usize;
    let cfg = match &spec.workload {
        // A fresh marker per replay, as AgentX keys it by a per-run id.
        Workload::Trace(t) => {
            let run_id = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            ReplayConfig::for_trace(t, lanes, run_id)
        }
        _ => ReplayConfig { max_requests: Some(p.num_prompts), ..ReplayConfig::for_conversations(lanes, spec.dataset.seed) },
    };
    let set = files.get(engine, &spec.workload)?;
    let allowed = engine.allowed_token_ids().to_vec();
    let mut replay = SessionReplay::new(set, &allowed, cfg)?;
    let phase = format!("{} conc {}", spec.workload.name(), p.conc);
    let mut progress = Progress::start(phase, u64::from(p.num_prompts), channel);
    let started_mono_s = mono_now_s();
    let spec_before = engine.spec_counters();
    // Each stream's next prompt is built ahead on a helper thread, and
    // staged in the engine's form there (the replay's prompts are the same
    // either way).
    let stager = engine.prompt_stager();
    // The send costs worker.log gives after it are this replay's own (an
    // earlier loop's unprepared sends are dropped here).
    if let Some(s) = &stager {
        s.report();
    }
    let outcome = std::thread::scope(|scope| {
        replay.prefetch_in(scope, crate::workload::prefetch::budget_for(lanes), stager.clone());
        let outcome = drive_schedule(engine, &mut replay, Some(&STOP), ids, &mut |done| progress.on_done(channel, done));
        if let Some(s) = replay.stop_prefetch() {
            // In worker.log: whether the driver's thread built prompts itself.
            crate::errln!(
                "[enginebench] replay prompts: {} built ahead, {} waited for (longest wait {} us), {} built at the send ({} still queued for the builder, {} asks over the budget)",
                s.taken, s.waited, s.waited_max_us, s.inline, s.claimed, s.refused
            );
        }
        if let Some(r) = stager.as_ref().map(|s| s.report()) {
            crate::errln!("[enginebench] replay prompts staged in the engine's form ahead: {}, taken by their send: {}", r.made, r.taken);
            let us = |x: [f64; 3]| format!("p50 {:.0} us, p99 {:.0} us, max {:.0} us", x[0], x[1], x[2]);
            crate::errln!(
                "[enginebench] replay sends: {} waited for the GIL {}; {} long prompts' lists made at the send, {}",
                r.sends, us(r.gil_wait_us), r.made_at_send, us(r.made_at_send_us)
            );
        }
        outcome
    })?;
    let vllm_spec = spec_before.zip(engine.spec_counters()).map(|(before, after)| after.since(&before));
    let turns = replay.turns().to_vec();
    let measure_start_s = replay.measure_start_s();
    Ok(RawPoint {
        spec: spec.clone(),
        requested_output_lens: turns.iter().map(|t| t.max_tokens).collect(),
        records: outcome.records,
        engine_timings: outcome.engine_timings,
        // The telemetry window is the measured phase.
        duration_s: outcome.duration_s - measure_start_s.unwrap_or(0.0),
        started_mono_s: started_mono_s + measure_start_s.unwrap_or(0.0),
        steps: outcome.steps,
        vllm_spec,
        token_ids: outcome.token_ids,
        partial: outcome.stopped || STOP.load(Ordering::Relaxed),
        prefix_cache_reset,
        turns,
        trace_names: set.names.clone(),
        measure_start_s,
        replay_stop: replay.stop_reason(),
        file_requests: Some(set.turns.len() as u32),
        pd: None,
    })
}

/// Empties the engine's prefix cache before a point. `Some(true)`: reset;
/// `None`: this engine has no reset (recorded, not an error).
///
/// Errors: the engine refused (blocks still held: a request left behind).
fn reset_prefix_cache(engine: &mut impl WorkerEngine) -> Result<Option<bool>> {
    match engine.reset_prefix_cache().context("resetting the prefix cache")? {
        Some(false) => anyhow::bail!("vLLM refused to reset the prefix cache before the point (KV blocks still held)"),
        other => Ok(other),
    }
}

fn run_eval(
    engine: &mut impl StepEngine,
    engine_max_len: Option<u64>,
    eval: &EvalJob,
    share: usize,
    ids: &mut RequestIds,
    channel: &mut Channel,
) -> Result<()> {
    let max_model_len = engine_max_len.map(|m| m as u32);
    let max_tokens = eval.max_tokens_policy.resolve(eval.max_tokens, max_model_len);
    let requests: Vec<Request> = eval
        .prompts
        .iter()
        .take(share)
        .map(|p| Request::Text { prompt: p, max_tokens, stop: &eval.stop })
        .collect();
    let total = requests.len() as u64;
    let pacing = Pacing { max_in_flight: eval.concurrency as usize, arrivals: None, stop: Some(&STOP) };
    let mut progress = Progress::start("gsm8k".into(), total, channel);
    let outcome = drive(engine, &requests, pacing, ids, &mut |done| progress.on_done(channel, done))?;
    if outcome.stopped || share == 0 {
        // Interrupted: an eval on part of the questions is not a score. A
        // lockstep rank without questions has nothing to report.
        return Ok(());
    }
    let completions = outcome
        .completions
        .into_iter()
        .zip(&outcome.records)
        .map(|(c, r)| {
            let (text, token_ids) = c.unwrap_or_default();
            EvalCompletion { text, output_tokens: r.output_tokens, token_ids }
        })
        .collect();
    channel.send(&Message::Eval { completions, duration_s: outcome.duration_s, max_tokens });
    Ok(())
}

/// The lm-eval tasks, through lm-eval's own evaluation: its model's
/// `generate_until` calls back into the closure here, which runs each batch
/// through the driver loop at the eval concurrency (see
/// [`crate::eval::lmeval`]). Sends lm-eval's results, the loop's wall time
/// and the load per task; nothing when interrupted.
fn run_lm_eval(
    engine: &mut impl StepEngine,
    engine_max_len: Option<u64>,
    concurrency: u32,
    job: &LmEvalJob,
    ids: &mut RequestIds,
    channel: &mut Channel,
) -> Result<()> {
    let mut job = job.clone();
    if job.max_tokens_policy == MaxTokensPolicy::Inferencex {
        job.max_tokens = Some(job.max_tokens_policy.resolve(0, engine_max_len.map(|m| m as u32)));
    }
    let spec = serde_json::to_string(&job)?;
    let started = Instant::now();
    let (mut duration_s, mut tasks, mut tokens) = (0.0, Vec::new(), Vec::new());
    let mut generate = |batch: Vec<bridge::GenRequest>| -> Result<Vec<String>> {
        let requests: Vec<Request> =
            batch.iter().map(|r| Request::Text { prompt: &r.prompt, max_tokens: r.max_tokens, stop: &r.stop }).collect();
        let pacing = Pacing { max_in_flight: concurrency as usize, arrivals: None, stop: Some(&STOP) };
        let mut progress = Progress::start("lm-eval".into(), requests.len() as u64, channel);
        let outcome = drive(engine, &requests, pacing, ids, &mut |done| progress.on_done(channel, done))?;
        anyhow::ensure!(!outcome.stopped, "interrupted");
        duration_s += outcome.duration_s;
        tasks.extend(batch.into_iter().map(|r| r.task));
        tokens.extend(outcome.records.iter().map(|r| r.output_tokens));
        Ok(outcome.completions.into_iter().map(|c| c.map(|(text, _)| text).unwrap_or_default()).collect())
    };
    let results = match bridge::evaluate(&spec, &mut generate) {
        // Interrupted: an eval on part of the questions is not a score.
        Err(_) if STOP.load(Ordering::Relaxed) => return Ok(()),
        other => other?,
    };
    let load = load_by_task(&tasks, &tokens);
    let wall_s = started.elapsed().as_secs_f64();
    channel.send(&Message::LmEval { results, duration_s, wall_s, load, max_tokens: job.max_tokens });
    Ok(())
}

