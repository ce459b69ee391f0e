//! One job: a worker process for one engine configuration, watched until it
//! ends. Everything it sends is written as it arrives; crashes, hangs and
//! Ctrl-C leave valid files with the unfinished points named.

use std::io::{BufRead, BufReader};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::protocol::knobs::KnobRequest;
use indicatif::MultiProgress;

use super::finish::{finish_lm_eval, finish_point, gate, point_line, score_eval};
use super::interrupt::Interrupts;
use super::outputs::OutputFiles;
use super::plan::Plan;
use super::progress::{Bar, say};
use super::spawn::{Worker, kill_all, kill_group, spawn_worker};
pub use super::spawn::describe_exit;
use crate::protocol::{Job, Message, PointSpec, STOP_SIGNAL, Task};
use crate::report::result::{Evals, JobResult, PointResult, PointStatus, RunError, RunResult, Status, TelemetryInfo, Unfinished, UnfinishedStatus};
use crate::telemetry::{Telemetry, TelemetryConfig, engine_gpus_from_ordinals, visible_gpus_for_engine};

/// How a job ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    Ok,
    Failed,
    /// The engine rejected the user's input (e.g. a flag vLLM's parser rejects).
    BadInput,
    /// Stopped by Ctrl-C.
    Interrupted,
}

impl JobOutcome {
    /// The outcome a recorded job stands for (`None`: it did not run yet).
    pub fn of(job: &JobResult) -> Option<JobOutcome> {
        match job.status {
            Status::Ok => Some(JobOutcome::Ok),
            Status::Interrupted => Some(JobOutcome::Interrupted),
            Status::Failed if job.error.as_ref().is_some_and(|e| e.bad_input) => Some(JobOutcome::BadInput),
            Status::Failed => Some(JobOutcome::Failed),
            Status::Pending | Status::Running => None,
        }
    }

    /// The job status it is recorded as.
    pub fn status(self) -> Status {
        match self {
            JobOutcome::Ok => Status::Ok,
            JobOutcome::Interrupted => Status::Interrupted,
            JobOutcome::Failed | JobOutcome::BadInput => Status::Failed,
        }
    }
}

/// What every job of a command shares: the terminal and Ctrl-C.
pub struct Session<'a> {
    pub ui: &'a MultiProgress,
    pub interrupts: &'a Interrupts,
    /// Show the engine's log live.
    pub verbose: bool,
}

