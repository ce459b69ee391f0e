//! `enginebench run`: plan the jobs from a recipe, run each in its own worker,
//! stream results to disk, print the table.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::Result;
use indicatif::MultiProgress;
use serde::Serialize;

use super::plan::{EvalPlan, Plan, PlannedJob, RunOptions, plan};
use super::progress::Bar;
use super::protocol::{EvalCompletion, Job, Message, RawPoint, Task};
use super::spawn::spawn_worker;
use crate::error::{exit, usage};
use crate::eval::tasks::TaskDef;
use crate::eval::{Sample, aggregate, score_sample};
use crate::metrics::crosscheck::cross_check;
use crate::metrics::steps::summarize_steps;
use crate::metrics::{FigureSpec, point_figures};
use crate::recipe::GateMetric;
use crate::recipe::sweep::ResolvedSweep;
use crate::report::files::{JsonLines, write_json_atomic};
use crate::report::result::{
    Evals, Gate, GateCheck, Gsm8kResult, Host, JobResult, PointResult, RecipeInfo, RunError, RunResult,
    SCHEMA_VERSION, TIMING_NOTE, TelemetryInfo, Versions,
};
use crate::telemetry::{Telemetry, TelemetryConfig, visible_gpus_from_env};
use crate::report::table;

/// Telemetry sampling interval (the default; the sampler costs
/// ~0.2 ms of CPU per sample on the development machine).
const TELEMETRY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// How a job ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobOutcome {
    Ok,
    Failed,
    /// The engine rejected the user's input (e.g. a flag vLLM's parser rejects).
    BadInput,
}

/// Runs a recipe end to end: every job (variant x TP) in its own worker, one
/// after the other. Returns the exit code: 0 all points ok and every accuracy
/// gate passed, 1 a point, a job or a gate failed, 2 the engine rejected the
/// input (and nothing else failed).
///
/// Errors (usage, exit 2): unreadable or invalid recipe, bad overrides,
/// missing set-up or data, unusable output folder. Engine failures are not
/// errors here: they are recorded in the result, and the next job still runs.
pub fn run(opts: &RunOptions) -> Result<i32> {
    let plan = plan(opts)?;
    let out_dir = output_dir(opts.output.as_deref(), &plan.recipe.name)?;
    let mut result = RunResult {
        schema_version: SCHEMA_VERSION,
        status: "running".into(),
        recipe: RecipeInfo {
            name: plan.recipe.name.clone(),
            file: plan.recipe_path.display().to_string(),
            model: plan.recipe.model.clone(),
            hardware: plan.recipe.hardware.clone(),
            precision: plan.recipe.precision.clone(),
            model_path: plan.model_path.clone(),
        },
        versions: Versions { enginebench: env!("CARGO_PKG_VERSION").into(), ..Default::default() },
        host: Host::detect(),
        started_at: now_rfc3339(),
        finished_at: None,
        timing: TIMING_NOTE.into(),
        jobs: plan.jobs.iter().map(pending_job).collect(),
    };
    let mut files = OutputFiles::create(&out_dir, opts.step_trace)?;
    files.write_result(&result)?;

    let ui = MultiProgress::new();
    eprintln!("enginebench: recipe {} -> {}", plan.recipe.name, out_dir.display());
    if let Some(e) = &plan.eval {
        eprintln!(
            "eval: {} ({}): {} questions, few-shot {}, data {}",
            e.task.name,
            e.task.description,
            e.plan.requests.len(),
            e.plan.fewshot_mode.label(),
            e.plan.data_kind.as_str()
        );
    }
    let mut outcomes = Vec::new();
    for (index, job) in plan.jobs.iter().enumerate() {
        if plan.jobs.len() > 1 {
            super::progress::say(&ui, &format!("job {}/{}: {}", index + 1, plan.jobs.len(), job.config.label()));
        }
        outcomes.push(run_job(&plan, index, job, &mut result, &mut files, &ui, opts.verbose)?);
    }

    let failed = outcomes.iter().any(|o| *o != JobOutcome::Ok);
    result.status = if failed { "failed" } else { "ok" }.into();
    result.finished_at = Some(now_rfc3339());
    files.write_result(&result)?;
    print_summary(&result, &out_dir, opts.verbose);
    Ok(if outcomes.iter().all(|o| *o == JobOutcome::Ok) {
        exit::OK
    } else if outcomes.iter().all(|o| *o != JobOutcome::Failed) {
        exit::USAGE
    } else {
        exit::FAILED
    })
}

