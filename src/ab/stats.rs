//! Statistics of an A/B comparison: the interval of the relative delta
//! candidate / baseline - 1 (a paired t interval on the repeats' log ratios,
//! or a request-level bootstrap with a single repeat), the minimum detectable
//! effect, and the verdict of each figure.
//!
//! # The interval (which method, and why)
//!
//! Each variant ran the same point in R repeats, interleaved ABBA, so repeat i
//! of the baseline and repeat i of the candidate form a pair. A repeat's
//! figure is computed from its own requests; a variant's figure is the mean of
//! its repeats' figures; the delta is candidate / baseline - 1.
//!
//! * **R >= 2 on both sides, paired** ([`IntervalMethod::PairedT`]): the
//!   per-pair log ratios d_i = ln(c_i / b_i) are taken as independent draws
//!   of the change plus noise, and the interval is the paired Student's t
//!   interval d̄ ± t(0.975, R - 1) · s_d / sqrt(R), mapped back with
//!   exp(.) - 1 (Student 1908; the paired-difference t interval on logs as
//!   in e.g. Box, Hunter & Hunter, *Statistics for Experimenters*, 2nd ed.,
//!   2005, §3.2; the same as scipy's `ttest_rel` on log figures). Each
//!   d_i already carries both kinds of noise: run-to-run (whole engine runs
//!   on a shared machine differ by 5-10%) and request-to-request (a repeat's
//!   median or throughput is computed from n requests), Var d_i =
//!   2 σ²_run + 2 σ²_req(n). So the within-repeat request variation is kept,
//!   inside s_d, and is not added a second time (that would count it twice
//!   and make the interval conservative). With 2 or 3 pairs the t quantile
//!   is 12.7 or 4.30, not ~1.96: an interval that small samples can trust.
//! * **R >= 2 on both sides, unequal counts** ([`IntervalMethod::WelchT`]):
//!   Welch's t interval on the log figures, Welch–Satterthwaite degrees of
//!   freedom (Welch 1947).
//! * **One repeat on a side** ([`IntervalMethod::RequestBootstrap`]): there
//!   is no run-to-run information, so no run-to-run claim is made: the
//!   interval is the request-level percentile bootstrap below (as before),
//!   covering request-to-request variation within that run only.
//!
//! The previous method, a two-level percentile bootstrap whose top level
//! resampled the R repeats, is kept as [`bootstrap_delta`] (the R = 1 path
//! and, for comparison, [`DeltaCi`] beside the new interval in `ab.json`).
//! With R = 3 its top level has 10 distinct resamples and a spread scaled by
//! (R - 1) / R with a normal-like quantile, so its 95% interval is 2-3x too
//! narrow; the simulation test in this module measures its coverage and the
//! new one's at R = 2, 3, 5, 10.
//!
//! # Minimum detectable effect
//!
//! The smallest true change that a run with this noise and these repeats
//! detects with 80% power at the 5% level (two-sided):
//! MDE = exp((t(0.975, df) + t(0.80, df)) · se) - 1, se the standard error of
//! the mean log ratio (Bloom, "Minimum Detectable Effects", *Evaluation
//! Review* 19(5), 1995, eq. 1; with t instead of z for the small df). For the
//! bootstrap path se is the interval's log width / (2 · 1.96).
//!
//! # The request bootstrap (one repeat, and the old method)
//!
//! One bootstrap replicate draws, for each
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
//!   T* = T · (Σ tok* / Σ e2el*) / (Σ tok / Σ e2el). In request-rate mode
//!   throughput is set by the arrival process, not by latency, so no request
//!   term is used ([`RepeatData::Fixed`]) and a single repeat gives no
//!   interval.
//!
//! The distributions behind the intervals and McNemar's test on paired
//! correctness are in [`super::distributions`].

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::distributions::student_t_quantile;
use crate::metrics::stats::{mean, median, median_in_place, percentile_sorted, sample_variance};

/// Bootstrap replicates used unless told otherwise.
pub const DEFAULT_RESAMPLES: usize = 2000;
/// Seed of the bootstrap RNG unless told otherwise (ChaCha8, one stream per row and metric).
pub const DEFAULT_SEED: u64 = 0;
/// Coverage of the intervals (two-sided), as a fraction.
pub const CONFIDENCE: f64 = 0.95;

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
            RepeatData::Median(v) => median(v),
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
    mean(&repeats.iter().map(RepeatData::observed).collect::<Vec<_>>())
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

/// Power of the minimum detectable effect ([`Interval::mde`]), as a fraction.
pub const MDE_POWER: f64 = 0.80;

