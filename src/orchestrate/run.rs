//! `enginebench run`: plan the sweep from a recipe, run it in a worker,
//! stream results to disk, print the table.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use super::protocol::{EvalCompletion, EvalJob, Job, Message, PointSpec};
use crate::error::{exit, usage};
use crate::eval::gsm8k;
use crate::eval::score::{Sample, mean_and_stderr, score};
use crate::install::{Install, resolve_model};
use crate::recipe::{Recipe, default_recipe_path};
use crate::report::files::{JsonLines, write_json_atomic};
use crate::report::result::{
    Evals, Gsm8kResult, Host, RecipeInfo, RunError, RunResult, SCHEMA_VERSION, TIMING_NOTE,
    Versions,
};
use crate::report::table;

/// Options of `enginebench run` (see the CLI for their meaning).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub recipe: Option<PathBuf>,
    pub conc: Option<Vec<u32>>,
    pub isl: Option<u32>,
    pub osl: Option<u32>,
    pub num_prompts: Option<u32>,
    pub eval_limit: Option<u32>,
    pub no_eval: bool,
    pub output: Option<PathBuf>,
    pub verbose: bool,
}

/// OMP_NUM_THREADS for the CPU backend when the recipe leaves it unset.
/// Without it, a decode step was measured ~30x slower (DESIGN.md).
fn default_omp_threads() -> String {
    std::thread::available_parallelism().map_or(1, |n| n.get()).to_string()
}

/// The eval questions, prepared before any engine starts (so bad data fails fast).
struct EvalPlan {
    job: EvalJob,
    /// (doc id, gold answer) per prompt.
    golds: Vec<(usize, String)>,
    data_source: String,
}

