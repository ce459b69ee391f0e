//! What the harness records per request ([`RequestRecord`], its timeline on
//! the harness's monotonic clock), per engine step ([`StepRecord`]), and, for
//! session replays, each request's place in its session ([`TurnInfo`]).

use serde::{Deserialize, Serialize};

use super::step::{SpecCounts, StepStats};

/// A request as the closed loop saw it. Times are seconds since the start of
/// the point. In-process, a token "arrives" when the `step()` that produced it
/// returns to Rust; all tokens of one step arrive together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Prompt length, tokens.
    pub input_tokens: u32,
    /// Tokens generated.
    pub output_tokens: u32,
    /// When the request was handed to the engine (`add_request` called), s;
    /// for a request the admission budget held back, the start of the gap
    /// in which it was first due (see `held_s`).
    pub send_s: f64,
    /// How long the admission budget held the request back before
    /// `add_request`, s (0: it went in the gap it became due). Counted in
    /// TTFT and E2EL, as a server's queue would; vLLM's own clock starts
    /// after it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_s: f64,
    /// When the step that produced the first token returned, s.
    pub first_token_s: Option<f64>,
    /// When the step that produced the last token returned, s.
    pub last_token_s: Option<f64>,
    /// Gaps between successive token arrivals, s (one per step that delivered
    /// tokens after the first, as bench serve records one per stream chunk).
    pub itl_s: Vec<f64>,
    /// Tokens delivered with each gap of `itl_s` (parallel to it); empty
    /// while every chunk carried one token, which is the common case without
    /// speculative decoding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunk_tokens: Vec<u32>,
    /// Set when the request did not finish normally.
    pub error: Option<String>,
    /// Prompt tokens the engine served from its prefix cache (vLLM's
    /// `num_cached_tokens`); absent where the engine does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u32>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The error of a request a stopped loop never sent (Ctrl-C came first):
/// it is counted apart, neither completed nor failed.
pub const NOT_SENT: &str = "not sent: interrupted";

impl RequestRecord {
    /// Never sent: the loop stopped before its turn ([`NOT_SENT`]).
    pub fn not_sent(&self) -> bool {
        self.error.as_deref() == Some(NOT_SENT)
    }

    /// Succeeded: finished with at least one token and no error.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.last_token_s.is_some()
    }

    /// Time to first token, s.
    pub fn ttft_s(&self) -> Option<f64> {
        self.first_token_s.map(|t| t - self.send_s)
    }

    /// End-to-end latency, s.
    pub fn e2el_s(&self) -> Option<f64> {
        self.last_token_s.map(|t| t - self.send_s)
    }

    /// Time per output token after the first, s: (E2EL - TTFT) / (output_len - 1),
    /// only for output_len > 1 (bench serve's definition).
    pub fn tpot_s(&self) -> Option<f64> {
        match (self.ttft_s(), self.e2el_s()) {
            (Some(ttft), Some(e2el)) if self.output_tokens > 1 => {
                Some((e2el - ttft) / f64::from(self.output_tokens - 1))
            }
            _ => None,
        }
    }

    /// ITL per token, s: each chunk's gap divided evenly over the chunk's
    /// tokens (a 3-token chunk 30 ms after the previous one gives 10, 10, 10).
    /// Tokens of the first chunk beyond the first token have no gap (they
    /// are part of TTFT). Without multi-token chunks this equals `itl_s`.
    pub fn itl_per_token_s(&self) -> impl Iterator<Item = f64> + '_ {
        self.itl_s.iter().enumerate().flat_map(move |(i, &gap)| {
            let n = self.chunk_tokens.get(i).copied().unwrap_or(1).max(1);
            std::iter::repeat_n(gap / f64::from(n), n as usize)
        })
    }

    /// Records tokens arriving at `now_s`.
    pub fn on_tokens(&mut self, now_s: f64, new_tokens: u32) {
        if new_tokens == 0 {
            return;
        }
        match self.last_token_s {
            None => self.first_token_s = Some(now_s),
            Some(last) => {
                self.itl_s.push(now_s - last);
                if new_tokens > 1 && self.chunk_tokens.is_empty() {
                    self.chunk_tokens = vec![1; self.itl_s.len() - 1];
                }
                if !self.chunk_tokens.is_empty() {
                    self.chunk_tokens.push(new_tokens);
                }
            }
        }
        self.last_token_s = Some(now_s);
        self.output_tokens += new_tokens;
    }
}

