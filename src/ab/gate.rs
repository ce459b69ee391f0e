//! The gate's decision rule: PASS, FAIL or INCONCLUSIVE for one gated
//! figure, decided from its 95% interval against the largest accepted
//! regression, as an equivalence (non-inferiority) test decides; the paired
//! interval of an accuracy difference; and how many repeats or questions
//! would decide a figure that is INCONCLUSIVE. A leaf: it knows the numbers,
//! not the comparison ([`super::compare::gate`] applies it to every row and
//! to the accuracy block).
//!
//! # The rule
//!
//! With `m` the margin (the largest accepted regression, a fraction, raised
//! to the A/A noise floor where one is given and larger) and [lo, hi] the
//! 95% interval of the change:
//!
//! * **PASS**: the interval excludes every regression larger than `m`;
//! * **FAIL**: the whole interval lies beyond `m` (a regression larger than
//!   `m` is shown);
//! * **INCONCLUSIVE**: the interval straddles `m`: the data cannot tell.
//!
//! This is the two one-sided tests' confidence-interval form (Schuirmann,
//! "A comparison of the two one-sided tests procedure and the power approach
//! for assessing the equivalence of average bioavailability", *J.
//! Pharmacokinetics and Biopharmaceutics* 15(6), 1987) applied on the
//! regression side only (a non-inferiority margin), with the three-way
//! reading of Wellek, *Testing Statistical Hypotheses of Equivalence and
//! Noninferiority*, 2nd ed., 2010, §1.6. Unlike "fail when significant",
//! it never reads a wide interval as a PASS.
//!
//! # What would decide an INCONCLUSIVE figure
//!
//! * **Performance**: the repeats per variant R' at which a paired t
//!   interval of the same spread, around the same mean log ratio, would no
//!   longer reach the margin: the smallest R' with
//!   t(0.975, R' - 1) · s / sqrt(R') < |d̄ - ln(1 ± m)|, s the sd of the
//!   per-pair log ratios (s = se · sqrt(R)) and d̄ their mean. This is the
//!   margin-of-error sample size of a t interval, ME = t · s / sqrt(n)
//!   solved for n by iteration because t depends on n (Lenth, "Some
//!   practical guidelines for effective sample size determination", *The
//!   American Statistician* 55(3), 2001, §2). It is an estimate at the
//!   observed spread and mean, not a promise: both move as pairs are added.
//! * **Accuracy**: the paired questions n' at which the interval below,
//!   with the observed discordant proportions b/n and c/n held, excludes
//!   the margin (the same margin-of-error approach on that interval's
//!   half-width, searched over n').
//!
//! # The accuracy interval
//!
//! On n paired questions with b = baseline right and candidate wrong,
//! c = baseline wrong and candidate right, the difference of the
//! candidate's and the baseline's accuracy is (c - b) / n. Its interval is
//! Agresti and Min's adjusted Wald interval: add 1/2 to each of the four
//! cells of the paired 2x2 table, n* = n + 2, p12 = (b + 1/2) / n*,
//! p21 = (c + 1/2) / n*, then
//! (p21 - p12) ± z(0.975) · sqrt((p12 + p21 - (p21 - p12)²) / n*)
//! (Agresti & Min, "Simple improved confidence intervals for comparing
//! matched proportions", *Statistics in Medicine* 24(5), 2005, eq. 3 with
//! the 1/2 adjustment; the variance is the paired-proportions Wald variance
//! of Agresti, *Categorical Data Analysis*, 3rd ed., 2013, §11.1.1). The
//! plain Wald interval is [0, 0] when no question changed; the adjustment
//! gives 5 agreeing questions an interval of about ±28 points, so they
//! cannot resolve a 1-point margin.
//!
//! # The unpaired accuracy interval
//!
//! Against another tool's file without per-question samples there are no
//! pairs, only two scores p_b on n_b and p_c on n_c questions. The interval
//! of p_c - p_b is Agresti and Caffo's: add one success and one failure to
//! each side, p̃ = (x + 1) / (n + 2), then the Wald interval
//! (p̃_c - p̃_b) ± z(0.975) · sqrt(p̃_b (1 - p̃_b) / (n_b + 2) + p̃_c (1 - p̃_c) / (n_c + 2))
//! (Agresti & Caffo, "Simple and effective confidence intervals for
//! proportions and differences of proportions result from adding two
//! successes and two failures", *The American Statistician* 54(4), 2000).
//! It ignores that the same questions may lie behind both scores, so it is
//! wider than a paired one would be: it can only err towards INCONCLUSIVE.