/// Runs a recipe end to end. Returns the exit code (0 ok, 1 failed).
///
/// Errors (usage, exit 2): unreadable or invalid recipe, bad overrides,
/// missing set-up or data, unusable output folder. Engine failures are not
/// errors here: they are recorded in the result and give exit code 1.
pub fn run(opts: &RunOptions) -> Result<i32> {
    let recipe_path = opts.recipe.clone().unwrap_or_else(default_recipe_path);
    let mut recipe = Recipe::load(&recipe_path)?;
    apply_overrides(&mut recipe, opts)?;
    let install = Install::locate()?;
    let model_path = resolve_model(&recipe.model, &install)?;
    let points = plan_points(&recipe);
    let eval = match (&recipe.eval, opts.no_eval) {
        (Some(section), false) => Some(plan_gsm8k(&install, section.limit, section.concurrency)?),
        _ => None,
    };
    let env = engine_env(&recipe);
    let out_dir = output_dir(opts.output.as_deref(), &recipe.name)?;

    let mut result = RunResult {
        schema_version: SCHEMA_VERSION,
        status: "running".into(),
        recipe: RecipeInfo {
            name: recipe.name.clone(),
            file: recipe_path.display().to_string(),
            model: recipe.model.clone(),
            model_path: model_path.clone(),
            engine_args: recipe.engine.args.clone(),
            env: env.clone(),
        },
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
    let result_path = out_dir.join("result.json");
    write_json_atomic(&result_path, &result)?;
    let mut points_file = JsonLines::create(out_dir.join("points.jsonl"))?;

    let mut engine_argv = vec![model_path];
    engine_argv.extend(recipe.engine.args.iter().cloned());
    let job = Job {
        python: install.python(),
        engine_argv,
        points: points.clone(),
        eval: eval.as_ref().map(|e| e.job.clone()),
    };

    let ui = MultiProgress::new();
    eprintln!("enginebench: recipe {} -> {}", recipe.name, out_dir.display());
    let log_path = out_dir.join("worker.log");
    let mut worker = spawn_worker(&job, &env, &log_path, opts.verbose, &ui)?;
    let mut bar = Bar::new(&ui);
    bar.spinner("starting engine (import vLLM, load weights)");

    let mut failure: Option<RunError> = None;
    let mut bad_input = false;
    let mut got_done = false;
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
                result.versions.vllm = get("vllm");
                result.versions.torch = get("torch");
                result.versions.python = get("python");
                result.engine = Some(engine);
                result.engine_start_s = Some(engine_start_s);
                write_json_atomic(&result_path, &result)?;
            }
            Message::Progress { phase, done, total } => bar.progress(&phase, done, total),
            Message::Point { point } => {
                bar.finish(format!(
                    "conc {}: {:.1} output tok/s, median TPOT {:.2} ms",
                    point.conc,
                    point.figures.output_throughput,
                    point.figures.ms("median_tpot_ms")
                ));
                points_file.append(&point)?;
                result.points.push(point);
                write_json_atomic(&result_path, &result)?;
            }
            Message::Eval { completions, duration_s } => {
                bar.finish(format!("gsm8k generated in {duration_s:.1} s"));
                if let Some(plan) = &eval {
                    let g = score_gsm8k(plan, &completions, duration_s, &out_dir)?;
                    result.eval = Some(Evals { gsm8k: g });
                    write_json_atomic(&result_path, &result)?;
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
    let log_tail = worker.log_tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
    if failure.is_none() && (!got_done || !status.success()) {
        failure = Some(RunError {
            message: format!("the engine worker ended unexpectedly ({})", describe_exit(status)),
            traceback: None,
            log_tail: Vec::new(),
        });
    }
    if let Some(f) = failure.as_mut() {
        f.log_tail = log_tail;
    }
    let points_failed = result.points.iter().any(|p| p.figures.failed > 0);
    result.status = if failure.is_some() || points_failed { "failed" } else { "ok" }.into();
    result.error = failure;
    result.finished_at = Some(now_rfc3339());
    write_json_atomic(&result_path, &result)?;

    print_summary(&result, &out_dir, opts.verbose);
    Ok(match result.status.as_str() {
        "ok" => exit::OK,
        _ if bad_input => exit::USAGE,
        _ => exit::FAILED,
    })
}

fn apply_overrides(recipe: &mut Recipe, opts: &RunOptions) -> Result<()> {
    if let Some(conc) = &opts.conc {
        if conc.is_empty() || conc.contains(&0) {
            return Err(usage(format!("--conc {conc:?}: give concurrencies >= 1, e.g. --conc 1,4,16")));
        }
        recipe.sweep.conc = conc.clone();
    }
    if let Some(isl) = opts.isl {
        recipe.sweep.isl = isl;
    }
    if let Some(osl) = opts.osl {
        recipe.sweep.osl = osl;
    }
    if recipe.sweep.isl == 0 || recipe.sweep.osl == 0 {
        return Err(usage("--isl and --osl must be at least 1 token"));
    }
    if let Some(n) = opts.num_prompts {
        if n == 0 {
            return Err(usage("--num-prompts must be at least 1"));
        }
        recipe.sweep.num_prompts = Some(n);
    }
    if let Some(limit) = opts.eval_limit {
        match recipe.eval.as_mut() {
            Some(e) => e.limit = Some(limit),
            None => return Err(usage("--eval-limit given but the recipe has no [eval] section")),
        }
    }
    Ok(())
}

/// One [`PointSpec`] per concurrency; each point's prompts get their own seed.
fn plan_points(recipe: &Recipe) -> Vec<PointSpec> {
    let s = &recipe.sweep;
    s.conc
        .iter()
        .map(|&conc| PointSpec {
            conc,
            isl: s.isl,
            osl: s.osl,
            num_prompts: s.num_prompts_at(conc),
            warmups: s.warmups_per_conc * conc,
            seed: s.seed ^ (u64::from(conc) << 32) ^ (u64::from(s.isl) << 16) ^ u64::from(s.osl),
        })
        .collect()
}

/// The engine process's environment: the recipe's, plus in-process mode and,
/// on the CPU backend, an OMP_NUM_THREADS default.
fn engine_env(recipe: &Recipe) -> BTreeMap<String, String> {
    let mut env = recipe.env.clone();
    if env.get("VLLM_ENABLE_V1_MULTIPROCESSING").is_some_and(|v| v != "0") {
        tracing::warn!("VLLM_ENABLE_V1_MULTIPROCESSING forced to 0: enginebench drives the engine in-process");
    }
    env.insert("VLLM_ENABLE_V1_MULTIPROCESSING".into(), "0".into());
    if recipe.is_cpu() && !env.contains_key("OMP_NUM_THREADS") {
        env.insert("OMP_NUM_THREADS".into(), default_omp_threads());
    }
    env
}

fn plan_gsm8k(install: &Install, limit: Option<u32>, concurrency: u32) -> Result<EvalPlan> {
    let path = gsm8k::olmo_split_path(&install.site_packages()?);
    let docs = gsm8k::load_olmo_split(&path)?;
    let prompts = gsm8k::test_only_prompts(&docs, gsm8k::NUM_FEWSHOT, limit.map(|l| l as usize));
    if prompts.is_empty() {
        return Err(usage(format!("GSM8K: no questions to score in {}", path.display())));
    }
    let golds = prompts.iter().map(|(i, d, _)| (*i, d.answer.clone())).collect();
    Ok(EvalPlan {
        job: EvalJob {
            prompts: prompts.into_iter().map(|(_, _, p)| p).collect(),
            max_tokens: gsm8k::MAX_NEW_TOKENS,
            stop: gsm8k::STOP.iter().map(|s| s.to_string()).collect(),
            concurrency,
        },
        golds,
        data_source: path.display().to_string(),
    })
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

struct Worker {
    child: std::process::Child,
    stdout: Option<std::process::ChildStdout>,
    log_tail: Arc<Mutex<VecDeque<String>>>,
}

/// Lines of the worker log kept for error reports.
const LOG_TAIL_LINES: usize = 30;

fn spawn_worker(
    job: &Job,
    env: &BTreeMap<String, String>,
    log_path: &Path,
    verbose: bool,
    ui: &MultiProgress,
) -> Result<Worker> {
    let exe = std::env::current_exe().context("locating the enginebench binary")?;
    let mut child = Command::new(exe)
        .arg("__worker")
        .envs(env)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the engine worker")?;
    let mut stdin = child.stdin.take().expect("piped");
    stdin.write_all(&serde_json::to_vec(job)?)?;
    drop(stdin);

    let log_tail = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_TAIL_LINES)));
    let stderr = child.stderr.take().expect("piped");
    let mut log = std::fs::File::create(log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let tail = Arc::clone(&log_tail);
    let ui = ui.clone();
    std::thread::spawn(move || {
        // Progress bars of Python (tqdm) redraw with '\r': split on both.
        let mut reader = BufReader::new(stderr);
        let mut buf = Vec::new();
        while reader.read_until(b'\n', &mut buf).map(|n| n > 0).unwrap_or(false) {
            let _ = log.write_all(&buf);
            let text = String::from_utf8_lossy(&buf);
            let line = text.rsplit('\r').find(|s| !s.trim().is_empty()).unwrap_or("").trim_end();
            if !line.is_empty() {
                if verbose {
                    let _ = ui.println(line);
                }
                if let Ok(mut t) = tail.lock() {
                    if t.len() == LOG_TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(line.to_string());
                }
            }
            buf.clear();
        }
    });
    let stdout = child.stdout.take();
    Ok(Worker { child, stdout, log_tail })
}

/// One progress bar at a time, replaced when the phase changes.
struct Bar<'a> {
    ui: &'a MultiProgress,
    bar: Option<ProgressBar>,
    phase: String,
}

