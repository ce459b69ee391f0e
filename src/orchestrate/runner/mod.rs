//! The one job runner behind `run`, `eval`, `ab`, `overhead` and the tasks
//! of a parallel or Slurm run: the run folder and its result document,
//! Ctrl-C, progress, one [`Executor`] that runs the jobs, and the exit code
//! at the end.
//!
//! ```text
//! let mut runner = Runner::open(plan, &opts, &how, Folder::New { name })?;
//! let mut exec = executor_for(&how.exec, &runner.plan)?;
//! runner.run_jobs(exec.as_mut(), &groups, &heading)?;
//! let code = runner.finish()?;  // 0 ok, 1 failed, 2 bad input only, 130 interrupted
//! ```
//!
//! Executors (one file each, as hyperfine keeps its executors) read the run
//! ([`Run`]) and record into the runner's [`Sink`]: [`local`] runs jobs one
//! after another in this process's workers; [`parallel`] runs several at
//! once on disjoint device sets of this node; [`slurm`] submits one Slurm
//! job array whose tasks run the jobs. A task ([`task`], the hidden
//! subcommand) is a runner of its own that runs its jobs with [`local`]'s
//! executor; [`merge`] folds its files back into the folder.

pub mod devices;
pub mod executor;
pub mod folder;
pub mod local;
pub mod merge;
pub mod parallel;
pub mod sink;
pub mod slurm;
pub mod task;
pub mod watch;

use std::path::Path;

use anyhow::{Context, Result};
use indicatif::MultiProgress;

use super::interrupt::Interrupts;
use super::job::{JobOutcome, Session};
use super::outputs::OutputFiles;
use super::plan::{Plan, PlannedJob, RunOptions};
use crate::error::ExitStatus;
use crate::report::result::{RunResult, Status};

pub use executor::{ExecChoice, ExecOptions, Executor, executor_for};
pub use folder::{new_result, now_rfc3339, output_dir, output_path, pending_job, print_summary};
pub use sink::Sink;

/// Exit code after Ctrl-C (128 + SIGINT), as shells report it.