/// Which part of a session replay sent a request (AgentX's
/// `benchmark_phase`: only `measured` requests count in the figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayPhase {
    /// Re-sends, with its full prefix, the last turn before the mid-trace
    /// start of a stream that is live there (fills the prefix cache).
    Primer,
    /// One of a lane's warm-up requests after its primers (think times
    /// removed).
    Warmup,
    /// Counted in the figures.
    Measured,
}

/// A replayed request's place in its session: one per request record, in
/// send order (the session replay's `turns()`). The orchestrator
/// groups by `session` for per-session figures and sums `hit_blocks` /
/// `blocks` for the theoretical prefix-cache hit rate (AgentX's
/// `theoretical_prefix_cache_hit`: sum of hit blocks over sum of blocks,
/// notes/agentx.md 4e).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnInfo {
    /// Index into the replay's trace names (`SessionSet::names`).
    pub trace: u32,
    /// Which session tree this is, 0.. in the order the replay started them
    /// (a trace played twice, by two lanes or after recycling, is two).
    pub session: u32,
    /// The lane (0..concurrency) that holds the tree; 0 for timed traces.
    pub lane: u32,
    /// 0: the root stream; k > 0: the trace's k-th subagent stream.
    pub stream: u32,
    /// The turn's index within its stream (recorded order).
    pub turn: u32,
    pub phase: ReplayPhase,
    /// Tokens asked for (`max_tokens`, with `ignore_eos`).
    pub max_tokens: u32,
    /// The recorded request's prompt blocks: its hash ids (AgentX, timed
    /// traces), or its prompt tokens (conversations: one block per token).
    pub blocks: u32,
    /// The leading run of those blocks an infinite prefix cache would
    /// already hold (hash ids seen earlier in the trace in recorded order;
    /// conversations: the token prefix shared with the previous turn).
    pub hit_blocks: u32,
    /// `hit_blocks` in prompt tokens (full blocks within the prompt only).
    pub theoretical_hit_tokens: u32,
}

impl TurnInfo {
    /// A subagent's request (not the root stream's).
    pub fn is_subagent(&self) -> bool {
        self.stream > 0
    }
}

/// One engine step, as the harness saw it (a line of the `--step-trace` file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Step start, s since the point started (the clock of the request records).
    pub t_s: f64,
    /// Wall time of the `step()` call on the harness's clock, ms.
    pub dur_ms: f64,
    /// Requests / tokens scheduled in the prefill (context) phase; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_reqs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tokens: Option<u32>,
    /// Requests / tokens scheduled in the decode phase; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_reqs: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tokens: Option<u32>,
    /// Requests running / waiting in the scheduler.
    pub running: u32,
    pub waiting: u32,
    /// KV-cache usage, 0..1; null when this vLLM does not report it.
    pub kv_cache_usage: Option<f64>,
    /// Prompt tokens looked up in / found in the prefix cache this step
    /// (requests admitted for the first time).
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    /// The same for a KV connector's cache (CPU offload); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector_prefix_cache_queries: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector_prefix_cache_hits: Option<u64>,
    pub preempted: u32,
    /// Output tokens this step delivered to the harness.
    pub output_tokens: u32,
    /// Requests that finished in this step.
    pub finished: u32,
    /// vLLM's speculative-decoding counters of this step (drafts, draft
    /// tokens, accepted tokens, accepted per position); absent when the
    /// engine does not speculate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<SpecCounts>,
}

