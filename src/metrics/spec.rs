//! Speculative-decoding figures of a point, from vLLM's own per-step
//! counters (`SpecDecodingStats` in vllm/v1/spec_decode/metrics.py, read by
//! the shim's stat logger in every `step()`).
//!
//! Definitions, as vLLM's `SpecDecodingLogging.log` and `vllm bench serve`
//! (vllm/benchmarks/serve.py, the `spec_decode_*` result keys) compute them
//! over a window of steps:
//! * acceptance rate = accepted tokens / draft tokens (a fraction here; bench
//!   serve's `spec_decode_acceptance_rate` is the same in percent),
//! * mean acceptance length = 1 + accepted tokens / drafts (the 1 is the
//!   bonus token the target model samples after the accepted ones),
//! * per-position acceptance rate i = drafts whose token i was accepted / drafts.
//!
//! A draft is one request's proposal in one step (vLLM counts none when the
//! proposer gave it no token, e.g. ngram found no match). The window is the
//! steps of a point's measured requests: warm-ups run in their own loop and
//! their steps are never summarised.

use serde::{Deserialize, Serialize};

use crate::protocol::SpecCounts;

/// The speculative-decoding figures of one point. Present in a point result
/// only when the engine speculates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecDecodeSummary {
    /// Draft tokens per step the engine was configured with (k), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_speculative_tokens: Option<u32>,
    #[serde(flatten)]
    pub counts: SpecCounts,
    /// accepted_tokens / draft_tokens, 0..1; absent when nothing was drafted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_rate: Option<f64>,
    /// 1 + accepted_tokens / drafts, tokens per draft step, in 1..=1+k;
    /// absent when nothing was drafted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_length: Option<f64>,
    /// accepted_per_pos[i] / drafts, 0..1 each (empty when nothing was drafted).
    pub per_position_acceptance_rates: Vec<f64>,
    /// vLLM's own running totals (its Prometheus counters, what `vllm bench
    /// serve` reads) taken before and after the point: their difference, and
    /// whether it equals the per-step sum above. Absent when vLLM keeps none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_counters: Option<SpecCounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vllm_counters_agree: Option<bool>,
}

