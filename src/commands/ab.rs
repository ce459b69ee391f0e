//! `enginebench ab`: a baseline and a candidate variant on the same sweep,
//! interleaved per repeat, then their comparison.

use anyhow::Result;

use super::{ExitStatus, Global, options};
use crate::cli::AbArgs;
use crate::orchestrate;

/// Runs both arms of `a` and compares them; see [`orchestrate::ab::ab`].
pub fn run(a: AbArgs, g: &Global) -> Result<ExitStatus> {
    let req = orchestrate::ab::AbRequest {
        baseline: a.baseline.clone(),
        // Two interpreters and no --candidate: one variant, two vLLM builds.
        candidate: a.candidate.clone().or_else(|| {
            (!a.aa && (a.baseline_python.is_some() || a.candidate_python.is_some())).then(|| a.baseline.clone())
        }),
        repeats: a.repeats,
        options: options::ab_options(&a.gate),
        config_key: a.gate.config_key.clone(),
        noise: a.gate.noise.clone(),
        calibrate: a.calibrate,
        until_ci: a.until_ci,
        max_repeats: a.max_repeats,
        baseline_python: a.baseline_python.clone(),
        candidate_python: a.candidate_python.clone(),
        allow_noop: a.allow_noop,
    };
    options::run_options(a.run, g).and_then(|(o, how)| orchestrate::ab::ab(&o, &how, &req))
}
