//! The Slurm executor (`--slurm`): one `sbatch --array` whose tasks are the
//! run's jobs (an `ab` repeat's baseline and candidate share a task, so an
//! ABBA pair never spans two nodes). Each task runs `enginebench __task`
//! on its node into the shared run folder; the submitter follows the array
//! with `scontrol` (see [`state`] for why not `sacct`), prints each point as
//! the task's `points.jsonl` grows, merges every task into the one
//! `result.json`, and exits as a local run would. `--detach` returns after
//! submitting; `enginebench status DIR` and `enginebench collect DIR` pick
//! the run up later.

pub mod commands;
pub mod script;
pub mod state;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::super::plan::{Plan, gpus_of, plan};
use super::super::progress::say;
use super::merge::{Fault, TaskEnd, points_so_far};
use super::task::{self, task_dir};
use super::watch::Watch;
use super::{ExecChoice, Executor, Folder, Run, Runner, Sink, now_rfc3339};
use crate::error::{ExitStatus, usage};
use crate::report::files::write_json_atomic;
use crate::report::result::Execution;
use commands::Tools;
use state::{Phase, TaskRecord, phase};

/// `--gpus-per-job`: from each job's TP x PP (the largest of the array), or a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpusPerJob {
    #[default]
    Auto,
    N(u32),
}

impl std::str::FromStr for GpusPerJob {
    type Err = String;
    fn from_str(s: &str) -> Result<GpusPerJob, String> {
        match s {
            "auto" => Ok(GpusPerJob::Auto),
            _ => s.parse::<u32>().map(GpusPerJob::N).map_err(|_| format!("{s:?}: give a number of GPUs or auto")),
        }
    }
}

/// The `--slurm` options.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Each task's time limit, as sbatch's `--time` takes it.
    pub time: Option<String>,
    pub gpus_per_job: GpusPerJob,
    /// More `#SBATCH` lines (`--slurm-arg=--constraint=mi355x`).
    pub extra: Vec<String>,
    /// Where `sbatch`, `scontrol` and `scancel` are (default: PATH).
    pub bin: Option<PathBuf>,
    /// Submit and return.
    pub detach: bool,
}

/// `slurm/submission.json`: what was submitted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Submission {
    pub array_job_id: u64,
    /// Array index -> the jobs that task runs.
    pub tasks: BTreeMap<u32, Vec<usize>>,
    pub script: PathBuf,
    /// RFC 3339, UTC.
    pub submitted_at: String,
    /// `sbatch --version`.
    pub slurm_version: String,
}

/// The submission file of a run folder.
pub fn submission_path(dir: &Path) -> PathBuf {
    dir.join("slurm").join("submission.json")
}

/// Runs jobs as the tasks of one Slurm job array.
pub struct Slurm {
    opts: SlurmOptions,
    tools: Tools,
    version: String,
    gpus: u32,
    exclusive: bool,
    /// Nodes per task: the most any job spans (`[layout] nodes`).
    nodes: u32,
}

impl Slurm {
    /// Checks that Slurm's commands run and sizes the tasks.
    ///
    /// Errors (usage): sbatch missing (naming where it was looked for).
    pub fn new(plan: &Plan, opts: SlurmOptions) -> Result<Slurm> {
        let tools = Tools { bin: opts.bin.clone() };
        let version = tools.check()?;
        let cpu = plan.recipe.is_cpu();
        let nodes = plan.jobs.iter().filter_map(|j| j.nodes.as_ref().map(|n| n.nodes)).max().unwrap_or(1);
        // A job over several nodes asks GPUs per node: its layout's.
        let per_node = |j: &crate::orchestrate::plan::PlannedJob| match &j.nodes {
            Some(n) => n.gpus_per_node.unwrap_or_else(|| gpus_of(j, cpu).div_ceil(n.nodes)),
            None => gpus_of(j, cpu),
        };
        let gpus = match opts.gpus_per_job {
            GpusPerJob::N(n) => n,
            GpusPerJob::Auto if cpu => 0,
            GpusPerJob::Auto => plan.jobs.iter().map(per_node).max().unwrap_or(0),
        };
        Ok(Slurm { opts, tools, version, gpus, exclusive: gpus == 0, nodes })
    }

