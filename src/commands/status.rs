//! `enginebench status DIR`: the Slurm tasks of a submitted run.

use anyhow::Result;

use super::{ExitStatus, Global};
use crate::cli::DirArgs;
use crate::orchestrate;

/// Prints the tasks of `a.dir`; see [`orchestrate::runner::slurm::status`].
pub fn run(a: DirArgs, _: &Global) -> Result<ExitStatus> {
    orchestrate::runner::slurm::status(&a.dir)
}
