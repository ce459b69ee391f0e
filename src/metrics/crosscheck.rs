//! Cross-check of the harness's clock against vLLM's own per-request stats
//! (`RequestStateStats`: `first_token_latency`, first/last token timestamps).
//!
//! The harness's send time is taken just before `add_request` and its token
//! arrival when `step()` returns; vLLM's arrival time is taken inside
//! `add_request` and its token time inside the step. A request the
//! admission budget held back counts the hold in the harness's latency
//! (its send time is when it was due) but not in vLLM's: the hold
//! (`RequestRecord::held_s`) is taken off before comparing, so a slow
//! machine, whose gaps hold more back, does not read as a clock error
//! of a whole step. Otherwise the harness should
//! read slightly longer, by the request-processing and output-processing
//! time. A point agrees when, for TTFT and E2EL, the median difference is
//! within [`TOLERANCE_MS`] + [`TOLERANCE_REL`] of vLLM's median +
//! [`TOLERANCE_STEPS`] of the point's median step time, and no single request
//! differs by more than 5x that.
//!
//! Why a step term: the harness sees a token when `step()` returns, so its
//! resolution is one step, and the error this check exists to catch (a token
//! or a send attributed to the wrong step) is a whole step. The requests that
//! start together share their first-token step, so one stall after vLLM's
//! timestamp in that step (a preemption or a GC pause on a busy 2-core VM,
//! ~10 ms measured in CI) moves the median of all of them; half a step
//! separates that noise from a real attribution error.

use serde::{Deserialize, Serialize};

use super::stats::{mean, median, percentile_sorted, sorted};
use crate::protocol::{EngineTiming, RequestRecord};

/// Absolute part of the tolerance, ms.
pub const TOLERANCE_MS: f64 = 2.0;
/// Relative part of the tolerance (of vLLM's median).
pub const TOLERANCE_REL: f64 = 0.02;
/// Step part of the tolerance (of the point's median `step()` wall time).
pub const TOLERANCE_STEPS: f64 = 0.5;

/// Harness minus vLLM, over the compared requests, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub mean_ms: f64,
    pub median_ms: f64,
    pub max_abs_ms: f64,
    /// vLLM's own median of the metric, ms.
    pub vllm_median_ms: f64,
    /// Allowed |median difference|, ms.
    pub tolerance_ms: f64,
}

impl Difference {
    fn of(harness_ms: &[f64], vllm_ms: &[f64], median_step_ms: f64) -> Difference {
        let d = sorted(&harness_ms.iter().zip(vllm_ms).map(|(h, v)| h - v).collect::<Vec<_>>());
        let vllm_median_ms = median(vllm_ms);
        Difference {
            mean_ms: mean(&d),
            median_ms: percentile_sorted(&d, 50.0),
            max_abs_ms: d.iter().fold(0.0, |m, x| m.max(x.abs())),
            vllm_median_ms,
            tolerance_ms: TOLERANCE_MS + TOLERANCE_REL * vllm_median_ms + TOLERANCE_STEPS * median_step_ms,
        }
    }

    fn within(&self) -> bool {
        self.median_ms.abs() <= self.tolerance_ms && self.max_abs_ms <= 5.0 * self.tolerance_ms
    }
}

/// The cross-check of one point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CrossCheck {
    /// Completed requests that vLLM reported timings for.
    pub requests: u32,
    pub ttft: Difference,
    pub e2el: Difference,
    /// Both within tolerance.
    pub agree: bool,
}

