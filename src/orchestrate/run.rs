//! `enginebench run` (and `eval`): plan the jobs from a recipe, run each in
//! its own worker, stream results to disk, print the table. `--resume`
//! continues an earlier run folder.

use std::path::{Path, PathBuf};

use anyhow::Result;
use indicatif::MultiProgress;

use super::interrupt::Interrupts;
use super::job::{JobOutcome, Session, run_job};
use super::outputs::OutputFiles;
use super::plan::{Plan, PlannedJob, RunOptions, plan};
use super::progress::say;
use crate::error::{exit, usage};
use crate::recipe::args::has_flag;
use crate::report::result::{Host, JobResult, RecipeInfo, RunResult, SCHEMA_VERSION, TIMING_NOTE, Versions};
use crate::report::table;

/// Exit code after Ctrl-C (128 + SIGINT), as shells report it.
const EXIT_INTERRUPTED: i32 = 130;

/// Runs a recipe end to end: every job (variant x TP) in its own worker, one
/// after the other. Returns the exit code: 0 all points ok and every accuracy
/// gate passed; 1 a point, a job or a gate failed; 2 the engine rejected the
/// input (and nothing else failed); 130 interrupted.
///
/// Errors (usage, exit 2): unreadable or invalid recipe, bad overrides,
/// missing set-up or data, unusable output folder, a `--resume` folder that
/// does not match. Engine failures are not errors here: they are recorded
/// in the result, and the next job still runs.
pub fn run(opts: &RunOptions) -> Result<i32> {
    let mut plan = plan(opts)?;
    let (out_dir, mut result, mut files) = match &opts.resume {
        Some(dir) => resume(dir, &mut plan, opts)?,
        None => {
            let dir = output_dir(opts.output.as_deref(), &plan.recipe.name)?;
            let result = new_result(&plan);
            let files = OutputFiles::create(&dir, opts.step_trace)?;
            (dir, result, files)
        }
    };
    files.write_result(&result)?;

    let ui = MultiProgress::new();
    let interrupts = Interrupts::install();
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
    if result.jobs.iter().any(|j| j.trust_remote_code) {
        eprintln!("note: --trust-remote-code is ON (the recipe asks for it): the model's own Python code runs");
    }
    let mut outcomes = Vec::new();
    for (index, job) in plan.jobs.iter().enumerate() {
        if job.specs.is_empty() && !job.run_eval {
            continue; // resumed: nothing left to do for this job
        }
        if plan.jobs.len() > 1 {
            say(&ui, &format!("job {}/{}: {}", index + 1, plan.jobs.len(), result.jobs[index].label));
        }
        let session = Session { ui: &ui, interrupts: &interrupts, verbose: opts.verbose };
        let outcome = run_job(&plan, index, &mut result, &mut files, &session)?;
        outcomes.push(outcome);
        if outcome == JobOutcome::Interrupted {
            break;
        }
    }

    let interrupted = outcomes.contains(&JobOutcome::Interrupted);
    let all_ok = result.jobs.iter().all(|j| j.status == "ok");
    result.status = if interrupted {
        "interrupted"
    } else if all_ok {
        "ok"
    } else {
        "failed"
    }
    .into();
    result.finished_at = Some(now_rfc3339());
    files.write_result(&result)?;
    print_summary(&result, &out_dir, opts.verbose);
    Ok(if interrupted {
        EXIT_INTERRUPTED
    } else if all_ok {
        exit::OK
    } else if outcomes.iter().all(|o| matches!(o, JobOutcome::Ok | JobOutcome::BadInput)) {
        exit::USAGE
    } else {
        exit::FAILED
    })
}

pub(super) fn new_result(plan: &Plan) -> RunResult {
    RunResult {
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
        jobs: plan.jobs.iter().map(|j| pending_job(j, &plan.model_path)).collect(),
        resumes: 0,
    }
}