fn pending_job(job: &PlannedJob) -> JobResult {
    JobResult {
        label: job.config.label(),
        variant: job.config.variant.clone(),
        tp: job.config.tp,
        status: "pending".into(),
        engine_args: job.config.args.clone(),
        env: job.env.clone(),
        env_unset: job.config.env_unset.clone(),
        fingerprint: None,
        sweep: job.config.sweep.clone(),
        engine: None,
        engine_start_s: None,
        points: Vec::new(),
        eval: None,
        telemetry: None,
        error: None,
    }
}

/// Runs one job in a fresh worker and records everything into `result.jobs[index]`.
fn run_job(
    plan: &Plan,
    index: usize,
    job: &PlannedJob,
    result: &mut RunResult,
    files: &mut OutputFiles,
    ui: &MultiProgress,
    verbose: bool,
) -> Result<JobOutcome> {
    let mut engine_argv = vec![plan.model_path.clone()];
    engine_argv.extend(job.config.args.iter().cloned());
    let request = Job {
        python: plan.install.python(),
        engine_argv,
        points: job.specs.clone(),
        eval: plan.eval.as_ref().filter(|_| job.run_eval).map(|e| e.job.clone()),
    };
    let suffix = if plan.jobs.len() > 1 { format!("-{index}") } else { String::new() };
    let log_path = files.dir.join(format!("worker{suffix}.log"));
    let series_file = format!("telemetry{suffix}.jsonl");
    result.jobs[index].status = "running".into();
    files.write_result(result)?;

    // The sampler starts before the engine, so the series covers its load.
    let telemetry = Telemetry::start(TelemetryConfig {
        interval: TELEMETRY_INTERVAL,
        visible_gpus: visible_gpus_from_env(&job.env),
        gpu_count_hint: job.config.tp,
    });
    telemetry.mark("engine load");
    let mut worker = spawn_worker(&Task::Run(request), &job.env, &job.config.env_unset, &log_path, verbose, ui)?;
    telemetry.set_engine_pid(worker.child.id());
    let mut bar = Bar::new(ui);
    bar.spinner("starting engine (import vLLM, load weights)");
    let mut failure: Option<RunError> = None;
    let mut bad_input = false;
    let mut got_done = false;
    let mut gpus = 1;
    for line in BufReader::new(worker.stdout.take().expect("piped")).lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Message>(&line) else {
            tracing::debug!("worker said: {line}");
            continue;
        };
        let j = &mut result.jobs[index];
        match msg {
            Message::Ready { engine, engine_start_s } => {
                telemetry.mark("engine ready");
                bar.finish(format!("engine started in {engine_start_s:.1} s"));
                let get = |k: &str| engine.get(k).and_then(|v| v.as_str()).map(String::from);
                let size = |k: &str| engine.get(k).and_then(|v| v.as_u64()).unwrap_or(1).max(1) as u32;
                gpus = size("tensor_parallel_size") * size("pipeline_parallel_size");
                j.fingerprint = Some(j.compute_fingerprint(&plan.model_path, get("vllm").as_deref().unwrap_or("")));
                j.engine = Some(engine.clone());
                j.engine_start_s = Some(engine_start_s);
                if result.versions.vllm.is_none() {
                    result.versions.vllm = get("vllm");
                    result.versions.torch = get("torch");
                    result.versions.python = get("python");
                }
            }
            Message::Progress { phase, done, total } => {
                if bar.phase() != phase {
                    telemetry.mark(&phase);
                }
                bar.progress(&phase, done, total)
            }
            Message::Point { raw } => {
                let mut point = finish_point(&raw, &j.sweep, gpus);
                let f = &point.figures;
                let (t0, t1) = (raw.started_mono_s, raw.started_mono_s + raw.duration_s);
                let window = telemetry.window(t0, t1, f.total_output_tokens, f.total_input_tokens + f.total_output_tokens);
                point.telemetry = Some(window);
                bar.finish(point_line(&point));
                files.append_point(index, j, j.points.len(), &point, &raw)?;
                j.points.push(point);
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
                failure = Some(RunError { message, traceback, log_tail: Vec::new() });
            }
            Message::Done => got_done = true,
            Message::Checked { .. } => {}
        }
        files.write_result(result)?;
    }
    bar.clear();
    let status = worker.child.wait()?;
    let report = telemetry.stop();
    report.write_jsonl(&files.dir.join(&series_file))?;
    result.jobs[index].telemetry = Some(TelemetryInfo {
        interval_ms: report.interval_ms,
        sources: report.sources.clone(),
        gpus: report.gpus.clone(),
        markers: report.markers.clone(),
        samples: report.samples.len(),
        series_file,
        sampler_cpu_seconds: report.sampler_cpu_seconds,
        sampler_cpu_fraction: report.sampler_cpu_fraction(),
    });
    if failure.is_none() && (!got_done || !status.success()) {
        failure = Some(RunError {
            message: format!("the engine worker ended unexpectedly ({})", describe_exit(status)),
            traceback: None,
            log_tail: Vec::new(),
        });
    }
    if let Some(f) = failure.as_mut() {
        f.log_tail = worker.log_tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
    }
    let j = &mut result.jobs[index];
    let points_failed = j.points.iter().any(|p| p.status != "ok");
    let gate_failed = j.eval.as_ref().and_then(|e| e.gate.as_ref()).is_some_and(|g| !g.passed);
    let outcome = match (&failure, bad_input) {
        (Some(_), true) => JobOutcome::BadInput,
        (Some(_), false) => JobOutcome::Failed,
        (None, _) if points_failed || gate_failed => JobOutcome::Failed,
        (None, _) => JobOutcome::Ok,
    };
    j.status = if outcome == JobOutcome::Ok { "ok" } else { "failed" }.into();
    j.error = failure;
    files.write_result(result)?;
    Ok(outcome)
}

