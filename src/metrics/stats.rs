//! Order statistics with numpy's conventions, so that figures match
//! `vllm bench serve` (which uses `np.mean`, `np.std`, `np.median`,
//! `np.percentile` with linear interpolation, and `x or 0` for empty lists).

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
        let mut sorted: Vec<f64> = values.to_vec();
        sorted.sort_by(f64::total_cmp);
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

/// Population standard deviation (ddof = 0, as `np.std`); 0 for an empty slice.
pub fn std_dev(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let m = mean(values);
    (values.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / values.len() as f64).sqrt()
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
    }
}