use serde::{Deserialize, Serialize};

use super::distributions::student_t_quantile;
use super::stats::CONFIDENCE;

/// The most repeats per variant the estimate looks at: beyond it the line
/// says "more than 100".
pub const MAX_REPEATS_ESTIMATE: u64 = 100;
/// The most questions the accuracy estimate looks at when the task's size
/// is not known.
pub const MAX_QUESTIONS_ESTIMATE: u64 = 100_000;

/// What the gate decided, for one figure or the whole comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The interval excludes a regression larger than the margin.
    Pass,
    /// The interval straddles the margin.
    Inconclusive,
    /// The whole interval lies beyond the margin.
    Fail,
}

impl Outcome {
    /// PASS, FAIL or INCONCLUSIVE.
    pub fn text(self) -> &'static str {
        match self {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// Several outcomes as one: FAIL when any fails, else INCONCLUSIVE when
    /// any is, else PASS; `None` for none.
    pub fn combine(outcomes: impl IntoIterator<Item = Outcome>) -> Option<Outcome> {
        outcomes.into_iter().max()
    }
}

/// How many repeats (or questions) would decide an INCONCLUSIVE figure at
/// the observed spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Needed {
    /// About this many.
    About(u64),
    /// More than this many (the estimate's limit, or all questions the task has).
    MoreThan(u64),
}

impl Needed {
    /// `about 14` / `more than 100`.
    pub fn text(self) -> String {
        match self {
            Needed::About(n) => format!("about {n}"),
            Needed::MoreThan(n) => format!("more than {n}"),
        }
    }
}

/// The gate's decision on one performance figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FigureGate {
    pub outcome: Outcome,
    /// The largest accepted regression (fraction): `--max-regression`, or
    /// the figure's A/A noise floor where that is larger.
    pub margin: f64,
    /// INCONCLUSIVE only: the repeats per variant that would decide it at
    /// the observed spread (module documentation); `None` when decided.
    pub repeats_needed: Option<Needed>,
}

/// What the performance decision needs to know of a figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfInput {
    /// 95% interval of the change candidate / baseline - 1 (fractions).
    pub ci: (f64, f64),
    /// Throughputs: true (a regression is a drop); latencies: false.
    pub higher_is_better: bool,
    /// Standard error of the mean log ratio and its degrees of freedom
    /// (`None` for the request bootstrap, which is never gated).
    pub se_log: Option<f64>,
    pub df: Option<f64>,
    /// Repeats per variant (baseline, candidate).
    pub repeats: (usize, usize),
}

/// The decision on one performance figure against `margin` (fraction).
pub fn judge_perf(f: &PerfInput, margin: f64) -> FigureGate {
    let (lo, hi) = f.ci;
    let outcome = if f.higher_is_better {
        if lo >= -margin {
            Outcome::Pass
        } else if hi < -margin {
            Outcome::Fail
        } else {
            Outcome::Inconclusive
        }
    } else if hi <= margin {
        Outcome::Pass
    } else if lo > margin {
        Outcome::Fail
    } else {
        Outcome::Inconclusive
    };
    let repeats_needed = (outcome == Outcome::Inconclusive).then(|| repeats_needed(f, margin));
    FigureGate { outcome, margin, repeats_needed }
}

/// The repeats per variant at which the interval would clear the margin at
/// the observed spread and mean (module documentation).
fn repeats_needed(f: &PerfInput, margin: f64) -> Needed {
    let beyond = Needed::MoreThan(MAX_REPEATS_ESTIMATE);
    let (Some(se), Some(_)) = (f.se_log, f.df) else { return beyond };
    let (lo, hi) = f.ci;
    if lo <= -1.0 || (f.higher_is_better && margin >= 1.0) {
        return beyond;
    }
    // The paired t interval is symmetric in logs: its centre is the mean log ratio.
    let mean_log = (lo.ln_1p() + hi.ln_1p()) / 2.0;
    let boundary = if f.higher_is_better { (-margin).ln_1p() } else { margin.ln_1p() };
    let gap = (mean_log - boundary).abs();
    // Per-pair spread. With unequal counts (Welch) the larger count scales
    // se up to a per-pair sd that is not smaller than the truth.
    let now = f.repeats.0.max(f.repeats.1) as u64;
    let s = se * (now as f64).sqrt();
    let t = |n: u64| student_t_quantile(0.5 + CONFIDENCE / 2.0, (n - 1) as f64);
    (now.max(1) + 1..=MAX_REPEATS_ESTIMATE)
        .find(|&n| t(n) * s / (n as f64).sqrt() < gap)
        .map_or(beyond, Needed::About)
}

