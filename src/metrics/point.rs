//! Figures of one sweep point from its request records.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::RequestRecord;
use super::stats::Summary;
use crate::recipe::sweep::Goodput;

/// How to summarise a point.
#[derive(Debug, Clone, Copy)]
pub struct FigureSpec<'a> {
    /// Latency percentiles to report, 0..=100.
    pub percentiles: &'a [f64],
    /// GPUs the engine spans (TP x PP), the divisor of the per-GPU throughputs.
    pub gpus: u32,
    /// SLOs for goodput, if any.
    pub goodput: Option<Goodput>,
}

/// Throughput and latency of one point, as `vllm bench serve` reports them.
///
/// A point in which no request completed (one interrupted before its first
/// request finished) has no figures: its duration, throughputs and latency
/// figures are NaN here and `null` in JSON (read back as NaN), never a 0
/// that could pass for a measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointFigures {
    /// Requests that finished normally.
    pub completed: u32,
    /// Requests sent that failed or were aborted (never dropped silently).
    pub failed: u32,
    /// Requests never sent: the point was interrupted (Ctrl-C) before their
    /// turn. Neither completed nor failed; absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_sent: u32,
    /// Prompt tokens of completed requests.
    pub total_input_tokens: u64,
    /// Generated tokens of completed requests.
    pub total_output_tokens: u64,
    /// From the first request sent to the last token received, s.
    #[serde(deserialize_with = "null_is_nan")]
    pub duration_s: f64,
    /// completed / duration, req/s.
    #[serde(deserialize_with = "null_is_nan")]
    pub request_throughput: f64,
    /// total_output_tokens / duration, tok/s.
    #[serde(deserialize_with = "null_is_nan")]
    pub output_throughput: f64,
    /// (total_input_tokens + total_output_tokens) / duration, tok/s.
    #[serde(deserialize_with = "null_is_nan")]
    pub total_token_throughput: f64,
    /// total_token_throughput / GPUs, as InferenceX's `tput_per_gpu`, tok/s/GPU.
    #[serde(deserialize_with = "null_is_nan")]
    pub tput_per_gpu: f64,
    /// output_throughput / GPUs (InferenceX `output_tput_per_gpu`), tok/s/GPU.
    #[serde(deserialize_with = "null_is_nan")]
    pub output_tput_per_gpu: f64,
    /// (total - output) throughput / GPUs (InferenceX `input_tput_per_gpu`), tok/s/GPU.
    #[serde(deserialize_with = "null_is_nan")]
    pub input_tput_per_gpu: f64,
    /// Completed requests meeting every goodput SLO / duration, req/s (as
    /// bench serve's `request_goodput`); absent without SLOs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_goodput: Option<f64>,
    /// `{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`, named as bench serve names
    /// them (`p99.9_ttft_ms` for 99.9), ms. `itl` has one gap per step that
    /// gave a request tokens (per chunk, as current bench serve records one
    /// per stream chunk); `itl_per_token` divides each gap over the chunk's
    /// tokens (equal to `itl` without speculative decoding); and `{mean,median,pNN}_intvty` =
    /// 1000 / the TPOT figure, tok/s/user, as InferenceX's `*_intvty` (absent
    /// where TPOT is 0).
    #[serde(flatten, deserialize_with = "null_is_nan_map")]
    pub latency_ms: BTreeMap<String, f64>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A figure written as `null` (serde_json writes NaN so) read back as NaN
/// (also a DP rank's figures, `report::result::RankPoint`).
pub fn null_is_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// [`null_is_nan`] for each figure of the latency map.
fn null_is_nan_map<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
    let raw = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
    // The flattened map also sees the struct's other keys' leftovers: keep numbers and nulls.
    Ok(raw.into_iter().filter_map(|(k, v)| match v {
        serde_json::Value::Null => Some((k, f64::NAN)),
        v => v.as_f64().map(|x| (k, x)),
    }).collect())
}

impl PointFigures {
    /// A latency figure by key, e.g. `median_tpot_ms`; NaN when absent.
    pub fn ms(&self, key: &str) -> f64 {
        self.latency_ms.get(key).copied().unwrap_or(f64::NAN)
    }
}

