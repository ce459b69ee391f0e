//! `enginebench compare`: two existing results (ours, or another tool's
//! files) compared as `ab` compares its arms.

use anyhow::Result;

use super::{ExitStatus, Global, options};
use crate::ab;
use crate::cli::CompareArgs;

/// Compares `a`'s baseline and candidate results; see [`ab::run_compare`].
pub fn run(a: CompareArgs, _: &Global) -> Result<ExitStatus> {
    ab::run_compare(&ab::CompareRequest {
        baseline: a.baseline,
        candidate: a.candidate,
        baseline_label: a.baseline_label,
        candidate_label: a.candidate_label,
        options: options::ab_options(&a.gate),
        config_key: a.gate.config_key.clone(),
        noise: a.gate.noise.clone(),
        output: a.output,
        hints: ab::foreign::Hints { isl_osl: a.foreign_isl_osl, tp: a.foreign_tp },
    })
}