/// Compares completed requests with vLLM's timings; `None` when vLLM reported
/// none (e.g. `--disable-log-stats`). `median_step_ms`: the point's median
/// `step()` wall time, ms (see the module doc for why it widens the tolerance).
pub fn cross_check(
    records: &[RequestRecord],
    timings: &[Option<EngineTiming>],
    median_step_ms: f64,
) -> Option<CrossCheck> {
    let (mut h_ttft, mut v_ttft, mut h_e2el, mut v_e2el) = (vec![], vec![], vec![], vec![]);
    for (r, t) in records.iter().zip(timings) {
        let (Some(t), Some(ttft), Some(e2el)) = (t, r.ttft_s(), r.e2el_s()) else { continue };
        if !r.ok() {
            continue;
        }
        // vLLM's clock starts at add_request, after any admission hold.
        h_ttft.push((ttft - r.held_s) * 1000.0);
        v_ttft.push(t.ttft_s * 1000.0);
        h_e2el.push((e2el - r.held_s) * 1000.0);
        v_e2el.push((t.ttft_s + t.decode_s) * 1000.0);
    }
    if h_ttft.is_empty() {
        return None;
    }
    let ttft = Difference::of(&h_ttft, &v_ttft, median_step_ms);
    let e2el = Difference::of(&h_e2el, &v_e2el, median_step_ms);
    Some(CrossCheck { requests: h_ttft.len() as u32, agree: ttft.within() && e2el.within(), ttft, e2el })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ttft: f64, e2el: f64) -> RequestRecord {
        let mut r = RequestRecord { input_tokens: 1, ..Default::default() };
        r.on_tokens(ttft, 1);
        r.on_tokens(e2el, 1);
        r
    }
    fn timing(ttft: f64, decode: f64) -> Option<EngineTiming> {
        Some(EngineTiming { rid: 0, ttft_s: ttft, decode_s: decode, queued_s: 0.0, generation_tokens: Some(2) })
    }

    #[test]
    fn small_offsets_agree() {
        let recs = [rec(0.1005, 0.5010), rec(0.2004, 0.6009)];
        let t = [timing(0.100, 0.400), timing(0.200, 0.400)];
        let c = cross_check(&recs, &t, 0.0).unwrap();
        assert_eq!(c.requests, 2);
        assert!((c.ttft.median_ms - 0.45).abs() < 1e-6, "{c:?}");
        assert!((c.e2el.max_abs_ms - 1.0).abs() < 1e-6);
        assert!(c.agree);
    }

    #[test]
    fn an_admission_hold_is_not_a_clock_error() {
        // Held back 300 ms (one slow step) before add_request: vLLM's clock
        // starts after the hold, the harness's before it.
        let mut r = rec(0.4005, 0.8010);
        r.held_s = 0.300;
        let c = cross_check(&[r.clone()], &[timing(0.100, 0.400)], 300.0).unwrap();
        assert!(c.agree && (c.ttft.median_ms - 0.5).abs() < 1e-6, "{c:?}");
        r.held_s = 0.0;
        assert!(!cross_check(&[r], &[timing(0.100, 0.400)], 300.0).unwrap().agree, "without the hold it is a step off");
    }

    #[test]
    fn a_clock_error_is_reported() {
        // The harness reads 50 ms more TTFT than vLLM: one 50 ms step late,
        // beyond 2 ms + 2% + half a step.
        let recs = [rec(0.150, 0.550)];
        let c = cross_check(&recs, &[timing(0.100, 0.400)], 50.0).unwrap();
        assert!(!c.agree);
        assert!((c.ttft.median_ms - 50.0).abs() < 1e-9);
        assert!((c.ttft.tolerance_ms - (2.0 + 2.0 + 25.0)).abs() < 1e-9);
    }

    #[test]
    fn a_stall_shorter_than_half_a_step_agrees() {
        // 11 ms late on the first token of a 45 ms-step point (seen in CI).
        let recs = [rec(0.111, 0.502)];
        assert!(cross_check(&recs, &[timing(0.100, 0.400)], 45.0).unwrap().agree);
        assert!(!cross_check(&recs, &[timing(0.100, 0.400)], 0.0).unwrap().agree);
    }

    #[test]
    fn no_timings_no_check() {
        assert!(cross_check(&[rec(0.1, 0.2)], &[None], 10.0).is_none());
    }
}