/// The accuracy decision of one exact_match metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AccuracyGate {
    pub outcome: Outcome,
    /// Agresti–Min 95% interval of candidate - baseline on the paired
    /// questions (fractions, 0.01 = 1 point), or against another tool's file
    /// without samples the unpaired Agresti–Caffo one
    /// ([`judge_accuracy_unpaired`]); `None` without either.
    pub ci: Option<(f64, f64)>,
    /// INCONCLUSIVE only: the paired questions that would decide it at the
    /// observed disagreement (module documentation).
    pub questions_needed: Option<Needed>,
}

/// Agresti–Min 95% interval of the paired accuracy difference (candidate -
/// baseline, fractions in [-1, 1]) for `b` (baseline right, candidate
/// wrong) and `c` (baseline wrong, candidate right) discordant pairs among
/// `n` paired questions (module documentation). Real-valued counts: the
/// estimate of [`judge_accuracy`] scales them.
pub fn paired_diff_interval(b: f64, c: f64, n: f64) -> (f64, f64) {
    let z = student_t_quantile(0.5 + CONFIDENCE / 2.0, f64::INFINITY);
    let n_adj = n + 2.0;
    let (p12, p21) = ((b + 0.5) / n_adj, (c + 0.5) / n_adj);
    let diff = p21 - p12;
    let half = z * ((p12 + p21 - diff * diff).max(0.0) / n_adj).sqrt();
    ((diff - half).max(-1.0), (diff + half).min(1.0))
}

/// The decision on one accuracy metric: `b`, `c` discordant pairs among
/// `n` paired questions, against the largest accepted drop `max_drop`
/// (fraction). `available`: the questions the task has (the estimate stops
/// there), if known. With no paired question, INCONCLUSIVE with no estimate.
pub fn judge_accuracy(b: u64, c: u64, n: u64, max_drop: f64, available: Option<u64>) -> AccuracyGate {
    if n == 0 {
        return AccuracyGate { outcome: Outcome::Inconclusive, ci: None, questions_needed: None };
    }
    let decide = |(lo, hi): (f64, f64)| {
        if lo >= -max_drop - 1e-12 {
            Outcome::Pass
        } else if hi < -max_drop {
            Outcome::Fail
        } else {
            Outcome::Inconclusive
        }
    };
    let ci = paired_diff_interval(b as f64, c as f64, n as f64);
    let outcome = decide(ci);
    let questions_needed = (outcome == Outcome::Inconclusive).then(|| {
        let limit = available.unwrap_or(MAX_QUESTIONS_ESTIMATE).max(n);
        let (pb, pc) = (b as f64 / n as f64, c as f64 / n as f64);
        (n + 1..=limit)
            .find(|&m| {
                let m = m as f64;
                decide(paired_diff_interval(pb * m, pc * m, m)) != Outcome::Inconclusive
            })
            .map_or(Needed::MoreThan(limit), Needed::About)
    });
    AccuracyGate { outcome, ci: Some(ci), questions_needed }
}

/// Agresti–Caffo 95% interval of `c.0 - b.0` for two independent scores
/// (fractions) on `b.1` and `c.1` questions (module documentation).
pub fn unpaired_diff_interval(b: (f64, f64), c: (f64, f64)) -> (f64, f64) {
    let z = student_t_quantile(0.5 + CONFIDENCE / 2.0, f64::INFINITY);
    let adj = |(p, n): (f64, f64)| ((p * n + 1.0) / (n + 2.0), n + 2.0);
    let ((pb, nb), (pc, nc)) = (adj(b), adj(c));
    let diff = pc - pb;
    let half = z * (pb * (1.0 - pb) / nb + pc * (1.0 - pc) / nc).sqrt();
    ((diff - half).max(-1.0), (diff + half).min(1.0))
}