/// The accuracy gate over lm-eval's metric names (`exact_match,<filter>`).
fn gate(g: &Gsm8kResult, task: &TaskDef, min_accuracy: f64, metric: Option<GateMetric>) -> Gate {
    let strict = (format!("exact_match,{}", task.strict.name), g.exact_match_strict);
    let flexible = (format!("exact_match,{}", task.flexible.name), g.exact_match_flexible);
    let metrics = match metric.unwrap_or_default() {
        GateMetric::All => vec![strict, flexible],
        GateMetric::Strict => vec![strict],
        GateMetric::Flexible => vec![flexible],
    };
    let checks: Vec<GateCheck> = metrics
        .into_iter()
        .map(|(metric, value)| GateCheck { metric, value, passed: value >= min_accuracy })
        .collect();
    Gate { min_accuracy, passed: checks.iter().all(|c| c.passed), checks }
}

/// Figures, step summary and cross-check of one measured point.
fn finish_point(raw: &RawPoint, sweep: &ResolvedSweep, gpus: u32) -> PointResult {
    let p = &raw.spec.point;
    let spec = FigureSpec { percentiles: &sweep.percentiles, gpus, goodput: sweep.goodput };
    let figures = point_figures(&raw.records, raw.duration_s, spec);
    let crosscheck = cross_check(&raw.records, &raw.engine_timings);
    if let Some(c) = crosscheck.as_ref().filter(|c| !c.agree) {
        tracing::warn!(
            "{}/{} conc {}: harness and vLLM disagree (TTFT median diff {:.2} ms, E2EL {:.2} ms, tolerance {:.2}/{:.2} ms)",
            p.isl, p.osl, p.conc, c.ttft.median_ms, c.e2el.median_ms, c.ttft.tolerance_ms, c.e2el.tolerance_ms
        );
    }
    PointResult {
        conc: p.conc,
        isl: p.isl,
        osl: p.osl,
        num_prompts: p.num_prompts,
        warmups: p.warmups,
        length_convention: raw.spec.dataset.convention,
        range_ratio: raw.spec.dataset.range_ratio,
        prefix_len: raw.spec.dataset.prefix_len,
        request_rate: raw.spec.request_rate,
        burstiness: raw.spec.request_rate.map(|_| raw.spec.burstiness),
        ignore_eos: raw.spec.ignore_eos,
        gpus,
        status: if figures.failed == 0 { "ok" } else { "failed" }.into(),
        figures,
        step_stats: summarize_steps(&raw.steps),
        crosscheck,
        telemetry: None,
    }
}