/// Where a runner keeps its files.
pub enum Folder<'a> {
    /// `--output` or `results/<name>-<UTC time>`; must not hold a result yet.
    New { name: &'a str },
    /// This folder (created), a fresh result (the A/A of `ab --calibrate`).
    At(&'a Path),
    /// Continue the run in this folder (`--resume`): only what is missing runs.
    Resume(&'a Path),
    /// This run folder as it is, its plan unchanged (`collect`).
    Existing(&'a Path),
}

/// A heading printed before a job starts (`job 2/4: aiter`), if any.
pub type Heading<'a> = dyn Fn(&RunResult, usize) -> Option<String> + 'a;

/// A plan, its run folder and result, the terminal, and Ctrl-C.
pub struct Runner {
    pub plan: Plan,
    pub opts: RunOptions,
    pub how: ExecOptions,
    pub ui: MultiProgress,
    pub interrupts: Interrupts,
    /// The result and the run folder's files: what executors record into.
    pub sink: Sink,
}

/// A run as its executor reads it: the plan, what the command asked to run
/// and how, the terminal, Ctrl-C, and the heading printed before each job.
pub struct Run<'a> {
    pub plan: &'a Plan,
    pub opts: &'a RunOptions,
    pub how: &'a ExecOptions,
    pub ui: &'a MultiProgress,
    pub interrupts: &'a Interrupts,
    pub heading: &'a Heading<'a>,
}

impl<'a> Run<'a> {
    /// What each job's worker shares: the terminal, Ctrl-C, `-v`.
    pub fn session(&self) -> Session<'a> {
        Session { ui: self.ui, interrupts: self.interrupts, verbose: self.how.verbose }
    }
}

impl Runner {
    /// Checks that every job's interpreter has vLLM and torch and that its
    /// vLLM can serve here ([`super::preflight`]: it imports, is in the
    /// supported range and finds a platform; on a Slurm array the platform
    /// is the compute nodes' to judge), then opens the run folder and writes
    /// the (pending) result with the versions found.
    ///
    /// Errors (usage, before the folder exists): a folder that cannot be
    /// written ([`folder::check_writable`]), an interpreter without vLLM
    /// or torch ([`crate::python::require_engine_packages`]) or whose vLLM
    /// cannot serve; see [`output_dir`] and [`folder::resume`].
    pub fn open(mut plan: Plan, opts: &RunOptions, how: &ExecOptions, folder: Folder<'_>) -> Result<Runner> {
        // A folder that cannot be written is bad input, found before any worker starts.
        match &folder {
            Folder::New { name } => folder::check_writable(&output_path(how.output.as_deref(), name)?)?,
            Folder::At(dir) | Folder::Resume(dir) => folder::check_writable(dir)?,
            Folder::Existing(_) => {}
        }
        for job in &plan.jobs {
            crate::python::require_engine_packages(&job.python)?;
        }
        if !crate::python::probe::fake_engine_selected() && !matches!(folder, Folder::Existing(_)) {
            super::preflight::check_jobs(&mut plan.jobs, !matches!(how.exec, ExecChoice::Slurm(_)))?;
        }
        let (dir, result, files) = match folder {
            Folder::New { name } => {
                let dir = output_dir(how.output.as_deref(), name)?;
                let files = OutputFiles::create(&dir, opts.step_trace)?;
                (dir, new_result(&plan), files)
            }
            Folder::At(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| crate::error::usage(format!("cannot create {}: {e}", dir.display())))?;
                let files = OutputFiles::create(dir, opts.step_trace)?;
                (dir.to_path_buf(), new_result(&plan), files)
            }
            Folder::Resume(dir) => {
                let (result, files) = folder::resume(dir, &mut plan, how.force, opts.step_trace)?;
                (dir.to_path_buf(), result, files)
            }
            Folder::Existing(dir) => {
                let result = crate::report::export::read_result(&dir.join("result.json"))?;
                let mut files = OutputFiles::create(dir, opts.step_trace)?;
                files.resumes = result.resumes;
                (dir.to_path_buf(), result, files)
            }
        };
        let sink = Sink::new(result, files, &dir);
        sink.write()?;
        Ok(Runner::with(plan, opts, how, sink))
    }

    /// The runner of task `key` of the run in `dir` (`enginebench __task`):
    /// the run's result as the submitter left it, the task's lines and
    /// result written into its own folder (`tasks/KEY/`, merged by the
    /// submitter), logs and telemetry into `dir`. Nothing is written before
    /// a job starts; the submitter checked the interpreters.
    ///
    /// Errors: the run's result.json is missing or unreadable, the task's
    /// folder cannot be created.
    pub fn for_task(plan: Plan, opts: &RunOptions, how: &ExecOptions, dir: &Path, key: u32) -> Result<Runner> {
        let result = crate::report::export::read_result(&dir.join("result.json"))?;
        let tdir = task::task_dir(dir, key);
        std::fs::create_dir_all(&tdir).with_context(|| format!("creating {}", tdir.display()))?;
        let mut files = OutputFiles::for_task(dir, &tdir, opts.step_trace)?;
        files.resumes = result.resumes;
        Ok(Runner::with(plan, opts, how, Sink::new(result, files, dir)))
    }

    fn with(plan: Plan, opts: &RunOptions, how: &ExecOptions, sink: Sink) -> Runner {
        Runner { plan, opts: opts.clone(), how: how.clone(), ui: MultiProgress::new(), interrupts: Interrupts::install(), sink }
    }

    /// The run folder.
    pub fn dir(&self) -> &Path {
        self.sink.dir()
    }

    /// The result document as recorded so far.
    pub fn result(&self) -> &RunResult {
        self.sink.result()
    }

    /// Adds `jobs` to the plan and (pending) to the result, and writes it.
    pub fn add_jobs(&mut self, jobs: Vec<PlannedJob>) -> Result<()> {
        for j in jobs {
            self.sink.push_job(pending_job(&j, &self.plan.model_path));
            self.plan.jobs.push(j);
        }
        self.sink.write()
    }

    /// Runs the jobs of `groups` (job indices; a group's jobs run one after
    /// another on one node) with `exec`, skipping jobs with nothing left to
    /// do (a resumed run). Returns whether Ctrl-C stopped it.
    ///
    /// Errors: the run could not go on (its folder cannot be written, a
    /// worker cannot start); the result is then left failed with the cause
    /// ([`Sink::abandon`]) and the error says what the folder kept.
    pub fn run_jobs(&mut self, exec: &mut dyn Executor, groups: &[Vec<usize>], heading: &Heading<'_>) -> Result<bool> {
        let todo: Vec<Vec<usize>> = groups
            .iter()
            .map(|g| g.iter().copied().filter(|&i| self.has_work(i)).collect::<Vec<_>>())
            .filter(|g| !g.is_empty())
            .collect();
        self.sink.set_execution(exec.describe());
        if !todo.is_empty() && !self.sink.is_interrupted() {
            let (run, sink) = self.parts(heading);
            if let Err(e) = exec.execute(&run, sink, &todo) {
                return Err(self.sink.abandon(e));
            }
        }
        if let Err(e) = self.sink.write() {
            return Err(self.sink.abandon(e));
        }
        Ok(self.sink.is_interrupted())
    }

    /// The run as an executor reads it, and the sink it records into.
    pub fn parts<'a>(&'a mut self, heading: &'a Heading<'a>) -> (Run<'a>, &'a mut Sink) {
        let run = Run { plan: &self.plan, opts: &self.opts, how: &self.how, ui: &self.ui, interrupts: &self.interrupts, heading };
        (run, &mut self.sink)
    }

    /// Whether job `index` still has points or an eval to run.
    pub fn has_work(&self, index: usize) -> bool {
        let job = &self.plan.jobs[index];
        !job.specs.is_empty() || job.run_eval
    }

    /// Sets the run's final status, writes the result, prints the summary
    /// and returns how the run ended ([`exit_status`]).
    pub fn finish(&mut self) -> Result<ExitStatus> {
        self.finish_printing(true)
    }

    /// [`Runner::finish`], printing the per-job summary only if `print`.
    pub fn finish_printing(&mut self, print: bool) -> Result<ExitStatus> {
        if self.sink.is_detached() {
            self.sink.write()?;
            let dir = self.dir().display();
            outln!("submitted: `enginebench status {dir}` shows the tasks, `enginebench collect {dir}` waits for them and merges the result");
            return Ok(ExitStatus::Ok);
        }
        let status = run_status(self.result(), self.sink.is_interrupted());
        self.sink.close(status)?;
        if print || status == Status::Interrupted {
            print_summary(self.result(), self.dir(), self.how.verbose);
        }
        Ok(exit_status(self.result()))
    }

    /// How `jobs` alone (a task's jobs) ended, as [`exit_status`] says of a
    /// run.
    pub fn exit_status_of(&self, jobs: &[usize]) -> ExitStatus {
        let mut mine = self.result().clone();
        mine.jobs = jobs.iter().map(|&i| self.result().jobs[i].clone()).collect();
        mine.status = run_status(&mine, self.sink.is_interrupted());
        exit_status(&mine)
    }
}

