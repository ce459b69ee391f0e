//! `vllm bench serve`'s result JSON as a side of a comparison.
//!
//! The keys, read from vLLM 0.32's `vllm/benchmarks/serve.py`: the run's
//! `date`, `backend`, `model_id`, `num_prompts`, `request_rate` (`"inf"` or
//! req/s), `burstiness`, `max_concurrency`, any `--metadata KEY=VALUE` pair
//! as a top-level string, then `duration` (s), `completed`, `failed`, token
//! totals, `request_throughput`, `output_throughput`,
//! `total_token_throughput`, and `{mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms`.
//! Per request (in the order sent): `latencies` (s) always; `input_lens`,
//! `output_lens`, `ttfts` (s), `itls` (s, per request a list), `errors`
//! only with `--save-detailed`. The older `benchmark_serving.py` that
//! InferenceX (`utils/bench_serving`) and ATOM (`atom/benchmarks`) fork
//! writes `best_of`, no `failed`, and keeps `input_lens` and `output_lens`
//! without `--save-detailed`; ATOM's keeps `ttfts` and `itls` too and writes
//! no `latencies`.
//!
//! None of them records ISL/OSL, the length range or the TP: they are read
//! from metadata keys when `--metadata` put them there (`isl`/`osl` or
//! `random_input_len`/`random_output_len`, `random_range_ratio`,
//! `random_prefix_len`, `ignore_eos`, `use_chat_template`, `tp`, `pp`,
//! `engine`/`framework`, `version`/`image`), else ISL/OSL and TP come from
//! `--foreign-isl-osl` and `--foreign-tp`; without ISL/OSL the file cannot
//! be matched (exit 2), without TP tok/s/gpu is not compared.
//!
//! Definitions are vLLM's and ours alike (see docs/metrics.md): TTFT from
//! send to the first streamed token (a reasoning token counts), E2EL to the
//! last, TPOT per request (E2EL - TTFT) / (output tokens - 1) and its median
//! over requests (request-weighted), throughputs over the benchmark duration.
//! Where the file has no `latencies`, a request's E2EL is TTFT + the sum of
//! its ITLs (as vLLM's own timeline plot rebuilds it), and the source says so.

use std::path::PathBuf;

use anyhow::Result;
use serde_json::Value;

use super::{ForeignPoint, Format, Hints, PointRecord, Read, Source, boolean, number, text, whole};
use crate::ab::metric::Metric;
use crate::ab::input::RequestRow;
use crate::error::usage;
use crate::metrics::PointFigures;

/// Keys every bench-serve result has.
pub const REQUIRED: &[&str] =
    &["duration", "completed", "total_input_tokens", "total_output_tokens", "output_throughput", "total_token_throughput", "max_concurrency"];

/// Which program wrote a file, from its keys, and how it draws lengths from
/// `random_range_ratio` r: vLLM's `[L(1 - r), L(1 + r)]`, the older script's
/// `[rL, L]`, or unknown.
fn writer(doc: &Value) -> (&'static str, Option<Convention>) {
    let has = |k: &str| doc.get(k).is_some();
    if doc["endpoint_type"] == "enginebench-inprocess" {
        let c = match doc["enginebench_length_convention"].as_str() {
            Some("inferencex") => Some(Convention::Upper),
            Some("vllm") => Some(Convention::Symmetric),
            _ => None,
        };
        ("enginebench export --format vllm-bench", c)
    } else if has("endpoint_type") || has("failed") || has("rtfx") || has("max_concurrent_requests") {
        ("vllm bench serve", Some(Convention::Symmetric))
    } else if has("benchmark_start_time_unix") {
        ("benchmark_serving.py (InferenceX utils/bench_serving)", Some(Convention::Upper))
    } else if has("best_of") {
        ("benchmark_serving.py (vLLM's script before `vllm bench serve`, or a fork such as ATOM's)", Some(Convention::Upper))
    } else {
        ("a bench-serve result (writer not identified)", None)
    }
}

