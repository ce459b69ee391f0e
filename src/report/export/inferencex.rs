//! The `inferencex` export of a fixed-length point: the aggregate InferenceX's
//! `utils/process_result.py` writes (run identity, `tput_per_gpu` =
//! total tok/s / (TP x PP x PCP),
//! `output_tput_per_gpu`, `input_tput_per_gpu`, every `*_ms` figure again
//! in seconds without the suffix, and for every TPOT figure an
//! interactivity `*_intvty` = 1000 / TPOT(ms)). A P/D point carries its
//! disaggregated per-role figures instead ([`crate::metrics::pd`]).

use serde_json::{Map, Value, json};

use super::{engine_size, latency_figures, spec_decode_fields};
use crate::report::result::{JobResult, PointResult, RunResult};

/// The run-identity keys of an InferenceX aggregate (fixed-seq and agentic
/// alike): hardware, model, framework, precision, parallel layout, ...
/// `tp` is the recipe's TP (InferenceX's matrix TP: 8 for a DP-attention
/// job that runs vLLM with `-tp 1 -dp 8`), else the engine's TP x DP;
/// `pp`, `pcp_size` and `dcp_size` are the engine's.
pub(super) fn identity(result: &RunResult, job: &JobResult, p: &PointResult) -> Map<String, Value> {
    let args = &job.engine_args;
    let engine_tp = engine_size(job, |e| e.tensor_parallel_size);
    let pp = engine_size(job, |e| e.pipeline_parallel_size);
    let dp = engine_size(job, |e| e.data_parallel_size);
    let tp = job.tp.filter(|&t| t > 0).map_or(engine_tp * dp, u64::from);
    let ep = if args.iter().any(|a| a == "--enable-expert-parallel" || a == "-ep") { engine_tp * dp } else { 1 };
    let dp_attention = args.iter().any(|a| a == "--data-parallel-size" || a == "-dp" || a.starts_with("--data-parallel-size=")) && dp > 1;
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
    put("is_multinode", json!(false));
    put("tp", json!(tp));
    put("pp", json!(pp));
    put("dcp_size", json!(engine_size(job, |e| e.decode_context_parallel_size)));
    put("pcp_size", json!(engine_size(job, |e| e.prefill_context_parallel_size)));
    put("ep", json!(ep));
    put("dp_attention", json!(dp_attention.to_string()));
    m
}

/// GPUs as InferenceX divides by: TP x PP x PCP of the identity
/// (utils/process_result.py).
pub(super) fn gpus(identity: &Map<String, Value>) -> f64 {
    ["tp", "pp", "pcp_size"].iter().map(|k| identity[*k].as_f64().unwrap_or(1.0).max(1.0)).product()
}

/// The fixed-seq aggregate of one point (`agg_*.json`).
pub(super) fn aggregate(result: &RunResult, job: &JobResult, p: &PointResult) -> Value {
    let mut m = identity(result, job, p);
    // Per GPU over InferenceX's count, whatever divisor the run used.
    let n = gpus(&m);
    let f = &p.figures;
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("isl", json!(p.isl));
    put("osl", json!(p.osl));
    match &p.pd {
        // A P/D point: process_result.py's disaggregated figures and GPU
        // counts (total over prefill + decode GPUs, output over the decode
        // GPUs, input over the prefill GPUs), as the point computed them.
        // `is_multinode` stays false: both sides ran on one node.
        Some(pd) => {
            put("disagg", json!(true));
            put("prefill_num_workers", json!(pd.prefill_workers));
            put("decode_num_workers", json!(pd.decode_workers));
            put("num_prefill_gpu", json!(pd.prefill_gpus));
            put("num_decode_gpu", json!(pd.decode_gpus));
            put("tput_per_gpu", json!(pd.tput_per_gpu));
            put("output_tput_per_gpu", json!(pd.output_tput_per_gpu));
            put("input_tput_per_gpu", json!(pd.input_tput_per_gpu));
        }
        None => {
            put("tput_per_gpu", json!(f.total_token_throughput / n));
            put("output_tput_per_gpu", json!(f.output_throughput / n));
            put("input_tput_per_gpu", json!((f.total_token_throughput - f.output_throughput) / n));
        }
    }
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

