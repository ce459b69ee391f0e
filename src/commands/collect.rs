//! `enginebench collect DIR`: waits for a submitted run's Slurm tasks and merges the result.

use anyhow::Result;

use super::{ExitStatus, Global};
use crate::cli::DirArgs;
use crate::orchestrate;

/// Follows and merges `a.dir`; see [`orchestrate::runner::slurm::collect`].
pub fn run(a: DirArgs, g: &Global) -> Result<ExitStatus> {
    orchestrate::runner::slurm::collect(&a.dir, g.python.as_deref())
}
