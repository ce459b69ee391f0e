//! The run folder: a new one, or one continued with `--resume`; the fresh
//! result document of a plan; the summary printed at the end.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::super::outputs::OutputFiles;
use super::super::plan::{Plan, PlannedJob};
use crate::error::usage;
use crate::recipe::args::has_flag;
use crate::report::result::{Host, JobResult, PointStatus, RecipeInfo, RunResult, SCHEMA_VERSION, Status, TIMING_NOTE, Versions};
use crate::report::table;

/// A fresh result document: every job of `plan` pending.
pub fn new_result(plan: &Plan) -> RunResult {
    let mut r = RunResult {
        schema_version: SCHEMA_VERSION,
        status: Status::Running,
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
        execution: None,
        error: None,
    };
    // The builds the check before the run found, until the engines report.
    r.versions.refresh(&r.jobs);
    r
}

/// The result entry of a job that has not run yet.
pub fn pending_job(job: &PlannedJob, model: &str) -> JobResult {
    let mut j = JobResult {
        label: job.label.clone().unwrap_or_else(|| job.config.label()),
        variant: job.config.variant.clone(),
        tp: job.config.tp,
        status: Status::Pending,
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
        placement: None,
        knobs: None,
    };
    j.plan_fingerprint = j.compute_plan_fingerprint(model);
    j
}

/// Continues the run in `dir`: keeps every finished point, plans only the
/// missing and failed ones (and a missing eval).
///
/// Errors (usage): no result.json there, a different recipe or a job whose
/// configuration changed (unless `force`).
pub fn resume(dir: &Path, plan: &mut Plan, force: bool, step_trace: bool) -> Result<(RunResult, OutputFiles)> {
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
        if prior.plan_fingerprint != fresh.plan_fingerprint && !force {
            return Err(usage(format!(
                "--resume {}: job {} was planned with different model/flags/env (fingerprint {} there, {} now); use --force to continue anyway",
                dir.display(),
                fresh.label,
                prior.plan_fingerprint,
                fresh.plan_fingerprint
            )));
        }
        // Keep what finished; plan the rest.
        prior.points.retain(|p| p.status == PointStatus::Ok);
        let done: Vec<(u32, u32, u32)> = prior.points.iter().map(|p| (p.isl, p.osl, p.conc)).collect();
        planned.specs.retain(|s| !done.contains(&(s.point.isl, s.point.osl, s.point.conc)));
        planned.run_eval &= prior.eval.is_none();
        prior.unfinished.clear();
        prior.error = None;
        prior.status = if planned.specs.is_empty() && !planned.run_eval { Status::Ok } else { Status::Pending };
        prior.plan_fingerprint = fresh.plan_fingerprint;
        jobs.push(prior);
    }
    let todo: usize = plan.jobs.iter().map(|j| j.specs.len()).sum();
    errln!("resuming {}: {todo} point(s) left to run", dir.display());
    old.jobs = jobs;
    old.resumes += 1;
    old.status = Status::Running;
    old.finished_at = None;
    old.error = None;
    let mut files = OutputFiles::create(dir, step_trace)?;
    files.resumes = old.resumes;
    Ok((old, files))
}

/// The output folder: `given`, or `results/<name>-<UTC time>`; created.
///
/// Errors (usage): it already holds a result.json, or cannot be created.
pub fn output_dir(given: Option<&Path>, name: &str) -> Result<PathBuf> {
    let dir = output_path(given, name)?;
    std::fs::create_dir_all(&dir).map_err(|e| usage(format!("cannot create output folder {}: {e}", dir.display())))?;
    Ok(dir)
}

/// Checks that files can be written in `dir` (or, when it does not exist
/// yet, in its nearest existing parent) by creating and removing a probe,
/// so that a read-only or full folder is refused before any
/// engine starts rather than when the first line is written. Creates
/// nothing that stays.
///
/// Errors (usage): the probe cannot be created; the message names the
/// folder and the system's reason.
pub fn check_writable(dir: &Path) -> Result<()> {
    let existing = dir.ancestors().find(|a| a.is_dir()).unwrap_or(Path::new("."));
    let probe = existing.join(format!(".enginebench-write-probe-{}", std::process::id()));
    let made = if existing == dir {
        // A few bytes written and synced: a full disk refuses them.
        let written = std::fs::File::create(&probe).and_then(|mut f| {
            use std::io::Write;
            f.write_all(b"enginebench write probe\n").and_then(|_| f.sync_all())
        });
        let _ = std::fs::remove_file(&probe);
        written
    } else {
        std::fs::create_dir(&probe).and_then(|_| std::fs::remove_dir(&probe))
    };
    match made {
        Ok(_) => Ok(()),
        Err(e) => Err(usage(format!(
            "output folder {} cannot be written ({}: {e}): choose another --output",
            dir.display(),
            if existing == dir { "creating a file there".to_string() } else { format!("creating a folder in {}", existing.display()) }
        ))),
    }
}

/// [`output_dir`]'s folder and check, without creating it (a command that
/// checks more before it writes anything creates it later).
///
/// Errors (usage): the folder already holds a result.json.
pub fn output_path(given: Option<&Path>, name: &str) -> Result<PathBuf> {
    let dir = match given {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("results").join(format!("{name}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"))),
    };
    if dir.join("result.json").exists() {
        return Err(usage(format!(
            "output folder {} already holds a result.json: choose another --output, or continue it with --resume {}",
            dir.display(),
            dir.display()
        )));
    }
    Ok(dir)
}

/// Prints every job's table, unfinished points, eval, gate and error.
pub fn print_summary(result: &RunResult, out_dir: &Path, verbose: bool) {
    let multi = result.jobs.len() > 1;
    for job in &result.jobs {
        if multi {
            let node = job.placement.as_ref().map(|p| format!(" on {}", p.node)).unwrap_or_default();
            outln!("== {} ({}{node})", job.label, job.status);
        }
        if !job.points.is_empty() {
            outln!("{}", table::points_table(&job.points));
        }
        for u in &job.unfinished {
            outln!("  {}/{} conc {}: {} ({})", u.point.isl, u.point.osl, u.point.conc, u.status, u.reason);
        }
        if let Some(e) = &job.eval {
            if let Some(g) = &e.gsm8k {
                outln!("{}", table::gsm8k_line(g));
            }
            for line in e.lm_eval.iter().flat_map(table::lm_eval_lines) {
                outln!("{line}");
            }
            for line in e.gate.iter().flat_map(table::gate_lines) {
                outln!("{line}");
            }
        }
        if let Some(err) = &job.error {
            errln!("error{}: {}", if multi { format!(" in {}", job.label) } else { String::new() }, err.message);
            if verbose {
                if let Some(tb) = &err.traceback {
                    errln!("{tb}");
                }
            } else if err.traceback.is_some() {
                errln!("(run with -v for the Python traceback)");
            }
            if !err.log_tail.is_empty() {
                errln!("last lines of the engine log in {}:", out_dir.display());
                for l in err.log_tail.iter().rev().take(10).rev() {
                    errln!("  | {l}");
                }
            }
        }
    }
    if result.status == Status::Interrupted {
        errln!("interrupted: continue with `enginebench run ... --resume {}`", out_dir.display());
    }
    outln!("results: {}", out_dir.join("result.json").display());
}

/// Now, RFC 3339 UTC to the second.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