/// How an [`Interval`] was computed (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntervalMethod {
    /// Paired Student's t on the per-pair log ratios, R - 1 degrees of freedom.
    PairedT,
    /// Welch's t on the log figures (both sides 2+ repeats, unequal counts).
    WelchT,
    /// Request-level percentile bootstrap (a side has one repeat): no run-to-run claim.
    RequestBootstrap,
    /// No interval: a side is another tool's file with summary figures only
    /// (or the figure is not compared), one number with nothing to resample.
    SummaryOnly,
}

/// A relative delta with its 95% interval and resolution, as fractions
/// (0.05 = +5%).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    /// mean(candidate repeats) / mean(baseline repeats) - 1.
    pub delta: f64,
    /// The 95% interval of the change; `None` when nothing can vary.
    pub ci: Option<(f64, f64)>,
    pub method: IntervalMethod,
    /// Degrees of freedom of the t quantile (`None` for the bootstrap).
    pub df: Option<f64>,
    /// Standard error of the mean log ratio (natural log units).
    pub se_log: Option<f64>,
    /// Minimum detectable effect at 80% power and these repeats, fraction
    /// (module documentation); `None` without an interval.
    pub mde: Option<f64>,
    /// c_i / b_i - 1 of each repeat pair, in run order (empty when unpaired).
    pub repeat_deltas: Vec<f64>,
}

/// The delta and its interval by the method the repeats allow (see the
/// module documentation): paired t for R >= 2 pairs, Welch t for unequal
/// counts of 2+, otherwise the request bootstrap of [`bootstrap_delta`]
/// (with `opts`). `None` when either side has no repeat or the baseline
/// figure is not positive.
pub fn delta_interval(baseline: &[RepeatData], candidate: &[RepeatData], opts: BootstrapOptions) -> Option<Interval> {
    let b: Vec<f64> = baseline.iter().map(RepeatData::observed).collect();
    let c: Vec<f64> = candidate.iter().map(RepeatData::observed).collect();
    let positive = |v: &[f64]| v.iter().all(|x| *x > 0.0 && x.is_finite());
    if b.len() >= 2 && c.len() >= 2 && positive(&b) && positive(&c) {
        let delta = arm_figure(candidate) / arm_figure(baseline) - 1.0;
        let (mean_log, se, df, method, repeat_deltas) = if b.len() == c.len() {
            let d: Vec<f64> = b.iter().zip(&c).map(|(b, c)| (c / b).ln()).collect();
            let (m, var) = mean_var(&d);
            let deltas: Vec<f64> = b.iter().zip(&c).map(|(b, c)| c / b - 1.0).collect();
            (m, (var / d.len() as f64).sqrt(), (d.len() - 1) as f64, IntervalMethod::PairedT, deltas)
        } else {
            let lb: Vec<f64> = b.iter().map(|x| x.ln()).collect();
            let lc: Vec<f64> = c.iter().map(|x| x.ln()).collect();
            let ((mb, vb), (mc, vc)) = (mean_var(&lb), mean_var(&lc));
            let (qb, qc) = (vb / lb.len() as f64, vc / lc.len() as f64);
            let df = if qb + qc > 0.0 {
                (qb + qc).powi(2) / (qb * qb / (lb.len() - 1) as f64 + qc * qc / (lc.len() - 1) as f64)
            } else {
                (lb.len() + lc.len() - 2) as f64
            };
            (mc - mb, (qb + qc).sqrt(), df, IntervalMethod::WelchT, Vec::new())
        };
        let half = student_t_quantile(0.5 + CONFIDENCE / 2.0, df) * se;
        let ci = ((mean_log - half).exp_m1(), (mean_log + half).exp_m1());
        return Some(Interval {
            delta,
            ci: Some(ci),
            method,
            df: Some(df),
            se_log: Some(se),
            mde: Some(mde_of(se, df)),
            repeat_deltas,
        });
    }
    let d = bootstrap_delta(baseline, candidate, opts)?;
    let z = student_t_quantile(0.5 + CONFIDENCE / 2.0, f64::INFINITY);
    let se = d.ci.and_then(|(lo, hi)| (lo > -1.0).then(|| (hi.ln_1p() - lo.ln_1p()) / (2.0 * z)));
    Some(Interval {
        delta: d.delta,
        ci: d.ci,
        method: IntervalMethod::RequestBootstrap,
        df: None,
        se_log: se,
        mde: se.map(|s| mde_of(s, f64::INFINITY)),
        repeat_deltas: Vec::new(),
    })
}

