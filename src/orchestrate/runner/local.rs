//! The local executor: one job after another, each in a fresh worker of
//! this process. A local run uses it, and so does each task of a parallel or
//! Slurm run for its own jobs (placed as its task sees them).

use anyhow::Result;

use super::super::plan::PlannedJob;
use super::super::progress::say;
use super::{Executor, Run, Sink, node_name};
use crate::report::result::{Execution, Placement};

/// One job after another on this machine.
pub struct Sequential {
    /// Where a job runs, from its planned environment.
    place: fn(&PlannedJob) -> Placement,
}

impl Default for Sequential {
    /// A local run's: this node, alone.
    fn default() -> Sequential {
        Sequential { place: |job| local_placement(&job.env, false) }
    }
}

impl Sequential {
    /// One job after another, each placed by `place` (a task's placement
    /// knows its Slurm task and whether it shares the node).
    pub fn placed_by(place: fn(&PlannedJob) -> Placement) -> Sequential {
        Sequential { place }
    }
}

impl Executor for Sequential {
    fn execute(&mut self, run: &Run<'_>, sink: &mut Sink, groups: &[Vec<usize>]) -> Result<()> {
        for &index in groups.iter().flatten() {
            if sink.is_interrupted() {
                break;
            }
            if let Some(h) = (run.heading)(sink.result(), index) {
                say(run.ui, &h);
            }
            let placement = (self.place)(&run.plan.jobs[index]);
            sink.run_job(run.plan, index, placement, &run.session())?;
        }
        Ok(())
    }

    fn describe(&self) -> Execution {
        Execution { executor: "local".into(), max_concurrent_jobs: 1, shared_cpu: false }
    }
}

/// The device visibility variables a job may be limited by.
pub const DEVICE_VARS: [&str; 3] = ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"];

/// This node, and the devices the job's environment (or this process's) limits it to.
pub fn local_placement(env: &std::collections::BTreeMap<String, String>, concurrent: bool) -> Placement {
    let devices = DEVICE_VARS
        .iter()
        .filter_map(|k| env.get(*k).cloned().or_else(|| std::env::var(k).ok()).map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>();
    Placement {
        node: node_name(),
        devices: (!devices.is_empty()).then(|| devices.join(" ")),
        concurrent,
        slurm: None,
    }
}