/// The decision on one accuracy metric from two unpaired scores,
/// `(score, questions)` of the baseline and the candidate, against the
/// largest accepted drop `max_drop` (fraction): the Agresti–Caffo interval
/// (module documentation) read as [`judge_accuracy`] reads the paired one.
/// INCONCLUSIVE carries the questions a side at which the interval, at the
/// same two scores, would decide. With no question on a side,
/// INCONCLUSIVE with no interval.
pub fn judge_accuracy_unpaired(b: (f64, u64), c: (f64, u64), max_drop: f64) -> AccuracyGate {
    if b.1 == 0 || c.1 == 0 || !(b.0.is_finite() && c.0.is_finite()) {
        return AccuracyGate { outcome: Outcome::Inconclusive, ci: None, questions_needed: None };
    }
    let decide = |(lo, hi): (f64, f64)| {
        if lo >= -max_drop - 1e-12 {
            Outcome::Pass
        } else if hi < -max_drop {
            Outcome::Fail
        } else {
            Outcome::Inconclusive
        }
    };
    let ci = unpaired_diff_interval((b.0, b.1 as f64), (c.0, c.1 as f64));
    let outcome = decide(ci);
    let questions_needed = (outcome == Outcome::Inconclusive).then(|| {
        let from = b.1.max(c.1);
        (from + 1..=MAX_QUESTIONS_ESTIMATE.max(from))
            .find(|&m| decide(unpaired_diff_interval((b.0, m as f64), (c.0, m as f64))) != Outcome::Inconclusive)
            .map_or(Needed::MoreThan(MAX_QUESTIONS_ESTIMATE.max(from)), Needed::About)
    });
    AccuracyGate { outcome, ci: Some(ci), questions_needed }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perf(ci: (f64, f64), higher_is_better: bool, se: f64, r: usize) -> PerfInput {
        PerfInput { ci, higher_is_better, se_log: Some(se), df: Some((r - 1) as f64), repeats: (r, r) }
    }

    #[test]
    fn each_outcome_from_fixed_intervals() {
        // Throughput, 5% margin: a drop is a regression.
        assert_eq!(judge_perf(&perf((-0.03, 0.04), true, 0.01, 3), 0.05).outcome, Outcome::Pass);
        assert_eq!(judge_perf(&perf((-0.20, -0.08), true, 0.01, 3), 0.05).outcome, Outcome::Fail);
        let i = judge_perf(&perf((-0.09, 0.02), true, 0.02, 3), 0.05);
        assert_eq!(i.outcome, Outcome::Inconclusive);
        assert!(matches!(i.repeats_needed, Some(Needed::About(n)) if n > 3), "{i:?}");
        // A significant 10% regression whose interval reaches below the
        // margin is not shown to be beyond it: INCONCLUSIVE, not FAIL.
        assert_eq!(judge_perf(&perf((-0.17, -0.03), true, 0.02, 3), 0.05).outcome, Outcome::Inconclusive);
        // Latency: a rise is a regression; an improvement passes.
        assert_eq!(judge_perf(&perf((-0.30, 0.05), false, 0.05, 3), 0.05).outcome, Outcome::Pass);
        assert_eq!(judge_perf(&perf((0.06, 0.12), false, 0.01, 3), 0.05).outcome, Outcome::Fail);
        // The noise floor as the margin: a 9% rise within a 12% floor passes.
        assert_eq!(judge_perf(&perf((0.06, 0.11), false, 0.01, 3), 0.12).outcome, Outcome::Pass);
        // Decided figures carry no estimate.
        assert_eq!(judge_perf(&perf((0.06, 0.12), false, 0.01, 3), 0.05).repeats_needed, None);
    }

    #[test]
    fn repeats_needed_follows_the_t_interval() {
        // The run: tok/s/gpu -5.7% at 2 repeats with [-71.6%, +225%].
        // Mean log ratio and se from that interval (t(0.975, 1) = 12.706).
        let (lo, hi) = (-0.716f64, 2.25f64);
        let t1 = student_t_quantile(0.975, 1.0);
        let se = (hi.ln_1p() - lo.ln_1p()) / 2.0 / t1;
        let f = PerfInput { ci: (lo, hi), higher_is_better: true, se_log: Some(se), df: Some(1.0), repeats: (2, 2) };
        let g = judge_perf(&f, 0.05);
        assert_eq!(g.outcome, Outcome::Inconclusive);
        // s = se * sqrt(2) ~ 0.74 per pair, |mean - ln 0.95| ~ 0.01: far beyond 100 repeats.
        assert_eq!(g.repeats_needed, Some(Needed::MoreThan(MAX_REPEATS_ESTIMATE)));
        // A tighter case, checked by hand: mean log ln(0.97), s = 0.05 per
        // pair at 3 repeats; gap to ln(0.95) = 0.02083. n = 25: t(24) = 2.0639,
        // 2.0639 * 0.05 / 5 = 0.02064 < gap; n = 24: t(23) = 2.0687,
        // 2.0687 * 0.05 / sqrt(24) = 0.02111 > gap. So 25.
        let m = 0.97f64.ln();
        let se = 0.05 / 3f64.sqrt();
        let half = student_t_quantile(0.975, 2.0) * se;
        let f = PerfInput { ci: ((m - half).exp_m1(), (m + half).exp_m1()), higher_is_better: true, se_log: Some(se), df: Some(2.0), repeats: (3, 3) };
        let g = judge_perf(&f, 0.05);
        assert_eq!(g.outcome, Outcome::Inconclusive);
        assert_eq!(g.repeats_needed, Some(Needed::About(25)));
    }

    #[test]
    fn accuracy_interval_and_questions_needed() {
        // No question changed among 5: about ±28 points, cannot resolve 1 point.
        let (lo, hi) = paired_diff_interval(0.0, 0.0, 5.0);
        assert!((hi - 1.959964 / 7.0).abs() < 1e-5 && (lo + hi).abs() < 1e-12, "{lo} {hi}");
        let g = judge_accuracy(0, 0, 5, 0.01, Some(1319));
        assert_eq!(g.outcome, Outcome::Inconclusive);
        // Half-width z / (n + 2) <= 0.01 from n + 2 = 196 on.
        assert_eq!(g.questions_needed, Some(Needed::About(194)));
        // 1319 questions, 9 lost and 8 gained: within a point.
        let g = judge_accuracy(9, 8, 1319, 0.01, Some(1319));
        assert_eq!(g.outcome, Outcome::Pass);
        let (lo, hi) = g.ci.unwrap();
        assert!(lo > -0.01 && lo < -0.005 && hi > 0.004, "{lo} {hi}");
        assert_eq!(g.questions_needed, None);
        // 15 lost of 100: a drop beyond a point.
        assert_eq!(judge_accuracy(15, 0, 100, 0.01, None).outcome, Outcome::Fail);
        // 1 lost of 100 with a 1-point margin: straddles; resolving it needs
        // more questions than gsm8k's 1319 at this rate.
        let g = judge_accuracy(1, 0, 100, 0.01, Some(1319));
        assert_eq!(g.outcome, Outcome::Inconclusive);
        assert_eq!(g.questions_needed, Some(Needed::MoreThan(1319)));
        // No paired samples: nothing to decide on.
        assert_eq!(judge_accuracy(0, 0, 0, 0.01, None), AccuracyGate { outcome: Outcome::Inconclusive, ci: None, questions_needed: None });
    }

    #[test]
    fn unpaired_interval_of_two_scores() {
        // Agresti-Caffo by hand: 95 of 100 and 1235 of 1319 (0.9363), one
        // success and one failure added to each: 96/102 and 1236/1321.
        let (pb, pc): (f64, f64) = (96.0 / 102.0, 1236.0 / 1321.0);
        let half = 1.959963984540054 * (pb * (1.0 - pb) / 102.0 + pc * (1.0 - pc) / 1321.0).sqrt();
        let (lo, hi) = unpaired_diff_interval((0.95, 100.0), (1235.0 / 1319.0, 1319.0));
        assert!((lo - (pc - pb - half)).abs() < 1e-12 && (hi - (pc - pb + half)).abs() < 1e-12, "{lo} {hi}");
        // A published 93.63% on 1319 against 95% on a --limit 100 run: about
        // ±5 points, which cannot resolve a 1-point drop.
        let g = judge_accuracy_unpaired((1235.0 / 1319.0, 1319), (0.95, 100), 0.01);
        assert_eq!(g.outcome, Outcome::Inconclusive);
        let (lo, hi) = g.ci.unwrap();
        assert!(lo < -0.04 && hi > 0.05, "{lo} {hi}");
        assert!(matches!(g.questions_needed, Some(Needed::About(n)) if n > 1319), "{g:?}");
        // Clear cases both ways, and nothing to judge without questions.
        assert_eq!(judge_accuracy_unpaired((0.90, 20000), (0.90, 20000), 0.01).outcome, Outcome::Pass);
        assert_eq!(judge_accuracy_unpaired((0.95, 1000), (0.80, 1000), 0.01).outcome, Outcome::Fail);
        assert_eq!(judge_accuracy_unpaired((0.95, 0), (0.80, 1000), 0.01), AccuracyGate { outcome: Outcome::Inconclusive, ci: None, questions_needed: None });
    }

    #[test]
    fn outcomes_combine_worst_first() {
        use Outcome::*;
        assert_eq!(Outcome::combine([Pass, Inconclusive, Pass]), Some(Inconclusive));
        assert_eq!(Outcome::combine([Pass, Inconclusive, Fail]), Some(Fail));
        assert_eq!(Outcome::combine([Pass]), Some(Pass));
        assert_eq!(Outcome::combine([]), None);
    }
}
