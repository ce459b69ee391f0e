//! What kind of requests a point sends ([`Workload`]), as the worker is
//! told: random token ids (the default, with the point's
//! [`super::RandomDataset`]), the same through the model's chat template, or
//! multi-turn sessions replayed from a file (ShareGPT-shaped conversations,
//! agentic traces, timed traces). The files are read by the worker, which
//! has the tokenizer; the orchestrator checks them first.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The workload of one point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    /// Random token ids with the point's ISL/OSL ([`super::RandomDataset`]).
    #[default]
    Random,
    /// Random token ids as one user message through the tokenizer's chat
    /// template (InferenceX's `--use-chat-template`); the templated prompt
    /// has exactly the drawn input length.
    ChatRandom,
    /// Multi-turn conversations from a ShareGPT-shaped file.
    Conversation(ConversationSpec),
    /// Replay of recorded sessions (AgentX agentic traces) or of a timed
    /// trace (Mooncake-style lines).
    Trace(TraceSpec),
}

impl Workload {
    /// The recipe's and the command line's name of the workload.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Random => "random",
            Workload::ChatRandom => "chat_random",
            Workload::Conversation(_) => "conversation",
            Workload::Trace(_) => "trace",
        }
    }

    /// Whether requests are sessions whose turns share prefixes (the
    /// prefix-cache figures and the reset between points matter).
    pub fn is_sessions(&self) -> bool {
        matches!(self, Workload::Conversation(_) | Workload::Trace(_))
    }
}

/// A ShareGPT-shaped conversations file (JSON list or JSON lines of
/// `{"id": .., "conversations": [{"from": "human"|"gpt"|"system", "value": ..}, ..]}`).
/// Each user message followed by a reply is one turn; every conversation
/// is played once, `concurrency` at a time, with no think time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationSpec {
    /// The `.json` or `.jsonl` file.
    pub path: PathBuf,
    /// At most this many user turns per conversation (`None`: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Output tokens per turn: the recorded reply's length, at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

/// Which trace format a file is in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum TraceFormat {
    /// AgentX (InferenceX's agentic scenario): one session per line, with
    /// `requests` (`t`, `in`, `out`, `hash_ids`, `api_time`, subagents).
    #[default]
    Agentx,
    /// One request per line: `timestamp`, `input_length`, `output_length`,
    /// `hash_ids` (as vLLM's `timed_trace` dataset and Mooncake's traces).
    Timed,
}

/// A trace replay and its rules (AgentX's by default; the workload module's
/// `replay` overview states them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSpec {
    /// A `.jsonl` file, or a folder holding `traces.jsonl`.
    pub path: PathBuf,
    #[serde(default)]
    pub format: TraceFormat,
    /// Tokens per hash id (AgentX 64; Mooncake 512). AgentX lines carry
    /// their own `block_size`, which must equal this.
    pub block_size: u32,
    /// Seeds the lanes' trace choice, the mid-trace start and the prompt
    /// tokens: the same seed, trace and concurrency send the same token counts.
    pub seed: u64,
    /// Stop sending new requests this many seconds after the measured
    /// phase began (in-flight ones finish and count) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// ... or after this many measured requests (whichever comes first).
    /// With neither, every trace is played once (no recycling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    /// Mid-trace start of each lane's first trace, as a fraction of the
    /// trace's span, drawn between min and max (AgentX: 0.25 to 0.75);
    /// 0 and 0: every trace from its first turn. Ignored by timed traces.
    pub start_min_ratio: f64,
    pub start_max_ratio: f64,
    /// Warm-up requests per lane after the primers (AgentX: 10); not
    /// measured, 1 output token each. Ignored by timed traces.
    pub warmup_requests_per_lane: u32,
    /// A session tree idle this long has its pending timers moved up (AgentX: 300 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_idle_cap_s: Option<f64>,
    /// The whole replay idle this long has every pending timer moved up (AgentX: 10 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_idle_cap_s: Option<f64>,
    /// Seconds per recorded time unit, every format (AgentX records
    /// seconds: 1; a millisecond timed trace: 0.001); below 1 it also
    /// compresses think times.
    #[serde(default = "one")]
    pub time_scale: f64,
    /// A marker of 8 token ids before every prompt of a session tree, new
    /// for each tree and run, so nothing is cached from another replay or
    /// lane (AgentX's `first_turn_prefix` cache bust); timed traces: one
    /// marker for the whole replay (their lines share blocks).
    #[serde(default = "yes")]
    pub cache_bust: bool,
    /// AgentX traces: the top-level requests and each subagent's split
    /// into parallel agent chains by their hash ids, as InferenceX's AIPerf
    /// replay does (`workload::chains`); false: one serial stream each.
    #[serde(default = "yes")]
    pub split_chains: bool,
}

fn one() -> f64 {
    1.0
}

fn yes() -> bool {
    true
}

/// Why a replay stopped sending: what cut it, if anything (recorded with
/// the point, `sessions.stopped_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The point's measured seconds (`duration_s`, `--duration`) ran out.
    Duration,
    /// The point's measured-request budget (`num_prompts`, `--num-prompts`)
    /// was sent.
    MaxRequests,
    /// Every trace was played (one pass, or the end of a timed trace).
    Exhausted,
}