/// Runs one job in a fresh worker and records everything into `result.jobs[index]`.
pub fn run_job(
    plan: &Plan,
    index: usize,
    result: &mut RunResult,
    files: &mut OutputFiles,
    session: &Session<'_>,
) -> Result<JobOutcome> {
    let job = &plan.jobs[index];
    let request = worker_request(plan, index, result, files)?;
    let suffix = files.suffix(index, plan.jobs.len());
    // Points a resumed job kept from earlier runs.
    let done_before = result.jobs[index].points.len();
    let log_path = files.dir.join(format!("worker{suffix}.log"));
    let series_file = format!("telemetry{suffix}.jsonl");
    result.jobs[index].status = Status::Running;
    files.write_result(result)?;

    // The sampler starts before the engine, so the series covers its load.
    // It samples every GPU the engine's environment (inherited + recipe)
    // leaves visible; once the engine says which it runs on, the windows
    // narrow to those.
    let visible = visible_gpus_for_engine(&job.env, &job.config.env_unset);
    let telemetry = Telemetry::start(TelemetryConfig {
        interval: plan.telemetry_interval,
        visible_gpus: visible.clone(),
        gpu_count_hint: None,
    });
    telemetry.mark("engine load");
    // A P/D job's prefill workers serve its decode worker, the one watched.
    let mut prefill_workers = Vec::new();
    let mut workers = match (&job.nodes, &job.dp, &job.pd) {
        (None, None, Some(pd)) => {
            let at = super::pd::PairLaunch {
                python: &job.python,
                model_path: &plan.model_path,
                decode: &job.config,
                decode_env: &job.env,
                decode_unset: &job.config.env_unset,
                dir: &files.dir,
                suffix: &suffix,
                start_timeout: plan.start_timeout,
                verbose: session.verbose,
                ui: session.ui,
            };
            let (decode, prefill) = super::pd::spawn_pair(pd, request, &at)?;
            prefill_workers = prefill;
            decode
        }
        (Some(nodes), dp, _) => super::nodes::launch::spawn_nodes(job, nodes, dp.as_ref(), request, visible.as_deref(), (&files.dir, &suffix), plan.telemetry_interval, session.ui)?,
        (None, None, None) => vec![spawn_worker(&job.python, &Task::Run(request), &job.env, &job.config.env_unset, &log_path, session.verbose, session.ui)?],
        (None, Some(dp), _) => spawn_ranks(job, dp, request, visible.as_deref(), &files.dir, &suffix, session)?,
    };
    telemetry.set_engine_pid(workers[0].child.id());
    result.jobs[index].worker_pid = Some(workers[0].child.id());
    files.write_result(result)?;

    let world_size = job.dp.as_ref().map_or(1, |d| d.world_size);
    let mut watch = WorkerWatch::new(plan, index, session, &telemetry, visible);
    watch.nodes = job.nodes.clone();
    let followed = watch.follow(&mut workers, world_size, result, files);
    // The decode worker is done (or gone): its prefill workers end with it.
    let prefill_end = super::pd::end_prefill_workers(&mut prefill_workers);
    let (mut end, node_telemetry) = match followed {
        Ok(end) => end,
        Err(e) => {
            // The run cannot go on (its folder cannot be written): stop the
            // engine, and leave the job failed with the cause and the points
            // it did not finish (the caller writes the result as it can).
            kill_all(&mut workers);
            telemetry.stop();
            let j = &mut result.jobs[index];
            let end = WorkerEnd { points_done: j.points.len().saturating_sub(done_before), failure: Some(RunError { message: format!("{e:#}"), ..RunError::default() }), ..WorkerEnd::default() };
            let unfinished = unfinished_points(&job.specs, &j.points, &end);
            j.unfinished.extend(unfinished);
            j.worker_pid = None;
            j.status = Status::Failed;
            j.error = end.failure;
            return Err(e);
        }
    };
    let mut statuses = Vec::new();
    for w in &mut workers {
        statuses.push(w.child.wait()?);
    }
    let report = telemetry.stop();
    report.write_jsonl(&files.dir.join(&series_file))?;
    let bad_exit = statuses.iter().enumerate().find(|(_, s)| !s.success());
    if end.failure.is_none() && !end.interrupted && (!end.got_done || bad_exit.is_some()) {
        let (rank, status) = bad_exit.map_or((0, statuses[0]), |(r, s)| (r, *s));
        let who = match (&job.nodes, workers.len() > 1) {
            (Some(_), _) => format!("node {rank}'s group"),
            (None, true) if job.pd.is_some() => format!("decode worker {rank}"),
            (None, true) => format!("data-parallel rank {rank}'s engine worker"),
            (None, false) => "the engine worker".to_string(),
        };
        end.failure = Some(RunError { message: format!("{who} ended unexpectedly ({})", describe_exit(status)), ..RunError::default() });
    }
    if let (Some(f), Some((i, exit))) = (end.failure.as_mut(), &prefill_end) {
        f.message = format!("{} (prefill worker {i} {exit}; its log: worker{suffix}.prefill{i}.log)", f.message);
    }
    if let Some(f) = end.failure.as_mut() {
        f.log_tail = match &job.nodes {
            // A node's ranks log to their own files; the failed rank's tail.
            Some(nodes) => rank_log_tail(&files.dir.join(format!("worker{suffix}.rank{}.log", end.failed_rank.unwrap_or(0))))
                .unwrap_or_else(|| node_log_tail(&workers[nodes.node_of_rank(end.failed_rank.unwrap_or(0) as u32) as usize])),
            None => node_log_tail(&workers[end.failed_rank.unwrap_or(0).min(workers.len() - 1)]),
        };
    }

    let j = &mut result.jobs[index];
    j.worker_pid = None;
    let mut info = TelemetryInfo::of(&report, series_file);
    info.nodes = node_telemetry;
    j.telemetry = Some(info);
    let unfinished = unfinished_points(&job.specs, &j.points, &end);
    j.unfinished.extend(unfinished);
    let outcome = end.outcome(j);
    j.status = outcome.status();
    j.error = end.failure;
    files.write_result(result)?;
    Ok(outcome)
}

/// The last lines of a worker's (or node group's) log as it was read.
fn node_log_tail(w: &Worker) -> Vec<String> {
    w.log_tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default()
}

/// The last lines of a rank's log file (a rank of a node group logs there).
fn rank_log_tail(path: &std::path::Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(path).ok()?;
    let lines: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).map(String::from).collect();
    (!lines.is_empty()).then(|| lines[lines.len().saturating_sub(super::spawn::LOG_TAIL_LINES)..].to_vec())
}

/// Starts one worker per DP rank of `job` (orchestrate/dp): rank r gets
/// `request` with its rank, its flags and environment
/// ([`super::dp::DpPlan::launches`]), and logs to `worker{suffix}.rank{r}.log`.
/// A lockstep group meets on the recipe's `VLLM_DP_MASTER_PORT`, else a free
/// local port.
fn spawn_ranks(
    job: &super::plan::PlannedJob,
    dp: &super::dp::DpPlan,
    request: Job,
    visible: Option<&[u32]>,
    dir: &std::path::Path,
    suffix: &str,
    session: &Session<'_>,
) -> Result<Vec<Worker>> {
    let port = match dp.master_port {
        Some(p) => p,
        None => super::dp::free_port()?,
    };
    let mut workers = Vec::new();
    for launch in dp.launches(&job.config.args, visible, port, &super::dp::allowed_cores()) {
        let rank_job = launch.request(&request, dp);
        let (env, unset) = launch.environment(&job.env, &job.config.env_unset);
        let log = dir.join(format!("worker{suffix}.rank{}.log", launch.rank));
        match spawn_worker(&job.python, &Task::Run(rank_job), &env, &unset, &log, session.verbose, session.ui) {
            Ok(w) => workers.push(w),
            Err(e) => {
                // Ranks start together or not at all.
                kill_all(&mut workers);
                return Err(e);
            }
        }
    }
    Ok(workers)
}