fn point_line(p: &PointResult) -> String {
    let mut line = format!(
        "{}/{} conc {}: {:.1} output tok/s, median TPOT {:.2} ms",
        p.isl,
        p.osl,
        p.conc,
        p.figures.output_throughput,
        p.figures.ms("median_tpot_ms")
    );
    if p.figures.failed > 0 {
        line.push_str(&format!(", {} requests FAILED", p.figures.failed));
    }
    line
}

/// One request as written to `requests.jsonl`.
#[derive(Serialize)]
struct RequestLine<'a> {
    job: usize,
    label: &'a str,
    point: usize,
    isl: u32,
    osl: u32,
    conc: u32,
    request: usize,
    input_tokens: u32,
    requested_output_tokens: u32,
    output_tokens: u32,
    send_s: f64,
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
    e2el_ms: Option<f64>,
    itl_ms: Vec<f64>,
    error: &'a Option<String>,
    /// vLLM's own TTFT / queue time for this request, ms.
    vllm_ttft_ms: Option<f64>,
    vllm_queued_ms: Option<f64>,
}

/// The files of a run folder (see the README's "Output files").
struct OutputFiles {
    dir: PathBuf,
    points: JsonLines,
    requests: JsonLines,
    steps: Option<JsonLines>,
    samples: Option<JsonLines>,
}

impl OutputFiles {
    fn create(dir: &Path, step_trace: bool) -> Result<OutputFiles> {
        Ok(OutputFiles {
            dir: dir.to_path_buf(),
            points: JsonLines::create(dir.join("points.jsonl"))?,
            requests: JsonLines::create(dir.join("requests.jsonl"))?,
            steps: if step_trace { Some(JsonLines::create(dir.join("steps.jsonl"))?) } else { None },
            samples: None,
        })
    }

    fn write_result(&self, result: &RunResult) -> Result<()> {
        write_json_atomic(&self.dir.join("result.json"), result)
    }

    fn append_point(
        &mut self,
        job_index: usize,
        job: &JobResult,
        index: usize,
        point: &PointResult,
        raw: &RawPoint,
    ) -> Result<()> {
        #[derive(Serialize)]
        struct Tagged<'a, T: Serialize> {
            job: usize,
            label: &'a str,
            point: usize,
            #[serde(flatten)]
            item: &'a T,
        }
        let label = job.label.as_str();
        self.points.append(&Tagged { job: job_index, label, point: index, item: point })?;
        let ms = |s: Option<f64>| s.map(|s| s * 1000.0);
        for (i, r) in raw.records.iter().enumerate() {
            let vllm = raw.engine_timings.get(i).copied().flatten();
            self.requests.append(&RequestLine {
                job: job_index,
                label,
                point: index,
                isl: point.isl,
                osl: point.osl,
                conc: point.conc,
                request: i,
                input_tokens: r.input_tokens,
                requested_output_tokens: raw.requested_output_lens.get(i).copied().unwrap_or(0),
                output_tokens: r.output_tokens,
                send_s: r.send_s,
                ttft_ms: ms(r.ttft_s()),
                tpot_ms: ms(r.tpot_s()),
                e2el_ms: ms(r.e2el_s()),
                itl_ms: r.itl_s.iter().map(|s| s * 1000.0).collect(),
                error: &r.error,
                vllm_ttft_ms: vllm.map(|t| t.ttft_s * 1000.0),
                vllm_queued_ms: vllm.map(|t| t.queued_s * 1000.0),
            })?;
        }
        if let Some(steps) = self.steps.as_mut() {
            for step in &raw.steps {
                steps.append(&Tagged { job: job_index, label, point: index, item: step })?;
            }
        }
        Ok(())
    }
}

