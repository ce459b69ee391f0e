//! A task: jobs of a saved plan run by another `enginebench` process (a
//! child of the parallel executor, or a Slurm array task) into the shared
//! run folder. The submitter saves `plan.json`; the hidden subcommand
//! `enginebench __task DIR KEY` runs the jobs of task KEY with the local
//! executor, writing points and requests into `DIR/tasks/KEY/` (merged later
//! by [`super::merge`]) and logs and telemetry into DIR itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::super::plan::{PlannedJob, RunOptions, plan};
use super::{ExecChoice, ExecOptions};
use super::local::{DEVICE_VARS, Sequential, local_placement};
use super::{Run, Runner, Sink, node_name};
use crate::error::{ExitStatus, usage};
use crate::report::files::write_json_atomic;
use crate::report::result::{Placement, SlurmTask};

/// The saved plan of a run folder (`plan.json`).
#[derive(Serialize, Deserialize)]
pub struct SavedPlan {
    /// What the command runs (recipe, overrides).
    pub options: RunOptions,
    /// The global `--python` of the submitting command.
    pub python: Option<PathBuf>,
    /// The submitting command's executor (`status` and `collect` read its
    /// Slurm options).
    #[serde(default)]
    pub exec: ExecChoice,
    /// The submitting command's `--verbose`.
    #[serde(default)]
    pub verbose: bool,
    /// Every job, as planned (an `ab` schedule included).
    pub jobs: Vec<PlannedJob>,
    /// Task key (a Slurm array index) -> the jobs it runs, in order.
    pub tasks: BTreeMap<u32, Vec<usize>>,
    /// What `slurm/probe` must hold (the shared-filesystem check).
    #[serde(default)]
    pub probe_token: Option<String>,
}

/// The saved plan's file in a run folder.
pub const PLAN_FILE: &str = "plan.json";

/// Task KEY's own folder: `DIR/tasks/KEY`.
pub fn task_dir(dir: &Path, key: u32) -> PathBuf {
    dir.join("tasks").join(key.to_string())
}

/// Writes `plan.json` for `tasks` (and the result, so tasks start from it).
pub fn save(run: &Run<'_>, sink: &Sink, tasks: &BTreeMap<u32, Vec<usize>>, probe_token: Option<String>) -> Result<()> {
    let saved = SavedPlan {
        options: run.opts.clone(),
        python: run.how.python.clone(),
        exec: run.how.exec.clone(),
        verbose: run.how.verbose,
        jobs: run.plan.jobs.clone(),
        tasks: tasks.clone(),
        probe_token,
    };
    write_json_atomic(&sink.dir().join(PLAN_FILE), &saved)?;
    sink.write()
}

/// Reads `DIR/plan.json`.
///
/// Errors (usage): missing or unreadable, naming the file.
pub fn load(dir: &Path) -> Result<SavedPlan> {
    let path = dir.join(PLAN_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| usage(format!("{}: {e} (a parallel or Slurm run folder holds the plan its tasks run)", path.display())))?;
    let mut value: serde_json::Value = serde_json::from_str(&text).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    upgrade_older_shapes(&mut value);
    serde_json::from_value(value).map_err(|e| usage(format!("{}: {e}", path.display())))
}

/// Older builds' `plan.json` shapes, rewritten to this build's:
/// - the executor and `--verbose` were kept inside `options`: lifted to the top;
/// - `options.goodput` was one object of SLOs: now a list of them;
/// - `options.chat` was `true`/`false`/`null` (`--chat`/`--no-chat`/neither):
///   now the two flags;
/// - `options.task` was one name or `null`: now a list of them.
fn upgrade_older_shapes(value: &mut serde_json::Value) {
    use serde_json::Value;
    let Some(top) = value.as_object_mut() else { return };
    for key in ["exec", "verbose"] {
        if top.contains_key(key) {
            continue;
        }
        if let Some(v) = top.get_mut("options").and_then(|o| o.as_object_mut()).and_then(|o| o.remove(key)) {
            top.insert(key.to_string(), v);
        }
    }
    let Some(options) = top.get_mut("options").and_then(Value::as_object_mut) else { return };
    match options.remove("goodput") {
        Some(Value::Object(slos)) => {
            options.insert("goodput".into(), Value::Array(vec![Value::Object(slos)]));
        }
        Some(Value::Null) | None => {}
        Some(list) => {
            options.insert("goodput".into(), list);
        }
    }
    match options.get("chat") {
        Some(Value::Null) => {
            options.remove("chat");
        }
        Some(Value::Bool(false)) if !options.contains_key("no_chat") => {
            options.insert("no_chat".into(), Value::Bool(true));
        }
        _ => {}
    }
    match options.remove("task") {
        Some(Value::String(one)) => {
            options.insert("task".into(), Value::Array(vec![Value::String(one)]));
        }
        Some(Value::Null) | None => {}
        Some(list) => {
            options.insert("task".into(), list);
        }
    }
}

