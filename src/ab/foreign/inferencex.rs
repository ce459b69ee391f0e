//! InferenceX's aggregate rows as a side of a comparison.
//!
//! A fixed-sequence row (`utils/process_result.py`, read at InferenceX
//! 843c6254) holds the run's identity (`hw`, `conc`, `image`, `model`,
//! `infmax_model_prefix`, `framework`, `precision`, `spec_decoding`,
//! `disagg`, `isl`, `osl`, `is_multinode`, `tp`, `pp`, `dcp_size`,
//! `pcp_size`, `ep`, `dp_attention`), the throughputs per GPU
//! (`tput_per_gpu`, `output_tput_per_gpu`, `input_tput_per_gpu`: bench
//! serve's tok/s over TP x PP x PCP) and every `*_ms` figure of the
//! bench-serve result again in seconds without the suffix (`median_ttft`,
//! `p99_tpot`, ...), with `*_intvty` = 1000 / TPOT(ms). It records no
//! per-request data, no number of prompts, no length range and no
//! `ignore_eos`: summary figures only, and those settings "not recorded".
//!
//! Conversions, each named in the source: out tok/s = `output_tput_per_gpu`
//! x TP x PP x PCP (InferenceX's own divisor, undone), latencies = the
//! row's seconds x 1000; tok/s/gpu is compared as the row gives it where
//! this run divides by the same GPU count (else refused, naming both).
//! Refused rows, listed: agentic aggregates (`scenario_type`: AIPerf's
//! figures, whose TTFT and TPOT are not bench serve's) and multi-node rows
//! (per-GPU figures over prefill and decode GPU counts).

use std::path::PathBuf;

use anyhow::Result;
use serde_json::Value;

use super::{ForeignPoint, Format, PointRecord, Read, Source, boolean, number, text, whole};
use crate::ab::metric::Metric;
use crate::error::usage;
use crate::metrics::PointFigures;

/// Keys every InferenceX aggregate row has (fixed-sequence and agentic alike).
pub const REQUIRED: &[&str] = &["hw", "conc", "infmax_model_prefix", "framework", "precision", "tp"];

/// Keys a fixed-sequence row needs besides [`REQUIRED`].
const FIXED: &[&str] = &["isl", "osl", "tput_per_gpu", "output_tput_per_gpu"];

/// `median_ttft` → `median_ttft_ms`: a bench-serve latency key in seconds.
fn latency_key(k: &str) -> Option<String> {
    let (stat, metric) = k.rsplit_once('_')?;
    let stat_ok = matches!(stat, "mean" | "median" | "std")
        || stat.strip_prefix('p').is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit() || c == '.'));
    (stat_ok && matches!(metric, "ttft" | "tpot" | "itl" | "e2el")).then(|| format!("{k}_ms"))
}

