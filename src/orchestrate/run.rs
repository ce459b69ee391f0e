//! `enginebench run`: plan the sweep from a recipe, run it in a worker,
//! stream results to disk, print the table.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::Result;
use indicatif::MultiProgress;
use serde::Serialize;

use super::plan::{EvalPlan, RunOptions, plan};
use super::progress::Bar;
use super::protocol::{EvalCompletion, Job, Message, RawPoint};
use super::spawn::spawn_worker;
use crate::error::{exit, usage};
use crate::eval::gsm8k;
use crate::eval::score::{Sample, mean_and_stderr, score};
use crate::metrics::crosscheck::cross_check;
use crate::metrics::steps::summarize_steps;
use crate::metrics::{FigureSpec, point_figures};
use crate::recipe::sweep::ResolvedSweep;
use crate::report::files::{JsonLines, write_json_atomic};
use crate::report::result::{
    Evals, Gsm8kResult, Host, PointResult, RecipeInfo, RunError, RunResult, SCHEMA_VERSION,
    TIMING_NOTE, Versions,
};
use crate::report::table;

/// Runs a recipe end to end. Returns the exit code (0 ok, 1 failed, 2 bad
/// input found by the engine, e.g. a flag vLLM's parser rejects).
///
/// Errors (usage, exit 2): unreadable or invalid recipe, bad overrides,
/// missing set-up or data, unusable output folder. Engine failures are not
/// errors here: they are recorded in the result and give exit code 1.
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
            engine_args: plan.recipe.engine.args.clone(),
            env: plan.env.clone(),
            fingerprint: None,
        },
        sweep: plan.sweep.clone(),
        versions: Versions { enginebench: env!("CARGO_PKG_VERSION").into(), ..Default::default() },
        host: Host::detect(),
        started_at: now_rfc3339(),
        finished_at: None,
        engine: None,
        engine_start_s: None,
        timing: TIMING_NOTE.into(),
        points: Vec::new(),
        eval: None,
        error: None,
    };
    let mut files = OutputFiles::create(&out_dir, opts.step_trace)?;
    files.write_result(&result)?;

    let mut engine_argv = vec![plan.model_path.clone()];
    engine_argv.extend(plan.recipe.engine.args.iter().cloned());
    let job = Job {
        python: plan.install.python(),
        engine_argv,
        points: plan.points.clone(),
        eval: plan.eval.as_ref().map(|e| e.job.clone()),
    };

    let ui = MultiProgress::new();
    eprintln!("enginebench: recipe {} -> {}", plan.recipe.name, out_dir.display());
    let mut worker = spawn_worker(&job, &plan.env, &out_dir.join("worker.log"), opts.verbose, &ui)?;
    let mut bar = Bar::new(&ui);
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
        match msg {
            Message::Ready { engine, engine_start_s } => {
                bar.finish(format!("engine started in {engine_start_s:.1} s"));
                let get = |k: &str| engine.get(k).and_then(|v| v.as_str()).map(String::from);
                let size = |k: &str| engine.get(k).and_then(|v| v.as_u64()).unwrap_or(1).max(1) as u32;
                gpus = size("tensor_parallel_size") * size("pipeline_parallel_size");
                result.versions.vllm = get("vllm");
                result.recipe.fingerprint =
                    Some(result.recipe.compute_fingerprint(result.versions.vllm.as_deref().unwrap_or("")));
                result.versions.torch = get("torch");
                result.versions.python = get("python");
                result.engine = Some(engine);
                result.engine_start_s = Some(engine_start_s);
                files.write_result(&result)?;
            }
            Message::Progress { phase, done, total } => bar.progress(&phase, done, total),
            Message::Point { raw } => {
                let index = result.points.len();
                let point = finish_point(&raw, &plan.sweep, gpus);
                bar.finish(point_line(&point));
                files.append_point(index, &point, &raw)?;
                result.points.push(point);
                files.write_result(&result)?;
            }
            Message::Eval { completions, duration_s } => {
                bar.finish(format!("gsm8k generated in {duration_s:.1} s"));
                if let Some(eval) = &plan.eval {
                    let g = score_gsm8k(eval, &completions, duration_s, &out_dir)?;
                    result.eval = Some(Evals { gsm8k: g });
                    files.write_result(&result)?;
                }
            }
            Message::Error { message, traceback, bad_input: bad } => {
                bad_input = bad;
                failure = Some(RunError { message, traceback, log_tail: Vec::new() });
            }
            Message::Done => got_done = true,
        }
    }
    bar.clear();
    let status = worker.child.wait()?;
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
    let points_failed = result.points.iter().any(|p| p.status != "ok");
    result.status = if failure.is_some() || points_failed { "failed" } else { "ok" }.into();
    result.error = failure;
    result.finished_at = Some(now_rfc3339());
    files.write_result(&result)?;

    print_summary(&result, &out_dir, opts.verbose);
    Ok(match result.status.as_str() {
        "ok" => exit::OK,
        _ if bad_input => exit::USAGE,
        _ => exit::FAILED,
    })
}

