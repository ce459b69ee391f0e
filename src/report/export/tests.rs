//! The exports checked key by key on hand-written results.

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

#[test]
fn agentic_aggregate_keys_for_a_session_point() {
    use crate::metrics::prefix_cache::{CacheCounters, PrefixCacheSummary};
    use crate::protocol::{TraceFormat, TraceSpec, Workload};
    let mut result = fixture();
    // The KV pool the engine reported at start (vLLM's "KV cache size: N tokens").
    result.jobs[0].engine.as_mut().unwrap().kv_cache_tokens = Some(23_296);
    let p = &mut result.jobs[0].points[0];
    p.workload = Workload::Trace(TraceSpec {
        path: "t.jsonl".into(),
        format: TraceFormat::Agentx,
        block_size: 64,
        seed: 0,
        duration_s: None,
        max_requests: Some(3),
        start_min_ratio: 0.25,
        start_max_ratio: 0.75,
        warmup_requests_per_lane: 1,
        tree_idle_cap_s: Some(300.0),
        system_idle_cap_s: Some(10.0),
        time_scale: 1.0,
        cache_bust: true,
        split_chains: true,
    });
    p.prefix_cache = Some(PrefixCacheSummary {
        reset_before_point: true,
        prompt_tokens: 600,
        cached_tokens: Some(256),
        computed_tokens: Some(344),
        hit_rate: Some(256.0 / 600.0),
        scheduler: CacheCounters { queries: 800, hits: 320, hit_rate: Some(0.4) },
        connector: None,
        theoretical_hit_rate: Some(0.5),
        theoretical_token_hit_rate: Some(0.5),
        crosscheck: None,
    });
    // `blocks` / `hit_blocks`: 64-token blocks, the last one partial (200 = 3 full + 8 tokens).
    let line = |phase: &str, send: f64, ttft: f64, e2el: f64, tpot: f64, input: u32, out: u32, (blocks, hit): (u32, u32), error: Value| {
        json!({"job": 0, "point": 0, "phase": phase, "send_s": send, "ttft_ms": ttft, "e2el_ms": e2el, "tpot_ms": tpot,
               "input_tokens": input, "output_tokens": out, "requested_output_tokens": out, "blocks": blocks, "hit_blocks": hit,
               "theoretical_hit_tokens": hit.min(input / 64) * 64, "itl_ms": [], "error": error})
    };
    let requests = vec![
        line("warmup", 0.0, 10.0, 100.0, 10.0, 200, 10, (4, 0), Value::Null),
        line("measured", 1.0, 100.0, 1100.0, 100.0, 200, 11, (4, 1), Value::Null),
        line("measured", 1.5, 200.0, 2700.0, 250.0, 400, 11, (7, 4), Value::Null),
        line("measured", 2.0, 0.0, 0.0, 0.0, 300, 0, (5, 0), json!("aborted: engine error")),
    ];
    let docs = export(&result, &requests, Format::Inferencex);
    let v = &docs[0].1;
    assert_eq!(v["scenario_type"], "agentic-coding");
    assert_eq!(v["tp"], 8);
    assert_eq!(v["kv_offloading"], "none");
    let acc = &v["request_accounting"];
    assert_eq!((acc["records_total"].as_u64(), acc["records_profiled"].as_u64()), (Some(4), Some(2)));
    assert_eq!((acc["records_warmup_dropped"].as_u64(), acc["records_error_dropped"].as_u64()), (Some(1), Some(1)));
    assert_eq!(acc["error_categories"]["aborted"], 1);
    let rm = &v["request_metrics"];
    // TTFT 0.1 s and 0.2 s: seconds, numpy's linear percentiles.
    assert_eq!(rm["latency"]["ttft"]["mean"].as_f64().unwrap(), 0.15000000000000002);
    assert!((rm["latency"]["ttft"]["p90"].as_f64().unwrap() - 0.19).abs() < 1e-12);
    // Interactivity is 1 / the ITL statistic: ITL (= TPOT) 0.1 and 0.25 s.
    assert!((rm["latency"]["intvty"]["p50"].as_f64().unwrap() - 1.0 / 0.175).abs() < 1e-9);
    assert_eq!(rm["tokens"]["input"]["mean"], 300.0);
    // Duration: first measured send (1.0) to last end (1.5 + 2.7 = 4.2).
    let d = rm["throughput"]["duration_seconds"].as_f64().unwrap();
    assert!((d - 3.2).abs() < 1e-9, "{d}");
    assert!((rm["throughput"]["per_gpu"]["total_tput_tps"].as_f64().unwrap() - 622.0 / 3.2 / 8.0).abs() < 1e-9);
    // InferenceX's rule by hand: (1 + 4) hit blocks of (4 + 7) blocks, the
    // warm-up and the failed request left out (in tokens it would be 320 / 600).
    assert!((rm["cache"]["theoretical_cache_hit_rate"].as_f64().unwrap() - 5.0 / 11.0).abs() < 1e-12);
    assert_eq!(rm["qps"]["window_seconds"], 1.0);
    let sm = &v["server_metrics"];
    assert_eq!(sm["cache"]["gpu_cache_hit_rate"], 0.4);
    assert_eq!(sm["cache"]["prefix_cache_hits"], 320);
    assert!(sm["cache"]["cpu_cache_hit_rate"].is_null(), "no connector: null, not 0");
    assert_eq!(sm["tokens"]["prompt_by_source"]["computed"], 344);
    assert_eq!(sm["kv_cache"]["gpu_usage_pct"], 0.1);
    assert!(v.get("isl").is_none(), "a session point has no ISL/OSL");
    // Every key InferenceX's agentic aggregate has (its
    // test_process_agentic_result.py key sets), null where in-process has no source.
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(sm), ["adapter", "cache", "kv_cache", "kv_offload", "metric_count", "present", "sources", "tokens"]);
    assert_eq!((sm["metric_count"].as_u64(), sm["sources"].as_array().map(Vec::len)), (Some(3), Some(0)));
    assert_eq!(keys(&sm["cache"]).len(), 14);
    assert_eq!((sm["kv_cache"]["gpu_total_tokens"].as_u64(), v["kv_cache_pool_tokens"].as_u64()), (Some(23_296), Some(23_296)));
    assert_eq!(keys(&sm["tokens"]["prompt_by_source"]), ["computed", "cpu_or_external_cache_hit", "gpu_cache_hit", "raw"]);
    assert_eq!(keys(&rm["latency"]), ["e2e_norm_intvty", "e2el", "full_response_intvty", "full_response_itl", "intvty", "itl", "tpot", "ttft"]);
    assert_eq!(rm["latency"]["full_response_itl"], rm["latency"]["itl"], "in-process every token is a response token");
    // A result file from before the pool was recorded: null, as InferenceX
    // writes it when the server log has no size line.
    result.jobs[0].engine.as_mut().unwrap().kv_cache_tokens = None;
    let old = &export(&result, &requests, Format::Inferencex)[0].1;
    assert!(old["server_metrics"]["kv_cache"]["gpu_total_tokens"].is_null() && old["kv_cache_pool_tokens"].is_null());
}

