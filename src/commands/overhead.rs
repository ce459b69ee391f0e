//! `enginebench overhead`: the harness's own cost, tier by tier.

use anyhow::Result;

use super::{ExitStatus, Global, options};
use crate::cli::RunArgs;
use crate::{error, orchestrate};

/// Measures the tiers of `a`'s recipe; see [`orchestrate::overhead::overhead`].
///
/// Errors (usage): `--profile` (profiling runs the engine in-process: `run --profile`).
pub fn run(a: RunArgs, g: &Global) -> Result<ExitStatus> {
    if a.profile.profile {
        return Err(error::usage("overhead does not take --profile: profile with `run --profile` (the engine in-process)"));
    }
    options::run_options(a, g).and_then(|(o, how)| orchestrate::overhead::overhead(&o, &how))
}