impl SavedPlan {
    /// How a task or `collect` runs the saved plan: the submitter's
    /// `--verbose`, the local executor, the interpreter `python` (this
    /// process's `--python`).
    pub fn exec_options(&self, python: Option<&Path>) -> ExecOptions {
        ExecOptions { verbose: self.verbose, python: python.map(Path::to_path_buf), ..ExecOptions::default() }
    }
}

/// The environment variable that tells a task it shares its node with other jobs.
pub const CONCURRENT_VAR: &str = "ENGINEBENCH_CONCURRENT";

/// `enginebench __task DIR KEY [--probe TOKEN]`: runs the jobs of task KEY.
/// Returns how those jobs ended (as a run's).
///
/// Errors (usage): the probe file is missing or different (the folder is not
/// shared with this node), no plan, no such task.
pub fn run_task(dir: &Path, key: u32, probe: Option<&str>, python: Option<&Path>) -> Result<ExitStatus> {
    if let Some(token) = probe {
        let node = node_name();
        let path = dir.join("slurm").join("probe");
        match std::fs::read_to_string(&path) {
            Ok(t) if t.trim() == token => {}
            found => {
                return Err(usage(format!(
                    "node {node} cannot confirm the probe file {} ({}): the run folder {} must be on a filesystem the submitting machine and every node share",
                    path.display(),
                    match found {
                        Ok(_) => "it holds another run's token".to_string(),
                        Err(e) => e.to_string(),
                    },
                    dir.display()
                )));
            }
        }
    }
    let saved = load(dir)?;
    let jobs = saved.tasks.get(&key).cloned().ok_or_else(|| usage(format!("{}: no task {key} in {PLAN_FILE}", dir.display())))?;
    let mut plan = plan(&saved.options, python)?;
    let how = saved.exec_options(python);
    plan.jobs = saved.jobs;
    // The devices this process was given (by the parallel executor or
    // Slurm) reach the worker, and the sampler attributes them to this job.
    for &index in &jobs {
        for k in DEVICE_VARS {
            if let Ok(v) = std::env::var(k) {
                plan.jobs[index].env.insert(k.to_string(), v);
            }
        }
    }
    let mut runner = Runner::for_task(plan, &saved.options, &how, dir, key)?;
    let node = task_node();
    let heading = |r: &crate::report::result::RunResult, i: usize| Some(format!("enginebench task {key}: job {i} ({}) on {node}", r.jobs[i].label));
    runner.run_jobs(&mut Sequential::placed_by(task_placement), std::slice::from_ref(&jobs), &heading)?;
    Ok(runner.exit_status_of(&jobs))
}

/// The node a task runs on: Slurm's name for it, else the host name.
fn task_node() -> String {
    std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| node_name())
}

/// Where a task's job runs: this node (as Slurm names it), the devices the
/// task was given, whether other jobs share the node, the Slurm task.
fn task_placement(job: &PlannedJob) -> Placement {
    let concurrent = std::env::var_os(CONCURRENT_VAR).is_some();
    Placement { node: task_node(), slurm: slurm_env(), ..local_placement(&job.env, concurrent) }
}

