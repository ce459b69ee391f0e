//! Statistics of an A/B comparison: a two-level percentile bootstrap of the
//! relative delta candidate / baseline - 1, and McNemar's test on paired
//! per-question correctness.
//!
//! # The bootstrap (what is resampled, and why)
//!
//! Each variant ran the same point in R repeats (the `ab` command interleaves
//! them, so drift hits both). A repeat's figure is computed from its own
//! requests; a variant's figure is the mean of its repeats' figures; the delta
//! is candidate / baseline - 1. One bootstrap replicate draws, for each
//! variant, R repeats with replacement and, inside each drawn repeat, its n
//! requests with replacement, recomputes the repeat figures, their mean and the
//! delta (a two-stage or hierarchical bootstrap: Davison & Hinkley,
//! *Bootstrap Methods and their Application*, 1997, section 3.8). The 95%
//! interval is the 2.5th and 97.5th percentile of the replicate deltas
//! (percentile bootstrap, Efron & Tibshirani 1993 ch. 13; numpy's linear
//! percentile). When both variants have the same number of repeats (more
//! than one), repeat i of the baseline is drawn together with repeat i of the
//! candidate, keeping the pairing that interleaving created.
//!
//! How a repeat's figure is recomputed from resampled requests
//! ([`RepeatData`]):
//!
//! * **Latency medians** (TTFT, TPOT): the median (numpy linear) of the
//!   resampled per-request values.
//! * **Throughput** is one number per repeat (tokens / duration), not a
//!   per-request quantity. Its within-repeat term comes from Little's law:
//!   in a closed loop with `conc` requests always in flight,
//!   duration ≈ Σ e2el / conc, so throughput ≈ conc · Σ tokens / Σ e2el, a
//!   ratio estimator over requests. A replicate scales the *observed*
//!   throughput by how that ratio moves under resampling:
//!   T* = T · (Σ tok* / Σ e2el*) / (Σ tok / Σ e2el). With several repeats the
//!   spread between repeats dominates (resampling repeats); with a single
//!   repeat this request term is all there is, so the interval then covers
//!   request-to-request variation inside that run only, not run-to-run drift
//!   (use 3 or more repeats for that). In request-rate mode throughput is set
//!   by the arrival process, not by latency, so no request term is used
//!   ([`RepeatData::Fixed`]) and a single repeat gives no interval.
//!
//! Resampling at both levels slightly overstates the variance of the mean
//! (the within-repeat variance is counted once more, divided by R·n), which
//! makes the interval a little conservative.
//!
//! # McNemar's test
//!
//! On questions both variants answered, b = baseline right and candidate
//! wrong, c = baseline wrong and candidate right. For b + c < 25 the two-sided
//! exact binomial p-value 2 · P(X <= min(b, c)), X ~ Binomial(b + c, 1/2),
//! capped at 1; otherwise the chi-square statistic with continuity correction
//! (|b - c| - 1)² / (b + c) on 1 degree of freedom. Both are what
//! statsmodels' `mcnemar(table, exact=True)` / `(exact=False,
//! correction=True)` return; the cut at 25 discordant pairs is the usual rule
//! of thumb for when the chi-square approximation is good enough.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::metrics::stats::percentile_sorted;

/// Bootstrap replicates used unless told otherwise.
pub const DEFAULT_RESAMPLES: usize = 2000;
/// Seed of the bootstrap RNG unless told otherwise (ChaCha8, one stream per row and metric).
pub const DEFAULT_SEED: u64 = 0;
/// Coverage of the intervals (two-sided), as a fraction.
pub const CONFIDENCE: f64 = 0.95;
/// McNemar: below this many discordant pairs the exact binomial test is used.
pub const MCNEMAR_EXACT_BELOW: u64 = 25;

/// What one repeat contributes to a figure, and how its figure is recomputed
/// from resampled requests.
#[derive(Debug, Clone, PartialEq)]
pub enum RepeatData {
    /// The figure is the median (numpy linear) of these per-request values
    /// (e.g. TPOT in ms of every completed request).
    Median(Vec<f64>),
    /// The figure is `observed` (e.g. tok/s); a resample scales it by
    /// (Σ num* / Σ den*) / (Σ num / Σ den) over requests (num: tokens of a
    /// request, den: its E2EL in s), the Little's-law ratio estimator.
    Ratio { observed: f64, num: Vec<f64>, den: Vec<f64> },
    /// The figure is `observed` and has no within-repeat resampling.
    Fixed(f64),
}

