//! Request-rate mode: arrival times as `vllm bench serve --request-rate R
//! --burstiness B` makes them (vllm/benchmarks/serve.py `get_request`).
//!
//! Intervals are gamma-distributed with shape B and scale 1/(R*B) (B = 1 is
//! a Poisson process; B < 1 burstier, B > 1 more uniform), accumulated, then
//! rescaled so that the last arrival is at exactly N/R seconds. B = infinity
//! gives constant intervals 1/R.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};

/// Arrival offsets (s from the start) of `n` requests at `rate` req/s.
///
/// Panics unless `rate > 0` and `burstiness > 0` (the recipe check ensures it).
pub fn arrival_times(n: usize, rate: f64, burstiness: f64, seed: u64) -> Vec<f64> {
    assert!(rate > 0.0 && burstiness > 0.0, "rate and burstiness must be positive");
    let mut delays: Vec<f64> = if burstiness.is_infinite() {
        vec![1.0 / rate; n]
    } else {
        let gamma = Gamma::new(burstiness, 1.0 / (rate * burstiness)).expect("positive parameters");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| gamma.sample(&mut rng)).collect()
    };
    for i in 1..delays.len() {
        delays[i] += delays[i - 1];
    }
    if let Some(&last) = delays.last() {
        if last > 0.0 {
            let scale = (n as f64 / rate) / last;
            delays.iter_mut().for_each(|d| *d *= scale);
        }
    }
    delays
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_at_n_over_rate_and_increases() {
        let a = arrival_times(100, 4.0, 1.0, 7);
        assert_eq!(a.len(), 100);
        assert!((a[99] - 25.0).abs() < 1e-9);
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(a, arrival_times(100, 4.0, 1.0, 7));
    }

    #[test]
    fn constant_when_burstiness_infinite() {
        let a = arrival_times(4, 2.0, f64::INFINITY, 0);
        assert_eq!(a, vec![0.5, 1.0, 1.5, 2.0]);
    }

    #[test]
    fn burstier_means_more_spread_gaps() {
        let cv = |b: f64| {
            let a = arrival_times(5000, 10.0, b, 3);
            let gaps: Vec<f64> = a.windows(2).map(|w| w[1] - w[0]).collect();
            crate::metrics::stats::std_dev(&gaps) / crate::metrics::stats::mean(&gaps)
        };
        // Gamma(k) has coefficient of variation 1/sqrt(k).
        assert!((cv(1.0) - 1.0).abs() < 0.1);
        assert!((cv(4.0) - 0.5).abs() < 0.06);
        assert!(cv(0.25) > 1.5);
    }
}
