//! End to end on real vLLM (CPU build) and the real bundled model.

use crate::util::{engine_lock, enginebench, f, install, read_json, repo, text};

/// `a` and `b` agree within a relative tolerance (figures are rounded nowhere,
/// but a duration is summed from floats).
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 + 1e-6 * a.abs().max(b.abs())
}

#[test]
fn run_sweep_and_gsm8k_on_real_engine() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = enginebench(&[
        "run",
        "--conc", "1,4",
        "--isl", "64",
        "--osl", "16",
        "--num-prompts", "8",
        "--eval-limit", "5",
        "--output", out_dir.to_str().unwrap(),
    ]);
    let log = text(&out);
    assert!(out.status.success(), "run failed:\n{log}");
    assert!(log.contains("TTFT ms") && log.contains("GSM8K"), "no table printed:\n{log}");

    let r = read_json(&out_dir.join("result.json"));
    assert_eq!(r["schema_version"], 1);
    assert_eq!(r["status"], "ok");
    assert!(r["versions"]["vllm"].as_str().unwrap().starts_with("0.32.0"), "{}", r["versions"]);
    for key in ["torch", "python", "enginebench"] {
        assert!(r["versions"][key].as_str().is_some_and(|v| !v.is_empty()), "versions.{key}");
    }
    assert_eq!(r["recipe"]["name"], "smollm2-135m-cpu");
    let job = &r["jobs"][0];
    assert_eq!(r["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(job["status"], "ok");
    assert!(job["engine_args"].as_array().unwrap().iter().any(|a| a == "--enforce-eager"));
    assert_eq!(job["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"], "0");
    assert!(job["engine_start_s"].as_f64().unwrap() > 0.0);
    // The perf sweep drove vLLM's engine core directly (the eval's text
    // requests went through its output processor on the same engine).
    assert_eq!(job["engine"]["step_path"], "core", "{}", job["engine"]);
    assert!(job["engine"].get("step_path_reason").is_none(), "{}", job["engine"]);

    let points = job["points"].as_array().unwrap();
    assert_eq!(points.iter().map(|p| p["conc"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 4]);
    for p in points {
        let n = p["num_prompts"].as_u64().unwrap();
        let completed = p["completed"].as_u64().unwrap();
        assert_eq!(n, 8);
        assert_eq!(completed, n, "{p}");
        assert_eq!(p["failed"], 0);
        assert_eq!(p["total_output_tokens"].as_u64().unwrap(), completed * 16, "{p}");
        assert_eq!(p["total_input_tokens"].as_u64().unwrap(), completed * 64, "{p}");
        let f = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("missing {k} in {p}"));
        let dur = f("duration_s");
        assert!(dur > 0.0);
        assert!(close(f("output_throughput"), completed as f64 * 16.0 / dur), "{p}");
        assert!(close(f("request_throughput"), completed as f64 / dur), "{p}");
        assert!(close(f("total_token_throughput"), completed as f64 * 80.0 / dur), "{p}");
        for stat in ["mean", "median", "p99"] {
            assert!(f(&format!("{stat}_ttft_ms")) > 0.0);
            assert!(f(&format!("{stat}_ttft_ms")) <= f(&format!("{stat}_e2el_ms")), "{stat}: {p}");
            assert!(f(&format!("{stat}_tpot_ms")) > 0.0);
            assert!(f(&format!("{stat}_itl_ms")) > 0.0);
        }
        // Every request spends at least its 15 decode gaps in E2EL.
        assert!(f("mean_e2el_ms") >= f("mean_ttft_ms") + 15.0 * f("mean_tpot_ms") * 0.999, "{p}");
        // One step per generated token at least (each step gives a request at most 1 token).
        let steps = &p["step_stats"];
        assert!(steps["steps"].as_u64().unwrap() >= 16 * n / p["conc"].as_u64().unwrap(), "{p}");
        assert!(steps["mean_step_ms"].as_f64().unwrap() > 0.0);

        // Host telemetry sampled over the point: CPU and the engine's RSS.
        let host = &p["telemetry"]["host"];
        assert!(host["samples"].as_u64().unwrap() >= 1, "{}", p["telemetry"]);
        assert!(host["cpu_pct"]["mean"].as_f64().unwrap() > 0.0, "{host}");
        assert!(host["engine_rss_bytes"]["max"].as_f64().unwrap() > 1e8, "an engine holds > 100 MB: {host}");
        // No GPU here: said so, and power is not claimed valid.
        assert_eq!(p["telemetry"]["power_valid"], false);
    }
    let t = &job["telemetry"];
    let sources = t["sources"].as_array().unwrap();
    for name in ["nvml", "amd_smi", "host"] {
        let s = sources.iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("source {name} not listed: {t}"));
        assert!(!s["reason"].as_str().unwrap().is_empty(), "{s}");
    }
    assert!(sources.iter().any(|s| s["name"] == "host" && s["used"] == true));
    let series = std::fs::read_to_string(out_dir.join(t["series_file"].as_str().unwrap())).unwrap();
    assert_eq!(series.lines().count() as u64, t["samples"].as_u64().unwrap());
    assert!(t["markers"].as_array().unwrap().iter().any(|m| m["label"] == "engine ready"));
    let jsonl = std::fs::read_to_string(out_dir.join("points.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count(), 2);

    let g = &job["eval"]["gsm8k"];
    assert_eq!(g["n"], 5, "{g}");
    let samples: Vec<serde_json::Value> = std::fs::read_to_string(out_dir.join("gsm8k_samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(samples.len(), 5);
    // The model generated tokens for every question, and scoring agrees with the samples.
    assert!(samples.iter().all(|s| s["output_tokens"].as_u64().unwrap() >= 1), "{samples:?}");
    assert!(samples.iter().all(|s| s["strict"].is_string() && s["flexible"].is_string()));
    assert_eq!(samples.iter().map(|s| s["doc_id"].as_u64().unwrap()).collect::<Vec<_>>(), vec![5, 6, 7, 8, 9]);
    let strict = samples.iter().filter(|s| s["strict_correct"] == true).count() as f64 / 5.0;
    let flexible = samples.iter().filter(|s| s["flexible_correct"] == true).count() as f64 / 5.0;
    assert_eq!(g["exact_match_strict"].as_f64().unwrap(), strict);
    assert_eq!(g["exact_match_flexible"].as_f64().unwrap(), flexible);
    let sample_tokens: u64 = samples.iter().map(|s| s["output_tokens"].as_u64().unwrap()).sum();
    assert_eq!(g["output_tokens"].as_u64().unwrap(), sample_tokens);
    assert!(g["duration_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn bundled_model_conversion_matches_transformers() {
    let _guard = engine_lock();
    let root = install();
    let out = std::process::Command::new(root.join("venv/bin/python3"))
        .args(["-m", "enginebench_shim.check_greedy"])
        .arg(root.join("models/smollm2-135m-instruct"))
        .env("PYTHONPATH", repo().join("python-shim"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(out.status.success(), "greedy texts differ or the check failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["equal"], true);
    assert!(!v["vllm"].as_str().unwrap().trim().is_empty(), "{v}");
}

#[test]
fn rejected_engine_flag_is_bad_input() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("bad.toml");
    std::fs::write(
        &recipe,
        r#"name = "bad-flag"
model = "bundled:smollm2-135m-instruct"
hardware = "cpu"
[engine]
args = ["--dtype", "float32", "--no-such-flag", "3"]
[sweep]
isl = 16
osl = 4
conc = [1]
"#,
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let out = enginebench(&["run", recipe.to_str().unwrap(), "-o", out_dir.to_str().unwrap()]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("--no-such-flag"), "{log}");
    assert!(!log.contains("Traceback"), "a traceback without -v:\n{log}");
    let r = read_json(&out_dir.join("result.json"));
    assert_eq!(r["status"], "failed");
    assert_eq!(r["jobs"][0]["status"], "failed");
    assert!(r["jobs"][0]["error"]["message"].as_str().unwrap().contains("--no-such-flag"));
}

/// Two ISL/OSL pairs, a doubling concurrency range, the step trace,
/// vLLM's own stats agreeing with the harness, and both exports.
#[test]
fn sweep_matrix_step_stats_crosscheck_and_exports() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = enginebench(&[
        "run",
        "--isl-osl", "48/12,24/6",
        "--conc", "1..4",
        "--num-prompts", "6",
        "--warmups", "2",
        "--range-ratio", "0.5",
        "--goodput", "ttft:60000",
        "--no-eval",
        "--step-trace",
        "--output", out_dir.to_str().unwrap(),
    ]);
    let log = text(&out);
    assert!(out.status.success(), "run failed:\n{log}");
    let r = read_json(&out_dir.join("result.json"));
    let job = &r["jobs"][0];
    assert!(job["fingerprint"].as_str().is_some_and(|f| f.len() == 16), "{}", job["fingerprint"]);
    let points = job["points"].as_array().unwrap();
    let matrix: Vec<(u64, u64, u64)> = points
        .iter()
        .map(|p| (p["isl"].as_u64().unwrap(), p["osl"].as_u64().unwrap(), p["conc"].as_u64().unwrap()))
        .collect();
    assert_eq!(matrix, vec![(48, 12, 1), (48, 12, 2), (48, 12, 4), (24, 6, 1), (24, 6, 2), (24, 6, 4)]);

    let requests: Vec<serde_json::Value> = std::fs::read_to_string(out_dir.join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(requests.len(), 36);
    let steps_lines = std::fs::read_to_string(out_dir.join("steps.jsonl")).unwrap();
    let steps: Vec<serde_json::Value> = steps_lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();

    for (i, p) in points.iter().enumerate() {
        let completed = p["completed"].as_u64().unwrap();
        assert_eq!(completed, 6, "{p}");
        assert_eq!(p["length_convention"], "vllm");
        let (isl, osl) = (p["isl"].as_u64().unwrap(), p["osl"].as_u64().unwrap());
        // vLLM convention, ratio 0.5: lengths within [floor(L/2), ceil(1.5 L)], as recorded.
        let mine: Vec<&serde_json::Value> = requests.iter().filter(|q| q["point"] == i as u64).collect();
        for q in &mine {
            let input = q["input_tokens"].as_u64().unwrap();
            let requested = q["requested_output_tokens"].as_u64().unwrap();
            assert!((isl / 2..=isl * 3 / 2).contains(&input), "{q}");
            assert!((osl / 2..=osl * 3 / 2).contains(&requested), "{q}");
            assert_eq!(q["output_tokens"], requested, "ignore_eos gives exactly the requested length: {q}");
        }
        let total_out: u64 = mine.iter().map(|q| q["output_tokens"].as_u64().unwrap()).sum();
        assert_eq!(p["total_output_tokens"].as_u64().unwrap(), total_out);

        // Step statistics: every output token after a request's first comes from a decode step.
        let s = &p["step_stats"];
        let decode = s["decode_tokens"].as_u64().expect("scheduler counts in-process");
        assert_eq!(decode + completed, total_out, "decode tokens + first tokens = output tokens: {s}");
        let input: u64 = mine.iter().map(|q| q["input_tokens"].as_u64().unwrap()).sum();
        assert_eq!(s["prefill_tokens"].as_u64().unwrap(), input, "random prompts: no prefix-cache hits: {s}");
        let trace: Vec<&serde_json::Value> = steps.iter().filter(|t| t["point"] == i as u64).collect();
        assert_eq!(trace.len() as u64, s["steps"].as_u64().unwrap());
        let traced_decode: u64 = trace.iter().map(|t| t["decode_tokens"].as_u64().unwrap()).sum();
        assert_eq!(traced_decode, decode);
        assert!(s["max_running"].as_u64().unwrap() <= p["conc"].as_u64().unwrap());

        // Per GPU on CPU: one "GPU" (TP 1 x PP 1).
        assert_eq!(p["gpus"], 1);
        assert_eq!(p["tput_per_gpu"], p["total_token_throughput"]);
        let median_tpot = p["median_tpot_ms"].as_f64().unwrap();
        assert!((p["median_intvty"].as_f64().unwrap() - 1000.0 / median_tpot).abs() < 1e-6);
        // A 60 s TTFT SLO: every request is good.
        assert!((p["request_goodput"].as_f64().unwrap() - p["request_throughput"].as_f64().unwrap()).abs() < 1e-9);

        // The harness's clock agrees with vLLM's own per-request timings
        // (on the engine-core path, rebuilt from the core's outputs as
        // vLLM's output processor computes them).
        let c = &p["crosscheck"];
        assert_eq!(c["requests"].as_u64().unwrap(), completed, "{c}");
        assert_eq!(c["agree"], true, "harness vs vLLM per-request stats: {c}");
        for q in &mine {
            assert!(f(&q["vllm_ttft_ms"]) > 0.0 && f(&q["vllm_queued_ms"]) >= 0.0, "{q}");
            assert_eq!(q["cached_tokens"], 0, "random prompts, cache reset: {q}");
        }
    }

    // Exports carry the same figures.
    let ix = enginebench(&["export", "--format", "inferencex", out_dir.join("result.json").to_str().unwrap()]);
    assert!(ix.status.success(), "{}", text(&ix));
    let ix: serde_json::Value = serde_json::from_slice(&ix.stdout).unwrap();
    assert_eq!(ix.as_array().unwrap().len(), 6);
    let p0 = &points[0];
    assert_eq!(ix[0]["tput_per_gpu"], p0["tput_per_gpu"]);
    assert!((ix[0]["median_ttft"].as_f64().unwrap() * 1000.0 - p0["median_ttft_ms"].as_f64().unwrap()).abs() < 1e-6);
    let vb_dir = dir.path().join("vb");
    let vb = enginebench(&[
        "export", "--format", "vllm-bench", out_dir.join("result.json").to_str().unwrap(),
        "-o", vb_dir.to_str().unwrap(),
    ]);
    assert!(vb.status.success(), "{}", text(&vb));
    let v = read_json(&vb_dir.join("smollm2-135m-cpu_48_12_conc2.json"));
    assert_eq!(v["completed"], 6);
    assert_eq!(v["max_concurrency"], 2);
    assert_eq!(v["ttfts"].as_array().unwrap().len(), 6);
    assert_eq!(v["output_lens"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).sum::<u64>(),
               points[1]["total_output_tokens"].as_u64().unwrap());

    // Each export compared with the run it came from: zero deltas at every
    // point (one foreign run is never gated: exit 3).
    std::fs::write(dir.path().join("ix.json"), serde_json::to_string(&ix).unwrap()).unwrap();
    for (name, exported) in [("vllm-bench", vb_dir.clone()), ("inferencex", dir.path().join("ix.json"))] {
        let cmp = dir.path().join(format!("cmp-{name}"));
        let out = enginebench(&["compare", exported.to_str().unwrap(), out_dir.join("result.json").to_str().unwrap(), "-o", cmp.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(3), "{name}: {}", text(&out));
        let ab = read_json(&cmp.join("ab.json"));
        let rows = ab["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 6, "{name}: {ab}");
        for r in rows {
            for fig in r["figures"].as_array().unwrap() {
                assert!(f(&fig["delta"]).abs() < 1e-9, "{name}: {r}");
            }
        }
    }
}