/// The run's status from its jobs: interrupted if Ctrl-C stopped it (or a
/// job was interrupted), ok when every job is ok, else failed.
pub fn run_status(result: &RunResult, interrupted: bool) -> Status {
    if interrupted || result.jobs.iter().any(|j| j.status == Status::Interrupted) {
        Status::Interrupted
    } else if result.jobs.iter().all(|j| j.status == Status::Ok) {
        Status::Ok
    } else {
        Status::Failed
    }
}

/// How a finished run ended (the README's "Exit codes"): interrupted (130);
/// ok (0) when every job is ok; bad input (2) when the only failures are bad
/// input (a flag the engine rejected); else failed (1).
pub fn exit_status(result: &RunResult) -> ExitStatus {
    match result.status {
        Status::Interrupted => ExitStatus::Interrupted,
        Status::Ok => ExitStatus::Ok,
        _ => {
            let outcomes: Vec<JobOutcome> = result.jobs.iter().filter_map(JobOutcome::of).collect();
            let only_bad_input = outcomes.iter().all(|o| matches!(o, JobOutcome::Ok | JobOutcome::BadInput))
                && outcomes.contains(&JobOutcome::BadInput);
            if only_bad_input { ExitStatus::Usage } else { ExitStatus::Failed }
        }
    }
}