/// Minimum detectable effect (fraction) for a mean log ratio with standard
/// error `se` on `df` degrees of freedom: exp((t(0.975) + t(0.80)) · se) - 1
/// (Bloom 1995; module documentation).
pub fn mde_of(se: f64, df: f64) -> f64 {
    ((student_t_quantile(0.5 + CONFIDENCE / 2.0, df) + student_t_quantile(MDE_POWER, df)) * se).exp_m1()
}

/// Mean and sample variance (n - 1 denominator) of at least two values.
fn mean_var(v: &[f64]) -> (f64, f64) {
    (mean(v), sample_variance(v))
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
    /// The interval excludes 0 but |delta| is within the A/A noise floor:
    /// no significant change for this machine (printed with the floor).
    WithinNoise,
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

    /// Applies an A/A noise floor (fraction) to a faster/slower verdict: it
    /// stands only when |delta| exceeds the floor, else [`Verdict::WithinNoise`].
    /// Without a floor, or for other verdicts, unchanged.
    pub fn within_noise(self, delta: f64, floor: Option<f64>) -> Verdict {
        match (self, floor) {
            (Verdict::Faster | Verdict::Slower, Some(f)) if delta.abs() <= f => Verdict::WithinNoise,
            (v, _) => v,
        }
    }

    /// Faster, slower or mixed: a change that counts.
    pub fn is_change(self) -> bool {
        matches!(self, Verdict::Faster | Verdict::Slower | Verdict::Mixed)
    }

    /// A row's verdict from its figures' verdicts: faster (or slower) when at
    /// least one is and none goes the other way, mixed when both happen,
    /// within noise when some figure is and none changed, no significant
    /// change when some interval exists and none excludes 0.
    pub fn combine(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let (mut faster, mut slower, mut known, mut noise) = (false, false, false, false);
        for v in verdicts {
            faster |= v == Verdict::Faster;
            slower |= v == Verdict::Slower;
            known |= v != Verdict::Unknown;
            noise |= v == Verdict::WithinNoise;
        }
        match (faster, slower) {
            (true, true) => Verdict::Mixed,
            (true, false) => Verdict::Faster,
            (false, true) => Verdict::Slower,
            _ if noise => Verdict::WithinNoise,
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
            Verdict::WithinNoise => "no significant change (within noise)",
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
    fn median_like_numpy() {
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
    fn paired_t_on_three_measured_repeats() {
        // Three repeats measured on a shared machine: base 181.8 / 178.5 /
        // 161.6, knob 193.6 / 180.5 / 204.6 tok/s/gpu; a paired t interval
        // on the log ratios gives [-17.2%, +48.5%] (the two-level bootstrap
        // said +9.2% "faster": its interval is too narrow at R = 3).
        let b: Vec<RepeatData> = [181.8, 178.5, 161.6].map(RepeatData::Fixed).into();
        let c: Vec<RepeatData> = [193.6, 180.5, 204.6].map(RepeatData::Fixed).into();
        let i = delta_interval(&b, &c, BootstrapOptions::default()).unwrap();
        assert_eq!(i.method, IntervalMethod::PairedT);
        assert_eq!(i.df, Some(2.0));
        let (lo, hi) = i.ci.unwrap();
        close(lo, -0.172, 0.0005);
        close(hi, 0.485, 0.001);
        close(i.delta, (193.6 + 180.5 + 204.6) / (181.8 + 178.5 + 161.6) - 1.0, 1e-12);
        assert_eq!(Verdict::of(i.ci, true), Verdict::NoSignificantChange);
        assert_eq!(i.repeat_deltas.len(), 3);
        close(i.repeat_deltas[2], 204.6 / 161.6 - 1.0, 1e-12);
        // MDE = exp((4.303 + 1.061) · se) - 1 with se = sd(d) / sqrt(3).
        let d: Vec<f64> = [(193.6f64 / 181.8).ln(), (180.5f64 / 178.5).ln(), (204.6f64 / 161.6).ln()].into();
        let m = d.iter().sum::<f64>() / 3.0;
        let se = (d.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 2.0 / 3.0).sqrt();
        close(i.mde.unwrap(), ((4.302652729749464 + 1.0606601717798212) * se).exp_m1(), 1e-7);
        // One repeat a side: the request bootstrap, as before.
        let one = delta_interval(&b[..1], &c[..1], BootstrapOptions::default()).unwrap();
        assert_eq!(one.method, IntervalMethod::RequestBootstrap);
        assert_eq!(one.ci, None);
        // Unequal counts: Welch.
        let w = delta_interval(&b, &c[..2], BootstrapOptions::default()).unwrap();
        assert_eq!(w.method, IntervalMethod::WelchT);
        assert!(w.df.unwrap() > 1.0 && w.ci.unwrap().0 < 0.0);
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