/// A DP-attention job as InferenceX runs it (matrix TP 8, vLLM `-tp 1 -dp 8`),
/// recorded by a run that divided by the engine's TP 1: the export reports
/// `tp` 8 and tok/s/GPU over TP x PP x PCP = 8 GPUs, as process_result.py.
#[test]
fn dp_attention_job_counts_gpus_as_inferencex() {
    let mut r = fixture();
    let job = &mut r.jobs[0];
    job.engine_args = ["--tensor-parallel-size", "1", "--data-parallel-size", "8", "--enable-expert-parallel"].map(String::from).to_vec();
    let engine = job.engine.as_mut().unwrap();
    (engine.tensor_parallel_size, engine.data_parallel_size) = (Some(1), Some(8));
    let p = &mut job.points[0];
    p.gpus = 1;
    p.figures.tput_per_gpu = 1012.0;
    let docs = export(&r, &[], Format::Inferencex);
    let v = &docs[0].1;
    assert_eq!((v["tp"].as_u64(), v["ep"].as_u64(), v["dp_attention"].as_str()), (Some(8), Some(8), Some("true")));
    assert_eq!((v["pp"].as_u64(), v["pcp_size"].as_u64(), v["dcp_size"].as_u64()), (Some(1), Some(1), Some(1)));
    assert_eq!(v["tput_per_gpu"], 126.5);
    assert_eq!(v["output_tput_per_gpu"], 64.0);
    assert_eq!(v["input_tput_per_gpu"], 62.5);
    // Without the recipe's TP, the engine's TP x DP stands for it; PCP from the engine multiplies.
    r.jobs[0].tp = None;
    r.jobs[0].engine.as_mut().unwrap().prefill_context_parallel_size = Some(2);
    let v = &export(&r, &[], Format::Inferencex)[0].1;
    assert_eq!((v["tp"].as_u64(), v["pcp_size"].as_u64()), (Some(8), Some(2)));
    assert_eq!(v["tput_per_gpu"], 1012.0 / 16.0);
}

/// A P/D point exports InferenceX's disaggregated figures (process_result.py:
/// total over prefill + decode GPUs, output over decode, input over prefill).
#[test]
fn pd_point_exports_the_disaggregated_per_gpu_figures() {
    let mut r = fixture();
    let pd: crate::metrics::pd::PdSummary = serde_json::from_value(serde_json::json!({
        "prefill_workers": 2, "decode_workers": 1, "requests_per_prefill_worker": [4, 4],
        "ttft_split": {"requests": 0,
            "prefill_queue_ms": {"mean": 0.0, "median": 0.0, "std": 0.0, "percentiles": []},
            "prefill_compute_ms": {"mean": 0.0, "median": 0.0, "std": 0.0, "percentiles": []},
            "handoff_ms": {"mean": 0.0, "median": 0.0, "std": 0.0, "percentiles": []},
            "kv_wait_ms": {"mean": 0.0, "median": 0.0, "std": 0.0, "percentiles": []},
            "first_token_ms": {"mean": 0.0, "median": 0.0, "std": 0.0, "percentiles": []}},
        "transfers": null, "prompt_tokens": 0, "transferred_tokens": 0, "whole_prompt_transferred": 0, "recomputed": 0,
        "prefill_gpus": 8, "decode_gpus": 8, "tput_per_gpu": 100.0, "output_tput_per_gpu": 50.0, "input_tput_per_gpu": 150.0
    }))
    .unwrap();
    r.jobs[0].points[0].pd = Some(pd);
    let v = &export(&r, &[], Format::Inferencex)[0].1;
    assert_eq!((v["disagg"].as_bool(), v["is_multinode"].as_bool()), (Some(true), Some(false)));
    assert_eq!((v["num_prefill_gpu"].as_u64(), v["num_decode_gpu"].as_u64(), v["prefill_num_workers"].as_u64()), (Some(8), Some(8), Some(2)));
    assert_eq!((v["tput_per_gpu"].as_f64(), v["output_tput_per_gpu"].as_f64(), v["input_tput_per_gpu"].as_f64()), (Some(100.0), Some(50.0), Some(150.0)));
}
