//! `enginebench export`: a result in the shapes other tools read.
//!
//! * `inferencex`: one aggregate object per point with the keys InferenceX's
//!   `utils/process_result.py` writes: run identity (hw, conc, model,
//!   framework, precision, isl, osl, tp, pp, ep, ...), `tput_per_gpu`,
//!   `output_tput_per_gpu`, `input_tput_per_gpu`, every `*_ms` figure again in
//!   seconds without the suffix (`median_ttft` = median_ttft_ms / 1000), and for
//!   every TPOT figure an interactivity `*_intvty` = 1000 / TPOT(ms).
//! * `vllm-bench`: one object per point shaped like `vllm bench serve`'s
//!   `--save-result` JSON (duration, completed, failed, token totals,
//!   throughputs, `*_ms` figures, and the per-request `input_lens`,
//!   `output_lens`, `ttfts`, `itls` (s) from `requests.jsonl`).
//!
//! Both carry bench serve's `spec_decode_*` keys when the engine speculated
//! (see [`spec_decode_fields`]).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{Map, Value, json};

use super::result::{JobResult, PointResult, RunResult};
use crate::error::usage;
use crate::protocol::EngineInfo;

/// Target shape of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Inferencex,
    VllmBench,
}

/// Reads `result.json` (schema 1) with a usage error naming the file.
pub fn read_result(path: &Path) -> Result<RunResult> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{} is not JSON: {e}", path.display())))?;
    match value.get("schema_version").and_then(Value::as_u64) {
        Some(1) => {}
        Some(v) => return Err(usage(format!("{}: schema_version {v} is not supported (this enginebench reads 1)", path.display()))),
        None => return Err(usage(format!("{} is not an enginebench result.json (no schema_version)", path.display()))),
    }
    serde_json::from_value(value).map_err(|e| usage(format!("{}: not a valid result: {e}", path.display())))
}

/// Exports every point of `result`. `requests` are the lines of the run's
/// `requests.jsonl` (needed by `vllm-bench`).
pub fn export(result: &RunResult, requests: &[Value], format: Format) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (ji, job) in result.jobs.iter().enumerate() {
        for (pi, p) in job.points.iter().enumerate() {
            let label = if result.jobs.len() > 1 { format!("_{}", job.label.replace([' ', '='], "-")) } else { String::new() };
            let stem = format!("{}{label}_{}_{}_conc{}", result.recipe.name, p.isl, p.osl, p.conc);
            out.push(match format {
                Format::Inferencex => (format!("agg_{stem}.json"), inferencex(result, job, p)),
                Format::VllmBench => {
                    let at = |r: &&Value, k: &str, v: usize| r[k].as_u64() == Some(v as u64);
                    let lines: Vec<&Value> =
                        requests.iter().filter(|r| at(r, "job", ji) && at(r, "point", pi)).collect();
                    (format!("{stem}.json"), vllm_bench(result, p, &lines))
                }
            });
        }
    }
    out
}

/// One of the engine's parallel sizes (1 when the engine did not say).
fn engine_size(job: &JobResult, size: impl Fn(&EngineInfo) -> Option<u32>) -> u64 {
    job.engine.as_ref().and_then(size).map_or(1, u64::from)
}

/// The `*_ms` figures (and their keys) of a point, as bench serve names them.
fn latency_figures(p: &PointResult) -> &BTreeMap<String, f64> {
    &p.figures.latency_ms
}

/// The speculative-decoding keys of `vllm bench serve`'s result
/// (vllm/benchmarks/serve.py): `spec_decode_acceptance_rate` in percent,
/// `spec_decode_acceptance_length`, `spec_decode_num_drafts`,
/// `spec_decode_draft_tokens`, `spec_decode_accepted_tokens` and
/// `spec_decode_per_position_acceptance_rates` (fractions). Like bench
/// serve, none when nothing was drafted or the engine does not speculate.
fn spec_decode_fields(p: &PointResult) -> Vec<(&'static str, Value)> {
    let Some(s) = p.spec_decode.as_ref() else { return Vec::new() };
    let (Some(rate), Some(length)) = (s.acceptance_rate, s.acceptance_length) else { return Vec::new() };
    vec![
        ("spec_decode_acceptance_rate", json!(rate * 100.0)),
        ("spec_decode_acceptance_length", json!(length)),
        ("spec_decode_num_drafts", json!(s.counts.drafts)),
        ("spec_decode_draft_tokens", json!(s.counts.draft_tokens)),
        ("spec_decode_accepted_tokens", json!(s.counts.accepted_tokens)),
        ("spec_decode_per_position_acceptance_rates", json!(s.per_position_acceptance_rates)),
    ]
}