/// Computes a point's figures. Only completed requests count toward tokens
/// and latencies, as in bench serve; TPOT only from requests with more than
/// one output token.
pub fn point_figures(records: &[RequestRecord], duration_s: f64, spec: FigureSpec<'_>) -> PointFigures {
    let done: Vec<&RequestRecord> = records.iter().filter(|r| r.ok()).collect();
    let not_sent = records.iter().filter(|r| r.not_sent()).count();
    // Nothing completed: no figure is defined (NaN, null in JSON).
    let duration_s = if done.is_empty() { f64::NAN } else { duration_s };
    let ms = |v: Option<f64>| v.map(|s| s * 1000.0);
    let ttft: Vec<f64> = done.iter().filter_map(|r| ms(r.ttft_s())).collect();
    let tpot: Vec<f64> = done.iter().filter_map(|r| ms(r.tpot_s())).collect();
    let e2el: Vec<f64> = done.iter().filter_map(|r| ms(r.e2el_s())).collect();
    let itl: Vec<f64> = done.iter().flat_map(|r| r.itl_s.iter().map(|s| s * 1000.0)).collect();
    let itl_per_token: Vec<f64> = done.iter().flat_map(|r| r.itl_per_token_s().map(|s| s * 1000.0)).collect();

    let total_input_tokens: u64 = done.iter().map(|r| u64::from(r.input_tokens)).sum();
    let total_output_tokens: u64 = done.iter().map(|r| u64::from(r.output_tokens)).sum();
    let per_s = |x: f64| if duration_s > 0.0 { x / duration_s } else if duration_s.is_nan() { f64::NAN } else { 0.0 };

    let mut latency_ms = BTreeMap::new();
    let series = [("ttft", &ttft), ("tpot", &tpot), ("itl", &itl), ("itl_per_token", &itl_per_token), ("e2el", &e2el)];
    for (name, values) in series {
        let mut s = Summary::of(values, spec.percentiles);
        if done.is_empty() {
            s.mean = f64::NAN;
            s.median = f64::NAN;
            s.std = f64::NAN;
            s.percentiles.iter_mut().for_each(|p| p.1 = f64::NAN);
        }
        latency_ms.insert(format!("mean_{name}_ms"), s.mean);
        latency_ms.insert(format!("median_{name}_ms"), s.median);
        latency_ms.insert(format!("std_{name}_ms"), s.std);
        let mut put_intvty = |stat: String, tpot_ms: f64| {
            if name == "tpot" && tpot_ms > 0.0 {
                latency_ms.insert(format!("{stat}_intvty"), 1000.0 / tpot_ms);
            }
        };
        put_intvty("mean".into(), s.mean);
        put_intvty("median".into(), s.median);
        for &(p, v) in &s.percentiles {
            put_intvty(format!("p{}", percentile_word(p)), v);
        }
        for (p, v) in s.percentiles {
            latency_ms.insert(format!("p{}_{name}_ms", percentile_word(p)), v);
        }
    }
    let request_goodput = spec.goodput.map(|g| {
        let good = done
            .iter()
            .filter(|r| {
                // bench serve counts TPOT as 0 for single-token requests here.
                let tpot_ms = r.tpot_s().unwrap_or(0.0) * 1000.0;
                let ok = |slo: Option<f64>, v: Option<f64>| slo.is_none_or(|s| v.is_some_and(|v| v <= s));
                ok(g.ttft_ms, ms(r.ttft_s())) && ok(g.tpot_ms, Some(tpot_ms)) && ok(g.e2el_ms, ms(r.e2el_s()))
            })
            .count();
        per_s(good as f64)
    });
    let gpus = f64::from(spec.gpus.max(1));
    let output_throughput = per_s(total_output_tokens as f64);
    let total_token_throughput = per_s((total_input_tokens + total_output_tokens) as f64);

    PointFigures {
        completed: done.len() as u32,
        failed: (records.len() - done.len() - not_sent) as u32,
        not_sent: not_sent as u32,
        total_input_tokens,
        total_output_tokens,
        duration_s,
        request_throughput: per_s(done.len() as f64),
        output_throughput,
        total_token_throughput,
        tput_per_gpu: total_token_throughput / gpus,
        output_tput_per_gpu: output_throughput / gpus,
        input_tput_per_gpu: (total_token_throughput - output_throughput) / gpus,
        request_goodput,
        latency_ms,
    }
}

