//! What one engine step is asked and gives back: the prompt of a request,
//! the new tokens per request ([`Delta`]), finished text requests
//! ([`Completion`]), the scheduler's statistics ([`StepStats`]), vLLM's own
//! per-request timing ([`EngineTiming`]) and speculative counters
//! ([`SpecCounts`]), gathered in one reusable [`StepOutput`].

use serde::{Deserialize, Serialize};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

/// A prompt: plain text, or chat messages for the tokenizer's chat template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prompt {
    Text(String),
    Chat(Vec<ChatMessage>),
}

impl Prompt {
    /// What the prompt hash is taken of: the text, or the messages as compact
    /// JSON (`[{"role":..,"content":..},..]`).
    pub fn hash_input(&self) -> String {
        match self {
            Prompt::Text(t) => t.clone(),
            Prompt::Chat(m) => serde_json::to_string(m).expect("messages serialize"),
        }
    }
}

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
    /// Prompt tokens looked up in / found in a KV connector's cache (CPU
    /// offload) this step; `None` without a connector.
    pub connector: Option<(u64, u64)>,
}

/// vLLM's own timing of a finished request, for cross-checking the
/// harness's clock: `RequestOutput.metrics` (a `RequestStateStats`) on the
/// shim's engine step path; on its core path the same quantities from the
/// same inputs the output processor uses (the request's `arrival_time`, the
/// wall clock when its first output came back, the engine core's output
/// timestamps and QUEUED/SCHEDULED events; vllm/v1/metrics/stats.py
/// `IterationStats.update_from_output`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EngineTiming {
    pub rid: u64,
    /// vLLM's first_token_latency: first-token iteration time - arrival, s.
    pub ttft_s: f64,
    /// last_token_ts - first_token_ts on the engine core's clock, s.
    pub decode_s: f64,
    /// Time spent queued in the scheduler (scheduled_ts - queued_ts), s.
    pub queued_s: f64,
    /// vLLM's `num_generation_tokens`; `None` on the core path (no output
    /// processor counts them; the harness's own count is the record's).
    #[serde(default)]
    pub generation_tokens: Option<u32>,
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
    pub spec: Option<SpecCounts>,
    /// The new token ids of each delta, parallel to `deltas`; empty unless
    /// token ids were asked for (`VllmEngine::record_token_ids`).
    pub token_ids: Vec<Vec<u32>>,
    /// (request id, prompt tokens served from the prefix cache) of each
    /// request that finished in this step, where the engine reports it
    /// (vLLM's `RequestOutput.num_cached_tokens`: local prefix cache plus
    /// any KV connector such as CPU offload).
    pub cached: Vec<(u64, u32)>,
    /// (request id, JSON of vLLM's `kv_transfer_params`) of each request
    /// that finished in this step with some: an engine with a KV connector
    /// (a P/D prefill engine's hand-off to the decode side).
    pub kv_params: Vec<(u64, String)>,
    /// (request id, prompt tokens that arrived through the KV connector,
    /// `PrefillStats.num_external_cached_tokens`) at a request's first
    /// output, on an engine with a KV connector.
    pub external_cached: Vec<(u64, u32)>,
    /// (request id, why) of requests that failed outside the engine this
    /// step (a P/D request whose prefill failed): the driver records the
    /// error and counts them finished.
    pub failures: Vec<(u64, String)>,
}

impl StepOutput {
    pub fn clear(&mut self) {
        self.deltas.clear();
        self.completions.clear();
        self.stats = StepStats::default();
        self.timings.clear();
        self.spec = None;
        self.token_ids.clear();
        self.cached.clear();
        self.kv_params.clear();
        self.external_cached.clear();
        self.failures.clear();
    }
}

/// vLLM's speculative counters over some steps (one step, or a point).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecCounts {
    /// Requests that had draft tokens verified.
    pub drafts: u64,
    /// Draft tokens proposed (verified by the target model).
    pub draft_tokens: u64,
    /// Draft tokens accepted.
    pub accepted_tokens: u64,
    /// Accepted tokens by draft position 0..k (a draft whose first j tokens
    /// were accepted counts once at each of positions 0..j).
    pub accepted_per_pos: Vec<u64>,
}

impl SpecCounts {
    /// Adds `other` (per-position lists of different lengths are aligned at 0).
    pub fn add(&mut self, other: &SpecCounts) {
        self.drafts += other.drafts;
        self.draft_tokens += other.draft_tokens;
        self.accepted_tokens += other.accepted_tokens;
        if self.accepted_per_pos.len() < other.accepted_per_pos.len() {
            self.accepted_per_pos.resize(other.accepted_per_pos.len(), 0);
        }
        for (a, b) in self.accepted_per_pos.iter_mut().zip(&other.accepted_per_pos) {
            *a += b;
        }
    }

    /// `self - before` (two snapshots of running totals); saturates at 0.
    pub fn since(&self, before: &SpecCounts) -> SpecCounts {
        SpecCounts {
            drafts: self.drafts.saturating_sub(before.drafts),
            draft_tokens: self.draft_tokens.saturating_sub(before.draft_tokens),
            accepted_tokens: self.accepted_tokens.saturating_sub(before.accepted_tokens),
            accepted_per_pos: self
                .accepted_per_pos
                .iter()
                .enumerate()
                .map(|(i, a)| a.saturating_sub(before.accepted_per_pos.get(i).copied().unwrap_or(0)))
                .collect(),
        }
    }
}