impl RepeatData {
    /// The repeat's figure on its own requests.
    pub fn observed(&self) -> f64 {
        match self {
            RepeatData::Median(v) => {
                let mut s = v.clone();
                s.sort_by(f64::total_cmp);
                percentile_sorted(&s, 50.0)
            }
            RepeatData::Ratio { observed, .. } | RepeatData::Fixed(observed) => *observed,
        }
    }

    /// Whether resampling requests can move this figure at all.
    fn has_requests(&self) -> bool {
        match self {
            RepeatData::Median(v) => !v.is_empty(),
            RepeatData::Ratio { num, .. } => !num.is_empty(),
            RepeatData::Fixed(_) => false,
        }
    }

    /// The figure on a resample (with replacement) of the requests.
    fn resample(&self, rng: &mut ChaCha8Rng, scratch: &mut Vec<f64>) -> f64 {
        match self {
            RepeatData::Median(v) if !v.is_empty() => {
                scratch.clear();
                scratch.extend((0..v.len()).map(|_| v[rng.random_range(0..v.len())]));
                median_in_place(scratch)
            }
            RepeatData::Ratio { observed, num, den } if !num.is_empty() => {
                let (n0, d0) = (num.iter().sum::<f64>(), den.iter().sum::<f64>());
                let (mut n1, mut d1) = (0.0, 0.0);
                for _ in 0..num.len() {
                    let i = rng.random_range(0..num.len());
                    n1 += num[i];
                    d1 += den[i];
                }
                if d0 <= 0.0 || d1 <= 0.0 || n0 <= 0.0 {
                    *observed
                } else {
                    observed * (n1 / d1) / (n0 / d0)
                }
            }
            other => other.observed(),
        }
    }
}

/// Median with numpy's linear interpolation, reordering `v` (O(n) selection).
fn median_in_place(v: &mut [f64]) -> f64 {
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

/// How to bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BootstrapOptions {
    /// Replicates drawn.
    pub resamples: usize,
    /// Seed of the ChaCha8 generator.
    pub seed: u64,
    /// Stream of the generator (distinct per row and metric, so that each
    /// interval does not depend on what else was compared).
    pub stream: u64,
}

impl Default for BootstrapOptions {
    fn default() -> Self {
        BootstrapOptions { resamples: DEFAULT_RESAMPLES, seed: DEFAULT_SEED, stream: 0 }
    }
}

/// A relative delta and its percentile-bootstrap interval, as fractions
/// (0.05 = +5%).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeltaCi {
    /// mean(candidate repeats) / mean(baseline repeats) - 1.
    pub delta: f64,
    /// 2.5th / 97.5th percentile of the replicate deltas; `None` when nothing
    /// can vary (one repeat each and no per-request data).
    pub ci: Option<(f64, f64)>,
}

/// Mean of the repeats' observed figures (the figure a variant reports).
pub fn arm_figure(repeats: &[RepeatData]) -> f64 {
    crate::metrics::stats::mean(&repeats.iter().map(RepeatData::observed).collect::<Vec<_>>())
}

/// The delta candidate / baseline - 1 with its two-level bootstrap interval
/// (see the module documentation). `None` when either side has no repeat or
/// the baseline figure is not positive.
pub fn bootstrap_delta(baseline: &[RepeatData], candidate: &[RepeatData], opts: BootstrapOptions) -> Option<DeltaCi> {
    if baseline.is_empty() || candidate.is_empty() {
        return None;
    }
    let (b0, c0) = (arm_figure(baseline), arm_figure(candidate));
    if !(b0 > 0.0 && b0.is_finite() && c0.is_finite()) {
        return None;
    }
    let delta = c0 / b0 - 1.0;
    let varies = |arm: &[RepeatData]| arm.len() > 1 || arm.iter().any(RepeatData::has_requests);
    if !(varies(baseline) || varies(candidate)) || opts.resamples == 0 {
        return Some(DeltaCi { delta, ci: None });
    }
    let paired = baseline.len() == candidate.len() && baseline.len() > 1;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    rng.set_stream(opts.stream);
    let mut scratch = Vec::new();
    let mut picks_b = vec![0usize; baseline.len()];
    let mut picks_c = vec![0usize; candidate.len()];
    let mut deltas = Vec::with_capacity(opts.resamples);
    for _ in 0..opts.resamples {
        for p in picks_b.iter_mut() {
            *p = rng.random_range(0..baseline.len());
        }
        if paired {
            picks_c.copy_from_slice(&picks_b);
        } else {
            for p in picks_c.iter_mut() {
                *p = rng.random_range(0..candidate.len());
            }
        }
        let mut mean_of = |arm: &[RepeatData], picks: &[usize]| {
            picks.iter().map(|&i| arm[i].resample(&mut rng, &mut scratch)).sum::<f64>() / picks.len() as f64
        };
        let b = mean_of(baseline, &picks_b);
        let c = mean_of(candidate, &picks_c);
        if b > 0.0 && (c / b).is_finite() {
            deltas.push(c / b - 1.0);
        }
    }
    if deltas.is_empty() {
        return Some(DeltaCi { delta, ci: None });
    }
    deltas.sort_by(f64::total_cmp);
    let tail = (1.0 - CONFIDENCE) / 2.0 * 100.0;
    let ci = (percentile_sorted(&deltas, tail), percentile_sorted(&deltas, 100.0 - tail));
    Some(DeltaCi { delta, ci: Some(ci) })
}

