//! One job: a worker process for one engine configuration, watched until it
//! ends. Everything it sends is written as it arrives; crashes, hangs and
//! Ctrl-C leave valid files with the unfinished points named.

use std::io::{BufRead, BufReader};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Result;
use indicatif::MultiProgress;

use super::finish::{finish_point, gate, point_line, score_eval};
use super::interrupt::Interrupts;
use super::outputs::OutputFiles;
use super::plan::Plan;
use super::progress::{Bar, say};
use crate::protocol::{Job, Message, Task};
use super::spawn::spawn_worker;
use crate::protocol::STOP_SIGNAL;
use crate::report::result::{Evals, JobResult, RunError, RunResult, Status, TelemetryInfo, Unfinished};
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
    let (ui, interrupts) = (session.ui, session.interrupts);
    let job = &plan.jobs[index];
    let mut engine_argv = vec![plan.model_path.clone()];
    engine_argv.extend(job.config.args.iter().cloned());
    // --profile: the first job of each label (in `ab`, each variant's first repeat).
    let first_of_label = result.jobs[..index].iter().all(|j| j.label != result.jobs[index].label);
    let profile = crate::profile::select::job_targets(plan.profile.as_ref(), first_of_label, &job.specs, job.config.tp, &files.dir, &result.jobs[index].label)?;
    let request = Job {
        engine_argv,
        points: job.specs.clone(),
        eval: plan.eval.as_ref().filter(|_| job.run_eval).map(|e| e.job.clone()),
        record_token_ids: job.record_token_ids,
        profile,
    };
    let suffix = files.suffix(index, plan.jobs.len());
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
    let mut worker = spawn_worker(&job.python, &Task::Run(request), &job.env, &job.config.env_unset, &log_path, session.verbose, ui)?;
    let pid = worker.child.id();
    telemetry.set_engine_pid(pid);
    result.jobs[index].worker_pid = Some(pid);
    files.write_result(result)?;

    // Messages arrive on a thread so the loop can watch the clock and Ctrl-C.
    let (tx, rx) = mpsc::channel();
    let stdout = worker.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut bar = Bar::new(ui);
    bar.spinner("starting engine (import vLLM, load weights)");
    let mut failure: Option<RunError> = None;
    let mut bad_input = false;
    let mut got_done = false;
    let mut gpus = 1;
    let mut points_done = 0usize;
    // Engine start has its own deadline; each point then gets --point-timeout.
    let mut deadline: Option<Instant> = Some(Instant::now() + plan.start_timeout);
    let mut started = false;
    let mut timed_out = false;
    let seen_interrupts = interrupts.count();
    let mut asked_to_stop = false;
    let mut killed = false;
    loop {
        let line = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // Ctrl-C: the first asks the worker to stop gracefully, the second kills it.
        let pressed = interrupts.count() - seen_interrupts;
        if pressed >= 1 && !asked_to_stop {
            asked_to_stop = true;
            bar.clear();
            say(ui, "interrupted: aborting the requests in flight and keeping the partial point (Ctrl-C again to kill the engine)");
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid as i32, STOP_SIGNAL) };
        }
        if pressed >= 2 && !killed {
            killed = true;
            say(ui, "interrupted again: killing the engine worker");
            kill_group(pid);
        }
        if deadline.is_some_and(|d| Instant::now() > d) && !timed_out {
            timed_out = true;
            let message = if started {
                let secs = plan.point_timeout.map_or(0, |t| t.as_secs());
                format!("timeout: no point finished within --point-timeout {secs} s; the engine worker was killed")
            } else {
                format!(
                    "timeout: the engine did not start within --start-timeout {} s (model load, compile or graph capture hung?); the engine worker was killed; --resume retries the job",
                    plan.start_timeout.as_secs()
                )
            };
            failure = Some(RunError { message, ..RunError::default() });
            kill_group(pid);
        }
        let Some(line) = line else { continue };
        let Ok(msg) = serde_json::from_str::<Message>(&line) else {
            tracing::debug!("worker said: {line}");
            continue;
        };
        // Progress changes nothing in result.json: rewriting (and syncing) it
        // per finished request took CPU from the engine on small machines.
        let changes_result = !matches!(msg, Message::Progress { .. });
        let j = &mut result.jobs[index];
        match msg {
            Message::Ready { engine, engine_start_s } => {
                telemetry.mark("engine ready");
                started = true;
                bar.finish(format!("engine started in {engine_start_s:.1} s"));
                // Per-GPU figures divide by InferenceX's count (TP x PP x PCP, TP the recipe's).
                gpus = engine.inferencex_gpus(job.config.tp);
                let engine_gpus = engine_gpus_from_ordinals(visible.as_deref(), &engine.device_ordinals());
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
                deadline = plan.point_timeout.map(|t| Instant::now() + t);
            }
            Message::Progress { phase, done, total } => {
                if bar.phase() != phase {
                    telemetry.mark(&phase);
                }
                bar.progress(&phase, done, total)
            }
            Message::Point { raw } => {
                let k = j.engine.as_ref().and_then(|e| e.num_speculative_tokens);
                let mut point = finish_point(&raw, &j.sweep, gpus, super::plan::in_process(&j.env), k);
                let f = &point.figures;
                let (t0, t1) = (raw.started_mono_s, raw.started_mono_s + raw.duration_s);
                let window = telemetry.window(t0, t1, f.total_output_tokens, f.total_input_tokens + f.total_output_tokens);
                point.telemetry = Some(window);
                bar.finish(point_line(&point));
                files.append_point(index, j, j.points.len(), &point, &raw)?;
                j.points.push(point);
                points_done += 1;
                deadline = plan.point_timeout.map(|t| Instant::now() + t);
            }
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
                        failure.get_or_insert(RunError { message, ..RunError::default() });
                    }
                    None => say(ui, &format!("warning: profile of an unknown point {}", raw.point)),
                }
                deadline = plan.point_timeout.map(|t| Instant::now() + t);
            }
            Message::Eval { completions, duration_s, max_tokens } => {
                bar.finish(format!("eval generated in {duration_s:.1} s"));
                if let Some(eval) = &plan.eval {
                    let g = score_eval(eval, &completions, duration_s, max_tokens, files, &j.label)?;
                    let metric = plan.recipe.eval.as_ref().map(|e| e.gate_metric);
                    let gate = plan.min_accuracy.map(|min| gate(&g, &eval.task, min, metric));
                    j.eval = Some(Evals { gsm8k: g, gate });
                }
            }
            Message::Error { message, traceback, bad_input: bad } => {
                bad_input = bad;
                failure = Some(RunError { message, traceback, log_tail: Vec::new(), bad_input: bad });
            }
            Message::Done => got_done = true,
            Message::Checked { .. } | Message::Doctor { .. } => {}
        }
        if changes_result {
            files.write_result(result)?;
        }
    }
    bar.clear();
    let status = worker.child.wait()?;
    let report = telemetry.stop();
    report.write_jsonl(&files.dir.join(&series_file))?;

    let interrupted = asked_to_stop;
    if failure.is_none() && !interrupted && (!got_done || !status.success()) {
        failure = Some(RunError {
            message: format!("the engine worker ended unexpectedly ({})", describe_exit(status)),
            ..RunError::default()
        });
    }
    if let Some(f) = failure.as_mut() {
        f.log_tail = worker.log_tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
    }

    let j = &mut result.jobs[index];
    j.worker_pid = None;
    j.telemetry = Some(TelemetryInfo {
        interval_ms: report.interval_ms,
        sources: report.sources.clone(),
        gpus: report.gpus.clone(),
        engine_gpus: report.engine_gpus.clone(),
        markers: report.markers.clone(),
        samples: report.samples.len(),
        series_file,
        sampler_cpu_seconds: report.sampler_cpu_seconds,
        sampler_cpu_fraction: report.sampler_cpu_fraction(),
    });
    // Name every point that did not finish, and why.
    let partial_last = j.points.last().is_some_and(|p| p.status == "partial");
    for (i, spec) in job.specs.iter().enumerate().skip(points_done) {
        let (status, reason) = if i == points_done && !partial_last {
            match (&failure, interrupted) {
                (_, true) => ("interrupted", "stopped by Ctrl-C before it finished".to_string()),
                (Some(_), _) if timed_out => ("timeout", failure.as_ref().map(|f| f.message.clone()).unwrap_or_default()),
                (Some(f), _) => ("failed", f.message.clone()),
                (None, _) => ("not run", "the worker ended before this point".to_string()),
            }
        } else {
            ("not run", if interrupted { "interrupted".to_string() } else { "an earlier point failed".to_string() })
        };
        j.unfinished.push(Unfinished { point: spec.point, status: status.into(), reason });
    }
    let points_failed = j.points.iter().any(|p| p.status == "failed");
    let gate_failed = j.eval.as_ref().and_then(|e| e.gate.as_ref()).is_some_and(|g| !g.passed);
    let outcome = match (&failure, bad_input) {
        _ if interrupted => JobOutcome::Interrupted,
        (Some(_), true) => JobOutcome::BadInput,
        (Some(_), false) => JobOutcome::Failed,
        (None, _) if points_failed || gate_failed || !j.unfinished.is_empty() => JobOutcome::Failed,
        (None, _) => JobOutcome::Ok,
    };
    j.status = match outcome {
        JobOutcome::Ok => Status::Ok,
        JobOutcome::Interrupted => Status::Interrupted,
        _ => Status::Failed,
    };
    j.error = failure;
    files.write_result(result)?;
    Ok(outcome)
}

/// Kills the worker and everything it started (its own process group).
fn kill_group(pid: u32) {
    // SAFETY: signals to our own child's process group.
    unsafe {
        libc::kill(-(pid as i32), libc::SIGKILL);
    }
}

/// "exit code 1", "killed by signal 9 (SIGKILL)", ...
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => {
            let name = match sig {
                libc::SIGKILL => " (SIGKILL; out of memory is a common cause)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGBUS => " (SIGBUS)",
                _ => "",
            };
            format!("killed by signal {sig}{name}")
        }
        _ => "unknown status".into(),
    }
}
