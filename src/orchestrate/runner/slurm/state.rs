//! Slurm's task states as `scontrol -o show job ID` reports them, and what
//! each means for a job. (`sacct` needs accounting storage, slurmdbd and a
//! database, which many clusters have but a plain Slurm does not; scontrol
//! knows every task of the array until `MinJobAge` after it ended, and a
//! task's own result file covers the rest.)

use crate::report::result::SlurmTask;

/// What a Slurm state means here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not started yet (PENDING, CONFIGURING, REQUEUED, ...).
    Waiting,
    /// On a node (RUNNING, COMPLETING, SUSPENDED, ...).
    Running,
    /// Ended with exit code 0.
    Completed,
    /// Ended any other way (FAILED, CANCELLED, TIMEOUT, NODE_FAIL,
    /// OUT_OF_MEMORY, PREEMPTED, BOOT_FAIL, DEADLINE, ...).
    Ended,
}

/// The phase of a Slurm job state (`CANCELLED by 0` and `CANCELLED+` count as `CANCELLED`).
pub fn phase(state: &str) -> Phase {
    let word: String = state.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
    match word.as_str() {
        "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_FED" | "REQUEUE_HOLD" | "RESV_DEL_HOLD" | "SPECIAL_EXIT" => Phase::Waiting,
        "RUNNING" | "COMPLETING" | "SUSPENDED" | "STOPPED" | "SIGNALING" | "STAGE_OUT" | "RESIZING" => Phase::Running,
        "COMPLETED" => Phase::Completed,
        _ => Phase::Ended,
    }
}

/// One record of `scontrol -o show job`: a task, or a range of pending tasks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskRecord {
    /// The array indices this record covers (several for pending tasks).
    pub keys: Vec<u32>,
    pub array_job_id: u64,
    pub job_id: u64,
    pub state: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// `NodeList`, absent while pending.
    pub node: Option<String>,
    /// `Reason`, absent when `None`.
    pub reason: Option<String>,
}

impl TaskRecord {
    /// The record as `result.json` keeps it for task `key`.
    pub fn slurm_task(&self, key: u32) -> SlurmTask {
        SlurmTask {
            array_job_id: self.array_job_id,
            array_task_id: key,
            job_id: Some(self.job_id),
            state: Some(self.state.clone()),
            exit_code: self.exit_code,
            signal: self.signal,
            reason: self.reason.clone(),
        }
    }

    /// "CANCELLED (exit code 0, signal 15)", with the reason when there is one.
    pub fn describe(&self) -> String {
        let mut s = self.state.clone();
        let mut parts = Vec::new();
        if let Some(c) = self.exit_code {
            parts.push(format!("exit code {c}"));
        }
        if let Some(sig) = self.signal.filter(|&s| s != 0) {
            parts.push(format!("signal {sig}"));
        }
        if let Some(r) = &self.reason {
            parts.push(format!("reason {r}"));
        }
        if !parts.is_empty() {
            s.push_str(&format!(" ({})", parts.join(", ")));
        }
        s
    }
}

/// Parses `scontrol -o show job ID` (one record per line, `Key=Value` fields).
pub fn parse_scontrol(text: &str) -> Vec<TaskRecord> {
    text.lines()
        .filter(|l| l.contains("JobId="))
        .filter_map(|line| {
            let get = |key: &str| {
                line.split_whitespace().find_map(|f| f.strip_prefix(key).and_then(|r| r.strip_prefix('='))).map(str::to_string)
            };
            let keys = parse_indices(&get("ArrayTaskId")?);
            let (exit_code, signal) = match get("ExitCode").as_deref().and_then(|e| e.split_once(':')) {
                Some((c, s)) => (c.parse().ok(), s.parse().ok()),
                None => (None, None),
            };
            let state = get("JobState")?;
            let ended = matches!(phase(&state), Phase::Completed | Phase::Ended);
            Some(TaskRecord {
                keys,
                array_job_id: get("ArrayJobId")?.parse().ok()?,
                job_id: get("JobId")?.parse().ok()?,
                state,
                exit_code: if ended { exit_code } else { None },
                signal: if ended { signal } else { None },
                node: get("NodeList").filter(|n| n != "(null)" && !n.is_empty()),
                reason: get("Reason").filter(|r| r != "None"),
            })
        })
        .collect()
}

/// `3`, `1-3`, `0,2,4-5`, `2-7%1` (a throttle) -> the indices.
pub fn parse_indices(text: &str) -> Vec<u32> {
    let text = text.split('%').next().unwrap_or("");
    let mut out = Vec::new();
    for part in text.split(',') {
        let part = part.split(':').next().unwrap_or(part); // 0-10:2 steps are not used here
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_to_phases() {
        for s in ["PENDING", "CONFIGURING", "REQUEUED"] {
            assert_eq!(phase(s), Phase::Waiting, "{s}");
        }
        for s in ["RUNNING", "COMPLETING", "SUSPENDED"] {
            assert_eq!(phase(s), Phase::Running, "{s}");
        }
        assert_eq!(phase("COMPLETED"), Phase::Completed);
        for s in ["FAILED", "CANCELLED", "CANCELLED by 0", "CANCELLED+", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"] {
            assert_eq!(phase(s), Phase::Ended, "{s}");
        }
    }

    #[test]
    fn scontrol_records_of_an_array() {
        // Lines as Slurm 22.05 prints them (shortened).
        let text = "JobId=13 ArrayJobId=12 ArrayTaskId=1 JobName=enginebench UserId=root(0) JobState=CANCELLED Reason=None Dependency=(null) ExitCode=0:15 RunTime=00:00:09 NodeList=vm BatchHost=vm\n\
                    JobId=12 ArrayJobId=12 ArrayTaskId=0 JobName=enginebench JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=vm\n\
                    JobId=12 ArrayJobId=12 ArrayTaskId=2-3%1 JobName=enginebench JobState=PENDING Reason=JobArrayTaskLimit ExitCode=0:0 NodeList=(null)\n";
        let r = parse_scontrol(text);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].keys, vec![1]);
        assert_eq!((r[0].state.as_str(), r[0].exit_code, r[0].signal), ("CANCELLED", Some(0), Some(15)));
        assert_eq!(r[0].node.as_deref(), Some("vm"));
        assert_eq!(r[0].describe(), "CANCELLED (exit code 0, signal 15)");
        assert_eq!(r[0].slurm_task(1).job_id, Some(13));
        assert_eq!(r[1].describe(), "COMPLETED (exit code 0)");
        assert_eq!(r[2].keys, vec![2, 3]);
        assert_eq!((r[2].exit_code, r[2].node.as_deref()), (None, None));
        assert_eq!(r[2].reason.as_deref(), Some("JobArrayTaskLimit"));
        assert_eq!(parse_indices("0,2,4-5"), vec![0, 2, 4, 5]);
    }
}
