//! The `vllm-bench` export: one object per point shaped like `vllm bench
//! serve`'s `--save-result` JSON (duration, completed, failed, token totals,
//! throughputs, `*_ms` figures, and the per-request `input_lens`,
//! `output_lens`, `ttfts`, `itls`, `latencies` (s) from `requests.jsonl`),
//! plus, as `vllm bench serve --metadata KEY=VALUE` would add them, the
//! workload and layout the file itself does not record: `random_input_len`,
//! `random_output_len`, `random_range_ratio`, `random_prefix_len`,
//! `ignore_eos`, `use_chat_template`, `tp`, `pp` and
//! `enginebench_length_convention` (which range the ratio describes), so
//! `compare` can match the file to a run again.

use serde_json::{Map, Value, json};

use super::{engine_size, latency_figures, spec_decode_fields};
use crate::report::result::{JobResult, PointResult, RunResult};

/// The bench-serve result of one point of `job` from its request lines.
pub(super) fn document(result: &RunResult, job: &JobResult, p: &PointResult, requests: &[&Value]) -> Value {
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
    put("random_input_len", json!(p.isl));
    put("random_output_len", json!(p.osl));
    put("random_range_ratio", json!(p.range_ratio));
    put("random_prefix_len", json!(p.prefix_len));
    put("ignore_eos", json!(p.ignore_eos));
    put("use_chat_template", json!(p.workload == crate::protocol::Workload::ChatRandom));
    put("enginebench_length_convention", json!(p.length_convention));
    put("tp", json!(engine_size(job, |e| e.tensor_parallel_size)));
    put("pp", json!(engine_size(job, |e| e.pipeline_parallel_size)));
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

