//! Engine step statistics: one record per `step()` (the optional step trace)
//! and their per-point summary.

use serde::{Deserialize, Serialize};

use super::stats::{mean, percentile_sorted, sorted};
use crate::protocol::StepRecord;

/// Per-point summary of the engine's steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    pub steps: u64,
    /// `step()` wall time: mean / median / p99, ms.
    pub mean_step_ms: f64,
    pub median_step_ms: f64,
    pub p99_step_ms: f64,
    /// Steps with decode work and no prefill work, and their wall time, ms.
    pub decode_only_steps: u64,
    pub mean_decode_step_ms: f64,
    pub median_decode_step_ms: f64,
    /// Mean requests scheduled per step (prefill + decode) over steps that scheduled any.
    pub mean_batch_size: f64,
    pub max_running: u32,
    /// Highest KV-cache usage over the steps, 0..1; absent when no step reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_kv_cache_usage: Option<f64>,
    pub preemptions: u64,
    /// Tokens scheduled over the point; absent when the scheduler is not reachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tokens: Option<u64>,
    /// prefix cache hits / queries over the point (0 when there were no queries).
    pub prefix_cache_hit_rate: f64,
}

/// Summarises a point's steps.
pub fn summarize_steps(steps: &[StepRecord]) -> StepSummary {
    let all = sorted(&steps.iter().map(|s| s.dur_ms).collect::<Vec<_>>());
    let decode = sorted(&steps.iter().filter(|s| s.decode_only()).map(|s| s.dur_ms).collect::<Vec<_>>());
    let batches: Vec<f64> = steps
        .iter()
        .filter_map(|s| Some(s.prefill_reqs? + s.decode_reqs?))
        .filter(|&n| n > 0)
        .map(f64::from)
        .collect();
    let sum_opt = |f: fn(&StepRecord) -> Option<u32>| -> Option<u64> {
        steps.iter().map(|s| f(s).map(u64::from)).sum()
    };
    let queries: u64 = steps.iter().map(|s| s.prefix_cache_queries).sum();
    let hits: u64 = steps.iter().map(|s| s.prefix_cache_hits).sum();
    StepSummary {
        steps: steps.len() as u64,
        mean_step_ms: mean(&all),
        median_step_ms: percentile_sorted(&all, 50.0),
        p99_step_ms: percentile_sorted(&all, 99.0),
        decode_only_steps: decode.len() as u64,
        mean_decode_step_ms: mean(&decode),
        median_decode_step_ms: percentile_sorted(&decode, 50.0),
        mean_batch_size: mean(&batches),
        max_running: steps.iter().map(|s| s.running).max().unwrap_or(0),
        max_kv_cache_usage: steps.iter().filter_map(|s| s.kv_cache_usage).reduce(f64::max),
        preemptions: steps.iter().map(|s| u64::from(s.preempted)).sum(),
        prefill_tokens: if steps.is_empty() { None } else { sum_opt(|s| s.prefill_tokens) },
        decode_tokens: if steps.is_empty() { None } else { sum_opt(|s| s.decode_tokens) },
        prefix_cache_hit_rate: if queries > 0 { hits as f64 / queries as f64 } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::StepStats;

    fn step(dur_ms: f64, prefill: (u32, u32), decode: (u32, u32), kv: f64) -> StepRecord {
        let stats = StepStats {
            prefill: Some(prefill),
            decode: Some(decode),
            running: prefill.0 + decode.0,
            kv_cache_usage: Some(kv),
            prefix_queries: u64::from(prefill.1),
            prefix_hits: u64::from(prefill.1 / 2),
            ..Default::default()
        };
        StepRecord::new(0.0, dur_ms / 1000.0, &stats, decode.0 + prefill.0, 0)
    }

    #[test]
    fn summary_of_hand_built_steps() {
        let steps = [
            step(30.0, (2, 100), (0, 0), 0.1),
            step(10.0, (0, 0), (2, 2), 0.2),
            step(12.0, (0, 0), (2, 2), 0.3),
            step(20.0, (1, 50), (1, 1), 0.25),
        ];
        let s = summarize_steps(&steps);
        assert_eq!(s.steps, 4);
        assert!((s.mean_step_ms - 18.0).abs() < 1e-9);
        assert!((s.median_step_ms - 16.0).abs() < 1e-9);
        assert_eq!(s.decode_only_steps, 2);
        assert!((s.mean_decode_step_ms - 11.0).abs() < 1e-9);
        assert_eq!(s.mean_batch_size, 2.0);
        assert_eq!(s.max_kv_cache_usage, Some(0.3));
        assert_eq!(s.prefill_tokens, Some(150));
        assert_eq!(s.decode_tokens, Some(5));
        assert!((s.prefix_cache_hit_rate - 75.0 / 150.0).abs() < 1e-12);
    }

    #[test]
    fn unknown_scheduler_counts_stay_unknown() {
        let stats = StepStats { running: 3, ..Default::default() };
        let s = summarize_steps(&[StepRecord::new(0.0, 0.01, &stats, 3, 0)]);
        assert_eq!((s.prefill_tokens, s.decode_tokens, s.decode_only_steps), (None, None, 0));
        assert_eq!(s.max_running, 3);
    }
}
