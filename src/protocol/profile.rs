//! The profiler window of a point as the worker is asked for it
//! ([`ProfileTarget`]) and what the worker measured in it ([`ProfileRaw`]).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where the profiler window sits in a point's profile pass, in
/// steady-state decode steps counted from the first step after every
/// request of the pass has its first token: `warm` unprofiled steps, then
/// the `reference` unprofiled timed steps split around the `profiled` steps
/// (half, rounded up, before them; the rest after).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub warm: u32,
    pub reference: u32,
    pub profiled: u32,
}

impl Window {
    /// Decode steps the pass needs.
    pub fn decode_steps(&self) -> u32 {
        self.warm + self.reference + self.profiled
    }

    /// Output tokens each request of the pass asks for: its first token
    /// (prefill) plus one per decode step of the window.
    pub fn max_tokens(&self) -> u32 {
        self.decode_steps() + 1
    }
}

/// The profile window of one point of a job, as sent to the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileTarget {
    /// Index of the point in the job's `points`.
    pub point: usize,
    pub window: Window,
    /// Where the worker writes the trace (absolute, `.json.gz`).
    pub trace: PathBuf,
}

/// What the worker measured in one profile pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProfileRaw {
    /// Index of the point in the job's `points`.
    pub point: usize,
    pub trace: PathBuf,
    pub window: Window,
    /// Requests decoding together in the window.
    pub batch: u32,
    /// Steps before steady state (prefill, and steps mixing prefill and decode).
    pub prefill_steps: u32,
    /// Wall time of each unprofiled reference step, ms (harness clock).
    pub reference_ms: Vec<f64>,
    /// Wall time of each profiled step, ms (harness clock).
    pub profiled_ms: Vec<f64>,
    /// Profiler activities used (`CPU`, `CUDA`).
    pub activities: Vec<String>,
    /// Profiler start, stop and trace export, s (outside the steps).
    pub start_s: f64,
    pub stop_s: f64,
    pub export_s: f64,
    /// The traces of the other ranks (TP/PP > 1) of the same window, beside
    /// `trace` (rank 0's, the one the table is built from).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rank_traces: Vec<PathBuf>,
}
