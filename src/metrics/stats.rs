//! Order statistics with numpy's conventions, so that figures match
//! `vllm bench serve` (which uses `np.mean`, `np.std`, `np.median`,
//! `np.percentile` with linear interpolation, and `x or 0` for empty lists).
//! The one implementation of mean, deviation, median and percentiles for
//! every figure: request latencies, engine steps, telemetry readings, the
//! bootstrap of `ab`.

use serde::{Deserialize, Serialize};

/// Mean / median / standard deviation / chosen percentiles of one metric.
/// Values keep the unit of the input (the callers use ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub mean: f64,
    pub median: f64,
    /// Population standard deviation (`np.std`, ddof = 0).
    pub std: f64,
    /// (percentile in 0..=100, value)
    pub percentiles: Vec<(f64, f64)>,
}

impl Summary {
    /// Summarises `values`; an empty slice gives all zeros, as vLLM's
    /// `np.mean(x or 0)` does.
    pub fn of(values: &[f64], percentiles: &[f64]) -> Summary {
        let sorted = sorted(values);
        Summary {
            mean: mean(&sorted),
            median: percentile_sorted(&sorted, 50.0),
            std: std_dev(&sorted),
            percentiles: percentiles.iter().map(|&p| (p, percentile_sorted(&sorted, p))).collect(),
        }
    }
}

/// Arithmetic mean; 0 for an empty slice.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Sample variance (ddof = 1, n - 1 denominator, as `np.var(x, ddof=1)`);
/// 0 for fewer than two values.
pub fn sample_variance(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = mean(values);
    values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (values.len() - 1) as f64
}

/// Standard error of the mean: the sample standard deviation (ddof = 1) /
/// sqrt(n), as lm-eval's `mean_stderr` (lm_eval/api/metrics.py); 0 for
/// fewer than two values.
pub fn standard_error(values: &[f64]) -> f64 {
    (sample_variance(values) / values.len().max(1) as f64).sqrt()
}

/// Population standard deviation (ddof = 0, as `np.std`); 0 for an empty slice.
pub fn std_dev(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let m = mean(values);
    (values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / values.len() as f64).sqrt()
}

/// `values` in ascending order (NaN last, by `f64::total_cmp`).
pub fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// Median (`np.median`) of `values` in any order; 0 when empty.
pub fn median(values: &[f64]) -> f64 {
    percentile_sorted(&sorted(values), 50.0)
}

/// [`median`], reordering `v` instead of sorting a copy (O(n) selection,
/// for the bootstrap's many resamples); 0 when empty.
pub fn median_in_place(v: &mut [f64]) -> f64 {
    let n = v.len();
    match n {
        0 => 0.0,
        1 => v[0],
        _ => {
            let hi = n / 2;
            let (_, &mut upper, _) = v.select_nth_unstable_by(hi, f64::total_cmp);
            if n % 2 == 1 {
                upper
            } else {
                // The largest of the lower half is the other middle value.
                let lower = v[..hi].iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (lower + upper) / 2.0
            }
        }
    }
}

/// Percentile `p` (0..=100) of an ascending slice with linear interpolation
/// between closest ranks (numpy's default `method="linear"`); 0 when empty.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = (p / 100.0).clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_linear_percentiles() {
        // np.percentile([1, 2, 3, 4], [50, 90, 99]) == [2.5, 3.7, 3.97]
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&s, 50.0), 2.5);
        assert!((percentile_sorted(&s, 90.0) - 3.7).abs() < 1e-12);
        assert!((percentile_sorted(&s, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(percentile_sorted(&s, 0.0), 1.0);
        assert_eq!(percentile_sorted(&s, 100.0), 4.0);
    }

    #[test]
    fn summary_matches_numpy() {
        // np.std([2, 4, 4, 4, 5, 5, 7, 9]) == 2.0
        let s = Summary::of(&[9.0, 2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0], &[99.0]);
        assert_eq!(s.mean, 5.0);
        assert_eq!(s.std, 2.0);
        assert_eq!(s.median, 4.5);
        assert_eq!(s.percentiles.len(), 1);
        assert!((s.percentiles[0].1 - 8.86).abs() < 1e-12);
    }

    #[test]
    fn empty_is_zero_like_vllm() {
        let s = Summary::of(&[], &[99.0]);
        assert_eq!((s.mean, s.median, s.std, s.percentiles[0]), (0.0, 0.0, 0.0, (99.0, 0.0)));
        assert_eq!((median(&[]), median_in_place(&mut []), sample_variance(&[1.0])), (0.0, 0.0, 0.0));
    }

    #[test]
    fn medians_agree_whether_sorted_or_selected() {
        // np.median([4, 1, 3, 2]) == 2.5, np.median([5, 1, 3]) == 3.0
        for (v, m) in [(vec![4.0, 1.0, 3.0, 2.0], 2.5), (vec![5.0, 1.0, 3.0], 3.0), (vec![7.0], 7.0)] {
            assert_eq!(median(&v), m);
            assert_eq!(median_in_place(&mut v.clone()), m);
        }
        // np.var([2, 4, 4, 4, 5, 5, 7, 9], ddof=1) == 32 / 7
        assert!((sample_variance(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) - 32.0 / 7.0).abs() < 1e-12);
    }
}
