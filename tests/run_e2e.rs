//! End to end on real vLLM (CPU build) and the real bundled model.

mod common;

use common::{engine_lock, enginebench, install, read_json, repo, text};

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
    assert!(r["recipe"]["engine_args"].as_array().unwrap().iter().any(|a| a == "--enforce-eager"));
    assert_eq!(r["recipe"]["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"], "0");
    assert!(r["engine_start_s"].as_f64().unwrap() > 0.0);

    let points = r["points"].as_array().unwrap();
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
        assert!(p["steps"].as_u64().unwrap() >= 16 * n / p["conc"].as_u64().unwrap(), "{p}");
        assert!(f("mean_step_ms") > 0.0);
    }
    let jsonl = std::fs::read_to_string(out_dir.join("points.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count(), 2);

    let g = &r["eval"]["gsm8k"];
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
    assert!(r["error"]["message"].as_str().unwrap().contains("--no-such-flag"));
}