/// This machine's host name (`/proc/sys/kernel/hostname`).
pub fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|s| s.trim().to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::result::{JobResult, RunError};

    fn result(jobs: &[(Status, bool)]) -> RunResult {
        let job = |(status, bad): &(Status, bool)| {
            let mut j: JobResult = serde_json::from_value(serde_json::json!({
                "label": "x", "status": status, "engine_args": [], "env": {}, "points": [],
                "sweep": {"space": [], "inferencex": false, "length_convention": "vllm", "range_ratio": 0.0,
                          "prefix_len": 0, "request_rate": null, "burstiness": 1.0, "ignore_eos": true,
                          "percentiles": [99.0], "goodput": null, "seed": 0,
                          "count": {"prompts_per_conc": null, "num_prompts": 4, "warmups_per_conc": null, "warmups": null}}
            }))
            .unwrap();
            if *status == Status::Failed {
                j.error = Some(RunError { message: "x".into(), bad_input: *bad, ..RunError::default() });
            }
            j
        };
        let mut r: RunResult = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "status": "running",
            "recipe": {"name": "r", "file": "r.toml", "model": "m", "model_path": "m"},
            "versions": {"enginebench": "0"}, "host": {"hostname": "h", "cpu": "c", "logical_cpus": 1, "gpus": []},
            "started_at": "now", "timing": "t", "jobs": []
        }))
        .unwrap();
        r.jobs = jobs.iter().map(job).collect();
        r
    }

    fn code(jobs: &[(Status, bool)], interrupted: bool) -> (Status, i32) {
        let mut r = result(jobs);
        r.status = run_status(&r, interrupted);
        (r.status, exit_status(&r).code())
    }

    #[test]
    fn exit_codes_come_from_the_recorded_jobs() {
        assert_eq!(code(&[(Status::Ok, false), (Status::Ok, false)], false), (Status::Ok, 0));
        assert_eq!(code(&[(Status::Ok, false), (Status::Failed, false)], false), (Status::Failed, 1));
        // Bad input alone is exit 2; with another failure it is 1.
        assert_eq!(code(&[(Status::Ok, false), (Status::Failed, true)], false), (Status::Failed, 2));
        assert_eq!(code(&[(Status::Failed, false), (Status::Failed, true)], false), (Status::Failed, 1));
        // Interrupted wins, whether Ctrl-C was seen here or a job says so.
        assert_eq!(code(&[(Status::Ok, false), (Status::Pending, false)], true), (Status::Interrupted, 130));
        assert_eq!(code(&[(Status::Interrupted, false), (Status::Failed, false)], false), (Status::Interrupted, 130));
        // A job that never ran is not ok.
        assert_eq!(code(&[(Status::Ok, false), (Status::Pending, false)], false), (Status::Failed, 1));
    }

    #[test]
    fn status_is_a_lowercase_word_in_json() {
        assert_eq!(serde_json::to_string(&Status::Interrupted).unwrap(), "\"interrupted\"");
        let s: Status = serde_json::from_str("\"ok\"").unwrap();
        assert_eq!(s, Status::Ok);
        assert!(serde_json::from_str::<Status>("\"done\"").is_err());
    }
}
