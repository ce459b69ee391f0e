//! Prefix-cache figures of a point, from the engine itself:
//!
//! * per request, the prompt tokens vLLM served from its cache
//!   (`RequestOutput.num_cached_tokens`: local prefix cache plus any KV
//!   connector such as CPU offload; vllm/v1/engine/output_processor.py),
//!   summed into the point's cached / computed prompt tokens and hit rate;
//! * per step, the scheduler's own counters (`SchedulerStats.prefix_cache_stats`
//!   queries/hits, tokens, and `connector_prefix_cache_stats` for a KV
//!   connector; vllm/v1/metrics/stats.py), the figures vLLM's
//!   `vllm:prefix_cache_hits` / `_queries` counters add up;
//! * for trace workloads, the theoretical hit rate of an infinite cache from
//!   the trace's hash ids, in InferenceX's units (its agentic aggregation
//!   `utils/agentic`, AIPerf's `theoretical_prefix_cache`): per request the
//!   leading run of hash-id blocks seen before in its trace, summed, over the
//!   requests' blocks summed (a partial last block counts as one block):
//!   `sum(hit_blocks) / sum(blocks)`; and the same in prompt tokens,
//!   `sum(theoretical_hit_tokens) / sum(prompt tokens)`, comparable with
//!   the engine's own `hit_rate` (its prompts include the cache-bust marker
//!   and only whole blocks within the prompt count as hit tokens, so it is
//!   lower than the block figure);
//! * a cross-check: the per-request sum against the scheduler's hits over
//!   the same requests. vLLM counts both once per request, at its first
//!   admission (re-admissions after a preemption go to separate counters), so
//!   they are equal when every request of the loop finished.

use serde::{Deserialize, Serialize};

use crate::protocol::{RequestRecord, StepRecord, TurnInfo};

/// Token counters of one cache over some steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheCounters {
    /// Prompt tokens looked up, tokens.
    pub queries: u64,
    /// Of them found in the cache, tokens.
    pub hits: u64,
    /// hits / queries; absent when nothing was looked up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit_rate: Option<f64>,
}

impl CacheCounters {
    fn new(queries: u64, hits: u64) -> CacheCounters {
        CacheCounters { queries, hits, hit_rate: (queries > 0).then(|| hits as f64 / queries as f64) }
    }
}

/// The per-request sum against vLLM's scheduler counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheCrossCheck {
    /// Sum of `num_cached_tokens` over the loop's finished requests, tokens.
    pub requests_cached_tokens: u64,
    /// Scheduler hits (local + connector) over all the loop's steps, tokens.
    pub scheduler_hits: u64,
    /// Equal, or (with requests that never finished, whose hits only the
    /// scheduler saw) the per-request sum is not larger.
    pub agree: bool,
    /// What was compared, or why they may differ.
    pub note: String,
}

/// Prefix-cache figures of one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefixCacheSummary {
    /// The cache was emptied before the point (`true`); `false`: the recipe
    /// opted out or this vLLM has no reset (then an earlier point's entries
    /// may have helped this one).
    pub reset_before_point: bool,
    /// Prompt tokens of the point's completed measured requests.
    pub prompt_tokens: u64,
    /// Of them served from the cache (vLLM's `num_cached_tokens`), and the
    /// rest, computed; absent where the engine does not report it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computed_tokens: Option<u64>,
    /// cached_tokens / prompt_tokens: the hit rate the requests saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit_rate: Option<f64>,
    /// The scheduler's local prefix cache over the measured phase's steps.
    pub scheduler: CacheCounters,
    /// The KV connector's cache (CPU offload); absent without a connector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<CacheCounters>,
    /// The hit rate of an infinite cache from the trace's hash ids, in
    /// InferenceX's units: hit blocks / blocks (trace workloads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theoretical_hit_rate: Option<f64>,
    /// The same in tokens: theoretical hit tokens / prompt tokens (whole
    /// blocks within the prompt; the prompt counts the cache-bust marker),
    /// the figure comparable with `hit_rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theoretical_token_hit_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crosscheck: Option<CacheCrossCheck>,
}

