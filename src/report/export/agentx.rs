//! The `inferencex` export of a session-workload point (trace replay,
//! conversations): the aggregate InferenceX's agentic scenario writes
//! (utils/agentic/aggregation/process_agentic_result.py `build_agg`, with
//! `request_metrics.py` and the vLLM adapter `backends/vllm.py`), key by key:
//!
//! * run identity as in the fixed-length aggregate, plus
//!   `scenario_type: "agentic-coding"`, KV-offload fields and
//!   `request_accounting` (records total / profiled / dropped as warm-up or
//!   error, error categories);
//! * `request_metrics`: `qps` (completions per 1 s window), `latency`
//!   (`ttft`, `e2el`, `itl`, `tpot` in seconds, `intvty` = 1 / the ITL
//!   statistic, `e2e_norm_intvty` over E2EL / output tokens,
//!   `full_response_itl` / `full_response_intvty`: AIPerf's ITL over every
//!   token of the response, reasoning included, which in-process is every
//!   token, so they repeat `itl` / `intvty`), `tokens`
//!   (input, output actual and expected), `throughput` (total and per GPU),
//!   `cache.theoretical_cache_hit_rate` in InferenceX's units: hit blocks
//!   over blocks summed over the requests (`hit_blocks`, `blocks` of
//!   requests.jsonl; a partial last block counts as one), as its
//!   aggregation and AIPerf's `theoretical_prefix_cache` count it;
//! * `server_metrics`: cache hit rates, prefix-cache counters, KV usage,
//!   prompt tokens by source, from the engine's own counters in-process
//!   (where AgentX scrapes vLLM's `/metrics`); `metric_count` is the number
//!   of engine counters read (prefix-cache queries and hits, KV usage, and
//!   the connector's queries and hits when there is one), `sources` is empty
//!   (no scraped endpoints), and what has no in-process source is `null`:
//!   the frontend and router figures (no HTTP frontend, no router);
//!   `kv_cache.gpu_total_tokens` (and its copy `kv_cache_pool_tokens`) is
//!   the KV pool in tokens the engine reported at start
//!   (`EngineInfo::kv_cache_tokens`, summed over DP ranks), `null` where a
//!   result file has none.
//!
//! Statistics are `{mean, p50, p75, p90, p95, std}` with numpy's linear
//! percentiles and the population std, as `aggregation_common.py`; AgentX's
//! per-request ITL is its `inter_token_latency` = (E2EL - TTFT) / (output - 1),
//! i.e. the TPOT, and `tpot` repeats it. Floats are not rounded (AgentX
//! rounds to 5 decimals). KV-offload bytes and times are `null`: the
//! in-process harness does not read the connector's transfer stats yet.

use serde_json::{Map, Value, json};

use super::inferencex::{gpus, identity};
use crate::metrics::stats::{mean, percentile_sorted, std_dev};
use crate::report::result::{JobResult, PointResult, RunResult};

/// The agentic aggregate of one point from its `requests.jsonl` lines.
pub(super) fn aggregate(result: &RunResult, job: &JobResult, p: &PointResult, lines: &[&Value]) -> Value {
    let mut m = identity(result, job, p);
    let kept: Vec<&Value> = lines.iter().copied().filter(|r| measured(r) && r["error"].is_null()).collect();
    let warmup = lines.iter().filter(|r| !measured(r)).count();
    let errors: Vec<&Value> = lines.iter().copied().filter(|r| !r["error"].is_null()).collect();
    let mut categories = Map::new();
    for e in &errors {
        let text = e["error"].as_str().unwrap_or("error");
        let cat: String = text.split(':').next().unwrap_or(text).chars().take(120).collect();
        let n = categories.get(&cat).and_then(Value::as_u64).unwrap_or(0);
        categories.insert(cat, json!(n + 1));
    }
    let kv_connector = job.engine.as_ref().and_then(|e| e.kv_connector.clone());
    m.insert("scenario_type".into(), json!("agentic-coding"));
    m.insert("kv_offloading".into(), json!(if kv_connector.is_some() { "dram" } else { "none" }));
    m.insert("kv_offload_backend".into(), kv_connector.map_or(Value::Null, |c| json!({ "name": c })));
    m.insert("allocated_cpu_dram_gb".into(), Value::Null);
    m.insert("num_requests_total".into(), json!(lines.len()));
    m.insert("num_requests_successful".into(), json!(kept.len()));
    m.insert(
        "request_accounting".into(),
        json!({
            "records_total": lines.len(),
            "records_profiled": kept.len(),
            "records_dropped_total": lines.len() - kept.len(),
            "records_warmup_dropped": warmup,
            "records_error_dropped": errors.len(),
            "error_categories": categories,
        }),
    );
    m.insert("request_metrics".into(), request_metrics(&kept, gpus(&m)));
    let pool = job.engine.as_ref().and_then(|e| e.kv_cache_tokens);
    let server = server_metrics(p, &kept, pool);
    m.insert("kv_cache_pool_tokens".into(), json!(pool));
    m.insert("server_metrics".into(), server);
    Value::Object(m)
}