fn inferencex(result: &RunResult, job: &JobResult, p: &PointResult) -> Value {
    let args = &job.engine_args;
    let tp = engine_size(job, |e| e.tensor_parallel_size);
    let pp = engine_size(job, |e| e.pipeline_parallel_size);
    let dp = engine_size(job, |e| e.data_parallel_size);
    let ep = if args.iter().any(|a| a == "--enable-expert-parallel" || a == "-ep") { tp * dp } else { 1 };
    let dp_attention = args.iter().any(|a| a == "--data-parallel-size" || a == "-dp") && dp > 1;
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("hw", json!(result.recipe.hardware.clone().unwrap_or_default()));
    put("conc", json!(p.conc));
    put("image", json!(format!("enginebench {}", result.versions.enginebench)));
    put("model", json!(result.recipe.model_path));
    put("infmax_model_prefix", json!(result.recipe.name));
    put("framework", json!("vllm"));
    put("precision", json!(result.recipe.precision.clone().unwrap_or_default()));
    put("spec_decoding", json!(if args.iter().any(|a| a.starts_with("--speculative-config")) { "yes" } else { "none" }));
    put("disagg", json!(false));
    put("recipe_fingerprint", json!(job.fingerprint.clone().unwrap_or_default()));
    put("isl", json!(p.isl));
    put("osl", json!(p.osl));
    put("is_multinode", json!(false));
    put("tp", json!(tp));
    put("pp", json!(pp));
    put("dcp_size", json!(1));
    put("pcp_size", json!(1));
    put("ep", json!(ep));
    put("dp_attention", json!(dp_attention.to_string()));
    put("tput_per_gpu", json!(p.figures.tput_per_gpu));
    put("output_tput_per_gpu", json!(p.figures.output_tput_per_gpu));
    put("input_tput_per_gpu", json!(p.figures.input_tput_per_gpu));
    for (k, v) in spec_decode_fields(p) {
        put(k, v);
    }
    for (k, &v) in latency_figures(p) {
        let Some(base) = k.strip_suffix("_ms") else { continue };
        m.insert(base.to_string(), json!(v / 1000.0));
        if k.contains("tpot") && v > 0.0 {
            m.insert(base.replace("tpot", "intvty"), json!(1000.0 / v));
        }
    }
    Value::Object(m)
}

fn vllm_bench(result: &RunResult, p: &PointResult, requests: &[&Value]) -> Value {
    let f = &p.figures;
    let secs = |v: &Value| v.as_f64().map_or(0.0, |ms| ms / 1000.0);
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("date", json!(result.started_at));
    put("endpoint_type", json!("enginebench-inprocess"));
    put("backend", json!("enginebench-inprocess"));
    put("label", Value::Null);
    put("model_id", json!(result.recipe.model_path));
    put("tokenizer_id", json!(result.recipe.model_path));
    put("num_prompts", json!(p.num_prompts));
    put("request_rate", p.request_rate.map_or(json!("inf"), |r| json!(r)));
    put("burstiness", json!(p.burstiness.unwrap_or(1.0)));
    put("max_concurrency", json!(p.conc));
    put("duration", json!(f.duration_s));
    put("completed", json!(f.completed));
    put("failed", json!(f.failed));
    put("total_input_tokens", json!(f.total_input_tokens));
    put("total_output_tokens", json!(f.total_output_tokens));
    put("request_throughput", json!(f.request_throughput));
    put("request_goodput", json!(f.request_goodput));
    put("output_throughput", json!(f.output_throughput));
    put("total_token_throughput", json!(f.total_token_throughput));
    put("input_lens", requests.iter().map(|r| r["input_tokens"].clone()).collect());
    put("output_lens", requests.iter().map(|r| r["output_tokens"].clone()).collect());
    put("ttfts", requests.iter().map(|r| json!(secs(&r["ttft_ms"]))).collect());
    put(
        "itls",
        requests
            .iter()
            .map(|r| r["itl_ms"].as_array().map_or(json!([]), |a| a.iter().map(|v| json!(secs(v))).collect()))
            .collect(),
    );
    put("latencies", requests.iter().map(|r| json!(secs(&r["e2el_ms"]))).collect());
    put("errors", requests.iter().map(|r| json!(r["error"].as_str().unwrap_or(""))).collect());
    for (k, v) in spec_decode_fields(p) {
        put(k, v);
    }
    for (k, &v) in latency_figures(p) {
        if k.ends_with("_ms") {
            m.insert(k.clone(), json!(v));
        }
    }
    Value::Object(m)
}