/// What the summary is made of.
pub struct CacheInput<'a> {
    /// Every request of the loop the steps belong to (warm-ups included
    /// when they ran in the same loop), in send order.
    pub records: &'a [RequestRecord],
    /// Which of `records` are measured (`None`: all).
    pub measured: Option<&'a [bool]>,
    /// The loop's steps (the cross-check's window) ...
    pub steps: &'a [StepRecord],
    /// ... and those of the measured phase (the counters' window): a replay
    /// runs its warm-ups in the same loop, before the measured phase.
    pub measured_steps: &'a [StepRecord],
    /// Per record, its place in the trace with its blocks, hit blocks and
    /// hit tokens of an infinite cache (trace workloads), parallel to `records`.
    pub turns: Option<&'a [TurnInfo]>,
    pub reset_before_point: bool,
}

/// Summarises a point's prefix cache.
pub fn summarize_prefix_cache(input: &CacheInput<'_>) -> PrefixCacheSummary {
    let is_measured = |i: usize| input.measured.is_none_or(|m| m.get(i).copied().unwrap_or(false));
    let done: Vec<(usize, &RequestRecord)> =
        input.records.iter().enumerate().filter(|(i, r)| r.ok() && is_measured(*i)).collect();
    let prompt_tokens: u64 = done.iter().map(|(_, r)| u64::from(r.input_tokens)).sum();
    let reported = !done.is_empty() && done.iter().all(|(_, r)| r.cached_tokens.is_some());
    let cached_tokens = reported.then(|| done.iter().map(|(_, r)| u64::from(r.cached_tokens.unwrap_or(0))).sum::<u64>());
    let ratio = |n: u64| (prompt_tokens > 0).then(|| n as f64 / prompt_tokens as f64);
    let counters = |steps: &[StepRecord]| {
        let sum = |f: fn(&StepRecord) -> u64| steps.iter().map(f).sum::<u64>();
        let local = CacheCounters::new(sum(|s| s.prefix_cache_queries), sum(|s| s.prefix_cache_hits));
        let connector = steps.iter().any(|s| s.connector_prefix_cache_queries.is_some()).then(|| {
            CacheCounters::new(
                sum(|s| s.connector_prefix_cache_queries.unwrap_or(0)),
                sum(|s| s.connector_prefix_cache_hits.unwrap_or(0)),
            )
        });
        (local, connector)
    };
    let (scheduler, connector) = counters(input.measured_steps);
    let turn_sum = |f: fn(&TurnInfo) -> u32| -> Option<u64> {
        let turns = input.turns?;
        Some(done.iter().filter_map(|&(i, _)| turns.get(i)).map(|t| u64::from(f(t))).sum())
    };
    let theoretical_hit_rate = match (turn_sum(|t| t.hit_blocks), turn_sum(|t| t.blocks)) {
        (Some(hit), Some(blocks)) if blocks > 0 => Some(hit as f64 / blocks as f64),
        _ => None,
    };
    let theoretical_token_hit_rate = turn_sum(|t| t.theoretical_hit_tokens).and_then(ratio);
    let crosscheck = input.records.iter().any(|r| r.cached_tokens.is_some()).then(|| {
        let ours: u64 = input.records.iter().filter_map(|r| r.cached_tokens).map(u64::from).sum();
        let (local, connector) = counters(input.steps);
        let vllm = local.hits + connector.map_or(0, |c| c.hits);
        let unfinished = input.records.iter().filter(|r| r.cached_tokens.is_none()).count();
        let (agree, note) = if unfinished == 0 {
            (ours == vllm, "every request of the loop: sum of num_cached_tokens against the scheduler's prefix-cache hits (local + connector)".to_string())
        } else {
            (
                ours <= vllm,
                format!("{unfinished} request(s) never finished: their hits are in the scheduler's counters only, so the per-request sum may be smaller"),
            )
        };
        CacheCrossCheck { requests_cached_tokens: ours, scheduler_hits: vllm, agree, note }
    });
    PrefixCacheSummary {
        reset_before_point: input.reset_before_point,
        prompt_tokens,
        cached_tokens,
        computed_tokens: cached_tokens.map(|c| prompt_tokens.saturating_sub(c)),
        hit_rate: cached_tokens.and_then(ratio),
        scheduler,
        connector,
        theoretical_hit_rate,
        theoretical_token_hit_rate,
        crosscheck,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(input: u32, cached: Option<u32>) -> RequestRecord {
        let mut r = RequestRecord { input_tokens: input, cached_tokens: cached, ..Default::default() };
        r.on_tokens(0.1, 2);
        r
    }

    fn turn(blocks: u32, hit_blocks: u32, theoretical_hit_tokens: u32) -> TurnInfo {
        TurnInfo {
            trace: 0,
            session: 0,
            lane: 0,
            stream: 0,
            turn: 0,
            phase: crate::protocol::ReplayPhase::Measured,
            max_tokens: 1,
            blocks,
            hit_blocks,
            theoretical_hit_tokens,
        }
    }

    fn step(q: u64, h: u64, conn: Option<(u64, u64)>) -> StepRecord {
        StepRecord {
            prefix_cache_queries: q,
            prefix_cache_hits: h,
            connector_prefix_cache_queries: conn.map(|c| c.0),
            connector_prefix_cache_hits: conn.map(|c| c.1),
            ..Default::default()
        }
    }

    #[test]
    fn sums_rates_and_cross_check() {
        let records = [request(100, Some(0)), request(100, Some(64)), request(50, Some(32))];
        let steps = [step(100, 0, None), step(150, 96, None)];
        let s = summarize_prefix_cache(&CacheInput {
            records: &records,
            measured: None,
            steps: &steps,
            measured_steps: &steps,
            turns: Some(&[turn(2, 0, 0), turn(2, 1, 64), turn(1, 1, 48)]),
            reset_before_point: true,
        });
        assert_eq!((s.prompt_tokens, s.cached_tokens, s.computed_tokens), (250, Some(96), Some(154)));
        assert_eq!(s.hit_rate, Some(96.0 / 250.0));
        assert_eq!(s.scheduler, CacheCounters { queries: 250, hits: 96, hit_rate: Some(96.0 / 250.0) });
        assert_eq!(s.connector, None, "no connector, no connector figures");
        // InferenceX's rule: (0 + 1 + 1) hit blocks of (2 + 2 + 1); in tokens 112 of 250.
        assert_eq!((s.theoretical_hit_rate, s.theoretical_token_hit_rate), (Some(2.0 / 5.0), Some(112.0 / 250.0)));
        assert!(s.crosscheck.as_ref().unwrap().agree);
        // A per-request sum the scheduler does not back is a disagreement.
        let wrong = [step(250, 90, None)];
        let s = summarize_prefix_cache(&CacheInput { steps: &wrong, measured_steps: &wrong, ..input(&records) });
        assert!(!s.crosscheck.unwrap().agree);
    }

    fn input(records: &[RequestRecord]) -> CacheInput<'_> {
        CacheInput { records, measured: None, steps: &[], measured_steps: &[], turns: None, reset_before_point: false }
    }

    #[test]
    fn measured_only_connector_and_unreported() {
        let records = [request(100, Some(100)), request(100, Some(64))];
        let steps = [step(200, 64, Some((136, 100)))];
        let later = [step(100, 64, Some((36, 0)))];
        let s = summarize_prefix_cache(&CacheInput { measured: Some(&[false, true]), steps: &steps, measured_steps: &later, ..input(&records) });
        assert_eq!((s.prompt_tokens, s.cached_tokens), (100, Some(64)), "the warm-up is not a measured request");
        assert_eq!((s.scheduler.hits, s.connector.unwrap().hits), (64, 0), "counters of the measured steps only");
        assert!(s.crosscheck.unwrap().agree, "local 64 + connector 100 = 164 over the whole loop");
        // An engine that does not report cached tokens gives no figure, not 0.
        let s = summarize_prefix_cache(&input(&[request(10, None)]));
        assert_eq!((s.cached_tokens, s.hit_rate, s.crosscheck), (None, None, None));
    }
}
