//! Energy math on time series of `(t seconds, value)` points, sorted by time.
//!
//! - Integration follows InferenceX `utils/aggregate_power.py`
//!   (`_integrate_device`): per device, trapezoidal rule over the samples inside
//!   the window, with the power at each window boundary linearly interpolated
//!   between the two samples that bracket it.
//! - Energy counters (NVML `nvmlDeviceGetTotalEnergyConsumption`, AMD SMI
//!   `amdsmi_get_energy_count`, RAPL `energy_uj`) are read as a delta between
//!   the window boundaries, also linearly interpolated, after unwrapping.
//! - Counter vs integral cross-check as in Zeus (which prefers the hardware
//!   counter where one exists and falls back to integrating power) and in
//!   InferenceX `cross_check_accumulator`: relative difference
//!   `|counter - integral| / counter`, tolerance [`CROSS_CHECK_TOLERANCE`].

use serde::{Deserialize, Serialize};

use crate::metrics::stats::{mean, percentile_sorted, sorted};

/// Relative tolerance of the counter / integral cross-check: 5 %, InferenceX's
/// `_ACCUMULATOR_TOLERANCE`.
pub const CROSS_CHECK_TOLERANCE: f64 = 0.05;
/// Largest gap between two samples, in seconds, inside a window before its
/// power figures are invalid (InferenceX `_DEFAULT_MAX_SAMPLE_GAP_S`).
pub const MAX_SAMPLE_GAP_S: f64 = 3.0;
/// A power reading at or below this many watts over a whole window is "stuck"
/// (rocm-smi has reported 0-2 W for busy MI325X GPUs).
pub const STUCK_LOW_W: f64 = 2.0;
/// Mean utilisation (%) above which a GPU counts as busy for the validity rule.
pub const BUSY_UTIL_PCT: f64 = 10.0;
/// A window with at least this many identical power readings is "constant".
pub const CONSTANT_MIN_SAMPLES: usize = 10;

/// Value of the piecewise-linear series at `t`, or `None` when `t` lies outside
/// the series. An exact sample time returns that sample.
pub fn interpolate(series: &[(f64, f64)], t: f64) -> Option<f64> {
    if series.is_empty() || t < series[0].0 || t > series[series.len() - 1].0 {
        return None;
    }
    let right = series.partition_point(|&(ts, _)| ts < t);
    let (rt, rv) = series[right];
    if (rt - t).abs() <= 1e-12 || right == 0 {
        return Some(rv);
    }
    let (lt, lv) = series[right - 1];
    if rt == lt {
        return Some(rv);
    }
    Some(lv + (t - lt) / (rt - lt) * (rv - lv))
}

/// Whether samples exist at or before `t0` and at or after `t1`.
pub fn brackets(series: &[(f64, f64)], t0: f64, t1: f64) -> bool {
    !series.is_empty() && series[0].0 <= t0 && series[series.len() - 1].0 >= t1
}

/// Energy in joules of a power series in watts over `[t0, t1]`: trapezoidal
/// rule with linear interpolation at the boundaries (InferenceX
/// `_integrate_device`). `None` when the samples do not bracket the window.
pub fn trapezoid_j(power_w: &[(f64, f64)], t0: f64, t1: f64) -> Option<f64> {
    if t1 < t0 || !brackets(power_w, t0, t1) {
        return None;
    }
    let mut pts = vec![(t0, interpolate(power_w, t0)?)];
    pts.extend(power_w.iter().copied().filter(|&(t, _)| t > t0 && t < t1));
    pts.push((t1, interpolate(power_w, t1)?));
    Some(pts.windows(2).map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0).sum())
}

/// Largest gap in seconds between consecutive samples that matter for
/// `[t0, t1]` (from the last sample at or before `t0` to the first at or after `t1`).
pub fn max_gap_s(series: &[(f64, f64)], t0: f64, t1: f64) -> f64 {
    let lo = series.partition_point(|&(t, _)| t <= t0).saturating_sub(1);
    let hi = (series.partition_point(|&(t, _)| t < t1) + 1).min(series.len());
    series[lo..hi].windows(2).map(|w| w[1].0 - w[0].0).fold(0.0, f64::max)
}

/// A counter delta over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterDelta {
    /// Energy in joules between the window boundaries.
    pub joules: f64,
    /// Counter wraps unwrapped inside the window.
    pub wraps: u32,
}