/// Which McNemar p-value was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum McNemarMethod {
    /// Two-sided exact binomial test on the discordant pairs (b + c < 25).
    ExactBinomial,
    /// Chi-square on 1 df with continuity correction (b + c >= 25).
    ChiSquareCorrected,
}

/// McNemar's test on paired correctness.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct McNemar {
    /// Baseline right, candidate wrong.
    pub b: u64,
    /// Baseline wrong, candidate right.
    pub c: u64,
    pub method: McNemarMethod,
    /// min(b, c) for the exact test, (|b - c| - 1)² / (b + c) for chi-square.
    pub statistic: f64,
    /// Two-sided p-value (1 when b + c = 0).
    pub p_value: f64,
}

/// McNemar's test for `b` (baseline right, candidate wrong) and `c`
/// (baseline wrong, candidate right) discordant pairs; see the module
/// documentation for which p-value and why.
pub fn mcnemar(b: u64, c: u64) -> McNemar {
    let n = b + c;
    if n < MCNEMAR_EXACT_BELOW {
        let k = b.min(c);
        let p = if n == 0 { 1.0 } else { (2.0 * binomial_half_cdf(k, n)).min(1.0) };
        McNemar { b, c, method: McNemarMethod::ExactBinomial, statistic: k as f64, p_value: p }
    } else {
        let d = (b as f64 - c as f64).abs() - 1.0;
        let stat = d * d / n as f64;
        McNemar { b, c, method: McNemarMethod::ChiSquareCorrected, statistic: stat, p_value: chi2_sf_1df(stat) }
    }
}

/// P(X <= k) for X ~ Binomial(n, 1/2), summed in log space
/// (log C(n, i+1) = log C(n, i) + log((n - i) / (i + 1))).
pub fn binomial_half_cdf(k: u64, n: u64) -> f64 {
    let ln_half_n = -(n as f64) * std::f64::consts::LN_2;
    let mut log_c = 0.0f64;
    let mut total = 0.0f64;
    for i in 0..=k.min(n) {
        total += (log_c + ln_half_n).exp();
        log_c += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    total.min(1.0)
}

/// Survival function of the chi-square distribution with 1 degree of
/// freedom: P(Χ² > x) = erfc(sqrt(x / 2)).
pub fn chi2_sf_1df(x: f64) -> f64 {
    if x <= 0.0 { 1.0 } else { libm::erfc((x / 2.0).sqrt()) }
}

/// Which way a figure moved, judged by its interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The interval excludes 0 on the better side.
    Faster,
    /// The interval excludes 0 on the worse side.
    Slower,
    /// The interval contains 0.
    NoSignificantChange,
    /// Some figures of a row are faster and others slower (rows only).
    Mixed,
    /// No interval could be computed.
    Unknown,
}

impl Verdict {
    /// From a delta interval; `higher_is_better` is true for throughputs,
    /// false for latencies.
    pub fn of(ci: Option<(f64, f64)>, higher_is_better: bool) -> Verdict {
        let Some((lo, hi)) = ci else { return Verdict::Unknown };
        let (up, down) = if higher_is_better { (Verdict::Faster, Verdict::Slower) } else { (Verdict::Slower, Verdict::Faster) };
        if lo > 0.0 {
            up
        } else if hi < 0.0 {
            down
        } else {
            Verdict::NoSignificantChange
        }
    }