/// `99` for 99.0, `99.9` for 99.9, as bench serve formats percentile keys.
pub fn percentile_word(p: f64) -> String {
    if p.fract() == 0.0 { format!("{}", p as i64) } else { format!("{p}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(send: f64, arrivals: &[(f64, u32)]) -> RequestRecord {
        let mut r = RequestRecord { input_tokens: 10, send_s: send, ..Default::default() };
        for &(t, n) in arrivals {
            r.on_tokens(t, n);
        }
        r
    }

    const SPEC: FigureSpec<'static> = FigureSpec { percentiles: &[90.0, 99.0, 99.9], gpus: 1, goodput: None };

    #[test]
    fn hand_computed_timeline() {
        // Two requests, conc 2, duration 1.0 s.
        // A: sent 0.0, tokens at 0.2, 0.3, 0.4 -> TTFT 200, E2EL 400, TPOT 100, ITL 100, 100
        // B: sent 0.0, tokens at 0.4, 0.6, 1.0 -> TTFT 400, E2EL 1000, TPOT 300, ITL 200, 400
        let recs = [req(0.0, &[(0.2, 1), (0.3, 1), (0.4, 1)]), req(0.0, &[(0.4, 1), (0.6, 1), (1.0, 1)])];
        let f = point_figures(&recs, 1.0, SPEC);
        assert_eq!((f.completed, f.failed), (2, 0));
        assert_eq!((f.total_input_tokens, f.total_output_tokens), (20, 6));
        assert_eq!(f.request_throughput, 2.0);
        assert_eq!(f.output_throughput, 6.0);
        assert_eq!(f.total_token_throughput, 26.0);
        let close = |k: &str, v: f64| assert!((f.ms(k) - v).abs() < 1e-9, "{k}: {} != {v}", f.ms(k));
        close("mean_ttft_ms", 300.0);
        close("median_ttft_ms", 300.0);
        close("std_ttft_ms", 100.0);
        close("mean_e2el_ms", 700.0);
        close("mean_tpot_ms", 200.0);
        close("median_itl_ms", 150.0);
        close("mean_itl_ms", 200.0);
        // np.percentile([100, 100, 200, 400], 99) = 200 + 0.97 * 200
        close("p99_itl_ms", 394.0);
        assert!(f.latency_ms.contains_key("p99.9_ttft_ms"));
        assert!(f.latency_ms.contains_key("p90_e2el_ms"));
        // Interactivity = 1000 / TPOT(ms): mean TPOT 200 ms -> 5 tok/s/user.
        close("mean_intvty", 5.0);
        close("median_intvty", 5.0);
        assert!(!f.latency_ms.contains_key("std_intvty"));
        assert_eq!(f.request_goodput, None);
    }

    #[test]
    fn per_gpu_and_goodput() {
        let recs = [req(0.0, &[(0.2, 1), (0.3, 1), (0.4, 1)]), req(0.0, &[(0.4, 1), (0.6, 1), (1.0, 1)])];
        let goodput = Some(Goodput { ttft_ms: Some(300.0), tpot_ms: None, e2el_ms: None });
        let f = point_figures(&recs, 1.0, FigureSpec { percentiles: &[99.0], gpus: 8, goodput });
        // total 26 tok/s, output 6 tok/s over 8 GPUs
        assert_eq!(f.tput_per_gpu, 26.0 / 8.0);
        assert_eq!(f.output_tput_per_gpu, 6.0 / 8.0);
        assert_eq!(f.input_tput_per_gpu, 20.0 / 8.0);
        // Only A (TTFT 200 ms) meets TTFT <= 300 ms.
        assert_eq!(f.request_goodput, Some(1.0));
        let strict = Some(Goodput { ttft_ms: Some(500.0), tpot_ms: Some(150.0), e2el_ms: None });
        let f = point_figures(&recs, 1.0, FigureSpec { percentiles: &[99.0], gpus: 1, goodput: strict });
        assert_eq!(f.request_goodput, Some(1.0)); // B's TPOT 300 ms misses
    }

    #[test]
    fn failed_requests_are_counted_not_measured() {
        let mut bad = req(0.0, &[(0.1, 1)]);
        bad.error = Some("aborted".into());
        let recs = [req(0.0, &[(0.5, 1)]), bad, RequestRecord::default()];
        let f = point_figures(&recs, 0.5, SPEC);
        assert_eq!((f.completed, f.failed), (1, 2));
        assert_eq!(f.total_output_tokens, 1);
        // output_len 1: no TPOT sample, so TPOT figures are 0 as in bench serve.
        assert_eq!(f.ms("mean_tpot_ms"), 0.0);
        assert!((f.ms("mean_ttft_ms") - 500.0).abs() < 1e-9);
    }

    #[test]
    fn unsent_requests_are_not_failures_and_a_point_without_completions_has_no_figures() {
        let unsent = || RequestRecord { error: Some(crate::protocol::NOT_SENT.into()), ..RequestRecord::default() };
        let mut aborted = req(0.0, &[(0.1, 1)]);
        aborted.error = Some("aborted: interrupted".into());
        let f = point_figures(&[aborted, unsent(), unsent()], 0.4, SPEC);
        assert_eq!((f.completed, f.failed, f.not_sent), (0, 1, 2));
        for key in ["mean_ttft_ms", "median_tpot_ms", "p99_e2el_ms"] {
            assert!(f.ms(key).is_nan(), "{key}: {}", f.ms(key));
        }
        assert!(f.duration_s.is_nan() && f.output_throughput.is_nan() && f.tput_per_gpu.is_nan());
        // null in JSON, and read back as such.
        let v = serde_json::to_value(&f).unwrap();
        for key in ["mean_ttft_ms", "median_tpot_ms", "duration_s", "output_throughput"] {
            assert!(v[key].is_null(), "{key}: {v}");
        }
        assert_eq!(v["not_sent"], 2);
        let back: PointFigures = serde_json::from_value(v).unwrap();
        assert!(back.duration_s.is_nan() && back.ms("mean_ttft_ms").is_nan() && back.not_sent == 2);
        // With a completion the figures are numbers again, and not_sent is left out at 0.
        let f = point_figures(&[req(0.0, &[(0.5, 1)])], 0.5, SPEC);
        let v = serde_json::to_value(&f).unwrap();
        assert!(v["duration_s"].is_number() && v.get("not_sent").is_none(), "{v}");
    }

    #[test]
    fn percentile_keys() {
        assert_eq!(percentile_word(99.0), "99");
        assert_eq!(percentile_word(99.9), "99.9");
    }
}
