//! Coverage measured, not assumed: a simulation of A/A and A/B runs with
//! known run-to-run and request-to-request noise, checking how often the 95%
//! interval of [`super::stats::delta_interval`] holds the true change at
//! R = 2, 3, 5, 10 repeats, the power at a known shift, and that the old
//! two-level percentile bootstrap ([`super::stats::bootstrap_delta`]) fails
//! the same check.
//!
//! The model of one repeat of one variant: a whole-run factor
//! exp(N(0, σ_run)) (each engine run its own, as on a shared machine) times
//! per-request values 50 ms · exp(N(0, σ_req)) for n requests; the figure is
//! the median (a TPOT-like latency), the candidate's values are scaled by
//! exp(shift). The true change of the median is exp(shift) - 1.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use super::stats::{BootstrapOptions, RepeatData, bootstrap_delta, delta_interval};

/// Requests per repeat.
const N_REQUESTS: usize = 16;
/// Allowed distance of the measured coverage from 95%: about 3.5 binomial
/// standard errors at 1000 trials (sqrt(0.95 · 0.05 / 1000) = 0.0069).
const TOLERANCE: f64 = 0.025;

struct Noise {
    run: f64,
    request: f64,
}

/// R repeat pairs: (baseline, candidate).
fn draw(rng: &mut ChaCha8Rng, r: usize, noise: &Noise, shift: f64) -> (Vec<RepeatData>, Vec<RepeatData>) {
    let run = Normal::new(0.0, noise.run).unwrap();
    let req = Normal::new(0.0, noise.request).unwrap();
    let one = |rng: &mut ChaCha8Rng, s: f64| {
        let factor = (run.sample(rng) + s).exp();
        RepeatData::Median((0..N_REQUESTS).map(|_| 50.0 * factor * req.sample(rng).exp()).collect())
    };
    let mut b = Vec::new();
    let mut c = Vec::new();
    for _ in 0..r {
        b.push(one(rng, 0.0));
        c.push(one(rng, shift));
    }
    (b, c)
}

/// (coverage of the true change, fraction of intervals excluding 0) over
/// `trials` draws, for the new interval (`old` false) or the old bootstrap.
fn measure(seed: u64, trials: usize, r: usize, noise: &Noise, shift: f64, old: bool) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let truth = shift.exp_m1();
    let (mut covered, mut detected) = (0usize, 0usize);
    for t in 0..trials {
        let (b, c) = draw(&mut rng, r, noise, shift);
        let opts = BootstrapOptions { resamples: 500, seed: 1, stream: t as u64 };
        let ci = if old { bootstrap_delta(&b, &c, opts).unwrap().ci } else { delta_interval(&b, &c, opts).unwrap().ci };
        let (lo, hi) = ci.expect("repeats vary");
        covered += usize::from(lo <= truth && truth <= hi);
        detected += usize::from(lo > 0.0 || hi < 0.0);
    }
    let out = (covered as f64 / trials as f64, detected as f64 / trials as f64);
    // Shown with --nocapture: the figures quoted in the tests' comments.
    let method = if old { "old" } else { "new" };
    eprintln!("R = {r}, run {}, request {}, shift {shift:.3}, {method}: coverage {:.3}, excludes 0 {:.3}", noise.run, noise.request, out.0, out.1);
    out
}

const RS: [usize; 4] = [2, 3, 5, 10];

#[test]
fn new_interval_covers_95_percent_at_small_repeats() {
    // Run-to-run noise 5% and request noise 10% per request (the median of
    // 16 then moves ~3%), run-to-run dominant (request 2%), then request
    // noise only. Measured (2026-12-01, 1000 trials each): coverage 0.937 to
    // 0.958 at every R, noise and shift.
    let cases = [Noise { run: 0.05, request: 0.10 }, Noise { run: 0.05, request: 0.02 }, Noise { run: 0.0, request: 0.20 }];
    for (ni, noise) in cases.iter().enumerate() {
        for (i, &r) in RS.iter().enumerate() {
            let (aa, false_pos) = measure(100 + (ni * 10 + i) as u64, 1000, r, noise, 0.0, false);
            assert!((aa - 0.95).abs() <= TOLERANCE, "A/A coverage {aa} at R = {r} (noise {ni})");
            assert!(false_pos <= 0.05 + TOLERANCE, "A/A false positives {false_pos} at R = {r}");
            let (ab, _) = measure(200 + (ni * 10 + i) as u64, 1000, r, noise, 0.10f64.ln_1p(), false);
            assert!((ab - 0.95).abs() <= TOLERANCE, "A/B coverage {ab} at R = {r} (noise {ni})");
        }
    }
}

#[test]
fn power_at_a_ten_percent_shift_grows_with_repeats() {
    // Per-pair log-ratio sd ≈ sqrt(2 · (0.05² + 0.031²)) ≈ 0.083: a +10%
    // change is ~3.6 standard errors at R = 10, so detected in most runs;
    // at R = 2 the t quantile is 12.7 and it almost never is. Measured
    // (2026-12-01): power 0.12, 0.22, 0.50, 0.90 at R = 2, 3, 5, 10.
    let noise = Noise { run: 0.05, request: 0.10 };
    let power: Vec<f64> = RS.iter().map(|&r| measure(300 + r as u64, 1000, r, &noise, 0.10f64.ln_1p(), false).1).collect();
    assert!(power.windows(2).all(|w| w[1] > w[0]), "power {power:?} at R = {RS:?}");
    assert!(power[3] >= 0.80, "power at R = 10: {power:?}");
    assert!(power[0] < 0.25, "power at R = 2: {power:?}");
}

#[test]
fn old_percentile_bootstrap_fails_the_coverage_check() {
    // The same kind of A/A draws through the old two-level percentile
    // bootstrap (500 resamples, 400 trials) when run-to-run noise dominates,
    // as on this shared machine (5% per run, request noise 2% per request,
    // ~0.6% on a median of 16). Measured (2026-12-01): coverage 0.60, 0.77,
    // 0.87, 0.87 at R = 2, 3, 5, 10 (false positives 40%, 23%, 13%, 13%);
    // the new interval on the same model: 0.94-0.96. (With request noise
    // only the old method over-covers instead, 0.98-0.99, as its doc said:
    // it counts the request variance twice.)
    let noise = Noise { run: 0.05, request: 0.02 };
    for &r in &RS {
        let (aa, false_pos) = measure(400 + r as u64, 400, r, &noise, 0.0, true);
        assert!(aa < 0.95 - TOLERANCE, "old coverage {aa} at R = {r} passes?");
        assert!(false_pos > 0.05 + TOLERANCE, "old false positives {false_pos} at R = {r}");
    }
}
