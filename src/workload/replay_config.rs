//! How a session replay runs and why it stopped: the settings both
//! schedules read ([`super::lanes::LanesReplay`], [`super::timed::TimedReplay`]),
//! from a recipe's [`TraceSpec`] or for conversations, checked before any
//! engine starts.

use anyhow::Result;

use crate::error::usage;
use crate::protocol::TraceSpec;

/// How a replay runs (the recipe's [`TraceSpec`] plus the point's
/// concurrency and a run id).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// Live session trees (the concurrency); timed traces: most requests in flight.
    pub lanes: usize,
    /// Seeds trace order, t* and prompt tokens.
    pub seed: u64,
    /// Keys the cache-bust markers with the seed: replays with different
    /// run ids share no prefix.
    pub run_id: u64,
    /// Mid-trace start as fractions of a trace's span (0, 0: from turn 0).
    pub start_min_ratio: f64,
    pub start_max_ratio: f64,
    /// Warm-up requests per lane after its primers.
    pub warmup_requests_per_lane: u32,
    /// Per-tree and whole-replay idle caps, s.
    pub tree_idle_cap_s: Option<f64>,
    pub system_idle_cap_s: Option<f64>,
    /// Measured phase length, s, and/or measured request budget.
    pub duration_s: Option<f64>,
    pub max_requests: Option<u32>,
    /// Seconds per recorded time unit.
    pub time_scale: f64,
    /// Prepend a per-tree marker (`synth::MARKER_TOKENS` ids).
    pub cache_bust: bool,
    pub ignore_eos: bool,
}

impl ReplayConfig {
    /// A trace replay of `spec` at `lanes`.
    pub fn for_trace(spec: &TraceSpec, lanes: usize, run_id: u64) -> Self {
        ReplayConfig {
            lanes,
            seed: spec.seed,
            run_id,
            start_min_ratio: spec.start_min_ratio,
            start_max_ratio: spec.start_max_ratio,
            warmup_requests_per_lane: spec.warmup_requests_per_lane,
            tree_idle_cap_s: spec.tree_idle_cap_s,
            system_idle_cap_s: spec.system_idle_cap_s,
            duration_s: spec.duration_s,
            max_requests: spec.max_requests,
            time_scale: spec.time_scale,
            cache_bust: spec.cache_bust,
            ignore_eos: true,
        }
    }

    /// Conversations at `lanes`: every conversation once from its first
    /// turn, no warm-up, no think time, no marker.
    pub fn for_conversations(lanes: usize, seed: u64) -> Self {
        ReplayConfig {
            lanes,
            seed,
            run_id: 0,
            start_min_ratio: 0.0,
            start_max_ratio: 0.0,
            warmup_requests_per_lane: 0,
            tree_idle_cap_s: None,
            system_idle_cap_s: None,
            duration_s: None,
            max_requests: None,
            time_scale: 1.0,
            cache_bust: false,
            ignore_eos: true,
        }
    }

    /// Errors (usage): no lanes, ratios outside 0 <= min <= max <= 1, a
    /// negative or non-finite time scale, cap or duration, a zero budget.
    pub fn check(&self) -> Result<()> {
        if self.lanes == 0 {
            return Err(usage("a replay needs a concurrency of at least 1"));
        }
        let (lo, hi) = (self.start_min_ratio, self.start_max_ratio);
        if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) || lo > hi {
            return Err(usage(format!(
                "trace start ratios must satisfy 0 <= min <= max <= 1, got min {lo} and max {hi}"
            )));
        }
        if !(self.time_scale.is_finite() && self.time_scale >= 0.0) {
            return Err(usage(format!("time_scale must be a finite number >= 0, got {}", self.time_scale)));
        }
        for (name, v) in [
            ("tree_idle_cap_s", self.tree_idle_cap_s),
            ("system_idle_cap_s", self.system_idle_cap_s),
            ("duration_s", self.duration_s),
        ] {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(usage(format!("{name} must be a positive number of seconds, got {v}")));
            }
        }
        if self.max_requests == Some(0) {
            return Err(usage("max_requests must be at least 1"));
        }
        Ok(())
    }

    /// Plays the pool once (no stop rule given) instead of recycling.
    pub fn one_pass(&self) -> bool {
        self.duration_s.is_none() && self.max_requests.is_none()
    }
}

pub use crate::protocol::StopReason;
