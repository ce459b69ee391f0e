//! The distributions behind `ab`'s intervals and tests: Student's t (CDF
//! and quantile) through the regularized incomplete beta function, the
//! chi-square survival function on 1 degree of freedom, the binomial CDF at
//! p = 1/2, and McNemar's test built from the last two.
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

use serde::Serialize;

/// McNemar: below this many discordant pairs the exact binomial test is used.
pub const MCNEMAR_EXACT_BELOW: u64 = 25;

/// CDF of Student's t distribution with `df` > 0 degrees of freedom
/// (`df` = infinity: the standard normal). For t < 0,
/// P(T <= t) = I_x(df / 2, 1 / 2) / 2 with x = df / (df + t²), I the
/// regularized incomplete beta function (Abramowitz & Stegun 26.7.1 and
/// 26.5.27).
pub fn student_t_cdf(t: f64, df: f64) -> f64 {
    if df.is_infinite() {
        return 0.5 * libm::erfc(-t / std::f64::consts::SQRT_2);
    }
    let tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    if t < 0.0 { tail } else { 1.0 - tail }
}

/// Quantile of Student's t with `df` degrees of freedom: the t with
/// [`student_t_cdf`](t, df) = p, 0 < p < 1, by bisection to 1e-12 (the CDF is
/// monotone; 200 halvings of [-1e6, 1e6] would be more than enough).
pub fn student_t_quantile(p: f64, df: f64) -> f64 {
    let (mut lo, mut hi) = (-1e6f64, 1e6f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if student_t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo < 1e-12 * (1.0 + mid.abs()) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// Regularized incomplete beta I_x(a, b), by its continued fraction with the
/// modified Lentz method (Press et al., *Numerical Recipes*, 3rd ed., 2007,
/// §6.4: the fraction for x < (a + 1) / (a + b + 2), the symmetry
/// I_x(a, b) = 1 - I_{1-x}(b, a) otherwise).
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = libm::lgamma(a + b) - libm::lgamma(a) - libm::lgamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_fraction(a, b, x) / a
    } else {
        1.0 - ln_front.exp() * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
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
    fn student_t_matches_closed_forms_and_tables() {
        // Closed forms of the t quantile (Hill 1970, CACM 13(10)): df 1:
        // tan(π (p - 1/2)); df 2: (2p - 1) sqrt(2 / α); df 4:
        // 2 sqrt(cos(θ / 3) / sqrt(α) - 1), α = 4p(1 - p), θ = acos(sqrt(α)).
        for p in [0.6, 0.8, 0.9, 0.975, 0.995] {
            let a = 4.0 * p * (1.0 - p);
            close(student_t_quantile(p, 1.0), (std::f64::consts::PI * (p - 0.5)).tan(), 1e-8);
            close(student_t_quantile(p, 2.0), (2.0 * p - 1.0) * (2.0 / a).sqrt(), 1e-9);
            close(student_t_quantile(p, 4.0), 2.0 * ((a.sqrt().acos() / 3.0).cos() / a.sqrt() - 1.0).sqrt(), 1e-9);
            close(student_t_cdf(-student_t_quantile(p, 3.0), 3.0), 1.0 - p, 1e-12);
        }
        close(student_t_quantile(0.975, 2.0), 4.302652729749464, 1e-9);
        // Printed tables (6 digits; 0.80 by numerical integration of the density): t(0.975, 9) = 2.262157, t(0.80, 9) = 0.883404,
        // t(0.975, 30) = 2.042272; the normal z(0.975) = 1.959963984540054.
        close(student_t_quantile(0.975, 9.0), 2.262157, 1e-6);
        close(student_t_quantile(0.80, 9.0), 0.883404, 1e-6);
        close(student_t_quantile(0.975, 30.0), 2.042272, 1e-6);
        close(student_t_quantile(0.975, f64::INFINITY), 1.959963984540054, 1e-9);
        close(student_t_cdf(0.0, 3.0), 0.5, 1e-15);
    }
}
