//! Which kernels ran: a torch profiler window per sweep point, a
//! top-kernels table, and a kernel diff between two profiled runs (issue 17).
//!
//! How a profiled point runs (`run --profile`, `ab --profile`):
//!
//! 1. The point runs as always (warm-ups, then the measured requests) with
//!    no profiler in the process: its figures are unprofiled.
//! 2. Then, still on the same engine and before the next point, a *profile
//!    pass* ([`pass`]): `min(conc, num_prompts)` requests of the point's
//!    workload start together; once every one of them has its first token
//!    (all prefill done: steady-state decode at the point's batch), the
//!    [`Window`] runs `warm` unprofiled decode steps, then the `profiled`
//!    steps with the profiler on, with `reference` unprofiled timed steps
//!    around them (half before, half after: the overhead baseline). The
//!    profiler is vLLM's own worker profiler (`--profiler-config` set by the
//!    shim when the engine is built, `start_profile`/`stop_profile`), which
//!    profiles every worker process, so TP/PP > 1 engines, whose model runs
//!    in worker processes, are profiled where their kernels run (CPU
//!    activity, plus CUDA on a GPU, which covers ROCm's HIP too). On a vLLM
//!    without it and one worker, a torch profiler in the engine's process.
//!    The pass then drains its requests (aborts what is left), so the
//!    window never crosses into another point.
//! 3. The worker puts rank 0's Chrome/Perfetto trace at
//!    `trace-<job>-<point>.json.gz` and each other rank's beside it
//!    (`trace-<job>-<point>.rank<N>.json.gz`, listed in the point's
//!    profile); the orchestrator reads rank 0's back, streaming it
//!    ([`trace`]): a device profile without device kernels is an error.
//!    Names are grouped by the patterns of `groups.toml`
//!    ([`groups`]) and writes the top-kernels table ([`table`]) into the
//!    point's `profile` in `result.json`, `kernels-<job>-<point>.md` and
//!    `.json`, and the terminal.
//! 4. `ab`/`compare` with profiles on both sides add a kernel diff per point
//!    ([`diff`]).
//!
//! Bad input (a `--profile-point` that matches no point, a window longer
//! than the point's decode steps, an unwritable `--profile-dir`) is a usage
//! error (exit 2) raised by [`select`] before any engine starts.

pub mod attach;
pub mod diff;
pub mod groups;
pub mod pass;
pub mod select;
pub mod table;
pub mod trace;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use select::PointFilter;
pub use crate::protocol::{ProfileRaw, ProfileTarget, Window};
use crate::report::kernels::Overhead;

/// Default `--profile-steps`: profiled decode steps per point.
pub const DEFAULT_STEPS: u32 = 8;

/// What the point result says about where the profiled steps were.
pub const PLACEMENT: &str = "separate profile pass after the point's measured requests, on the same engine: the point's figures contain no profiled step (the profiler exists only inside the window)";

/// `--profile`, `--profile-steps`, `--profile-point`, `--profile-dir` as given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileOptions {
    /// Profiled decode steps per point (`--profile-steps`).
    pub steps: u32,
    /// Which points (`--profile-point`, repeatable); empty: every point.
    pub points: Vec<PointFilter>,
    /// Where traces go (`--profile-dir`); `None`: the output folder.
    pub dir: Option<PathBuf>,
}

/// Where vLLM's worker profiler writes the per-rank traces of a job's
/// windows (`--profiler-config.torch_profiler_dir`, fixed when the engine is
/// built): `vllm-profiler/` beside the job's trace files. Each window's
/// traces are moved out of it to the target's name (rank 0) and beside it
/// (other ranks). `None` when the job profiles nothing.
pub fn worker_trace_dir(targets: &[ProfileTarget]) -> Option<PathBuf> {
    let first = targets.first()?;
    Some(first.trace.parent().unwrap_or(std::path::Path::new(".")).join("vllm-profiler"))
}

/// The profiler's cost in one pass: its profiled steps against the
/// unprofiled reference steps around them.
pub fn overhead(raw: &ProfileRaw) -> Overhead {
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    let median = |v: &[f64]| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        crate::metrics::stats::percentile_sorted(&s, 50.0)
    };
    let (pm, rm) = (median(&raw.profiled_ms), median(&raw.reference_ms));
    Overhead {
        profiled_step_ms: mean(&raw.profiled_ms),
        reference_step_ms: mean(&raw.reference_ms),
        profiled_median_ms: pm,
        reference_median_ms: rm,
        fraction: if rm > 0.0 { pm / rm - 1.0 } else { 0.0 },
        start_s: raw.start_s,
        stop_s: raw.stop_s,
        export_s: raw.export_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_is_of_the_medians_and_reads_older_results() {
        let raw = ProfileRaw { reference_ms: vec![10.0, 11.0, 30.0], profiled_ms: vec![12.0, 12.1, 11.0], ..ProfileRaw::default() };
        let o = overhead(&raw);
        assert_eq!((o.reference_median_ms, o.profiled_median_ms), (11.0, 12.0));
        assert!((o.fraction - (12.0 / 11.0 - 1.0)).abs() < 1e-12, "a slow outlier does not decide it");
        assert!((o.reference_step_ms - 17.0).abs() < 1e-12);
        let old = r#"{"profiled_step_ms": 2.0, "reference_step_ms": 1.0, "fraction": 1.0, "start_s": 0, "stop_s": 0, "export_s": 0}"#;
        let o: Overhead = serde_json::from_str(old).unwrap();
        assert_eq!(o.profiled_median_ms, 0.0);
    }
}
