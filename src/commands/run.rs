//! `enginebench run`: the recipe's sweep (then the eval) on in-process engines.

use anyhow::Result;

use super::{ExitStatus, Global, options};
use crate::cli::RunArgs;
use crate::orchestrate;

/// Runs `a`'s recipe; see [`orchestrate::run::run`].
pub fn run(a: RunArgs, g: &Global) -> Result<ExitStatus> {
    options::run_options(a, g).and_then(|(o, how)| orchestrate::run::run(&o, &how))
}