/// Reads InferenceX rows into points and a source.
///
/// Errors (usage): a fixed-sequence row without ISL/OSL or its throughputs
/// (naming the keys).
pub fn read(docs: &[(PathBuf, Value, Format)]) -> Result<Read> {
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    let mut gpu_counts = std::collections::BTreeSet::new();
    for (path, row, _) in docs {
        let file = path.display().to_string();
        let conc = whole(row, &["conc"]).unwrap_or(0);
        if let Some(kind) = text(row, &["scenario_type"]) {
            skipped.push(format!(
                "{file} conc {conc}: an agentic aggregate (scenario_type {kind}): AIPerf's TTFT and TPOT are not bench serve's; not compared"
            ));
            continue;
        }
        if boolean(&row["is_multinode"]) == Some(true) {
            skipped.push(format!(
                "{file} conc {conc}: a multi-node row: its per-GPU figures divide by prefill and decode GPU counts; not compared"
            ));
            continue;
        }
        let missing: Vec<&str> = FIXED.iter().filter(|k| number(&row[**k]).is_none()).copied().collect();
        if !missing.is_empty() {
            return Err(usage(format!("{file}: an InferenceX row without {} (a fixed-sequence row has them all)", missing.join(", "))));
        }
        let (isl, osl) = (whole(row, &["isl"]).unwrap_or(0), whole(row, &["osl"]).unwrap_or(0));
        let tp = whole(row, &["tp"]).filter(|t| *t > 0);
        let gpus = ["tp", "pp", "pcp_size"].iter().map(|k| whole(row, &[k]).unwrap_or(1).max(1)).product::<u32>();
        gpu_counts.insert(gpus);
        let f = |k: &str| number(&row[k]).unwrap_or(f64::NAN);
        let (per_gpu, out_per_gpu) = (f("tput_per_gpu"), f("output_tput_per_gpu"));
        let in_per_gpu = number(&row["input_tput_per_gpu"]).unwrap_or(per_gpu - out_per_gpu);
        let mut figures = PointFigures {
            completed: 0,
            failed: 0,
            not_sent: 0,
            total_input_tokens: 0,
            total_output_tokens: 0,
            duration_s: f64::NAN,
            request_throughput: f64::NAN,
            output_throughput: out_per_gpu * f64::from(gpus),
            total_token_throughput: per_gpu * f64::from(gpus),
            tput_per_gpu: per_gpu,
            output_tput_per_gpu: out_per_gpu,
            input_tput_per_gpu: in_per_gpu,
            request_goodput: None,
            latency_ms: Default::default(),
        };
        if let Some(obj) = row.as_object() {
            for (k, v) in obj {
                if let (Some(ms), Some(x)) = (latency_key(k), v.as_f64()) {
                    figures.latency_ms.insert(ms, x * 1000.0);
                }
            }
        }
        let mut record = PointRecord::bare();
        record.tp_known = tp.is_some();
        record.gpus = Some(gpus);
        for (metric, key) in [(Metric::MedianTtft, "median_ttft"), (Metric::MedianTpot, "median_tpot")] {
            if number(&row[key]).is_none() {
                record.missing.push((metric, format!("the row has no {key}")));
            }
        }
        points.push(ForeignPoint { isl, osl, conc, tp, chat: false, figures, requests: Vec::new(), record });
    }
    points.sort_by_key(|p| (p.isl, p.osl, p.tp, p.conc));
    if let Some(w) = points.windows(2).find(|w| (w[0].isl, w[0].osl, w[0].tp, w[0].conc) == (w[1].isl, w[1].osl, w[1].tp, w[1].conc)) {
        return Err(usage(format!("two InferenceX rows at ISL/OSL {}/{} conc {}: give one per point", w[0].isl, w[0].osl, w[0].conc)));
    }
    let first = docs.iter().map(|(_, d, _)| d).find(|d| d.get("scenario_type").is_none()).unwrap_or(&docs[0].1);
    let image = text(first, &["image"]);
    let counts = gpu_counts.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
    let source = Source {
        format: Format::Inferencex,
        files: docs.iter().map(|(p, _, _)| p.display().to_string()).collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
        tool: if image.as_deref().is_some_and(|i| i.starts_with("enginebench")) {
            "enginebench export --format inferencex".into()
        } else {
            "InferenceX aggregate (utils/process_result.py)".into()
        },
        engine: text(first, &["framework"]),
        version: image,
        model: text(first, &["model"]),
        hardware: text(first, &["hw"]),
        precision: text(first, &["precision"]),
        points: Vec::new(),
        eval: None,
        definitions: vec![
            "summary figures only (an aggregate row keeps no per-request data): no interval".into(),
            format!("out tok/s = output_tput_per_gpu x TP x PP x PCP (InferenceX's GPU count: {counts})"),
            "tok/s/gpu: the row's tput_per_gpu (total tok/s over TP x PP x PCP), compared where this run divides by the same count".into(),
            "TTFT and TPOT: the row's seconds x 1000 (bench serve's definitions, as this tool's)".into(),
            "not recorded by the row: number of prompts, length range, ignore_eos, chat template, request rate".into(),
        ],
        skipped,
    };
    Ok(Read { source, points, evals: None, task_samples: Vec::new() })
}

#[cfg(test)]
mod tests {
    #[test]
    fn latency_keys_are_recognised() {
        assert_eq!(super::latency_key("median_ttft").as_deref(), Some("median_ttft_ms"));
        assert_eq!(super::latency_key("p99.9_tpot").as_deref(), Some("p99.9_tpot_ms"));
        assert_eq!(super::latency_key("median_intvty"), None);
        assert_eq!(super::latency_key("tput_per_gpu"), None);
        assert_eq!(super::latency_key("p_ttft"), None);
    }
}