/// What the worker of job `index` is asked to do: its engine, its points,
/// the eval if this job runs it, and the profiler windows of `--profile`.
fn worker_request(plan: &Plan, index: usize, result: &RunResult, files: &OutputFiles) -> Result<Job> {
    let job = &plan.jobs[index];
    let mut engine_argv = vec![plan.model_path.clone()];
    engine_argv.extend(job.config.args.iter().cloned());
    // --profile: the first job of each label (in `ab`, each variant's first repeat).
    let first_of_label = result.jobs[..index].iter().all(|j| j.label != result.jobs[index].label);
    let profile = crate::profile::select::job_targets(plan.profile.as_ref(), first_of_label, &job.specs, job.config.tp, &files.dir, &result.jobs[index].label)?;
    Ok(Job {
        engine_argv,
        points: job.specs.clone(),
        eval: plan.eval.as_ref().filter(|_| job.run_eval).map(|e| {
            let mut eval = e.job.clone();
            if let Some(lm) = eval.lm_eval.as_mut() {
                lm.output_dir = super::outputs::lm_eval_dir(&files.dir, &result.jobs[index].label);
            }
            eval
        }),
        record_token_ids: job.record_token_ids,
        profile,
        dp: None,
        pd: None,
        knobs: Some(KnobRequest {
            env: job.env.clone(),
            env_unset: job.config.env_unset.clone(),
            concs: job.config.points.iter().map(|p| p.conc).collect(),
            quick_reduce: false,
        }),
    })
}

/// How a worker's run ended, as watching it saw it.
#[derive(Debug, Default)]
struct WorkerEnd {
    /// The engine's error, a `--point-timeout`, or (once the worker exited)
    /// its unexpected end.
    failure: Option<RunError>,
    /// The engine rejected the user's input.
    bad_input: bool,
    /// The worker said it finished every point.
    got_done: bool,
    /// Points finished in this run (a resumed job has earlier ones too).
    points_done: usize,
    /// `--point-timeout` ran out and the worker was killed.
    timed_out: bool,
    /// Ctrl-C asked the worker to stop.
    interrupted: bool,
    /// Data parallel: the rank whose failure ended the job.
    failed_rank: Option<usize>,
}

impl WorkerEnd {
    /// The job's outcome: interrupted wins; then the worker's failure (bad
    /// input or not); then failed points, a failed accuracy gate or points
    /// left unfinished; else ok.
    fn outcome(&self, job: &JobResult) -> JobOutcome {
        let points_failed = job.points.iter().any(|p| p.status == PointStatus::Failed);
        let gate_failed = job.eval.as_ref().and_then(|e| e.gate.as_ref()).is_some_and(|g| !g.passed);
        match (&self.failure, self.bad_input) {
            _ if self.interrupted => JobOutcome::Interrupted,
            (Some(_), true) => JobOutcome::BadInput,
            (Some(_), false) => JobOutcome::Failed,
            (None, _) if points_failed || gate_failed || !job.unfinished.is_empty() => JobOutcome::Failed,
            (None, _) => JobOutcome::Ok,
        }
    }
}

/// Names every point of `specs` that did not finish, and why: the one in
/// progress when the worker stopped (unless Ctrl-C kept it as a partial
/// point) for the reason it stopped, the ones after it as not run.
fn unfinished_points(specs: &[PointSpec], points: &[PointResult], end: &WorkerEnd) -> Vec<Unfinished> {
    let partial_last = points.last().is_some_and(|p| p.status == PointStatus::Partial);
    let in_progress = (!partial_last).then(|| match (&end.failure, end.interrupted) {
        (_, true) => (UnfinishedStatus::Interrupted, "stopped by Ctrl-C before it finished".to_string()),
        (Some(f), _) if end.timed_out => (UnfinishedStatus::Timeout, f.message.clone()),
        (Some(f), _) => (UnfinishedStatus::Failed, f.message.clone()),
        (None, _) => (UnfinishedStatus::NotRun, "the worker ended before this point".to_string()),
    });
    let after = if end.interrupted { "interrupted" } else { "an earlier point failed" };
    name_unfinished(specs.iter().skip(end.points_done), in_progress, after)
}

/// The unfinished entries of `todo` (points without a result, in plan
/// order): the first with `first` (status and reason) when given, every
/// other one not run for the reason `after`.
pub fn name_unfinished<'a>(todo: impl Iterator<Item = &'a PointSpec>, first: Option<(UnfinishedStatus, String)>, after: &str) -> Vec<Unfinished> {
    let mut first = first;
    todo.map(|spec| {
        let (status, reason) = first.take().unwrap_or_else(|| (UnfinishedStatus::NotRun, after.to_string()));
        Unfinished { point: spec.point, status, reason }
    })
    .collect()
}