    /// Follows the array of `sub` until every task ended, merging each as it
    /// ends. Ctrl-C cancels the array (`scancel`); a second one stops
    /// following and leaves what is left to `enginebench collect`.
    pub fn follow(&self, run: &Run<'_>, sink: &mut Sink, sub: &Submission) -> Result<()> {
        let id = sub.array_job_id;
        let submitted = Instant::now();
        let dir = sink.dir().to_path_buf();
        let mut merged: BTreeSet<u32> = sub.tasks.keys().copied().filter(|k| !task_dir(&dir, *k).exists() && run_done(sink, &sub.tasks[k])).collect();
        let mut watch = Watch::default();
        let mut shown: BTreeMap<u32, String> = BTreeMap::new();
        let seen = run.interrupts.count();
        let mut cancelled = false;
        let mut first_point = false;
        while merged.len() < sub.tasks.len() {
            let pressed = run.interrupts.count() - seen;
            if pressed >= 1 && !cancelled {
                cancelled = true;
                sink.interrupt();
                say(run.ui, &format!("interrupted: cancelling Slurm array {id} (scancel {id}); Ctrl-C again to stop waiting for it"));
                if let Err(e) = self.tools.scancel(id) {
                    say(run.ui, &format!("  {e:#}"));
                }
            }
            if pressed >= 2 {
                say(
                    run.ui,
                    &format!(
                        "stopped following Slurm array {id}; tasks still winding down are left to Slurm: `enginebench status {dir}` shows them, `enginebench collect {dir}` merges them",
                        dir = dir.display()
                    ),
                );
                return Ok(());
            }
            let records = self.tools.tasks(id)?;
            let by_key: BTreeMap<u32, &TaskRecord> = records.iter().flat_map(|r| r.keys.iter().map(move |k| (*k, r))).collect();
            for (&key, jobs) in &sub.tasks {
                if merged.contains(&key) {
                    continue;
                }
                let rec = by_key.get(&key).copied();
                let node = rec.and_then(|r| r.node.clone());
                if let Some(r) = rec {
                    let line = format!("{}{}", r.state, node.as_deref().map(|n| format!(" on {n}")).unwrap_or_default());
                    if shown.get(&key) != Some(&line) {
                        say(run.ui, &format!("  Slurm task {id}_{key}: {line}"));
                        shown.insert(key, line);
                    }
                }
                for l in watch.new_points(&dir, key, node.as_deref().map(|n| format!("on {n}")).as_deref().unwrap_or("")) {
                    if !first_point {
                        first_point = true;
                        say(run.ui, &format!("  first point {:.1} s after following began", submitted.elapsed().as_secs_f64()));
                    }
                    say(run.ui, &l);
                }
                let fault = |r: &TaskRecord| Fault {
                    message: format!("Slurm task {id}_{key} ended {}{}", r.describe(), out_tail(&dir, id, key)),
                    slurm: Some(r.slurm_task(key)),
                };
                let end = match rec.map(|r| (phase(&r.state), r)) {
                    Some((Phase::Waiting | Phase::Running, _)) => None,
                    Some((Phase::Completed, r)) => Some((None, Some(r.slurm_task(key)))),
                    Some((Phase::Ended, r)) => Some((Some(fault(r)), Some(r.slurm_task(key)))),
                    // Slurm forgot the array (MinJobAge passed): the task's
                    // own result is all there is.
                    None if records.is_empty() => {
                        let f = Fault { message: format!("Slurm no longer knows task {id}_{key} (ended more than MinJobAge ago)"), slurm: None };
                        Some((Some(f), None))
                    }
                    None => None,
                };
                if let Some((fault, slurm)) = end {
                    sink.merge_task(run.plan, key, jobs, &TaskEnd { fault, slurm: slurm.as_ref(), node: node.as_deref() })?;
                    merged.insert(key);
                    for &i in jobs {
                        let j = &sink.result().jobs[i];
                        let state = j.placement.as_ref().and_then(|p| p.slurm.as_ref()).and_then(|s| s.state.clone()).unwrap_or_default();
                        say(run.ui, &format!("  {}: {} (Slurm {state})", j.label, j.status));
                    }
                }
            }
            if merged.len() < sub.tasks.len() {
                std::thread::sleep(Duration::from_millis(1000));
            }
        }
        Ok(())
    }
}

/// The jobs of a task are already final in the result (merged earlier).
fn run_done(sink: &Sink, jobs: &[usize]) -> bool {
    jobs.iter().all(|&i| !sink.result().jobs[i].status.is_open())
}

/// "; its output slurm/12_1.out ends: ..." (the last lines), or "".
fn out_tail(dir: &Path, id: u64, key: u32) -> String {
    let path = dir.join("slurm").join(format!("{id}_{key}.out"));
    let Ok(text) = std::fs::read_to_string(&path) else { return String::new() };
    let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
    if tail.is_empty() {
        return String::new();
    }
    format!("; {} ends: {}", path.display(), tail.join(" | "))
}