impl StepRecord {
    /// Builds a record from the engine's step statistics.
    pub fn new(t_s: f64, dur_s: f64, stats: &StepStats, output_tokens: u32, finished: u32) -> Self {
        StepRecord {
            t_s,
            dur_ms: dur_s * 1000.0,
            prefill_reqs: stats.prefill.map(|p| p.0),
            prefill_tokens: stats.prefill.map(|p| p.1),
            decode_reqs: stats.decode.map(|d| d.0),
            decode_tokens: stats.decode.map(|d| d.1),
            running: stats.running,
            waiting: stats.waiting,
            kv_cache_usage: stats.kv_cache_usage,
            prefix_cache_queries: stats.prefix_queries,
            prefix_cache_hits: stats.prefix_hits,
            connector_prefix_cache_queries: stats.connector.map(|c| c.0),
            connector_prefix_cache_hits: stats.connector.map(|c| c.1),
            preempted: stats.preempted,
            output_tokens,
            finished,
            spec: None,
        }
    }

    /// A step that only decoded (no prefill work).
    pub fn decode_only(&self) -> bool {
        self.prefill_tokens == Some(0) && self.decode_tokens.is_some_and(|d| d > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_figures() {
        let mut r = RequestRecord { input_tokens: 8, send_s: 1.0, ..Default::default() };
        r.on_tokens(1.5, 1);
        r.on_tokens(1.6, 1);
        r.on_tokens(1.6, 0); // a step that gave this request nothing
        r.on_tokens(1.8, 2);
        assert_eq!(r.output_tokens, 4);
        assert_eq!(r.ttft_s(), Some(0.5));
        assert!((r.e2el_s().unwrap() - 0.8).abs() < 1e-12);
        // (0.8 - 0.5) / (4 - 1)
        assert!((r.tpot_s().unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(r.itl_s.len(), 2);
        assert!((r.itl_s[0] - 0.1).abs() < 1e-12 && (r.itl_s[1] - 0.2).abs() < 1e-12);
        assert!(r.ok());
    }

    #[test]
    fn multi_token_chunks_give_one_gap_per_chunk_and_split_per_token() {
        // Speculative decoding: 1 token at 0.1 s, then chunks of 1, 3, 2 tokens.
        let mut r = RequestRecord::default();
        r.on_tokens(0.1, 1);
        r.on_tokens(0.2, 1);
        r.on_tokens(0.5, 3);
        r.on_tokens(0.6, 2);
        assert_eq!(r.output_tokens, 7);
        assert_eq!(r.itl_s.len(), 3, "one gap per chunk, as bench serve counts stream chunks");
        assert_eq!(r.chunk_tokens, vec![1, 3, 2]);
        let per_token: Vec<f64> = r.itl_per_token_s().collect();
        let want = [0.1, 0.1, 0.1, 0.1, 0.05, 0.05];
        assert_eq!(per_token.len(), want.len());
        for (a, b) in per_token.iter().zip(want) {
            assert!((a - b).abs() < 1e-9, "{per_token:?}");
        }
        // TTFT is the first chunk; TPOT divides by tokens, not chunks.
        assert_eq!(r.ttft_s(), Some(0.1));
        assert!((r.tpot_s().unwrap() - 0.5 / 6.0).abs() < 1e-12);
        // Without multi-token chunks nothing extra is kept.
        let mut one = RequestRecord::default();
        one.on_tokens(0.1, 1);
        one.on_tokens(0.2, 1);
        assert!(one.chunk_tokens.is_empty());
        assert_eq!(one.itl_per_token_s().collect::<Vec<_>>(), one.itl_s);
    }

    #[test]
    fn single_token_has_no_tpot() {
        let mut r = RequestRecord::default();
        r.on_tokens(0.25, 1);
        assert_eq!(r.tpot_s(), None);
        assert_eq!(r.ttft_s(), r.e2el_s());
    }
}