/// Figures, step summary and cross-check of one measured point.
fn finish_point(raw: &RawPoint, sweep: &ResolvedSweep, gpus: u32) -> PointResult {
    let p = &raw.spec.point;
    let spec = FigureSpec { percentiles: &sweep.percentiles, gpus, goodput: sweep.goodput };
    let figures = point_figures(&raw.records, raw.duration_s, spec);
    let crosscheck = cross_check(&raw.records, &raw.engine_timings);
    if let Some(c) = crosscheck.as_ref().filter(|c| !c.agree) {
        tracing::warn!(
            "conc {}: harness and vLLM disagree (TTFT median diff {:.2} ms, E2EL {:.2} ms, tolerance {:.2}/{:.2} ms)",
            p.conc, c.ttft.median_ms, c.e2el.median_ms, c.ttft.tolerance_ms, c.e2el.tolerance_ms
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
    result_path: PathBuf,
    points: JsonLines,
    requests: JsonLines,
    steps: Option<JsonLines>,
}

impl OutputFiles {
    fn create(dir: &Path, step_trace: bool) -> Result<OutputFiles> {
        Ok(OutputFiles {
            result_path: dir.join("result.json"),
            points: JsonLines::create(dir.join("points.jsonl"))?,
            requests: JsonLines::create(dir.join("requests.jsonl"))?,
            steps: if step_trace { Some(JsonLines::create(dir.join("steps.jsonl"))?) } else { None },
        })
    }

    fn write_result(&self, result: &RunResult) -> Result<()> {
        write_json_atomic(&self.result_path, result)
    }

    fn append_point(&mut self, index: usize, point: &PointResult, raw: &RawPoint) -> Result<()> {
        self.points.append(point)?;
        let ms = |s: Option<f64>| s.map(|s| s * 1000.0);
        for (i, r) in raw.records.iter().enumerate() {
            let vllm = raw.engine_timings.get(i).copied().flatten();
            self.requests.append(&RequestLine {
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
            #[derive(Serialize)]
            struct StepLine<'a> {
                point: usize,
                #[serde(flatten)]
                step: &'a crate::metrics::steps::StepRecord,
            }
            for step in &raw.steps {
                steps.append(&StepLine { point: index, step })?;
            }
        }
        Ok(())
    }
}

fn score_gsm8k(
    plan: &EvalPlan,
    completions: &[EvalCompletion],
    duration_s: f64,
    out_dir: &Path,
) -> Result<Gsm8kResult> {
    let mut log = JsonLines::create(out_dir.join("gsm8k_samples.jsonl"))?;
    let mut samples: Vec<Sample> = Vec::with_capacity(completions.len());
    for ((prompt, (doc_id, gold)), completion) in
        plan.job.prompts.iter().zip(&plan.golds).zip(completions)
    {
        let s = score(*doc_id, prompt, &completion.text, completion.output_tokens, gold);
        log.append(&s)?;
        samples.push(s);
    }
    let (strict, strict_se) = mean_and_stderr(samples.iter().map(|s| s.strict_correct));
    let (flex, flex_se) = mean_and_stderr(samples.iter().map(|s| s.flexible_correct));
    Ok(Gsm8kResult {
        n: samples.len(),
        exact_match_strict: strict,
        exact_match_strict_stderr: strict_se,
        exact_match_flexible: flex,
        exact_match_flexible_stderr: flex_se,
        num_fewshot: gsm8k::NUM_FEWSHOT,
        fewshot_source: gsm8k::FEWSHOT_FIRST_TEST.into(),
        data_source: plan.data_source.clone(),
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
    if !result.points.is_empty() {
        println!("{}", table::points_table(&result.points));
    }
    if let Some(e) = &result.eval {
        println!("{}", table::gsm8k_line(&e.gsm8k));
    }
    if let Some(err) = &result.error {
        eprintln!("error: {}", err.message);
        if verbose {
            if let Some(tb) = &err.traceback {
                eprintln!("{tb}");
            }
        } else if err.traceback.is_some() {
            eprintln!("(run with -v for the Python traceback)");
        }
        if !err.log_tail.is_empty() {
            eprintln!("last lines of {}:", out_dir.join("worker.log").display());
            for l in err.log_tail.iter().rev().take(10).rev() {
                eprintln!("  | {l}");
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