impl<'a> Bar<'a> {
    fn new(ui: &'a MultiProgress) -> Bar<'a> {
        Bar { ui, bar: None, phase: String::new() }
    }

    fn spinner(&mut self, msg: &str) {
        self.clear();
        let b = self.ui.add(ProgressBar::new_spinner());
        b.set_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("template"));
        b.set_message(msg.to_string());
        b.enable_steady_tick(Duration::from_millis(200));
        self.bar = Some(b);
    }

    fn progress(&mut self, phase: &str, done: u64, total: u64) {
        if self.phase != phase || self.bar.is_none() {
            self.clear();
            let b = self.ui.add(ProgressBar::new(total));
            b.set_style(
                ProgressStyle::with_template("{msg:>16} [{bar:30}] {pos}/{len} requests [{elapsed}, eta {eta}]")
                    .expect("template")
                    .progress_chars("=> "),
            );
            b.set_message(phase.to_string());
            self.bar = Some(b);
            self.phase = phase.to_string();
        }
        if let Some(b) = &self.bar {
            b.set_position(done);
        }
    }

    fn finish(&mut self, line: String) {
        self.clear();
        let _ = self.ui.println(format!("  {line}"));
    }

    fn clear(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
            self.ui.remove(&b);
        }
        self.phase.clear();
    }
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