fn score_eval(
    eval: &EvalPlan,
    completions: &[EvalCompletion],
    duration_s: f64,
    max_tokens: u32,
    files: &mut OutputFiles,
    label: &str,
) -> Result<Gsm8kResult> {
    if files.samples.is_none() {
        files.samples = Some(JsonLines::create(files.dir.join("gsm8k_samples.jsonl"))?);
    }
    let log = files.samples.as_mut().expect("just created");
    let mut samples: Vec<Sample> = Vec::with_capacity(completions.len());
    for (request, completion) in eval.plan.requests.iter().zip(completions) {
        let mut s = score_sample(
            &eval.task,
            request.doc_id,
            &request.prompt.hash_input(),
            &completion.text,
            completion.output_tokens,
            &request.gold,
        );
        s.token_ids = completion.token_ids.clone();
        #[derive(Serialize)]
        struct Line<'a> {
            label: &'a str,
            #[serde(flatten)]
            sample: &'a Sample,
        }
        log.append(&Line { label, sample: &s })?;
        samples.push(s);
    }
    let a = aggregate(&samples);
    let p = &eval.plan;
    Ok(Gsm8kResult {
        n: a.n,
        exact_match_strict: a.exact_match_strict,
        exact_match_strict_stderr: a.exact_match_strict_stderr,
        exact_match_flexible: a.exact_match_flexible,
        exact_match_flexible_stderr: a.exact_match_flexible_stderr,
        task: p.task.clone(),
        task_origin: p.task_origin.clone(),
        chat: p.chat,
        num_fewshot: p.num_fewshot,
        fewshot_mode: p.fewshot_mode.label(),
        data_kind: p.data_kind.as_str().to_string(),
        data_source: p.data_source.clone(),
        train_size: p.split_sizes.train,
        test_size: p.split_sizes.test,
        max_tokens,
        duration_s,
        output_tokens: completions.iter().map(|c| u64::from(c.output_tokens)).sum(),
    })
}

fn output_dir(given: Option<&Path>, recipe_name: &str) -> Result<PathBuf> {
    let dir = match given {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("results")
            .join(format!("{recipe_name}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"))),
    };
    if dir.join("result.json").exists() {
        return Err(usage(format!(
            "output folder {} already holds a result.json: choose another --output",
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| usage(format!("cannot create output folder {}: {e}", dir.display())))?;
    Ok(dir)
}

fn print_summary(result: &RunResult, out_dir: &Path, verbose: bool) {
    let multi = result.jobs.len() > 1;
    for job in &result.jobs {
        if multi {
            println!("== {} ({})", job.label, job.status);
        }
        if !job.points.is_empty() {
            println!("{}", table::points_table(&job.points));
        }
        if let Some(e) = &job.eval {
            println!("{}", table::gsm8k_line(&e.gsm8k));
            if let Some(g) = &e.gate {
                println!("{}", table::gate_line(g));
            }
        }
        if let Some(err) = &job.error {
            eprintln!("error{}: {}", if multi { format!(" in {}", job.label) } else { String::new() }, err.message);
            if verbose {
                if let Some(tb) = &err.traceback {
                    eprintln!("{tb}");
                }
            } else if err.traceback.is_some() {
                eprintln!("(run with -v for the Python traceback)");
            }
            if !err.log_tail.is_empty() {
                eprintln!("last lines of the engine log in {}:", out_dir.display());
                for l in err.log_tail.iter().rev().take(10).rev() {
                    eprintln!("  | {l}");
                }
            }
        }
    }
    println!("results: {}", out_dir.join("result.json").display());
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown status".into(),
    }
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
