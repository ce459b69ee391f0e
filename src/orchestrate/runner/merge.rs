//! Folding a finished task's files into the run folder: its jobs' entries
//! replace the run's, its JSON lines are appended to the run's files, and a
//! task that ended without finishing its jobs is recorded with the reason
//! its executor gives (Slurm's state, exit code and signal).

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use super::super::job::name_unfinished;
use super::super::outputs::OutputFiles;
use super::super::plan::Plan;
use super::task::task_dir;
use crate::report::result::{PointStatus, RunError, RunResult, SlurmTask, Status, UnfinishedStatus};

/// The JSON-lines files a task writes (and the run folder holds).
pub const LINE_FILES: [&str; 4] = ["points.jsonl", "requests.jsonl", "steps.jsonl", "gsm8k_samples.jsonl"];

/// Why a task ended before its jobs did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fault {
    /// In words, e.g. "Slurm task 12_1 ended CANCELLED (exit code 0, signal 15)".
    pub message: String,
    /// The Slurm task's record, when it ran under Slurm.
    pub slurm: Option<SlurmTask>,
}

/// How a task ended, as its executor saw it.
#[derive(Debug, Default)]
pub struct TaskEnd<'a> {
    /// Why it ended before its jobs did; `None` when it ended cleanly.
    pub fault: Option<Fault>,
    /// The task's Slurm record, added to every job's placement.
    pub slurm: Option<&'a SlurmTask>,
    /// The scheduler's node, for jobs whose task recorded none.
    pub node: Option<&'a str>,
}

/// Merges task `key` (jobs `jobs` of `plan`) into `result` and the run
/// folder of `files`, writes the result, then removes the task's folder. A
/// job the task left open (or one a scheduler's signal stopped) is recorded
/// as failed for `end.fault`'s reason, its finished points kept.
pub fn merge_task(result: &mut RunResult, files: &OutputFiles, plan: &Plan, key: u32, jobs: &[usize], end: &TaskEnd<'_>) -> Result<()> {
    let (fault, slurm, node) = (end.fault.as_ref(), end.slurm, end.node);
    let dir = &files.dir;
    let tdir = task_dir(dir, key);
    let task_result: Option<RunResult> = crate::report::export::read_result(&tdir.join("result.json")).ok();
    for &i in jobs {
        if let Some(t) = task_result.as_ref().and_then(|t| t.jobs.get(i)) {
            result.jobs[i] = t.clone();
        }
        let job = &mut result.jobs[i];
        job.worker_pid = None;
        if let Some(s) = slurm {
            let placement = job.placement.get_or_insert_with(Default::default);
            let mut record = s.clone();
            if let Some(old) = &placement.slurm {
                record.job_id = record.job_id.or(old.job_id);
            }
            if placement.node.is_empty() {
                placement.node = node.unwrap_or_default().to_string();
            }
            placement.slurm = Some(record);
        }
        // A job still open, or one a scheduler's signal (not our Ctrl-C)
        // stopped, failed for the task's reason.
        let stopped_by_scheduler = fault.is_some_and(|f| f.slurm.is_some()) && job.status == Status::Interrupted;
        if job.status.is_open() || stopped_by_scheduler {
            job.points.retain(|p| p.status == PointStatus::Ok);
            job.error = None;
            let why = fault.map_or_else(|| format!("task {key} ended before this job finished"), |f| f.message.clone());
            job.status = Status::Failed;
            job.error.get_or_insert_with(|| RunError { message: why.clone(), ..RunError::default() });
            let done: Vec<(u32, u32, u32)> = job.points.iter().map(|p| (p.isl, p.osl, p.conc)).collect();
            let todo = plan.jobs[i].specs.iter().filter(|s| !done.contains(&(s.point.isl, s.point.osl, s.point.conc)));
            job.unfinished = name_unfinished(todo, Some((UnfinishedStatus::Failed, why.clone())), "an earlier point failed");
        }
    }
    result.versions.refresh(&result.jobs);
    for name in LINE_FILES {
        append(&tdir.join(name), &dir.join(name))?;
    }
    files.write_result(result)?;
    if tdir.exists() {
        std::fs::remove_dir_all(&tdir).with_context(|| format!("removing {}", tdir.display()))?;
    }
    Ok(())
}

/// Appends the whole lines of `from` (if it exists) to `to`.
fn append(from: &Path, to: &Path) -> Result<()> {
    let Ok(bytes) = std::fs::read(from) else { return Ok(()) };
    // A line cut by a kill is not a record.
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    if end == 0 {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(to).with_context(|| format!("opening {}", to.display()))?;
    f.write_all(&bytes[..end])?;
    f.flush()?;
    Ok(())
}

/// Lines in task `key`'s `points.jsonl` so far (its progress).
pub fn points_so_far(dir: &Path, key: u32) -> Vec<String> {
    std::fs::read_to_string(task_dir(dir, key).join("points.jsonl"))
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}
