//! The `inferencex` export of a fixed-length point: the aggregate InferenceX's
//! `utils/process_result.py` writes (run identity, `tput_per_gpu`,
//! `output_tput_per_gpu`, `input_tput_per_gpu`, every `*_ms` figure again
//! in seconds without the suffix, and for every TPOT figure an
//! interactivity `*_intvty` = 1000 / TPOT(ms)).

use serde_json::{Map, Value, json};

use super::{engine_size, latency_figures, spec_decode_fields};
use crate::report::result::{JobResult, PointResult, RunResult};

/// The run-identity keys of an InferenceX aggregate (fixed-seq and agentic
/// alike): hardware, model, framework, precision, parallel layout, ... GPUs
/// are counted as InferenceX counts them (utils/process_result.py,
/// utils/agentic/aggregation `_gpu_shape`): TP x PP x PCP.
pub(super) fn identity(result: &RunResult, job: &JobResult, p: &PointResult) -> Map<String, Value> {
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
    put("is_multinode", json!(false));
    put("tp", json!(tp));
    put("pp", json!(pp));
    put("dcp_size", json!(1));
    put("pcp_size", json!(1));
    put("ep", json!(ep));
    put("dp_attention", json!(dp_attention.to_string()));
    m
}

/// The fixed-seq aggregate of one point (`agg_*.json`).
pub(super) fn aggregate(result: &RunResult, job: &JobResult, p: &PointResult) -> Value {
    let mut m = identity(result, job, p);
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("isl", json!(p.isl));
    put("osl", json!(p.osl));
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