/// Reads the `requests.jsonl` next to a result file (empty when absent).
pub fn read_requests(result_path: &Path) -> Result<Vec<Value>> {
    let path = result_path.with_file_name("requests.jsonl");
    let Ok(file) = std::fs::File::open(&path) else { return Ok(Vec::new()) };
    BufReader::new(file)
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let line = line?;
            serde_json::from_str(&line).map_err(|e| usage(format!("{}:{}: {e}", path.display(), i + 1)))
        })
        .collect()
}

/// `enginebench export`: writes one file per point into `out_dir`, or prints
/// a JSON array to stdout. Returns the files written.
pub fn run_export(result_path: &Path, format: Format, out_dir: Option<&Path>) -> Result<Vec<PathBuf>> {
    let result = read_result(result_path)?;
    let requests = if format == Format::VllmBench { read_requests(result_path)? } else { Vec::new() };
    let docs = export(&result, &requests, format);
    match out_dir {
        None => {
            use std::io::Write;
            let array: Vec<&Value> = docs.iter().map(|(_, v)| v).collect();
            let text = serde_json::to_string_pretty(&array)?;
            // A closed pipe (`| head`) is not an error worth a panic.
            match writeln!(std::io::stdout().lock(), "{text}") {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(Vec::new()),
            }
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
            docs.into_iter()
                .map(|(name, v)| {
                    let path = dir.join(name);
                    super::files::write_json_atomic(&path, &v)?;
                    Ok(path)
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-written result with one point (figures chosen for easy checking).
    fn fixture() -> RunResult {
        serde_json::from_str(r#"{
            "schema_version": 1,
            "status": "ok",
            "recipe": {"name": "r", "file": "r.toml", "model": "m", "hardware": "mi355x", "precision": "fp4",
                       "model_path": "/models/m"},
            "versions": {"enginebench": "0.1.0", "vllm": "0.32.0"},
            "host": {"hostname": "h", "cpu": "c", "logical_cpus": 2},
            "started_at": "2026-11-30T12:00:00Z",
            "timing": "t",
            "jobs": [{
              "label": "base tp=8", "tp": 8, "status": "ok",
              "engine_args": ["-tp", "8", "--enable-expert-parallel"], "env": {}, "fingerprint": "abcd",
              "sweep": {"space": [{"tp": 8, "pairs": [[1024, 1024]], "concs": [4]}], "inferencex": true,
                        "length_convention": "inferencex", "range_ratio": 0.8, "prefix_len": 0, "request_rate": null,
                        "burstiness": 1.0, "ignore_eos": true, "percentiles": [99.0], "goodput": null, "seed": 0,
                        "count": {"prompts_per_conc": 10, "num_prompts": null, "warmups_per_conc": 2, "warmups": null}},
              "engine": {"tensor_parallel_size": 8, "pipeline_parallel_size": 1, "data_parallel_size": 1},
              "points": [{
                "conc": 4, "isl": 1024, "osl": 1024, "num_prompts": 2, "warmups": 8,
                "length_convention": "inferencex", "range_ratio": 0.8, "prefix_len": 0,
                "ignore_eos": true, "gpus": 8, "status": "ok",
                "completed": 2, "failed": 0, "total_input_tokens": 2000, "total_output_tokens": 2048,
                "duration_s": 4.0, "request_throughput": 0.5, "output_throughput": 512.0,
                "total_token_throughput": 1012.0, "tput_per_gpu": 126.5, "output_tput_per_gpu": 64.0,
                "input_tput_per_gpu": 62.5,
                "mean_ttft_ms": 250.0, "median_tpot_ms": 20.0, "p99_tpot_ms": 40.0, "std_tpot_ms": 0.0,
                "step_stats": {"steps": 10, "mean_step_ms": 1.0, "median_step_ms": 1.0, "p99_step_ms": 1.0,
                               "decode_only_steps": 9, "mean_decode_step_ms": 1.0, "median_decode_step_ms": 1.0,
                               "mean_batch_size": 2.0, "max_running": 2, "max_kv_cache_usage": 0.1,
                               "preemptions": 0, "prefix_cache_hit_rate": 0.0}
              }]
            }]
        }"#)
        .unwrap()
    }

    #[test]
    fn inferencex_aggregate_keys() {
        let docs = export(&fixture(), &[], Format::Inferencex);
        assert_eq!(docs.len(), 1);
        let (name, v) = &docs[0];
        assert_eq!(name, "agg_r_1024_1024_conc4.json");
        assert_eq!(v["hw"], "mi355x");
        assert_eq!(v["tp"], 8);
        assert_eq!(v["ep"], 8);
        assert_eq!(v["precision"], "fp4");
        assert_eq!(v["tput_per_gpu"], 126.5);
        assert_eq!(v["mean_ttft"], 0.25);
        assert_eq!(v["median_tpot"], 0.02);
        assert_eq!(v["median_intvty"], 50.0);
        assert_eq!(v["p99_intvty"], 25.0);
        // TPOT 0 would be infinite interactivity: left out, as JSON cannot hold it.
        assert!(v.get("std_intvty").is_none());
        assert_eq!(v["recipe_fingerprint"], "abcd");
    }

    #[test]
    fn vllm_bench_shape_with_requests() {
        let requests = vec![
            json!({"job": 0, "point": 0, "input_tokens": 1000, "output_tokens": 1024, "ttft_ms": 200.0, "e2el_ms": 3000.0, "itl_ms": [10.0, 20.0], "error": null}),
            json!({"job": 0, "point": 0, "input_tokens": 1000, "output_tokens": 1024, "ttft_ms": 300.0, "e2el_ms": 3500.0, "itl_ms": [], "error": null}),
            json!({"job": 0, "point": 1, "input_tokens": 5, "output_tokens": 5, "ttft_ms": 1.0, "e2el_ms": 2.0, "itl_ms": [], "error": null}),
            json!({"job": 1, "point": 0, "input_tokens": 5, "output_tokens": 5, "ttft_ms": 1.0, "e2el_ms": 2.0, "itl_ms": [], "error": null}),
        ];
        let docs = export(&fixture(), &requests, Format::VllmBench);
        let v = &docs[0].1;
        assert_eq!(v["max_concurrency"], 4);
        assert_eq!(v["request_rate"], "inf");
        assert_eq!(v["duration"], 4.0);
        assert_eq!(v["input_lens"], json!([1000, 1000]));
        assert_eq!(v["ttfts"], json!([0.2, 0.3]));
        assert_eq!(v["itls"], json!([[0.01, 0.02], []]));
        assert_eq!(v["errors"], json!(["", ""]));
        assert_eq!(v["mean_ttft_ms"], 250.0);
        assert!(v.get("spec_decode_acceptance_rate").is_none(), "no speculation, no spec keys");
    }

    #[test]
    fn spec_decode_keys_as_bench_serve_names_them() {
        use crate::metrics::spec::summarize_spec;
        use crate::protocol::SpecCounts;
        let mut result = fixture();
        let step = SpecCounts { drafts: 4, draft_tokens: 12, accepted_tokens: 6, accepted_per_pos: vec![3, 2, 1] };
        result.jobs[0].points[0].spec_decode = summarize_spec([Some(&step)], Some(3), None);
        for format in [Format::VllmBench, Format::Inferencex] {
            let docs = export(&result, &[], format);
            let v = &docs[0].1;
            assert_eq!(v["spec_decode_acceptance_rate"], 50.0, "{format:?}: percent, as bench serve");
            assert_eq!(v["spec_decode_acceptance_length"], 2.5);
            assert_eq!(v["spec_decode_num_drafts"], 4);
            assert_eq!(v["spec_decode_draft_tokens"], 12);
            assert_eq!(v["spec_decode_accepted_tokens"], 6);
            assert_eq!(v["spec_decode_per_position_acceptance_rates"], json!([0.75, 0.5, 0.25]));
        }
    }

    #[test]
    fn refuses_non_results() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.json");
        std::fs::write(&p, "{\"a\": 1}").unwrap();
        let e = read_result(&p).unwrap_err();
        assert!(e.downcast_ref::<crate::error::UsageError>().is_some());
        assert!(e.to_string().contains("schema_version"), "{e}");
    }
}
