//! The local executor: one job after another, each in a fresh worker of
//! this process (what enginebench always did).

use anyhow::Result;

use super::super::job::{JobOutcome, Session, run_job};
use super::super::progress::say;
use super::{Executor, Heading, Runner, node_name};
use crate::report::result::{Execution, Placement};

/// One job after another on this machine.
pub struct Sequential;

impl Executor for Sequential {
    fn execute(&mut self, run: &mut Runner, groups: &[Vec<usize>], heading: &Heading<'_>) -> Result<()> {
        for &index in groups.iter().flatten() {
            if run.interrupted {
                break;
            }
            if let Some(h) = heading(&run.result, index) {
                say(&run.ui, &h);
            }
            run.result.jobs[index].placement = Some(local_placement(&run.plan.jobs[index].env, false));
            let session = Session { ui: &run.ui, interrupts: &run.interrupts, verbose: run.opts.verbose };
            let outcome = run_job(&run.plan, index, &mut run.result, &mut run.files, &session)?;
            if outcome == JobOutcome::Interrupted {
                run.interrupted = true;
            }
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
