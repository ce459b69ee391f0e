//! Where executors record what their jobs did: the run's result document
//! and the run folder's files, behind a few methods. An executor records a
//! job by running it here ([`Sink::run_job`]) or by merging the files of a
//! task that ran it elsewhere ([`Sink::merge_task`]); it reads the result,
//! and says when Ctrl-C stopped it or it left the jobs to run without us.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::super::job::{JobOutcome, Session, run_job};
use super::super::outputs::OutputFiles;
use super::super::plan::Plan;
use super::merge::{TaskEnd, merge_task};
use crate::protocol::RawPoint;
use crate::report::result::{Execution, JobResult, Placement, PointResult, RunResult, Status};

/// The result document and the files of one run folder (or of one task's
/// part of it).
pub struct Sink {
    result: RunResult,
    files: OutputFiles,
    /// The run folder.
    dir: PathBuf,
    /// Ctrl-C stopped an executor: no further job starts.
    interrupted: bool,
    /// The Slurm executor with `--detach`: the jobs run on without us.
    detached: bool,
}

impl Sink {
    /// The sink of the run in `dir`; writes nothing yet.
    pub fn new(result: RunResult, files: OutputFiles, dir: &Path) -> Sink {
        Sink { result, files, dir: dir.to_path_buf(), interrupted: false, detached: false }
    }

    /// The result document as recorded so far.
    pub fn result(&self) -> &RunResult {
        &self.result
    }

    /// The run folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether Ctrl-C stopped an executor.
    pub fn is_interrupted(&self) -> bool {
        self.interrupted
    }

    /// Ctrl-C stopped the executor: no further job starts.
    pub fn interrupt(&mut self) {
        self.interrupted = true;
    }

    /// Whether the jobs were left to run without us (`--slurm --detach`).
    pub fn is_detached(&self) -> bool {
        self.detached
    }

    /// The jobs run on without us: the runner's end only says how to follow them.
    pub fn detach(&mut self) {
        self.detached = true;
    }

    /// Runs job `index` of `plan` in a fresh worker of this process, placed
    /// at `placement`, recording everything it sends; marks the run
    /// interrupted when Ctrl-C stopped it.
    ///
    /// Errors: the run folder cannot be written, the worker cannot start.
    pub fn run_job(&mut self, plan: &Plan, index: usize, placement: Placement, session: &Session<'_>) -> Result<JobOutcome> {
        self.result.jobs[index].placement = Some(placement);
        let outcome = run_job(plan, index, &mut self.result, &mut self.files, session)?;
        if outcome == JobOutcome::Interrupted {
            self.interrupted = true;
        }
        Ok(outcome)
    }

    /// Merges task `key` (jobs `jobs` of `plan`), which ended as `end` says,
    /// into the result and the run folder (see [`merge_task`]).
    pub fn merge_task(&mut self, plan: &Plan, key: u32, jobs: &[usize], end: &TaskEnd<'_>) -> Result<()> {
        merge_task(&mut self.result, &self.files, plan, key, jobs, end)
    }

    /// Writes the result document.
    pub fn write(&self) -> Result<()> {
        self.files.write_result(&self.result)
    }

    /// Records how the jobs are executed.
    pub fn set_execution(&mut self, execution: Execution) {
        self.result.execution = Some(execution);
    }

    /// Adds a job to the end of the result (not written yet).
    pub fn push_job(&mut self, job: JobResult) {
        self.result.jobs.push(job);
    }

    /// Appends point `point` of `job` (the result's job `job_index`, or the
    /// one about to be pushed there) to the run's JSON-lines files.
    pub fn append_point(&mut self, job_index: usize, job: &JobResult, point: &PointResult, raw: &RawPoint) -> Result<()> {
        self.files.append_point(job_index, job, job.points.len(), point, raw)
    }

    /// Sets the run's final status and end time, and writes the result (in
    /// place when there is no room for a second copy, see
    /// [`OutputFiles::write_result_last`]).
    pub fn close(&mut self, status: Status) -> Result<()> {
        self.result.status = status;
        self.result.finished_at = Some(super::now_rfc3339());
        self.files.write_result_last(&self.result).map(|_| ())
    }

    /// The run stopped on `e` (its folder cannot be written, a worker
    /// cannot start): every job still running is failed with that cause,
    /// the run is failed with it (`error`), and the result is written a last
    /// time as well as it can be. Returns `e` with what the folder kept.
    pub fn abandon(&mut self, e: anyhow::Error) -> anyhow::Error {
        let cause = format!("{e:#}");
        for j in self.result.jobs.iter_mut().filter(|j| j.status == Status::Running) {
            j.status = Status::Failed;
            j.worker_pid = None;
            j.error.get_or_insert_with(|| crate::report::result::RunError { message: cause.clone(), ..Default::default() });
        }
        self.result.error = Some(cause);
        let points: usize = self.result.jobs.iter().map(|j| j.points.len()).sum();
        let result_file = self.files.lines_dir.join("result.json");
        let kept = match self.close(Status::Failed) {
            Ok(()) => format!(
                "the run stopped; {} keeps its status (failed), the cause and {points} completed point(s), and the .jsonl files hold whole lines of those points only",
                result_file.display()
            ),
            Err(w) => format!(
                "the run stopped; {} could not be updated either ({w:#}): it holds the last state written, and the .jsonl files whole lines only",
                result_file.display()
            ),
        };
        e.context(kept)
    }
}