/// Energy from a cumulative counter series (joules) over `[t0, t1]`.
///
/// A step down is a wrap when `wrap_range_j` is known and the drop is more
/// than half of it (the counter went past its maximum and restarted at 0): the
/// range is added back. Any other step down is a reset (driver reload, counter
/// re-initialised) and the counter is unusable for the window. A counter that
/// does not advance over a window of non-zero length is stuck. Errors are
/// reasons, in words.
pub fn counter_delta(
    counter_j: &[(f64, f64)],
    t0: f64,
    t1: f64,
    wrap_range_j: Option<f64>,
) -> Result<CounterDelta, String> {
    if t1 < t0 {
        return Err("empty window".into());
    }
    if !brackets(counter_j, t0, t1) {
        return Err("counter samples do not bracket the window".into());
    }
    let lo = counter_j.partition_point(|&(t, _)| t <= t0).saturating_sub(1);
    let hi = (counter_j.partition_point(|&(t, _)| t < t1) + 1).min(counter_j.len());
    let part = &counter_j[lo..hi];
    let mut unwrapped = Vec::with_capacity(part.len());
    let mut offset = 0.0;
    let mut wraps = 0;
    for (i, &(t, v)) in part.iter().enumerate() {
        if i > 0 {
            let prev = part[i - 1].1;
            if v < prev {
                match wrap_range_j {
                    Some(r) if r > 0.0 && prev - v > r / 2.0 => {
                        offset += r;
                        wraps += 1;
                    }
                    _ => return Err(format!("counter reset at t={t:.3} s ({prev:.3} J -> {v:.3} J)")),
                }
            }
        }
        unwrapped.push((t, v + offset));
    }
    let joules = interpolate(&unwrapped, t1).unwrap() - interpolate(&unwrapped, t0).unwrap();
    if t1 > t0 && joules <= 0.0 {
        return Err("counter did not advance over the window".into());
    }
    Ok(CounterDelta { joules, wraps })
}

/// Counter delta against integrated power (InferenceX
/// `cross_check_accumulator`; Zeus prefers the counter where it exists).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CrossCheck {
    /// Counter delta, J.
    pub counter_j: f64,
    /// Trapezoidal integral of power, J.
    pub integrated_j: f64,
    /// `|counter_j - integrated_j| / counter_j`.
    pub relative_error: f64,
    /// The tolerance used ([`CROSS_CHECK_TOLERANCE`]).
    pub tolerance: f64,
    /// `relative_error <= tolerance`.
    pub within_tolerance: bool,
}

/// Compare a counter delta with an integral of power (both J).
pub fn cross_check(counter_j: f64, integrated_j: f64, tolerance: f64) -> CrossCheck {
    let relative_error = if counter_j > 0.0 { (counter_j - integrated_j).abs() / counter_j } else { f64::INFINITY };
    CrossCheck { counter_j, integrated_j, relative_error, tolerance, within_tolerance: relative_error <= tolerance }
}

/// The power validity rule for one device over `[t0, t1]`. Returns the
/// reasons the power readings are invalid (empty: valid):
///
/// - fewer than 2 samples, or samples that do not bracket the window, or a gap
///   over [`MAX_SAMPLE_GAP_S`] (InferenceX's rules);
/// - stuck low: every reading in the window at or below [`STUCK_LOW_W`];
/// - constant: at least [`CONSTANT_MIN_SAMPLES`] readings in the window, all
///   equal, unless the device is known idle (mean utilisation at or below
///   [`BUSY_UTIL_PCT`]): a busy accelerator's power moves.
///
/// `util_pct` is the utilisation readings inside the window (may be empty).
pub fn power_invalid_reasons(power_w: &[(f64, f64)], util_pct: &[f64], t0: f64, t1: f64) -> Vec<String> {
    let mut reasons = Vec::new();
    if power_w.len() < 2 {
        reasons.push(format!("insufficient_power_samples: {} reading(s)", power_w.len()));
        return reasons;
    }
    if !brackets(power_w, t0, t1) {
        reasons.push("window_not_bracketed: no power sample before the start or after the end".into());
    } else {
        let gap = max_gap_s(power_w, t0, t1);
        if gap > MAX_SAMPLE_GAP_S {
            reasons.push(format!("sampling_gap_exceeded: {gap:.2} s > {MAX_SAMPLE_GAP_S} s"));
        }
    }
    let inside: Vec<f64> = power_w.iter().filter(|&&(t, _)| t >= t0 && t <= t1).map(|&(_, p)| p).collect();
    let check: Vec<f64> = if inside.is_empty() {
        // A window shorter than the interval: judge the bracketing samples.
        let lo = power_w.partition_point(|&(t, _)| t <= t0).saturating_sub(1);
        power_w[lo..(lo + 2).min(power_w.len())].iter().map(|&(_, p)| p).collect()
    } else {
        inside
    };
    let util_mean = (!util_pct.is_empty()).then(|| mean(util_pct));
    let max = check.iter().copied().fold(f64::MIN, f64::max);
    let min = check.iter().copied().fold(f64::MAX, f64::min);
    if max <= STUCK_LOW_W {
        match util_mean {
            Some(u) if u > BUSY_UTIL_PCT => reasons.push(format!(
                "power_stuck_low: all {} readings <= {STUCK_LOW_W} W while utilisation averaged {u:.0} %",
                check.len()
            )),
            _ => reasons.push(format!("power_stuck_low: all {} readings <= {STUCK_LOW_W} W", check.len())),
        }
    } else if check.len() >= CONSTANT_MIN_SAMPLES && max - min <= 1e-9 {
        let idle = matches!(util_mean, Some(u) if u <= BUSY_UTIL_PCT);
        if !idle {
            reasons.push(format!("power_constant: all {} readings = {max} W over the window", check.len()));
        }
    }
    reasons
}