/// Watching one worker: its messages written into the job's result as they
/// arrive, the progress bar, Ctrl-C and `--point-timeout`.
struct WorkerWatch<'a> {
    plan: &'a Plan,
    index: usize,
    ui: &'a MultiProgress,
    interrupts: &'a Interrupts,
    telemetry: &'a Telemetry,
    /// The GPU ordinals the engine's environment leaves visible (`None`: all).
    visible: Option<Vec<u32>>,
    bar: Bar<'a>,
    /// GPUs the engine spans (the per-GPU divisor), once it is ready.
    gpus: u32,
    /// When the engine must have started (`--start-timeout`), then when
    /// the next point must have finished (`--point-timeout`).
    deadline: Option<Instant>,
    /// The engine reported ready.
    started: bool,
    seen_interrupts: usize,
    killed: bool,
    end: WorkerEnd,
    /// Data parallel: what the ranks sent that waits for the other ranks.
    ranks: RankMessages,
    /// A job over several nodes: the workers are node groups
    /// ([`super::nodes`]), whose events carry the ranks' lines.
    nodes: Option<super::nodes::NodePlan>,
    /// Per node: its clock against this process's (s to add to its
    /// monotonic times), its telemetry windows per point, its sampler.
    node_clock: Vec<f64>,
    node_windows: Vec<std::collections::VecDeque<crate::telemetry::WindowSummary>>,
    node_telemetry: Vec<TelemetryInfo>,
    /// Merged points waiting for every node's telemetry window.
    pending: std::collections::VecDeque<(crate::protocol::RawPoint, Vec<crate::protocol::RawPoint>)>,
    /// Data parallel: which rank the failure names when a death and its
    /// peers' errors race ([`super::dp::blame`]).
    blame: super::dp::blame::Blame,
}

/// What the reader threads pass to the watcher.
enum Feed {
    /// A rank's line, or its output closed (`None`).
    Rank(usize, Option<String>),
    /// A node group's event (not a rank's line).
    Node(super::nodes::NodeEvent),
    /// A node group's output closed.
    GroupClosed(usize),
}

/// Messages of a data-parallel job's ranks that only count once every rank
/// sent its own: readiness, each point, the end.
#[derive(Default)]
struct RankMessages {
    ready: Vec<Option<(crate::protocol::EngineInfo, f64)>>,
    points: Vec<std::collections::VecDeque<crate::protocol::RawPoint>>,
    done: Vec<bool>,
    world_size: u32,
}