/// How a range ratio maps to lengths.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Convention {
    /// `[L(1 - r), L(1 + r)]` (vLLM's random dataset since `vllm bench serve`).
    Symmetric,
    /// `[rL, L]` (the older script; InferenceX).
    Upper,
}

impl Convention {
    fn range(self, r: f64) -> (f64, f64) {
        match self {
            Convention::Symmetric => (1.0 - r, 1.0 + r),
            Convention::Upper => (r, 1.0),
        }
    }
}

/// Reads bench-serve documents (one per point) into points and a source.
///
/// Errors (usage): a document with no concurrency limit, or one whose
/// ISL/OSL neither the file nor `hints` give (naming the mean lengths the
/// file does hold).
pub fn read(docs: &[(PathBuf, Value, Format)], hints: Hints) -> Result<Read> {
    let mut points = Vec::new();
    let mut definitions = vec![
        "TTFT, TPOT and E2EL as `vllm bench serve` defines them, as this tool does: TPOT per request (E2EL - TTFT) / (output tokens - 1), \
         its median over requests (request-weighted); TTFT to the first streamed token, a reasoning token included"
            .to_string(),
    ];
    let mut add = |d: String| {
        if !definitions.contains(&d) {
            definitions.push(d);
        }
    };
    let first = &docs[0].1;
    let (tool, _) = writer(first);
    for (path, doc, _) in docs {
        let file = path.display().to_string();
        let (_, convention) = writer(doc);
        let conc = whole(doc, &["max_concurrency"]).filter(|c| *c > 0).ok_or_else(|| {
            usage(format!(
                "{file}: max_concurrency is {}: the run had no concurrency limit, and compare matches points by concurrency",
                doc["max_concurrency"]
            ))
        })?;
        let completed = whole(doc, &["completed"]).unwrap_or(0);
        let (isl, osl) = match (whole(doc, &["isl", "random_input_len"]), whole(doc, &["osl", "random_output_len"]), hints.isl_osl) {
            (Some(i), Some(o), _) => (i, o),
            (_, _, Some(given)) => given,
            _ => {
                let mean = |k: &str| number(&doc[k]).map_or("?".into(), |t| format!("{:.1}", t / f64::from(completed.max(1))));
                return Err(usage(format!(
                    "{file}: the file records no ISL/OSL (keys isl/osl or random_input_len/random_output_len, as \
                     `--metadata isl=1024 osl=1024` writes them; its requests averaged {} input and {} output tokens): \
                     give --foreign-isl-osl ISL/OSL",
                    mean("total_input_tokens"),
                    mean("total_output_tokens")
                )));
            }
        };
        let tp = whole(doc, &["tp", "tensor_parallel_size"]).or(hints.tp).filter(|t| *t > 0);
        let pp = whole(doc, &["pp", "pipeline_parallel_size"]).unwrap_or(1).max(1);
        let gpus = tp.map(|t| t * pp);
        let f = |k: &str| number(&doc[k]).unwrap_or(f64::NAN);
        let (total, output) = (f("total_token_throughput"), f("output_throughput"));
        let per_gpu = |x: f64| gpus.map_or(f64::NAN, |g| x / f64::from(g));
        let mut record = PointRecord::bare();
        record.tp_known = tp.is_some();
        record.gpus = gpus;
        match gpus {
            Some(g) if whole(doc, &["tp", "tensor_parallel_size"]).is_some() => {
                add(format!("tok/s/gpu = total_token_throughput / (tp x pp) from the file's metadata (tp x pp = {g})"))
            }
            Some(g) => add(format!("tok/s/gpu = total_token_throughput / (tp x pp) with tp from --foreign-tp (tp x pp = {g})")),
            None => record.missing.push((
                Metric::TputPerGpu,
                "the file records no TP or GPU count (give --foreign-tp N, or run the client with --metadata tp=N)".into(),
            )),
        }
        let requests = per_request(doc, &mut add);
        let failed = whole(doc, &["failed"]).unwrap_or_else(|| requests.iter().filter(|r| r.error.is_some()).count() as u32);
        let mut figures = PointFigures {
            completed,
            failed,
            not_sent: 0,
            total_input_tokens: number(&doc["total_input_tokens"]).unwrap_or(0.0) as u64,
            total_output_tokens: number(&doc["total_output_tokens"]).unwrap_or(0.0) as u64,
            duration_s: f("duration"),
            request_throughput: f("request_throughput"),
            output_throughput: output,
            total_token_throughput: total,
            tput_per_gpu: per_gpu(total),
            output_tput_per_gpu: per_gpu(output),
            input_tput_per_gpu: per_gpu(total - output),
            request_goodput: number(&doc["request_goodput"]),
            latency_ms: Default::default(),
        };
        if let Some(obj) = doc.as_object() {
            for (k, v) in obj {
                if let (true, Some(x)) = (k.ends_with("_ms"), v.as_f64()) {
                    figures.latency_ms.insert(k.clone(), x);
                }
            }
        }
        for (metric, key) in [(Metric::MedianTtft, "median_ttft_ms"), (Metric::MedianTpot, "median_tpot_ms")] {
            if figures.latency_ms.contains_key(key) {
                continue;
            }
            let why = if metric == Metric::MedianTpot && figures.latency_ms.contains_key("median_itl_ms") {
                "the file has no median_tpot_ms; its median_itl_ms is token-weighted (every gap between tokens counts) and is not used for TPOT"
                    .to_string()
            } else {
                format!("the file has no {key} (--percentile-metrics left it out)")
            };
            record.missing.push((metric, why));
        }
        if !requests.is_empty() {
            crosscheck(&requests, &figures, conc, &mut add);
        }
        record.per_request = !requests.is_empty();
        record.num_prompts = whole(doc, &["num_prompts"]);
        record.prefix_len = whole(doc, &["random_prefix_len"]);
        record.ignore_eos = boolean(&doc["ignore_eos"]);
        record.chat_template = boolean(&doc["use_chat_template"]);
        record.request_rate = match &doc["request_rate"] {
            Value::String(s) => Some(s.clone()),
            v => number(v).map(|r| if r.is_finite() { r.to_string() } else { "inf".into() }),
        };
        record.burstiness = number(&doc["burstiness"]);
        if let Some(r) = number(&doc["random_range_ratio"]) {
            match convention {
                Some(c) => record.length_range = Some(c.range(r)),
                None => add(format!(
                    "random_range_ratio {r} recorded, but whether it means [rL, L] or [L(1-r), L(1+r)] depends on the writer, which the keys do not identify"
                )),
            }
        }
        points.push(ForeignPoint {
            isl,
            osl,
            conc,
            tp,
            chat: record.chat_template == Some(true),
            figures,
            requests,
            record,
        });
    }
    points.sort_by_key(|p| (p.isl, p.osl, p.conc));
    if let Some(w) = points.windows(2).find(|w| (w[0].isl, w[0].osl, w[0].conc) == (w[1].isl, w[1].osl, w[1].conc)) {
        return Err(usage(format!(
            "{}: two results at ISL/OSL {}/{} conc {}: give one per point",
            docs[0].0.parent().map_or(String::new(), |p| p.display().to_string()),
            w[0].isl,
            w[0].osl,
            w[0].conc
        )));
    }
    let source = Source {
        format: Format::BenchServe,
        files: docs.iter().map(|(p, _, _)| p.display().to_string()).collect::<std::collections::BTreeSet<_>>().into_iter().collect(),
        tool: tool.to_string(),
        engine: text(first, &["engine", "framework"]),
        version: text(first, &["engine_version", "version", "image"]),
        model: text(first, &["model_id"]),
        hardware: text(first, &["hw", "hardware"]),
        precision: text(first, &["precision"]),
        points: Vec::new(),
        eval: None,
        definitions,
        skipped: Vec::new(),
    };
    Ok(Read { source, points, evals: None, task_samples: Vec::new() })
}

