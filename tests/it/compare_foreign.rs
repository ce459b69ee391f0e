//! `compare` against other tools' files through the command line, on one
//! fake-engine run (real worker processes and eval, the fake step engine,
//! no vLLM): `export` then `compare` gives zero deltas for both formats; an
//! ATOM-shaped `benchmark_serving.py` folder prints the per-concurrency
//! table and ends INCONCLUSIVE (exit 3) saying why, with and without its
//! per-request arrays; an unreadable file is exit 2 naming the keys it
//! missed; an lm-eval results file written here compares with the run's
//! GSM8K question by question.

use std::path::Path;

use serde_json::{Value, json};

use crate::runner_fake::{recipe, run};
use crate::util::{read_json, repo};

fn write(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every figure of every row of an `ab.json` at (near) zero delta.
fn assert_zero_deltas(ab: &Value, what: &str) {
    let rows = ab["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{what}: {ab}");
    for r in rows {
        for f in r["figures"].as_array().unwrap() {
            let d = f["delta"].as_f64().unwrap_or_else(|| panic!("{what}: {f}"));
            assert!(d.abs() < 1e-9, "{what}: conc {} {}: delta {d}", r["conc"], f["metric"]);
        }
    }
}

#[test]
fn other_tools_files_against_a_fake_engine_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let r = recipe(d, "");
    let data = repo().join("evals/fixtures/gsm8k_small");
    let out = d.join("run");
    let (o, log) = run(
        "step_ms=1",
        &["run", &r, "--task", "gsm8k", "--gsm8k-data", s(&data), "--eval-limit", "4", "--num-fewshot", "0", "-o", s(&out)],
    );
    assert!(o.status.success(), "{log}");
    let result = out.join("result.json");

    // The round trip: export, then compare the export with the run.
    let vb = d.join("vb");
    let (o, log) = run("step_ms=1", &["export", "--format", "vllm-bench", s(&result), "-o", s(&vb)]);
    assert!(o.status.success(), "{log}");
    let (o, log) = run("step_ms=1", &["compare", s(&vb), s(&result), "-o", s(&d.join("cmp_vb"))]);
    assert_eq!(o.status.code(), Some(3), "one foreign run is never gated:\n{log}");
    let ab = read_json(&d.join("cmp_vb/ab.json"));
    assert_zero_deltas(&ab, "vllm-bench");
    assert_eq!(ab["baseline_source"]["tool"], "enginebench export --format vllm-bench");
    assert!(ab["rows"][0]["figures"][2]["ci"].is_array(), "per-request arrays give an interval: {}", ab["rows"][0]);
    let (o, log) = run("step_ms=1", &["export", "--format", "inferencex", s(&result)]);
    assert!(o.status.success(), "{log}");
    std::fs::write(d.join("ix.json"), &o.stdout).unwrap();
    let (o, log) = run("step_ms=1", &["compare", s(&d.join("ix.json")), s(&result), "-o", s(&d.join("cmp_ix"))]);
    assert_eq!(o.status.code(), Some(3), "{log}");
    let ab = read_json(&d.join("cmp_ix/ab.json"));
    assert_zero_deltas(&ab, "inferencex");
    assert_eq!(ab["rows"][0]["figures"][0]["method"], "summary-only");

    // ATOM's benchmark_serving.py: the same requests, TPOT 5% lower, in its
    // keys (best_of, `request_goodput:`, no failed, no latencies), with
    // --metadata isl, osl, tp, engine, version.
    let atom = d.join("atom");
    std::fs::create_dir(&atom).unwrap();
    for entry in std::fs::read_dir(&vb).unwrap() {
        let path = entry.unwrap().path();
        let v = read_json(&path);
        let mut a = serde_json::Map::new();
        for k in ["date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness", "max_concurrency", "duration",
                  "completed", "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
                  "total_token_throughput", "input_lens", "output_lens", "ttfts", "errors", "median_ttft_ms", "mean_ttft_ms", "p99_ttft_ms"] {
            a.insert(k.into(), v[k].clone());
        }
        a.insert("best_of".into(), json!(1));
        a.insert("request_goodput:".into(), Value::Null);
        a.insert("itls".into(), json!(v["itls"].as_array().unwrap().iter().map(|g| g.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() * 0.95).collect::<Vec<_>>()).collect::<Vec<_>>()));
        a.insert("median_tpot_ms".into(), json!(v["median_tpot_ms"].as_f64().unwrap() * 0.95));
        for (k, x) in [("isl", "16"), ("osl", "8"), ("tp", "1"), ("engine", "ATOM"), ("version", "v0.1.2")] {
            a.insert(k.into(), json!(x));
        }
        write(&atom.join(path.file_name().unwrap()), &Value::Object(a));
    }
    let (o, log) = run("step_ms=1", &["compare", s(&atom), s(&result), "-o", s(&d.join("cmp_atom"))]);
    assert_eq!(o.status.code(), Some(3), "{log}");
    assert!(log.contains("Before (`ATOM`) is another tool's file: benchmark_serving.py") && log.contains("ATOM v0.1.2"), "{log}");
    assert!(log.contains("E2EL per request = TTFT + the sum of its ITLs (the file has no `latencies`)"), "{log}");
    let md = std::fs::read_to_string(d.join("cmp_atom/ab.md")).unwrap();
    let table = md.split("Median TPOT (ms), lower is better:\n\n").nth(1).unwrap_or_else(|| panic!("{md}"));
    let lines: Vec<&str> = table.lines().take(4).collect();
    assert_eq!(&lines[..2], ["| conc | before | after | delta |", "|---:|---:|---:|:---|"], "{md}");
    assert!(lines[2].starts_with("| 1 | ") && lines[3].starts_with("| 2 | "), "{md}");
    assert!(lines[2].contains("| +5.3% ["), "ours is 1/0.95 of ATOM's: {}", lines[2]);
    let ab = read_json(&d.join("cmp_atom/ab.json"));
    let why = ab["gate"]["inconclusive"][0].as_str().unwrap();
    assert!(why.contains("not decided: the baseline is one run of another tool (ATOM v0.1.2)") && why.contains("with per-request arrays"), "{why}");
    // Summary figures only: no interval, and the gate says why.
    for entry in std::fs::read_dir(&atom).unwrap() {
        let path = entry.unwrap().path();
        let mut v = read_json(&path);
        for k in ["input_lens", "output_lens", "ttfts", "itls", "errors"] {
            v.as_object_mut().unwrap().remove(k);
        }
        write(&path, &v);
    }
    let (o, log) = run("step_ms=1", &["compare", s(&atom), s(&result), "-o", s(&d.join("cmp_sum"))]);
    assert_eq!(o.status.code(), Some(3), "{log}");
    let md = std::fs::read_to_string(d.join("cmp_sum/ab.md")).unwrap();
    assert!(md.contains("+5.3% (no CI: summary figures only on a side)"), "{md}");
    assert!(md.contains("with summary figures only: one foreign run is not a measurement of its noise"), "{md}");

    // An unreadable file: exit 2, the keys it missed named.
    write(&d.join("bad.json"), &json!({"duration": 1.0, "completed": 4, "max_concurrency": 2}));
    let (o, log) = run("step_ms=1", &["compare", s(&d.join("bad.json")), s(&result)]);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("missing: total_input_tokens, total_output_tokens, output_throughput, total_token_throughput"), "{log}");
    assert!(!log.contains("panicked") && !log.contains("Traceback"), "{log}");

    // lm-eval's gsm8k on the same four questions, 5-shot, one of them right
    // (the fake engine answers every question wrong), the same prompts.
    let ours: Vec<Value> =
        std::fs::read_to_string(out.join("gsm8k_samples.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(ours.len(), 4);
    let date = "2026-12-04T10-00-00.000001";
    let lm = d.join("lm");
    std::fs::create_dir(&lm).unwrap();
    write(&lm.join(format!("results_{date}.json")), &json!({
        "results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.25,
                              "exact_match,flexible-extract": 0.25, "exact_match_stderr,flexible-extract": 0.25}},
        "configs": {"gsm8k": {"num_fewshot": 5, "generation_kwargs": {"max_gen_toks": 256}}},
        "versions": {"gsm8k": 3.0}, "n-shot": {"gsm8k": 5}, "n-samples": {"gsm8k": {"original": 5, "effective": 4}},
        "higher_is_better": {"gsm8k": {"exact_match": true}}, "config": {"model": "vllm", "limit": 4.0},
        "chat_template": null, "lm_eval_version": "0.4.10", "model_name": "fake/model"
    }));
    let mut samples = String::new();
    for (i, q) in ours.iter().enumerate() {
        for filter in ["strict-match", "flexible-extract"] {
            samples += &json!({"doc_id": q["doc_id"], "filter": filter, "metrics": ["exact_match"], "prompt_hash": q["prompt_sha256"],
                               "exact_match": if i == 0 { 1.0 } else { 0.0 }}).to_string();
            samples.push('\n');
        }
    }
    std::fs::write(lm.join(format!("samples_gsm8k_{date}.jsonl")), samples).unwrap();
    let (o, log) = run("step_ms=1", &["compare", s(&lm.join(format!("results_{date}.json"))), s(&result), "-o", s(&d.join("cmp_lm"))]);
    assert_eq!(o.status.code(), Some(3), "four questions resolve no 1-point drop:\n{log}");
    let ab = read_json(&d.join("cmp_lm/ab.json"));
    let a = &ab["accuracy"];
    assert_eq!((a["paired"].as_u64(), a["strict"]["mcnemar"]["b"].as_u64()), (Some(4), Some(1)), "{a}");
    let diffs: Vec<&str> = a["differences"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    assert_eq!(diffs, ["shots 5 (baseline) vs 0 (candidate)", "prompts byte-identical (SHA-256) on all 4 paired questions"], "{a}");
    assert_eq!(ab["baseline_source"]["engine"], "vLLM (lm-eval's in-process backend)");
    assert!(log.contains("the lm-eval file's lm-eval task gsm8k is compared with this run's gsm8k"), "{log}");
}