/// Summary statistics of readings (mean, min, max, p50, p99).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub p50: f64,
    pub p99: f64,
}

impl Stats {
    /// Statistics of `values`; `None` when empty. Percentiles use numpy's
    /// default linear interpolation between order statistics.
    pub fn of(values: &[f64]) -> Option<Stats> {
        let v = sorted(values);
        Some(Stats {
            mean: mean(&v),
            min: *v.first()?,
            max: *v.last()?,
            p50: percentile_sorted(&v, 50.0),
            p99: percentile_sorted(&v, 99.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn trapezoid_constant_and_ramp() {
        // 500 W flat for 10 s = 5000 J (InferenceX's flat-stream fixture).
        let flat: Vec<_> = (0..=10).map(|i| (i as f64, 500.0)).collect();
        assert!(close(trapezoid_j(&flat, 0.0, 10.0).unwrap(), 5000.0));
        // Ramp 0..100 W over 10 s: 500 J; the sub-window [2.5, 7.5] with
        // interpolated boundaries: mean 50 W x 5 s = 250 J.
        let ramp: Vec<_> = (0..=10).map(|i| (i as f64, 10.0 * i as f64)).collect();
        assert!(close(trapezoid_j(&ramp, 0.0, 10.0).unwrap(), 500.0));
        assert!(close(trapezoid_j(&ramp, 2.5, 7.5).unwrap(), 250.0));
        // Window inside one sample interval.
        assert!(close(trapezoid_j(&ramp, 2.2, 2.4).unwrap(), 0.2 * 23.0));
        // Not bracketed.
        assert_eq!(trapezoid_j(&ramp, -1.0, 5.0), None);
        assert_eq!(trapezoid_j(&ramp, 5.0, 10.5), None);
    }

    #[test]
    fn trapezoid_uneven_spacing() {
        let s = [(0.0, 100.0), (0.1, 200.0), (1.0, 200.0), (3.0, 0.0)];
        // 0.1*150 + 0.9*200 + 2*100 = 15 + 180 + 200
        assert!(close(trapezoid_j(&s, 0.0, 3.0).unwrap(), 395.0));
    }

    #[test]
    fn counter_delta_plain_and_interpolated() {
        let c: Vec<_> = (0..=10).map(|i| (i as f64, 1000.0 + 300.0 * i as f64)).collect();
        let d = counter_delta(&c, 0.0, 10.0, None).unwrap();
        assert!(close(d.joules, 3000.0));
        assert_eq!(d.wraps, 0);
        let d = counter_delta(&c, 0.5, 2.25, None).unwrap();
        assert!(close(d.joules, 1.75 * 300.0));
    }

    #[test]
    fn counter_wrap_is_unwrapped() {
        // A 32-bit counter of 15.259 uJ units wraps at 2^32 * 15.259e-6 J.
        let range = 4294967296.0 * 15.259e-6;
        let start = range - 250.0;
        let c: Vec<_> = (0..=4)
            .map(|i| {
                let v = start + 100.0 * i as f64;
                (i as f64, if v >= range { v - range } else { v })
            })
            .collect();
        assert!(c[3].1 < c[2].1, "fixture wraps");
        let d = counter_delta(&c, 0.0, 4.0, Some(range)).unwrap();
        assert!((d.joules - 400.0).abs() < 1e-6, "{}", d.joules);
        assert_eq!(d.wraps, 1);
    }

    #[test]
    fn counter_reset_and_stuck_are_errors() {
        let c = [(0.0, 5000.0), (1.0, 5100.0), (2.0, 20.0), (3.0, 120.0)];
        let e = counter_delta(&c, 0.0, 3.0, None).unwrap_err();
        assert!(e.contains("reset"), "{e}");
        // A small drop is a reset even when the wrap range is known.
        let e = counter_delta(&c[..3], 0.0, 2.0, Some(1e9)).unwrap_err();
        assert!(e.contains("reset"), "{e}");
        // The reset outside the window does not matter.
        let d = counter_delta(&c, 2.0, 3.0, None).unwrap();
        assert!(close(d.joules, 100.0));
        let stuck = [(0.0, 7.0), (1.0, 7.0), (2.0, 7.0)];
        assert!(counter_delta(&stuck, 0.0, 2.0, None).unwrap_err().contains("did not advance"));
        assert!(counter_delta(&stuck, -1.0, 2.0, None).unwrap_err().contains("bracket"));
    }

    #[test]
    fn cross_check_flags_mismatch() {
        let ok = cross_check(1000.0, 1030.0, CROSS_CHECK_TOLERANCE);
        assert!(ok.within_tolerance);
        assert!(close(ok.relative_error, 0.03));
        let bad = cross_check(1000.0, 1200.0, CROSS_CHECK_TOLERANCE);
        assert!(!bad.within_tolerance);
        // Same numbers from series: power 100 W for 10 s vs a counter claiming 2000 J.
        let p: Vec<_> = (0..=10).map(|i| (i as f64, 100.0)).collect();
        let c: Vec<_> = (0..=10).map(|i| (i as f64, 200.0 * i as f64)).collect();
        let x =
            cross_check(counter_delta(&c, 0.0, 10.0, None).unwrap().joules, trapezoid_j(&p, 0.0, 10.0).unwrap(), 0.05);
        assert!(!x.within_tolerance);
        assert!(close(x.relative_error, 0.5));
    }

    #[test]
    fn validity_rule() {
        let t: Vec<f64> = (0..=20).map(|i| i as f64 * 0.1).collect();
        let varied: Vec<_> = t.iter().map(|&t| (t, 300.0 + 50.0 * (t * 7.0).sin())).collect();
        assert!(power_invalid_reasons(&varied, &[90.0; 20], 0.0, 2.0).is_empty());
        // 0-2 W while busy.
        let low: Vec<_> = t.iter().enumerate().map(|(i, &t)| (t, (i % 3) as f64)).collect();
        let r = power_invalid_reasons(&low, &[95.0; 20], 0.0, 2.0);
        assert!(r.len() == 1 && r[0].starts_with("power_stuck_low") && r[0].contains("utilisation"), "{r:?}");
        // 0-2 W with no utilisation known is invalid too.
        assert!(power_invalid_reasons(&low, &[], 0.0, 2.0)[0].starts_with("power_stuck_low"));
        // Constant while busy or unknown: invalid; constant while idle: fine.
        let flat: Vec<_> = t.iter().map(|&t| (t, 137.0)).collect();
        assert!(power_invalid_reasons(&flat, &[80.0; 20], 0.0, 2.0)[0].starts_with("power_constant"));
        assert!(power_invalid_reasons(&flat, &[], 0.0, 2.0)[0].starts_with("power_constant"));
        assert!(power_invalid_reasons(&flat, &[0.0; 20], 0.0, 2.0).is_empty());
        // Too few samples to call constant.
        assert!(power_invalid_reasons(&flat[..5], &[80.0; 5], 0.0, 0.4).is_empty());
        // Not bracketed, gaps, too few.
        assert!(power_invalid_reasons(&varied, &[], -0.5, 2.0)[0].starts_with("window_not_bracketed"));
        let gappy = [(0.0, 100.0), (0.5, 120.0), (4.0, 110.0), (4.5, 130.0)];
        assert!(power_invalid_reasons(&gappy, &[], 0.0, 4.5)[0].starts_with("sampling_gap_exceeded"));
        assert!(power_invalid_reasons(&gappy[..1], &[], 0.0, 0.0)[0].starts_with("insufficient"));
    }

    #[test]
    fn stats_match_numpy_linear() {
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!(close(s.mean, 2.5) && close(s.p50, 2.5) && close(s.p99, 3.97) && s.min == 1.0 && s.max == 4.0);
        assert!(Stats::of(&[]).is_none());
    }

    #[test]
    fn max_gap_only_counts_the_window() {
        let s = [(0.0, 1.0), (10.0, 1.0), (10.1, 1.0), (10.2, 1.0), (30.0, 1.0)];
        assert!(close(max_gap_s(&s, 10.05, 10.15), 0.1));
        assert!(close(max_gap_s(&s, 5.0, 10.15), 10.0));
    }
}
