//! Job, run and point states, and where each job ran (`result.json`'s
//! `status`, `execution`, per-job `placement`, and each point's and each
//! unfinished point's `status`).

use serde::{Deserialize, Serialize};

/// The state of a job or of the whole run, written as a lowercase word.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Planned, not started (a job only).
    #[default]
    Pending,
    /// Started and not finished (the run while jobs go on).
    Running,
    /// Every point ran and every accuracy gate passed.
    Ok,
    /// A point, the engine, a gate, or the scheduler's task failed.
    Failed,
    /// Stopped by Ctrl-C (SIGINT/SIGTERM) before it finished.
    Interrupted,
}

impl Status {
    /// The word used in `result.json` and in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
        }
    }

    /// Still to run or still running.
    pub fn is_open(self) -> bool {
        matches!(self, Status::Pending | Status::Running)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a finished point, written as a lowercase word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointStatus {
    /// Every measured request finished.
    Ok,
    /// At least one request failed (the figures cover those that finished).
    Failed,
    /// Ctrl-C cut it short (the figures cover the requests that finished).
    Partial,
}

impl PointStatus {
    /// The word used in `result.json`, `points.jsonl` and in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            PointStatus::Ok => "ok",
            PointStatus::Failed => "failed",
            PointStatus::Partial => "partial",
        }
    }
}

impl std::fmt::Display for PointStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a planned point has no result (`unfinished[].status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnfinishedStatus {
    /// The point in progress when the engine or its task failed.
    #[serde(rename = "failed")]
    Failed,
    /// The point in progress when `--point-timeout` ran out.
    #[serde(rename = "timeout")]
    Timeout,
    /// The point in progress when Ctrl-C stopped the job.
    #[serde(rename = "interrupted")]
    Interrupted,
    /// A point after the one that stopped the job: it never started.
    #[serde(rename = "not run")]
    NotRun,
}

impl UnfinishedStatus {
    /// The word used in `result.json` and in the summary.
    pub fn as_str(self) -> &'static str {
        match self {
            UnfinishedStatus::Failed => "failed",
            UnfinishedStatus::Timeout => "timeout",
            UnfinishedStatus::Interrupted => "interrupted",
            UnfinishedStatus::NotRun => "not run",
        }
    }
}

impl std::fmt::Display for UnfinishedStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a run's jobs were executed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// `local` (one after another), `local-parallel` or `slurm`.
    pub executor: String,
    /// The most jobs that could run at the same time (1 for `local`; 0 for
    /// `slurm`: as many as the scheduler gives nodes for).
    pub max_concurrent_jobs: u32,
    /// Jobs shared the machine's CPU cores (`--parallel-jobs` on CPU with
    /// `--share-cpu`): their perf figures disturb each other.
    #[serde(default)]
    pub shared_cpu: bool,
}

/// Where one job ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// The host name of the node.
    pub node: String,
    /// The devices the job was given, as the visibility variable had them
    /// (e.g. `CUDA_VISIBLE_DEVICES=4,5,6,7`); absent on CPU or when inherited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<String>,
    /// Other jobs could run at the same time on this node.
    #[serde(default)]
    pub concurrent: bool,
    /// The Slurm task this job ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmTask>,
}

/// A Slurm array task, as `scontrol show job` reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlurmTask {
    /// The array's job id (`SLURM_ARRAY_JOB_ID`).
    pub array_job_id: u64,
    /// The task's index in the array (`SLURM_ARRAY_TASK_ID`).
    pub array_task_id: u32,
    /// The task's own job id (`SLURM_JOB_ID`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
    /// Slurm's final state (`COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`,
    /// `NODE_FAIL`, `OUT_OF_MEMORY`, ...), once the task ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The batch script's exit code and the signal that ended it (Slurm's `ExitCode=code:signal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Slurm's reason field, when it gives one (`None` is left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_and_unfinished_states_are_the_result_words() {
        for s in [PointStatus::Ok, PointStatus::Failed, PointStatus::Partial] {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<PointStatus>(&format!("\"{s}\"")).unwrap(), s);
        }
        let words = ["failed", "timeout", "interrupted", "not run"];
        let states = [UnfinishedStatus::Failed, UnfinishedStatus::Timeout, UnfinishedStatus::Interrupted, UnfinishedStatus::NotRun];
        for (word, s) in words.iter().zip(states) {
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{word}\""));
            assert_eq!(serde_json::from_str::<UnfinishedStatus>(&format!("\"{word}\"")).unwrap(), s);
            assert_eq!(s.to_string(), *word);
        }
        assert!(serde_json::from_str::<PointStatus>("\"done\"").is_err());
    }
}
