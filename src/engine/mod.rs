//! The engine side: vLLM's `LLMEngine` in the worker's own interpreter (the
//! `python` feature, built into the extension module), behind the small
//! [`StepEngine`] interface the request loops drive.

pub mod fake;
#[cfg(feature = "python")]
pub mod pyerror;
#[cfg(feature = "python")]
pub mod vllm;

use anyhow::Result;

pub use crate::eval::Prompt;

/// New tokens one request received in one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delta {
    pub rid: u64,
    /// Tokens produced for `rid` by this step (1 without speculative decoding).
    pub new_tokens: u32,
    /// The request finished in this step (length, stop string or EOS).
    pub finished: bool,
}

/// The full completion of a finished text (eval) request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub rid: u64,
    pub text: String,
    /// The generated token ids (greedy-token agreement compares them).
    pub token_ids: Vec<u32>,
}

/// The scheduler's view of one step (vLLM's SchedulerStats plus what the
/// scheduler handed the model). Scheduled counts are `None` where the
/// scheduler is not reachable (engine core in another process).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepStats {
    /// Requests / tokens in the prefill (context) phase scheduled this step.
    pub prefill: Option<(u32, u32)>,
    /// Requests / tokens in the decode phase scheduled this step.
    pub decode: Option<(u32, u32)>,
    /// Requests running and waiting after scheduling.
    pub running: u32,
    pub waiting: u32,
    /// Fraction of the KV cache in use, 0..1; `None` when this vLLM's
    /// scheduler stats do not say (never reported as 0).
    pub kv_cache_usage: Option<f64>,
    /// Prompt tokens looked up in / found in the prefix cache this step.
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    /// Requests preempted this step.
    pub preempted: u32,
}

/// vLLM's own timing of a finished request (`RequestOutput.metrics`, a
/// `RequestStateStats`), for cross-checking the harness's clock.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EngineTiming {
    pub rid: u64,
    /// vLLM's first_token_latency: first-token iteration time - arrival, s.
    pub ttft_s: f64,
    /// last_token_ts - first_token_ts on the engine core's clock, s.
    pub decode_s: f64,
    /// Time spent queued in the scheduler (scheduled_ts - queued_ts), s.
    pub queued_s: f64,
    pub generation_tokens: u32,
}

/// What one `step()` produced; reused across steps to avoid allocations.
#[derive(Debug, Default)]
pub struct StepOutput {
    pub deltas: Vec<Delta>,
    pub completions: Vec<Completion>,
    pub stats: StepStats,
    pub timings: Vec<EngineTiming>,
    /// vLLM's speculative-decoding counters of this step (`SpecDecodingStats`);
    /// zeros when the engine speculates but no request drafted, `None` when
    /// the engine does not speculate (or this vLLM does not report them).
    pub spec: Option<crate::metrics::spec::SpecCounts>,
    /// The new token ids of each delta, parallel to `deltas`; empty unless
    /// token ids were asked for (`VllmEngine::record_token_ids`).
    pub token_ids: Vec<Vec<u32>>,
}

impl StepOutput {
    pub fn clear(&mut self) {
        self.deltas.clear();
        self.completions.clear();
        self.stats = StepStats::default();
        self.timings.clear();
        self.spec = None;
        self.token_ids.clear();
    }
}

/// An engine that Rust drives one step at a time. Request ids must be unique
/// among requests in flight.
pub trait StepEngine {
    /// Adds a perf request: a token-id prompt, greedy, `max_tokens` new tokens
    /// (exactly that many when `ignore_eos`). Its tokens arrive as [`Delta`]s.
    fn add_tokens(&mut self, rid: u64, prompt: &[u32], max_tokens: u32, ignore_eos: bool)
    -> Result<()>;
    /// Adds an eval request: a text prompt, or chat messages put through the
    /// tokenizer's chat template; greedy, stopping at any of `stop`. It yields
    /// one [`Completion`] when it finishes (and a [`Delta`]).
    fn add_text(&mut self, rid: u64, prompt: &Prompt, max_tokens: u32, stop: &[String])
    -> Result<()>;
    /// Runs one engine step (schedule + execute + update), filling `out`.
    fn step(&mut self, out: &mut StepOutput) -> Result<()>;
    /// Aborts requests in flight (a graceful stop).
    fn abort(&mut self, rids: &[u64]) -> Result<()>;
}

/// What the worker needs of an engine besides stepping it (and opening a
/// profiler window, for `--profile`): the vLLM one, or the [`fake`] stand-in.
pub trait WorkerEngine: StepEngine + crate::profile::pass::Profiler {
    /// Facts about the built engine (versions, model, dtype, parallel sizes), JSON.
    fn info(&self) -> &serde_json::Value;
    /// Token ids a random prompt may use (vocabulary minus special tokens).
    fn allowed_token_ids(&self) -> &[u32];
    /// Makes later steps return each perf request's new token ids.
    fn record_token_ids(&mut self, on: bool) -> Result<()>;
    /// The engine's own speculative-decoding totals, if it keeps them.
    fn spec_counters(&self) -> Option<crate::metrics::spec::SpecCounts>;
    /// Shuts the engine down.
    fn shutdown(&mut self) -> Result<()>;
}