/// The requests of a file with per-request arrays: input and output lengths
/// and TTFT for every request, and E2EL from `latencies` or, without them,
/// TTFT + the sum of the request's ITLs. Empty (summary figures only) when
/// any is missing or the arrays disagree in length.
fn per_request(doc: &Value, add: &mut impl FnMut(String)) -> Vec<RequestRow> {
    let arr = |k: &str| doc[k].as_array();
    let (Some(inputs), Some(outputs), Some(ttfts)) = (arr("input_lens"), arr("output_lens"), arr("ttfts")) else {
        add("summary figures only at points without input_lens, output_lens and ttfts (`--save-detailed`): no interval there".into());
        return Vec::new();
    };
    let (latencies, itls, errors) = (arr("latencies"), arr("itls"), arr("errors"));
    let n = inputs.len();
    let same = |a: Option<&Vec<Value>>| a.is_none_or(|a| a.len() == n);
    if outputs.len() != n || ttfts.len() != n || latencies.is_none() && itls.is_none() || !(same(latencies) && same(itls) && same(errors)) {
        add("per-request arrays of unequal lengths, or without latencies and itls: not used (summary figures only)".into());
        return Vec::new();
    }
    if latencies.is_none() {
        add("E2EL per request = TTFT + the sum of its ITLs (the file has no `latencies`)".into());
    }
    (0..n)
        .map(|i| {
            let error = errors.and_then(|e| e[i].as_str()).filter(|s| !s.is_empty()).map(str::to_string);
            let ttft = number(&ttfts[i]);
            let e2el = match latencies {
                Some(l) => number(&l[i]),
                None => {
                    let gaps: Option<f64> = itls.and_then(|a| a[i].as_array()).map(|g| g.iter().filter_map(number).sum());
                    ttft.zip(gaps).map(|(t, g)| t + g)
                }
            };
            let output_tokens = number(&outputs[i]).unwrap_or(0.0) as u32;
            let ok = error.is_none();
            let ttft_ms = ttft.filter(|_| ok).map(|s| s * 1000.0);
            let e2el_ms = e2el.filter(|_| ok).map(|s| s * 1000.0);
            let tpot_ms = match (ttft_ms, e2el_ms) {
                (Some(t), Some(e)) if output_tokens > 1 => Some((e - t) / f64::from(output_tokens - 1)),
                _ => None,
            };
            RequestRow {
                job: 0,
                point: 0,
                attempt: 0,
                input_tokens: number(&inputs[i]).unwrap_or(0.0) as u32,
                output_tokens,
                ttft_ms,
                tpot_ms,
                e2el_ms,
                error,
                request: i,
                token_ids: Vec::new(),
            }
        })
        .collect()
}

/// Notes where the medians rebuilt from the per-request arrays differ from
/// the file's own by more than 1% (the comparison uses the rebuilt ones,
/// which the bootstrap resamples).
fn crosscheck(requests: &[RequestRow], figures: &PointFigures, conc: u32, add: &mut impl FnMut(String)) {
    let ok: Vec<&RequestRow> = requests.iter().filter(|r| r.ok()).collect();
    for (name, key, values) in [
        ("TTFT", "median_ttft_ms", ok.iter().filter_map(|r| r.ttft_ms).collect::<Vec<f64>>()),
        ("TPOT", "median_tpot_ms", ok.iter().filter_map(|r| r.tpot_ms).collect()),
    ] {
        let file = figures.ms(key);
        if values.is_empty() || !file.is_finite() {
            continue;
        }
        let rebuilt = crate::metrics::stats::median(&values);
        if (rebuilt - file).abs() > 0.01 * file.abs().max(1e-9) {
            add(format!(
                "conc {conc}: median {name} from the per-request arrays {rebuilt:.3} ms vs the file's {key} {file:.3} ms; the arrays' is compared"
            ));
        }
    }
}