impl<'a> WorkerWatch<'a> {
    fn new(plan: &'a Plan, index: usize, session: &'a Session<'a>, telemetry: &'a Telemetry, visible: Option<Vec<u32>>) -> WorkerWatch<'a> {
        WorkerWatch {
            plan,
            index,
            ui: session.ui,
            interrupts: session.interrupts,
            telemetry,
            visible,
            bar: Bar::new(session.ui),
            gpus: 1,
            deadline: Some(Instant::now() + plan.start_timeout),
            started: false,
            seen_interrupts: session.interrupts.count(),
            killed: false,
            end: WorkerEnd::default(),
            ranks: RankMessages::default(),
            nodes: None,
            node_clock: Vec::new(),
            node_windows: Vec::new(),
            node_telemetry: Vec::new(),
            pending: Default::default(),
            blame: Default::default(),
        }
    }

    /// Kills every worker (or ends every node group: SIGTERM, then SIGKILL).
    fn kill_all(&self, pids: &[u32]) {
        if self.nodes.is_some() {
            super::nodes::launch::end_node_groups(pids, super::nodes::launch::END_GRACE);
        } else {
            pids.iter().for_each(|&p| kill_group(p));
        }
    }

    /// Follows the workers' messages (one, or one per DP rank) until every
    /// output closes. A rank that fails or ends early ends every rank: the
    /// others would wait for it (a lockstep group) or measure without it.
    /// Returns how the job ended and, for a job over several nodes, each
    /// node's sampler.
    fn follow(mut self, workers: &mut [Worker], world_size: u32, result: &mut RunResult, files: &mut OutputFiles) -> Result<(WorkerEnd, Vec<TelemetryInfo>)> {
        // Messages arrive on threads so the loop can watch the clock and Ctrl-C.
        let (tx, rx) = mpsc::channel::<Feed>();
        let groups = self.nodes.is_some();
        for (index, worker) in workers.iter_mut().enumerate() {
            let stdout = worker.stdout.take().expect("piped");
            let tx = tx.clone();
            let name = format!("eb-worker-msg{index}");
            std::thread::Builder::new().name(name).spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let feed = if groups {
                        match serde_json::from_str::<super::nodes::NodeEvent>(&line) {
                            Ok(super::nodes::NodeEvent::Line { rank, line }) => Feed::Rank(rank as usize, Some(line)),
                            Ok(super::nodes::NodeEvent::Closed { rank }) => Feed::Rank(rank as usize, None),
                            Ok(event) => Feed::Node(event),
                            Err(_) => continue,
                        }
                    } else {
                        Feed::Rank(index, Some(line))
                    };
                    if tx.send(feed).is_err() {
                        return;
                    }
                }
                let _ = tx.send(if groups { Feed::GroupClosed(index) } else { Feed::Rank(index, None) });
            })?;
        }
        drop(tx);
        let n = self.nodes.as_ref().map_or(workers.len(), |p| p.rank_count() as usize);
        if n > 1 || groups {
            self.ranks = RankMessages { ready: vec![None; n], points: vec![Default::default(); n], done: vec![false; n], world_size };
        }
        if let Some(p) = &self.nodes {
            self.node_clock = vec![0.0; p.nodes as usize];
            self.node_windows = vec![Default::default(); p.nodes as usize];
        }
        let pids: Vec<u32> = workers.iter().map(|w| w.child.id()).collect();
        let (mut open, mut open_groups) = (n, if groups { workers.len() } else { 0 });
        let mut closed = vec![false; n];
        let mut ended_groups = false;
        self.bar.spinner(match (groups, n > 1) {
            (true, _) => "starting engines (one node group per node)",
            (false, true) => "starting engines (one per data-parallel rank)",
            (false, false) => "starting engine (import vLLM, load weights)",
        });
        while open > 0 || open_groups > 0 {
            // The spanning engine done: the other nodes' headless followers
            // serve until they are ended (node groups of ranks end with them).
            if open == 0 && !ended_groups && self.nodes.as_ref().is_some_and(|p| matches!(p.kind, super::nodes::NodeKind::Spanning { .. })) {
                ended_groups = true;
                super::nodes::launch::end_node_groups(&pids[1..], super::nodes::launch::END_GRACE);
            }
            let (rank, line) = match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(Feed::Rank(rank, Some(line))) => (rank, Some(line)),
                Ok(Feed::Rank(rank, None)) => {
                    if !std::mem::replace(&mut closed[rank], true) {
                        open -= 1;
                        if (n > 1 || groups) && !self.ranks.done[rank] && !self.end.interrupted {
                            let message = match &self.nodes {
                                Some(p) if matches!(p.kind, super::nodes::NodeKind::Spanning { .. }) => {
                                    "the engine (node 0, its workers on every node) ended before finishing; every node was stopped".to_string()
                                }
                                Some(p) => format!("data-parallel rank {rank} (node {}) ended before finishing; every node was stopped", p.node_of_rank(rank as u32)),
                                None => format!("data-parallel rank {rank} ended before finishing; every rank was stopped"),
                            };
                            self.on_death(Some(rank), message, &pids);
                        }
                    }
                    (rank, None)
                }
                Ok(Feed::Node(event)) => {
                    self.on_node_event(event, &pids, result, files)?;
                    (0, None)
                }
                Ok(Feed::GroupClosed(node)) => {
                    open_groups -= 1;
                    // A node group that is gone takes its ranks with it.
                    if let Some(p) = self.nodes.clone() {
                        let gone: Vec<usize> = (0..n).filter(|&r| p.node_of_rank(r as u32) as usize == node && !closed[r]).collect();
                        for rank in gone {
                            closed[rank] = true;
                            open -= 1;
                            if !self.ranks.done[rank] && !self.end.interrupted {
                                self.on_death(Some(rank), format!("node {node}'s group ended before data-parallel rank {rank} finished; every node was stopped"), &pids);
                            }
                        }
                    }
                    (0, None)
                }
                Err(RecvTimeoutError::Timeout) => (0, None),
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if let Some(v) = self.blame.due(Some(Instant::now())) {
                self.fail_with(v, &pids);
            }
            self.stop_if_asked(&pids);
            let Some(line) = line else { continue };
            let Ok(msg) = serde_json::from_str::<Message>(&line) else {
                tracing::debug!("worker said: {line}");
                continue;
            };
            // Progress changes nothing in result.json: rewriting (and syncing) it
            // per finished request took CPU from the engine on small machines.
            let changes_result = !matches!(msg, Message::Progress { .. });
            if n > 1 || groups {
                self.on_rank_message(rank, msg, &pids, result, files)?;
            } else {
                self.on_message(msg, result, files)?;
            }
            if changes_result {
                files.write_result(result)?;
            }
        }
        self.bar.clear();
        // Every output closed within a rank's grace: its error stands.
        if let Some(v) = self.blame.due(None) {
            self.record_failure(v);
        }
        let mut nodes = std::mem::take(&mut self.node_telemetry);
        nodes.sort_by(|a, b| a.series_file.cmp(&b.series_file));
        Ok((self.end, nodes))
    }

    /// A node group's own event: its clock, a telemetry window, a process
    /// that ended (a rank's or a follower's: its failure ends the job), its
    /// sampler, its failure.
    fn on_node_event(&mut self, event: super::nodes::NodeEvent, pids: &[u32], result: &mut RunResult, files: &mut OutputFiles) -> Result<()> {
        use super::nodes::NodeEvent;
        match event {
            NodeEvent::Clock { node, wall_minus_mono_s } => {
                if let Some(c) = self.node_clock.get_mut(node as usize) {
                    *c = wall_minus_mono_s - super::nodes::wall_minus_mono_s();
                }
            }
            NodeEvent::Window { node, window, .. } => {
                if let Some(q) = self.node_windows.get_mut(node as usize) {
                    q.push_back(*window);
                }
                self.flush_pending(result, files)?;
            }
            NodeEvent::Exited { node, rank, ok: false, status } => {
                let who = rank.map_or(format!("node {node}'s headless follower (vLLM's workers of that node)"), |r| format!("data-parallel rank {r} (node {node})"));
                self.on_death(rank.map(|r| r as usize), format!("{who} ended unexpectedly ({status}); every node was stopped"), pids);
            }
            NodeEvent::Exited { .. } => {}
            NodeEvent::Telemetry { info, .. } => self.node_telemetry.push(*info),
            NodeEvent::Failed { message, .. } => self.on_death(None, message, pids),
            NodeEvent::Line { .. } | NodeEvent::Closed { .. } => {}
        }
        Ok(())
    }

    /// Finishes the merged points whose every node sent its window (a
    /// spanning engine's: node 0's, the node that runs its engine core).
    fn flush_pending(&mut self, result: &mut RunResult, files: &mut OutputFiles) -> Result<()> {
        let Some(plan) = self.nodes.clone() else { return Ok(()) };
        let with_ranks = match plan.kind {
            super::nodes::NodeKind::DpRanks { .. } => plan.nodes as usize,
            super::nodes::NodeKind::Spanning { .. } => 1,
        };
        while !self.pending.is_empty() && self.node_windows[..with_ranks].iter().all(|q| !q.is_empty()) {
            let (raw, ranks) = self.pending.pop_front().expect("not empty");
            let windows: Vec<_> = self.node_windows[..with_ranks].iter_mut().filter_map(|q| q.pop_front()).collect();
            self.on_point_with(&raw, &ranks, Some((windows, plan.nodes as usize - with_ranks)), result, files)?;
        }
        Ok(())
    }

    /// Ctrl-C: the first asks the worker to stop gracefully, the second kills
    /// it; a point that outlives `--point-timeout` kills it too.
    fn stop_if_asked(&mut self, pids: &[u32]) {
        let pressed = self.interrupts.count() - self.seen_interrupts;
        if pressed >= 1 && !self.end.interrupted {
            self.end.interrupted = true;
            self.bar.clear();
            say(self.ui, "interrupted: aborting the requests in flight and keeping the partial point (Ctrl-C again to kill the engine)");
            for &pid in pids {
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(pid as i32, STOP_SIGNAL) };
            }
        }
        if pressed >= 2 && !self.killed {
            self.killed = true;
            say(self.ui, "interrupted again: killing the engine worker");
            self.kill_all(pids);
        }
        if self.deadline.is_some_and(|d| Instant::now() > d) && !self.end.timed_out {
            // A rank's error waiting out its grace came first: it is the
            // failure, not the timeout.
            if let Some(v) = self.blame.due(None) {
                self.deadline = None;
                self.fail_with(v, pids);
                return;
            }
            self.end.timed_out = true;
            let message = if self.started {
                let secs = self.plan.point_timeout.map_or(0, |t| t.as_secs());
                format!("timeout: no point finished within --point-timeout {secs} s; the engine worker was killed")
            } else {
                format!(
                    "timeout: the engine did not start within --start-timeout {} s (model load, compile or graph capture hung?); the engine worker was killed; --resume retries the job",
                    self.plan.start_timeout.as_secs()
                )
            };
            self.end.failure = Some(RunError { message, ..RunError::default() });
            self.killed = true;
            self.kill_all(pids);
        }
    }

    /// Rank `rank` (`None`: a node's follower or group) ended before
    /// finishing: the job's failure, unless this process already ended the
    /// ranks (their deaths are its own doing), naming it over a peer's
    /// error that came first ([`super::dp::blame`]).
    fn on_death(&mut self, rank: Option<usize>, message: String, pids: &[u32]) {
        if self.killed {
            return;
        }
        if let Some(v) = self.blame.on_death(rank, message, Instant::now()) {
            self.fail_with(v, pids);
        }
    }

    /// Records the verdict (the first failure only) and kills every rank.
    fn fail_with(&mut self, v: super::dp::blame::Verdict, pids: &[u32]) {
        self.record_failure(v);
        if !self.killed {
            self.killed = true;
            self.kill_all(pids);
        }
    }

    /// Records the verdict as the job's failure unless one is recorded.
    fn record_failure(&mut self, v: super::dp::blame::Verdict) {
        if self.end.failure.is_none() {
            self.end.bad_input = v.error.bad_input;
            self.end.failure = Some(v.error);
            self.end.failed_rank = Some(v.rank);
        }
    }

    /// One message of a data-parallel rank: readiness, points and the end
    /// count once all ranks sent theirs (the point merged over the ranks);
    /// progress and the eval come from rank 0; an error ends every rank.
    fn on_rank_message(&mut self, rank: usize, msg: Message, pids: &[u32], result: &mut RunResult, files: &mut OutputFiles) -> Result<()> {
        match msg {
            Message::Ready { engine, engine_start_s } => {
                self.ranks.ready[rank] = Some((*engine, engine_start_s));
                if self.ranks.ready.iter().all(Option::is_some) {
                    let ready: Vec<_> = self.ranks.ready.iter().flatten().cloned().collect();
                    let infos: Vec<_> = ready.iter().map(|(e, _)| e.clone()).collect();
                    let mut engine = super::dp::merge::merge_engine_info(&infos, self.ranks.world_size);
                    engine.nodes = self.nodes.as_ref().map(|p| p.nodes);
                    let start = ready.iter().map(|(_, s)| *s).fold(0.0, f64::max);
                    self.on_message(Message::Ready { engine: Box::new(engine), engine_start_s: start }, result, files)?;
                }
            }
            Message::Point { raw } => {
                let mut raw = *raw;
                // A rank of another node: its times onto this process's clock.
                if let Some(p) = &self.nodes {
                    raw.started_mono_s += self.node_clock.get(p.node_of_rank(rank as u32) as usize).copied().unwrap_or(0.0);
                }
                self.ranks.points[rank].push_back(raw);
                if self.ranks.points.iter().all(|q| !q.is_empty()) {
                    let raws: Vec<_> = self.ranks.points.iter_mut().filter_map(|q| q.pop_front()).collect();
                    let merged = super::dp::merge::merge_ranks(&raws);
                    if self.nodes.is_some() {
                        // Figures wait for every node's telemetry window.
                        let raws = if raws.len() > 1 { raws } else { Vec::new() };
                        self.pending.push_back((merged, raws));
                        self.flush_pending(result, files)?;
                    } else {
                        self.on_point(&merged, &raws, result, files)?;
                    }
                }
            }
            Message::Done => {
                self.ranks.done[rank] = true;
                self.end.got_done = self.ranks.done.iter().all(|d| *d);
            }
            Message::Error { message, traceback, bad_input } => {
                let error = RunError { message: format!("data-parallel rank {rank}: {message}"), traceback, bad_input, ..RunError::default() };
                if let Some(v) = self.blame.on_error(rank, error, Instant::now()) {
                    self.fail_with(v, pids);
                }
            }
            Message::Progress { .. } | Message::Eval { .. } if rank != 0 => {}
            other => self.on_message(other, result, files)?,
        }
        Ok(())
    }

    /// A finished point (`ranks`: a data-parallel job's raw points per
    /// rank, `raw` their merge; empty for one engine): its figures, its
    /// telemetry window, the files.
    fn on_point(&mut self, raw: &crate::protocol::RawPoint, ranks: &[crate::protocol::RawPoint], result: &mut RunResult, files: &mut OutputFiles) -> Result<()> {
        self.on_point_with(raw, ranks, None, result, files)
    }

    /// [`Self::on_point`] with the nodes' telemetry windows of a job over
    /// several nodes (and how many nodes sent none: a spanning engine's
    /// followers), merged into the point's window instead of this process's
    /// sampler's.
    fn on_point_with(
        &mut self,
        raw: &crate::protocol::RawPoint,
        ranks: &[crate::protocol::RawPoint],
        node_windows: Option<(Vec<crate::telemetry::WindowSummary>, usize)>,
        result: &mut RunResult,
        files: &mut OutputFiles,
    ) -> Result<()> {
        let (plan, telemetry) = (self.plan, self.telemetry);
        let j = &mut result.jobs[self.index];
        let k = j.engine.as_ref().and_then(|e| e.num_speculative_tokens);
        let in_process = super::plan::in_process(&j.env);
        let mut point = finish_point(raw, &j.sweep, self.gpus, in_process, k);
        point.ranks = ranks
            .iter()
            .enumerate()
            .map(|(r, rank_raw)| {
                let p = finish_point(rank_raw, &j.sweep, self.gpus, in_process, k);
                super::dp::merge::rank_point(r as u32, &p.figures, p.step_stats)
            })
            .collect();
        let f = &point.figures;
        let (t0, t1) = (raw.started_mono_s, raw.started_mono_s + raw.duration_s);
        let (out_tokens, all_tokens) = (f.total_output_tokens, f.total_input_tokens + f.total_output_tokens);
        let window = match node_windows {
            Some((windows, unsampled)) if !windows.is_empty() => {
                let mut w = crate::telemetry::summary::merge_node_windows(windows, t0, t1, out_tokens, all_tokens);
                if unsampled > 0 {
                    w.invalidate(format!("{unsampled} node(s) run only a headless follower and send no window of their GPUs"));
                }
                w
            }
            _ => telemetry.window(t0, t1, out_tokens, all_tokens),
        };
        point.telemetry = Some(window);
        self.bar.finish(point_line(&point));
        files.append_point(self.index, j, j.points.len(), &point, raw)?;
        j.points.push(point);
        self.end.points_done += 1;
        self.deadline = plan.point_timeout.map(|t| Instant::now() + t);
        Ok(())
    }

    /// Records one message of the worker into the job's result and files.
    fn on_message(&mut self, msg: Message, result: &mut RunResult, files: &mut OutputFiles) -> Result<()> {
        let (plan, ui, telemetry, bar) = (self.plan, self.ui, self.telemetry, &mut self.bar);
        let job = &plan.jobs[self.index];
        let j = &mut result.jobs[self.index];
        match msg {
            Message::Ready { engine, engine_start_s } => {
                telemetry.mark("engine ready");
                self.started = true;
                bar.finish(format!("engine started in {engine_start_s:.1} s"));
                // Per-GPU figures divide by InferenceX's count (TP x PP x PCP, TP the recipe's).
                self.gpus = engine.inferencex_gpus(job.config.tp);
                let engine_gpus = engine_gpus_from_ordinals(self.visible.as_deref(), &engine.device_ordinals());
                if let Err(e) = &engine_gpus {
                    say(ui, &format!("  warning: telemetry cannot tell the engine's GPUs: {e}"));
                }
                telemetry.set_engine_gpus(engine_gpus);
                j.fingerprint = Some(j.compute_fingerprint(&plan.model_path, engine.vllm.as_deref().unwrap_or("")));
                if let Some(info) = j.python.as_mut() {
                    info.vllm = engine.vllm.clone();
                    info.vllm_path = engine.vllm_path.clone();
                    info.vllm_git_commit = info.vllm_path.as_deref().and_then(crate::python::git_commit);
                }
                for item in &engine.degraded {
                    say(ui, &format!("  warning: off on this vLLM: {item}"));
                }
                j.engine = Some((*engine).clone());
                j.engine_start_s = Some(engine_start_s);
                result.versions.refresh(&result.jobs);
                self.deadline = plan.point_timeout.map(|t| Instant::now() + t);
            }
            Message::Knobs { report, error } => {
                match (&report, error) {
                    (Some(r), _) => say(ui, &format!("  {}", crate::knobs::render::summary(r))),
                    (None, Some(e)) => say(ui, &format!("  warning: no knob report: {e}")),
                    (None, None) => {}
                }
                j.knobs = report.map(|r| *r);
            }
            Message::Progress { phase, done, total } => {
                if bar.phase() != phase {
                    telemetry.mark(&phase);
                }
                bar.progress(&phase, done, total)
            }
            Message::Point { raw } => self.on_point(&raw, &[], result, files)?,
            Message::Profile { raw } => {
                // --profile: read the trace back, the top-kernels table into the point.
                let point = job.specs.get(raw.point).map(|s| s.point);
                match point.map(|p| crate::profile::attach::attach(&raw, &p, j, &files.dir)) {
                    Some(Ok(text)) => say(ui, &text),
                    // A profile that cannot be read, or a device profile
                    // without device kernels, fails the job: never a table
                    // of the wrong thing.
                    Some(Err(e)) => {
                        let message = format!("profile of {}: {e:#}", raw.trace.display());
                        say(ui, &format!("error: {message}"));
                        self.end.failure.get_or_insert(RunError { message, ..RunError::default() });
                    }
                    None => say(ui, &format!("warning: profile of an unknown point {}", raw.point)),
                }
                self.deadline = plan.point_timeout.map(|t| Instant::now() + t);
            }
            Message::Eval { completions, duration_s, max_tokens } => {
                bar.finish(format!("eval generated in {duration_s:.1} s"));
                if let Some(builtin) = plan.eval.as_ref().and_then(|e| e.builtin.as_ref()) {
                    let g = score_eval(builtin, &completions, duration_s, max_tokens, files, &j.label)?;
                    j.eval.get_or_insert_with(Evals::default).gsm8k = Some(g);
                    regate(plan, j);
                }
            }
            Message::LmEval { results, duration_s, wall_s, load, max_tokens } => {
                bar.finish(format!("lm-eval tasks generated in {duration_s:.1} s"));
                let out = super::outputs::lm_eval_dir(&files.dir, &j.label);
                let written = super::outputs::lm_eval_files(&files.dir, &out);
                let chat = plan.eval.as_ref().and_then(|e| e.job.lm_eval.as_ref()).is_some_and(|l| l.chat);
                let r = finish_lm_eval(&results, (duration_s, wall_s), &load, max_tokens, chat, written)?;
                j.eval.get_or_insert_with(Evals::default).lm_eval = Some(r);
                regate(plan, j);
            }
            Message::Error { message, traceback, bad_input } => {
                self.end.bad_input = bad_input;
                self.end.failure = Some(RunError { message, traceback, log_tail: Vec::new(), bad_input });
            }
            Message::Done => self.end.got_done = true,
            Message::Checked { .. } | Message::Doctor { .. } => {}
        }
        Ok(())
    }
}

/// (Re)computes a job's accuracy gate over every eval result it has so far.
fn regate(plan: &Plan, j: &mut crate::report::result::JobResult) {
    let builtin = plan.eval.as_ref().and_then(|e| e.builtin.as_ref()).map(|b| &b.task);
    let metric = plan.recipe.eval.as_ref().map(|e| e.gate_metric).unwrap_or_default();
    if let Some(e) = j.eval.as_mut() {
        e.gate = gate(e, builtin, &plan.gate, metric);
    }
}