impl Executor for Slurm {
    fn execute(&mut self, run: &Run<'_>, sink: &mut Sink, groups: &[Vec<usize>]) -> Result<()> {
        let tasks: BTreeMap<u32, Vec<usize>> = groups.iter().map(|g| (g[0] as u32, g.clone())).collect();
        let sdir = sink.dir().join("slurm");
        std::fs::create_dir_all(&sdir).with_context(|| format!("creating {}", sdir.display()))?;
        let token = format!("{:016x}", rand::random::<u64>());
        std::fs::write(sdir.join("probe"), &token).with_context(|| format!("writing the probe file in {}", sdir.display()))?;
        for k in tasks.keys() {
            let t = task_dir(sink.dir(), *k);
            if t.exists() {
                std::fs::remove_dir_all(&t)?; // a task folder left by an unmerged earlier try
            }
        }
        task::save(run, sink, &tasks, Some(token.clone()))?;
        let dir = std::fs::canonicalize(sink.dir())?;
        let exe = std::env::current_exe().context("locating the enginebench binary")?;
        let python = run.how.python.clone();
        let keys: Vec<u32> = tasks.keys().copied().collect();
        let name = format!("enginebench-{}", run.plan.recipe.name);
        let spec = script::ScriptSpec {
            name: &name,
            dir: &dir,
            keys: &keys,
            partition: self.opts.partition.as_deref(),
            account: self.opts.account.as_deref(),
            time: self.opts.time.as_deref(),
            gpus_per_task: self.gpus,
            nodes: self.nodes,
            exclusive: self.exclusive,
            extra: &self.opts.extra,
            exe: &exe,
            python: python.as_deref(),
            probe: &token,
        };
        let n = std::fs::read_dir(&sdir)?.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with("array-")).count();
        let script_path = sdir.join(format!("array-{n}.sh"));
        std::fs::write(&script_path, script::render(&spec))?;
        let id = self.tools.sbatch(&script_path)?;
        let sub = Submission { array_job_id: id, tasks: tasks.clone(), script: script_path.clone(), submitted_at: now_rfc3339(), slurm_version: self.version.clone() };
        write_json_atomic(&submission_path(sink.dir()), &sub)?;
        say(run.ui, &format!("submitted Slurm array {id} ({}): {} task(s), script {}", self.version, keys.len(), script_path.display()));
        for (k, jobs) in &tasks {
            for &i in jobs {
                let h = (run.heading)(sink.result(), i).unwrap_or_else(|| sink.result().jobs[i].label.clone());
                say(run.ui, &format!("  {h} -> task {id}_{k}"));
            }
        }
        if self.opts.detach {
            sink.detach();
            return Ok(());
        }
        self.follow(run, sink, &sub)
    }

    fn describe(&self) -> Execution {
        Execution { executor: "slurm".into(), max_concurrent_jobs: 0, shared_cpu: false }
    }
}

/// Reads `slurm/submission.json`.
///
/// Errors (usage): the folder has none.
pub fn load_submission(dir: &Path) -> Result<Submission> {
    let path = submission_path(dir);
    let text = std::fs::read_to_string(&path).map_err(|e| usage(format!("{}: {e} (not a run submitted with --slurm?)", path.display())))?;
    serde_json::from_str(&text).map_err(|e| usage(format!("{}: {e}", path.display())))
}

fn slurm_options(saved: &task::SavedPlan, dir: &Path) -> Result<SlurmOptions> {
    match &saved.exec {
        ExecChoice::Slurm(o) => Ok(o.clone()),
        _ => Err(usage(format!("{}: this run was not submitted with --slurm", dir.display()))),
    }
}

/// `enginebench status DIR`: each task's Slurm state, node and points so far.
///
/// Errors (usage): not a Slurm run folder.
pub fn status(dir: &Path) -> Result<ExitStatus> {
    let saved = task::load(dir)?;
    let sub = load_submission(dir)?;
    let tools = Tools { bin: slurm_options(&saved, dir)?.bin };
    let records = tools.tasks(sub.array_job_id)?;
    let result = crate::report::export::read_result(&dir.join("result.json"))?;
    outln!("Slurm array {} submitted {} ({}), run {}", sub.array_job_id, sub.submitted_at, sub.slurm_version, result.status);
    for (key, jobs) in &sub.tasks {
        let rec = records.iter().find(|r| r.keys.contains(key));
        let state = rec.map_or_else(|| "unknown to Slurm now".to_string(), TaskRecord::describe);
        let node = rec.and_then(|r| r.node.clone()).unwrap_or_else(|| "-".into());
        let labels: Vec<String> = jobs.iter().map(|&i| format!("{} ({})", result.jobs[i].label, result.jobs[i].status)).collect();
        let points = if task_dir(dir, *key).exists() {
            format!("{} point(s) so far", points_so_far(dir, *key).len())
        } else {
            let n: usize = jobs.iter().map(|&i| result.jobs[i].points.len()).sum();
            format!("{n} point(s) merged")
        };
        outln!("  task {}_{key}: {state} on {node}: {} - {points}", sub.array_job_id, labels.join(", "));
    }
    Ok(ExitStatus::Ok)
}

/// `enginebench collect DIR`: follows a detached Slurm run to its end,
/// merges it, prints the summary and returns the run's exit code.
///
/// Errors (usage): not a Slurm run folder.
pub fn collect(dir: &Path, python: Option<&Path>) -> Result<ExitStatus> {
    let saved = task::load(dir)?;
    let sub = load_submission(dir)?;
    let opts = slurm_options(&saved, dir)?;
    let mut plan = plan(&saved.options, python)?;
    plan.jobs = saved.jobs.clone();
    let slurm = Slurm::new(&plan, opts)?;
    let how = saved.exec_options(python);
    let mut runner = Runner::open(plan, &saved.options, &how, Folder::Existing(dir))?;
    errln!("enginebench collect: Slurm array {} -> {}", sub.array_job_id, dir.display());
    let no_heading = |_: &crate::report::result::RunResult, _: usize| None;
    let (run, sink) = runner.parts(&no_heading);
    slurm.follow(&run, sink, &sub)?;
    runner.finish()
}