pub(super) fn pending_job(job: &PlannedJob, model: &str) -> JobResult {
    let mut j = JobResult {
        label: job.label.clone().unwrap_or_else(|| job.config.label()),
        variant: job.config.variant.clone(),
        tp: job.config.tp,
        status: "pending".into(),
        plan_fingerprint: String::new(),
        trust_remote_code: has_flag(&job.config.args, &["--trust-remote-code"]),
        worker_pid: None,
        engine_args: job.config.args.clone(),
        env: job.env.clone(),
        env_unset: job.config.env_unset.clone(),
        fingerprint: None,
        sweep: job.config.sweep.clone(),
        engine: None,
        engine_start_s: None,
        points: Vec::new(),
        unfinished: Vec::new(),
        eval: None,
        telemetry: None,
        error: None,
        python: Some(crate::report::result::PythonInfo::of(&job.python)),
    };
    j.plan_fingerprint = j.compute_plan_fingerprint(model);
    j
}

/// Continues the run in `dir`: keeps every finished point, plans only the
/// missing and failed ones (and a missing eval).
///
/// Errors (usage): no result.json there, a different recipe or a job whose
/// configuration changed (unless `--force`).
fn resume(dir: &Path, plan: &mut Plan, opts: &RunOptions) -> Result<(PathBuf, RunResult, OutputFiles)> {
    let path = dir.join("result.json");
    let mut old = crate::report::export::read_result(&path)?;
    if old.recipe.name != plan.recipe.name {
        return Err(usage(format!(
            "--resume {}: that run is of recipe {:?}, not {:?}",
            dir.display(),
            old.recipe.name,
            plan.recipe.name
        )));
    }
    let mut jobs = Vec::new();
    for planned in &mut plan.jobs {
        let fresh = pending_job(planned, &plan.model_path);
        let Some(mut prior) = old.jobs.iter().find(|j| j.label == fresh.label).cloned() else {
            jobs.push(fresh);
            continue;
        };
        if prior.plan_fingerprint != fresh.plan_fingerprint && !opts.force {
            return Err(usage(format!(
                "--resume {}: job {} was planned with different model/flags/env (fingerprint {} there, {} now); use --force to continue anyway",
                dir.display(),
                fresh.label,
                prior.plan_fingerprint,
                fresh.plan_fingerprint
            )));
        }
        // Keep what finished; plan the rest.
        prior.points.retain(|p| p.status == "ok");
        let done: Vec<(u32, u32, u32)> = prior.points.iter().map(|p| (p.isl, p.osl, p.conc)).collect();
        planned.specs.retain(|s| !done.contains(&(s.point.isl, s.point.osl, s.point.conc)));
        planned.run_eval &= prior.eval.is_none();
        prior.unfinished.clear();
        prior.error = None;
        prior.status = if planned.specs.is_empty() && !planned.run_eval { "ok".into() } else { "pending".into() };
        prior.plan_fingerprint = fresh.plan_fingerprint;
        jobs.push(prior);
    }
    let todo: usize = plan.jobs.iter().map(|j| j.specs.len()).sum();
    eprintln!("resuming {}: {todo} point(s) left to run", dir.display());
    old.jobs = jobs;
    old.resumes += 1;
    old.status = "running".into();
    old.finished_at = None;
    let mut files = OutputFiles::create(dir, opts.step_trace)?;
    files.resumes = old.resumes;
    Ok((dir.to_path_buf(), old, files))
}

pub(super) fn output_dir(given: Option<&Path>, recipe_name: &str) -> Result<PathBuf> {
    let dir = match given {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("results")
            .join(format!("{recipe_name}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"))),
    };
    if dir.join("result.json").exists() {
        return Err(usage(format!(
            "output folder {} already holds a result.json: choose another --output, or continue it with --resume {}",
            dir.display(),
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| usage(format!("cannot create output folder {}: {e}", dir.display())))?;
    Ok(dir)
}

pub(super) fn print_summary(result: &RunResult, out_dir: &Path, verbose: bool) {
    let multi = result.jobs.len() > 1;
    for job in &result.jobs {
        if multi {
            println!("== {} ({})", job.label, job.status);
        }
        if !job.points.is_empty() {
            println!("{}", table::points_table(&job.points));
        }
        for u in &job.unfinished {
            println!("  {}/{} conc {}: {} ({})", u.point.isl, u.point.osl, u.point.conc, u.status, u.reason);
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
    if result.status == "interrupted" {
        eprintln!("interrupted: continue with `enginebench run ... --resume {}`", out_dir.display());
    }
    println!("results: {}", out_dir.join("result.json").display());
}

pub(super) fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