/// The Slurm task this process runs in, from Slurm's environment.
fn slurm_env() -> Option<SlurmTask> {
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    Some(SlurmTask {
        array_job_id: num("SLURM_ARRAY_JOB_ID")?,
        array_task_id: num("SLURM_ARRAY_TASK_ID")? as u32,
        job_id: num("SLURM_JOB_ID"),
        ..SlurmTask::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `plan.json` written before the execution options left `options`
    /// (and before the flags were declared once) still reads, with its
    /// executor and `--verbose` where this build keeps them, and its sweep
    /// and eval overrides.
    #[test]
    fn older_plan_json_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let old = serde_json::json!({
            "options": {
                "recipe": "r.toml", "variants": ["a"], "inferencex": false, "no_eval": true, "only_eval": false,
                "step_trace": false, "force": false, "output": "/tmp/out", "resume": null, "verbose": true,
                "exec": {"parallel": {"jobs": "auto", "share_cpu": true}},
                "conc": [1, 4], "isl_osl": [[256, 128]], "percentiles": null, "goodput": {"ttft_ms": 500.0, "tpot_ms": 50.0},
                "chat": false, "eval_limit": 8, "task": "gsm8k_cot", "point_timeout": {"secs": 20, "nanos": 0},
                "telemetry_interval": {"secs": 0, "nanos": 100000000}, "profile": null,
                "workload": {"workload": null, "trace_file": "/t.jsonl", "conversation_file": null, "duration": 30.0, "no_prefix_cache_reset": false}
            },
            "python": "/usr/bin/python3",
            "jobs": [],
            "tasks": {"0": [0]}
        });
        std::fs::write(dir.path().join(PLAN_FILE), old.to_string()).unwrap();
        let saved = load(dir.path()).unwrap();
        let o = &saved.options;
        assert_eq!(o.recipe.as_deref(), Some(Path::new("r.toml")));
        assert_eq!(o.variants, ["a"]);
        assert!(saved.verbose);
        assert!(matches!(saved.exec, ExecChoice::Parallel { share_cpu: true, .. }), "{:?}", saved.exec);
        assert_eq!(saved.python.as_deref(), Some(Path::new("/usr/bin/python3")));
        assert_eq!(saved.tasks[&0], [0]);
        let sweep = o.sweep.sweep();
        assert_eq!((sweep.conc, sweep.isl_osl), (Some(vec![1, 4]), Some(vec![[256, 128]])));
        let g = sweep.goodput.unwrap();
        assert_eq!((g.ttft_ms, g.tpot_ms, g.e2el_ms), (Some(500.0), Some(50.0), None));
        assert_eq!(o.sweep.workload.trace_file.as_deref(), Some(Path::new("/t.jsonl")));
        assert_eq!((o.eval.chat(), o.eval.eval_limit), (Some(false), Some(8)));
        assert_eq!(o.eval.task, ["gsm8k_cot"], "one task name becomes a list of one");
        assert_eq!(o.point_timeout, Some(std::time::Duration::from_secs(20)));
        assert!(o.no_eval && o.profile.is_none());
    }

    /// This build's `plan.json` reads back as written (the flattened sweep
    /// and eval overrides included).
    #[test]
    fn plan_options_round_trip() {
        let mut o = RunOptions { recipe: Some("r.toml".into()), step_trace: true, ..RunOptions::default() };
        o.sweep.conc = Some(crate::recipe::overrides::List(vec![2, 8]));
        o.sweep.goodput = vec![crate::recipe::sweep::parse_slo("e2el:900").unwrap()];
        o.sweep.workload.duration = Some(5.0);
        o.eval.chat = true;
        o.eval.task = vec!["gsm8k".into(), "gpqa_diamond_cot_n_shot".into()];
        let text = serde_json::to_value(&o).unwrap();
        assert_eq!(text["conc"], serde_json::json!([2, 8]), "sweep flags at the top level, as older builds saved them");
        let back: RunOptions = serde_json::from_value(text).unwrap();
        assert_eq!(back.sweep.sweep().conc, Some(vec![2, 8]));
        assert_eq!(back.sweep.sweep().goodput.unwrap().e2el_ms, Some(900.0));
        assert_eq!((back.sweep.workload.duration, back.eval.chat(), back.step_trace), (Some(5.0), Some(true), true));
        assert_eq!(back.eval.task, o.eval.task);
    }
}
