//! The hidden `enginebench __task DIR KEY`: the jobs of one task of a saved
//! plan (a child of the parallel executor, or a Slurm array task).

use anyhow::Result;

use super::{ExitStatus, Global};
use crate::cli::TaskArgs;
use crate::orchestrate;

/// Runs task `a.key` of `a.dir`; see [`orchestrate::runner::task::run_task`].
pub fn run(a: TaskArgs, g: &Global) -> Result<ExitStatus> {
    orchestrate::runner::task::run_task(&a.dir, a.key, a.probe.as_deref(), g.python.as_deref())
}