    /// A row's verdict from its figures' verdicts: faster (or slower) when at
    /// least one is and none goes the other way, mixed when both happen, no
    /// significant change when some interval exists and none excludes 0.
    pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let (mut faster, mut slower, mut known) = (false, false, false);
        for v in verdicts {
            faster |= v == Verdict::Faster;
            slower |= v == Verdict::Slower;
            known |= v != Verdict::Unknown;
        }
        match (faster, slower) {
            (true, true) => Verdict::Mixed,
            (true, false) => Verdict::Faster,
            (false, true) => Verdict::Slower,
            _ if known => Verdict::NoSignificantChange,
            _ => Verdict::Unknown,
        }
    }

    /// The words printed in tables.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::NoSignificantChange => "no significant change",
            Verdict::Mixed => "mixed",
            Verdict::Unknown => "no CI",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} != {b} (tol {tol})");
    }

    #[test]
    fn mcnemar_matches_statsmodels() {
        // statsmodels.stats.contingency_tables.mcnemar([[0, b], [c, 0]], exact=True).pvalue
        // (= scipy.stats.binomtest(b, b + c, 0.5).pvalue), statsmodels 0.15.0 / scipy 1.17.1.
        for (b, c, p) in [
            (3, 9, 0.14599609375),
            (0, 5, 0.0625),
            (10, 14, 0.5412561893463135),
            (1, 1, 1.0),
            (2, 0, 0.5),
        ] {
            let m = mcnemar(b, c);
            assert_eq!(m.method, McNemarMethod::ExactBinomial, "{b},{c}");
            close(m.p_value, p, 1e-12);
            assert_eq!(m.statistic, b.min(c) as f64);
        }
        // mcnemar(..., exact=False, correction=True): (statistic, pvalue).
        for (b, c, stat, p) in [
            (10, 25, 5.6, 0.01796047752607879),
            (40, 60, 3.61, 0.05743311963200335),
            (12, 13, 0.0, 1.0),
            (7, 30, 13.08108108108108, 0.0002982932471420178),
            (100, 150, 9.604, 0.0019415397850404208),
        ] {
            let m = mcnemar(b, c);
            assert_eq!(m.method, McNemarMethod::ChiSquareCorrected, "{b},{c}");
            close(m.statistic, stat, 1e-12);
            close(m.p_value, p, 1e-12);
        }
        // No discordant pair: nothing to test.
        assert_eq!(mcnemar(0, 0).p_value, 1.0);
    }

    #[test]
    fn binomial_by_hand() {
        // P(X <= 0 | n = 5) = 1/32; P(X <= 2 | n = 4) = (1 + 4 + 6) / 16.
        close(binomial_half_cdf(0, 5), 1.0 / 32.0, 1e-15);
        close(binomial_half_cdf(2, 4), 11.0 / 16.0, 1e-15);
        close(binomial_half_cdf(4, 4), 1.0, 1e-15);
        // chi2.sf(3.841458820694124, 1) = 0.05
        close(chi2_sf_1df(3.841458820694124), 0.05, 1e-12);
    }

    #[test]
    fn median_like_numpy() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        assert_eq!(median_in_place(&mut v), 2.5);
        let mut v = vec![5.0, 1.0, 3.0];
        assert_eq!(median_in_place(&mut v), 3.0);
        assert_eq!(RepeatData::Median(vec![1.0, 2.0, 3.0, 10.0]).observed(), 2.5);
    }

    #[test]
    fn constant_samples_give_the_exact_delta() {
        // Every baseline request takes 100 ms, every candidate request 50 ms:
        // any resample has medians 100 and 50, so the interval is the point.
        let b = vec![RepeatData::Median(vec![100.0; 20])];
        let c = vec![RepeatData::Median(vec![50.0; 20])];
        let d = bootstrap_delta(&b, &c, BootstrapOptions::default()).unwrap();
        assert_eq!(d.delta, -0.5);
        assert_eq!(d.ci, Some((-0.5, -0.5)));
        assert_eq!(Verdict::of(d.ci, false), Verdict::Faster);
        assert_eq!(Verdict::of(d.ci, true), Verdict::Slower);
    }

    #[test]
    fn same_distribution_covers_zero_and_clear_shift_excludes_it() {
        // Identical samples on both sides: the interval must straddle 0.
        let v: Vec<f64> = (0..40).map(|i| 50.0 + f64::from(i % 7) * 3.0).collect();
        let d = bootstrap_delta(&[RepeatData::Median(v.clone())], &[RepeatData::Median(v.clone())], BootstrapOptions::default())
            .unwrap();
        assert_eq!(d.delta, 0.0);
        let (lo, hi) = d.ci.unwrap();
        assert!(lo < 0.0 && hi > 0.0, "{lo} {hi}");
        assert_eq!(Verdict::of(d.ci, false), Verdict::NoSignificantChange);
        // The candidate 30% slower on every request: far outside the noise.
        let slow: Vec<f64> = v.iter().map(|x| x * 1.3).collect();
        let d = bootstrap_delta(&[RepeatData::Median(v)], &[RepeatData::Median(slow)], BootstrapOptions::default()).unwrap();
        close(d.delta, 0.3, 1e-12);
        assert!(d.ci.unwrap().0 > 0.0);
        assert_eq!(Verdict::of(d.ci, false), Verdict::Slower);
    }

    #[test]
    fn fixed_seed_is_reproducible_and_pinned() {
        // Three repeats per side of 8 requests each (hand-made TPOTs, ms).
        let rep = |base: f64| RepeatData::Median((0..8).map(|i| base + f64::from(i) * 2.0).collect());
        let b = [rep(100.0), rep(104.0), rep(98.0)];
        let c = [rep(95.0), rep(97.0), rep(93.0)];
        let o = BootstrapOptions { resamples: 2000, seed: 7, stream: 3 };
        let d1 = bootstrap_delta(&b, &c, o).unwrap();
        let d2 = bootstrap_delta(&b, &c, o).unwrap();
        assert_eq!(d1, d2);
        // Observed medians 107, 111, 105 vs 102, 104, 100: delta = 306/323 - 1.
        close(d1.delta, 306.0 / 323.0 - 1.0, 1e-15);
        let (lo, hi) = d1.ci.unwrap();
        assert!(lo < d1.delta && d1.delta < hi);
        // Pinned output of this seed (ChaCha8, rand 0.9): a change here means
        // the resampling changed.
        close(lo, PINNED.0, 1e-12);
        close(hi, PINNED.1, 1e-12);
        // Another seed gives another, similar interval.
        let d3 = bootstrap_delta(&b, &c, BootstrapOptions { seed: 8, ..o }).unwrap();
        assert_ne!(d3.ci, d1.ci);
        assert!((d3.ci.unwrap().0 - lo).abs() < 0.02);
    }
    const PINNED: (f64, f64) = (-0.08929122574955908, -0.018750000000000044);

    #[test]
    fn throughput_ratio_estimator() {
        // Fixed-length requests whose E2EL is identical: nothing can vary.
        let t = RepeatData::Ratio { observed: 80.0, num: vec![80.0; 10], den: vec![1.0; 10] };
        assert_eq!(t.observed(), 80.0);
        let u = RepeatData::Ratio { observed: 88.0, num: vec![80.0; 10], den: vec![0.9; 10] };
        let d = bootstrap_delta(std::slice::from_ref(&t), &[u], BootstrapOptions::default()).unwrap();
        close(d.delta, 0.1, 1e-12);
        let (lo, hi) = d.ci.unwrap();
        close(lo, 0.1, 1e-12);
        close(hi, 0.1, 1e-12);
        // Latency spread gives an interval around the observed delta.
        let den: Vec<f64> = (0..10).map(|i| 0.8 + f64::from(i) * 0.04).collect();
        let w = RepeatData::Ratio { observed: 100.0, num: vec![80.0; 10], den };
        let d = bootstrap_delta(&[t], &[w], BootstrapOptions::default()).unwrap();
        close(d.delta, 0.25, 1e-12);
        let (lo, hi) = d.ci.unwrap();
        assert!(lo > 0.15 && lo < 0.25 && hi > 0.25 && hi < 0.35, "{lo} {hi}");
    }

    #[test]
    fn single_fixed_repeats_have_no_interval_but_several_do() {
        let d = bootstrap_delta(&[RepeatData::Fixed(10.0)], &[RepeatData::Fixed(11.0)], BootstrapOptions::default()).unwrap();
        close(d.delta, 0.1, 1e-12);
        assert_eq!(d.ci, None);
        assert_eq!(Verdict::of(d.ci, true), Verdict::Unknown);
        // Repeats only (paired): 10, 10.2, 9.8 vs 11, 11.2, 10.8 -> always about +10%.
        let b = [RepeatData::Fixed(10.0), RepeatData::Fixed(10.2), RepeatData::Fixed(9.8)];
        let c = [RepeatData::Fixed(11.0), RepeatData::Fixed(11.2), RepeatData::Fixed(10.8)];
        let d = bootstrap_delta(&b, &c, BootstrapOptions::default()).unwrap();
        let (lo, hi) = d.ci.unwrap();
        assert!(lo > 0.09 && hi < 0.11, "{lo} {hi}");
        assert_eq!(Verdict::of(d.ci, true), Verdict::Faster);
    }

    #[test]
    fn row_verdicts() {
        use Verdict::*;
        assert_eq!(Verdict::combine([Faster, NoSignificantChange]), Faster);
        assert_eq!(Verdict::combine([Faster, Slower]), Mixed);
        assert_eq!(Verdict::combine([NoSignificantChange, Unknown]), NoSignificantChange);
        assert_eq!(Verdict::combine([Unknown]), Unknown);
        assert_eq!(Verdict::combine([Slower, Unknown]), Slower);
    }
}