/// A line of a measured request (lines without a phase are measured).
fn measured(r: &Value) -> bool {
    r["phase"].as_str().is_none_or(|p| p == "measured")
}

fn num(r: &Value, key: &str) -> Option<f64> {
    r[key].as_f64()
}

/// `{mean, p50, p75, p90, p95, std}` of `values` (empty: `{}`).
fn stats(values: &[f64]) -> Value {
    if values.is_empty() {
        return json!({});
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    json!({
        "mean": mean(&v),
        "p50": percentile_sorted(&v, 50.0),
        "p75": percentile_sorted(&v, 75.0),
        "p90": percentile_sorted(&v, 90.0),
        "p95": percentile_sorted(&v, 95.0),
        "std": std_dev(&v),
    })
}

/// AgentX's interactivity: 1 / each statistic of `values` (s per token),
/// the std over the per-request reciprocals.
fn reciprocal_stats(values: &[f64]) -> Value {
    let s = stats(values);
    let Some(obj) = s.as_object() else { return s };
    let mut out = Map::new();
    for (k, v) in obj {
        if k != "std" {
            let x = v.as_f64().unwrap_or(0.0);
            out.insert(k.clone(), if x > 0.0 { json!(1.0 / x) } else { Value::Null });
        }
    }
    if !obj.is_empty() {
        let inv: Vec<f64> = values.iter().filter(|x| **x > 0.0).map(|x| 1.0 / x).collect();
        out.insert("std".into(), json!(std_dev(&inv)));
    }
    Value::Object(out)
}

fn request_metrics(kept: &[&Value], gpus: f64) -> Value {
    let secs = |key: &str| -> Vec<f64> { kept.iter().filter_map(|r| num(r, key)).filter(|v| *v > 0.0).map(|ms| ms / 1000.0).collect() };
    let tokens = |key: &str| -> Vec<f64> { kept.iter().filter_map(|r| num(r, key)).collect() };
    let itl = secs("tpot_ms");
    let e2e_norm: Vec<f64> = kept
        .iter()
        .filter_map(|r| Some((num(r, "e2el_ms")? / 1000.0, num(r, "output_tokens")?)))
        .filter(|(_, o)| *o > 0.0)
        .map(|(e, o)| e / o)
        .collect();
    let starts: Vec<f64> = kept.iter().filter_map(|r| num(r, "send_s")).collect();
    let mut ends: Vec<f64> = kept.iter().filter_map(|r| Some(num(r, "send_s")? + num(r, "e2el_ms")? / 1000.0)).collect();
    ends.sort_by(f64::total_cmp);
    let first = starts.iter().copied().fold(f64::INFINITY, f64::min);
    let duration = ends.last().map_or(0.0, |last| (last - first).max(0.0));
    let sum = |key: &str| tokens(key).iter().sum::<f64>();
    let (input, output) = (sum("input_tokens"), sum("output_tokens"));
    let per_s = |x: f64| if duration > 0.0 { x / duration } else { 0.0 };
    let (hit_blocks, blocks) = (sum("hit_blocks"), sum("blocks"));
    let has_theoretical = kept.iter().any(|r| r.get("blocks").is_some_and(|v| !v.is_null()));
    json!({
        "qps": qps(&ends, duration),
        "latency": {
            "ttft": stats(&secs("ttft_ms")),
            "e2el": stats(&secs("e2el_ms")),
            "itl": stats(&itl),
            "tpot": stats(&itl),
            "intvty": reciprocal_stats(&itl),
            "e2e_norm_intvty": reciprocal_stats(&e2e_norm),
            "full_response_itl": stats(&itl),
            "full_response_intvty": reciprocal_stats(&itl),
        },
        "tokens": {
            "input": stats(&tokens("input_tokens")),
            "output_actual": stats(&tokens("output_tokens")),
            "output_expected": stats(&tokens("requested_output_tokens")),
        },
        "throughput": {
            "input": { "tokens_per_second": per_s(input) },
            "output": { "tokens_per_second": per_s(output) },
            "total": { "tokens_per_second": per_s(input + output) },
            "duration_seconds": duration,
            "per_gpu": {
                "total_tput_tps": per_s(input + output) / gpus,
                "output_tput_tps": per_s(output) / gpus,
                "input_tput_tps": per_s(input) / gpus,
            },
        },
        "cache": {
            "theoretical_cache_hit_rate": if has_theoretical && blocks > 0.0 { json!(hit_blocks / blocks) } else { Value::Null },
        },
    })
}

/// Completions per 1 s window `[e0 + i, e0 + i + 1)` while the window ends
/// by the last completion (AgentX's `qps`); with no full window, only the
/// mean over the duration.
fn qps(sorted_ends: &[f64], duration: f64) -> Value {
    let (Some(&e0), Some(&last)) = (sorted_ends.first(), sorted_ends.last()) else { return json!({}) };
    let mut samples = Vec::new();
    let mut i = 0.0;
    while e0 + i + 1.0 <= last {
        let (lo, hi) = (e0 + i, e0 + i + 1.0);
        samples.push(sorted_ends.iter().filter(|&&e| e >= lo && e < hi).count() as f64);
        i += 1.0;
    }
    if samples.is_empty() {
        let n = sorted_ends.len() as f64;
        return json!({ "mean": if duration > 0.0 { n / duration } else { 0.0 } });
    }
    let mut out = stats(&samples);
    out["window_seconds"] = json!(1.0);
    out["samples"] = json!(samples.len());
    out
}

/// `server_metrics` from the point's engine counters; `pool` is the job's
/// KV pool in tokens (`EngineInfo::kv_cache_tokens`), InferenceX's
/// `kv_cache.gpu_total_tokens` (its vLLM adapter sums the DP engines'
/// "GPU KV cache size: N tokens" log lines).
fn server_metrics(p: &PointResult, kept: &[&Value], pool: Option<u64>) -> Value {
    let Some(c) = p.prefix_cache.as_ref() else {
        return json!({ "present": false, "adapter": "enginebench-inprocess" });
    };
    let conn_hits = c.connector.map(|k| k.hits);
    let overall = (c.scheduler.queries > 0)
        .then(|| (c.scheduler.hits + conn_hits.unwrap_or(0)) as f64 / c.scheduler.queries as f64);
    let generation: f64 = kept.iter().filter_map(|r| num(r, "output_tokens")).sum();
    let metric_count = 3 + if c.connector.is_some() { 2 } else { 0 };
    json!({
        "present": true,
        "adapter": "enginebench-inprocess",
        "metric_count": metric_count,
        "cache": {
            "gpu_cache_hit_rate": c.scheduler.hit_rate,
            "cpu_cache_hit_rate": c.connector.and_then(|k| k.hit_rate),
            "external_cache_hit_rate": c.connector.and_then(|k| k.hit_rate),
            "overall_cache_hit_rate": overall,
            "prefix_cache_hits": c.scheduler.hits,
            "prefix_cache_queries": c.scheduler.queries,
            "external_prefix_cache_hits": conn_hits,
            "external_prefix_cache_queries": c.connector.map(|k| k.queries),
            "cached_tokens_by_source": {},
            "frontend_cache_hit_rate": Value::Null,
            "router_kv_hit_rate": Value::Null,
            "router_shared_cache_hit_rate": Value::Null,
            "frontend_cached_tokens": Value::Null,
            "frontend_input_tokens": Value::Null,
        },
        "kv_cache": {
            "gpu_usage_pct": p.step_stats.max_kv_cache_usage,
            "gpu_total_tokens": pool,
            "cpu_usage_pct": Value::Null,
            "cpu_used_tokens": Value::Null,
            "cpu_total_tokens": Value::Null,
        },
        "kv_offload": {
            "bytes_gpu_to_cpu": Value::Null,
            "bytes_cpu_to_gpu": Value::Null,
            "time_gpu_to_cpu": Value::Null,
            "time_cpu_to_gpu": Value::Null,
            "bandwidth_gpu_to_cpu_bytes_per_second": Value::Null,
            "bandwidth_cpu_to_gpu_bytes_per_second": Value::Null,
        },
        "tokens": {
            "prompt_total": c.prompt_tokens,
            "generation_total": generation,
            "requests_completed": kept.len(),
            "prompt_by_source": {
                "gpu_cache_hit": c.scheduler.hits,
                "cpu_or_external_cache_hit": conn_hits.unwrap_or(0),
                "computed": c.computed_tokens,
                "raw": {},
            },
        },
        "sources": [],
    })
}