/// Summarises the per-step counters of a point (`None` per step: the engine
/// reported none). `None` when no step reported any: the engine does not
/// speculate, and the result carries no speculative field at all.
pub fn summarize_spec<'a>(
    steps: impl IntoIterator<Item = Option<&'a SpecCounts>>,
    num_speculative_tokens: Option<u32>,
    vllm_counters: Option<SpecCounts>,
) -> Option<SpecDecodeSummary> {
    let mut total: Option<SpecCounts> = None;
    for s in steps.into_iter().flatten() {
        total.get_or_insert_with(SpecCounts::default).add(s);
    }
    let counts = total?;
    let drafts = counts.drafts as f64;
    let acceptance_rate =
        (counts.draft_tokens > 0).then(|| counts.accepted_tokens as f64 / counts.draft_tokens as f64);
    let acceptance_length = (counts.drafts > 0).then(|| 1.0 + counts.accepted_tokens as f64 / drafts);
    let per_position_acceptance_rates = if counts.drafts > 0 {
        counts.accepted_per_pos.iter().map(|&a| a as f64 / drafts).collect()
    } else {
        Vec::new()
    };
    let vllm_counters_agree = vllm_counters.as_ref().map(|v| {
        // vLLM's per-position list is as long as k even where the tail is 0.
        let trim = |p: &[u64]| p.iter().rposition(|&x| x > 0).map_or(0, |i| i + 1);
        v.drafts == counts.drafts
            && v.draft_tokens == counts.draft_tokens
            && v.accepted_tokens == counts.accepted_tokens
            && v.accepted_per_pos[..trim(&v.accepted_per_pos)]
                == counts.accepted_per_pos[..trim(&counts.accepted_per_pos)]
    });
    Some(SpecDecodeSummary {
        num_speculative_tokens,
        counts,
        acceptance_rate,
        acceptance_length,
        per_position_acceptance_rates,
        vllm_counters,
        vllm_counters_agree,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(drafts: u64, draft_tokens: u64, accepted: u64, per_pos: &[u64]) -> SpecCounts {
        SpecCounts { drafts, draft_tokens, accepted_tokens: accepted, accepted_per_pos: per_pos.to_vec() }
    }

    #[test]
    fn no_speculation_no_summary() {
        assert_eq!(summarize_spec([None, None], None, None), None);
        assert_eq!(summarize_spec(std::iter::empty(), None, None), None);
    }

    #[test]
    fn zero_drafts_has_counts_but_no_rates() {
        // An ngram engine whose prompts never matched: every step reports zeros.
        let z = c(0, 0, 0, &[0, 0, 0]);
        let s = summarize_spec([Some(&z), Some(&z)], Some(3), None).unwrap();
        assert_eq!((s.counts.drafts, s.counts.draft_tokens), (0, 0));
        assert_eq!((s.acceptance_rate, s.acceptance_length), (None, None));
        assert!(s.per_position_acceptance_rates.is_empty());
        let json = serde_json::to_value(&s).unwrap();
        assert!(json.get("acceptance_rate").is_none(), "absent, not zero: {json}");
        assert_eq!(json["drafts"], 0);
    }

    #[test]
    fn all_accepted() {
        // Two requests, k = 3, two steps, every draft token accepted.
        let step = c(2, 6, 6, &[2, 2, 2]);
        let s = summarize_spec([Some(&step), Some(&step)], Some(3), None).unwrap();
        assert_eq!(s.counts, c(4, 12, 12, &[4, 4, 4]));
        assert_eq!(s.acceptance_rate, Some(1.0));
        assert_eq!(s.acceptance_length, Some(4.0)); // 1 + k
        assert_eq!(s.per_position_acceptance_rates, vec![1.0, 1.0, 1.0]);
    }

    #[test]
    fn per_position_decay() {
        // 4 drafts of 3 tokens: accepted prefixes 3, 2, 1, 0 tokens long.
        let steps = [c(1, 3, 3, &[1, 1, 1]), c(1, 3, 2, &[1, 1, 0]), c(1, 3, 1, &[1, 0, 0]), c(1, 3, 0, &[0, 0, 0])];
        let s = summarize_spec(steps.iter().map(Some), Some(3), None).unwrap();
        assert_eq!(s.acceptance_rate, Some(6.0 / 12.0));
        assert_eq!(s.acceptance_length, Some(1.0 + 6.0 / 4.0));
        assert_eq!(s.per_position_acceptance_rates, vec![0.75, 0.5, 0.25]);
        // Mean length - 1 is the sum of the per-position rates (each accepted
        // token is counted at exactly one position).
        let sum: f64 = s.per_position_acceptance_rates.iter().sum();
        assert!((s.acceptance_length.unwrap() - 1.0 - sum).abs() < 1e-12);
    }

    #[test]
    fn point_boundary_in_the_middle_of_a_request() {
        // One request's steps split between a warm-up window and the point:
        // only the point's steps count, and the two windows add up to the whole.
        let steps = [c(1, 3, 2, &[1, 1, 0]), c(1, 3, 3, &[1, 1, 1]), c(1, 2, 0, &[0, 0, 0]), c(1, 3, 1, &[1, 0, 0])];
        let (warm, point) = steps.split_at(2);
        let p = summarize_spec(point.iter().map(Some), Some(3), None).unwrap();
        assert_eq!(p.counts, c(2, 5, 1, &[1, 0, 0]));
        assert_eq!(p.acceptance_rate, Some(0.2));
        assert_eq!(p.acceptance_length, Some(1.5));
        let w = summarize_spec(warm.iter().map(Some), Some(3), None).unwrap();
        let mut both = w.counts.clone();
        both.add(&p.counts);
        assert_eq!(both, summarize_spec(steps.iter().map(Some), Some(3), None).unwrap().counts);
    }

    #[test]
    fn cross_check_against_vllm_counters() {
        let before = c(10, 30, 12, &[6, 4, 2]);
        let after = c(12, 36, 15, &[8, 5, 2]);
        let step = c(2, 6, 3, &[2, 1]);
        let s = summarize_spec([Some(&step)], Some(3), Some(after.since(&before))).unwrap();
        assert_eq!(s.vllm_counters, Some(c(2, 6, 3, &[2, 1, 0])));
        assert_eq!(s.vllm_counters_agree, Some(true));
        let off = summarize_spec([Some(&c(2, 6, 2, &[2]))], Some(3), Some(after.since(&before))).unwrap();
        assert_eq!(off.vllm_counters_agree, Some(false));
    }
}
