//! `--profile` end to end on the real CPU engine and the bundled model: a
//! profiled point's trace is read back here, its top-kernels table checked
//! against it and against the measured step time, the unprofiled figures
//! keep their shape; an A/B of float32 against bfloat16 with profiles gives
//! a kernel diff that names the ops that differ; bad input exits 2 before
//! any engine starts.

use std::io::Read;

use serde_json::Value;

use crate::util::{bundled_recipe_head, engine_lock, enginebench, enginebench_env, f, read_json, text, write_recipe};

fn recipe(dir: &std::path::Path) -> String {
    let rest = r#"[sweep]
isl = 32
osl = 16
conc = [1, 2]
num_prompts = 2
warmups = 1
[variants.bf16]
args_replace = { "--dtype" = "bfloat16" }
"#;
    write_recipe(dir, "profile", &(bundled_recipe_head("profile-e2e", 512, "") + rest))
}

/// The trace's events, read back from the gzipped Chrome trace.
fn trace_events(path: &std::path::Path) -> Vec<Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()).read_to_string(&mut text).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["traceEvents"].as_array().expect("a Chrome trace has traceEvents").clone()
}

#[test]
fn profiled_point_has_a_trace_and_a_top_kernels_table() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = enginebench(&[
        "run", &recipe(dir.path()), "--profile", "--profile-steps", "3", "--profile-point", "conc=2",
        "--step-trace", "-o", out.to_str().unwrap(),
    ]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("top kernels, base 32/16 conc 2") && log.contains("profiler overhead:"), "{log}");

    let r = read_json(&out.join("result.json"));
    let points = r["jobs"][0]["points"].as_array().unwrap();
    let (plain, profiled) = (&points[0], &points[1]);
    assert_eq!((plain["conc"].as_u64(), profiled["conc"].as_u64()), (Some(1), Some(2)));
    assert!(plain.get("profile").is_none(), "only the chosen point is profiled");
    let prof = &profiled["profile"];
    assert_eq!(prof["window"], serde_json::json!({"warm": 2, "reference": 3, "profiled": 3}));
    assert_eq!(prof["batch"], 2);
    assert_eq!(prof["activities"], serde_json::json!(["CPU"]));
    assert!(prof["placement"].as_str().unwrap().contains("contain no profiled step"));

    // Unprofiled figures keep their shape: the same keys as the plain point,
    // and only the measured requests' steps and tokens in them.
    let keys = |p: &Value| {
        let mut k: Vec<String> = p.as_object().unwrap().keys().filter(|k| *k != "profile").cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(plain), keys(profiled));
    assert_eq!(profiled["completed"], 2);
    assert_eq!(profiled["total_output_tokens"], 2 * 16, "no profile-pass token counted");
    let steps = std::fs::read_to_string(out.join("steps.jsonl")).unwrap();
    let point_steps = steps.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|s| s["point"] == 1).count();
    assert_eq!(profiled["step_stats"]["steps"].as_u64().unwrap() as usize, point_steps, "no profile-pass step counted");

    // The trace parses back and holds what the table says.
    let trace = out.join(prof["trace"].as_str().unwrap());
    assert_eq!(trace.file_name().unwrap(), "trace-base-isl32-osl16-conc2.json.gz");
    let events = trace_events(&trace);
    let ops: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "cpu_op").collect();
    assert!(!ops.is_empty(), "no CPU op in the trace");
    let k = &prof["kernels"];
    assert_eq!(k["source"], "cpu_ops_self_time");
    assert_eq!(k["steps"], 3);
    let rows = k["rows"].as_array().unwrap();
    let top = &rows[0];
    let calls_in_trace = ops.iter().filter(|e| e["name"] == top["name"]).count() as f64;
    assert!((f(&top["calls_per_step"]) * 3.0 - calls_in_trace).abs() < 1e-9, "{top} vs {calls_in_trace} calls in the trace");
    // Every op name of the trace is a row, and a GEMM leads on this model.
    let mut names: Vec<&str> = ops.iter().map(|e| e["name"].as_str().unwrap()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), rows.len());
    assert!(rows.iter().take(3).any(|r| r["group"] == "GEMM"), "{rows:?}");
    // Per-step times add up to no more than the measured step time.
    let sum: f64 = rows.iter().map(|r| f(&r["ms_per_step"])).sum();
    assert!((sum - f(&k["kernel_ms_per_step"])).abs() < 1e-6);
    let step_ms = f(&k["step_ms"]);
    assert!(sum > 0.0 && sum <= step_ms, "ops {sum} ms/step > step {step_ms} ms");
    assert!((step_ms - f(&prof["overhead"]["profiled_step_ms"])).abs() < 1e-9);
    let shares: f64 = rows.iter().map(|r| f(&r["share"])).sum();
    assert!(shares <= 1.0 + 1e-9, "{shares}");
    // Overhead: both sides measured.
    let ov = &prof["overhead"];
    assert!(f(&ov["reference_median_ms"]) > 0.0 && f(&ov["profiled_median_ms"]) > 0.0, "{ov}");
    assert!((f(&ov["fraction"]) - (f(&ov["profiled_median_ms"]) / f(&ov["reference_median_ms"]) - 1.0)).abs() < 1e-9);

    // The table as Markdown and JSON files beside the trace.
    let md = std::fs::read_to_string(out.join("kernels-base-isl32-osl16-conc2.md")).unwrap();
    assert!(md.contains("| kernel / op | group | calls/step | ms/step | mean us | share of step |"), "{md}");
    assert!(md.contains(&format!("`{}`", top["name"].as_str().unwrap())), "{md}");
    let json = read_json(&out.join("kernels-base-isl32-osl16-conc2.json"));
    assert_eq!(&json, k);
}

#[test]
fn ab_float32_vs_bfloat16_kernel_diff() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ab");
    // On the shim's LLMEngine.step() path (the fallback where vLLM lacks the
    // engine-core path): this run keeps it exercised end to end.
    let o = enginebench_env(&[
        "ab", &recipe(dir.path()), "--baseline", "base", "--candidate", "bf16", "--repeats", "1", "--conc", "2",
        "--profile", "--profile-steps", "3", "--max-regression", "10", "-o", out.to_str().unwrap(),
    ], &[("ENGINEBENCH_STEP_PATH", "engine")]);
    let log = text(&o);
    // One repeat and no eval: nothing gated, so the gate is INCONCLUSIVE (exit 3).
    assert_eq!(o.status.code(), Some(3), "{log}");
    assert!(log.contains("kernel diff, ISL/OSL 32/16 TP 1 conc 2"), "{log}");

    let r = read_json(&out.join("result.json"));
    for job in r["jobs"].as_array().unwrap() {
        assert_eq!(job["engine"]["step_path"], "engine", "{}", job["engine"]);
        assert_eq!(job["engine"]["step_path_reason"], "ENGINEBENCH_STEP_PATH=engine");
        assert_eq!(job["points"][0]["completed"], job["points"][0]["num_prompts"], "{}", job["points"][0]);
    }
    let table = |label: &str| -> Vec<String> {
        let job = r["jobs"].as_array().unwrap().iter().find(|j| j["label"] == label).unwrap();
        job["points"][0]["profile"]["kernels"]["rows"].as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap().to_string()).collect()
    };
    let (fp32, bf16) = (table("base"), table("bf16"));
    let c = read_json(&out.join("ab.json"));
    let kernels = c["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 1, "{c}");
    let d = &kernels[0];
    let list = |k: &str| -> Vec<String> { d[k].as_array().unwrap().iter().map(|x| x["name"].as_str().unwrap().to_string()).collect() };
    let (only_c, only_b) = (list("only_in_candidate"), list("only_in_baseline"));
    eprintln!("only in bf16: {only_c:?}\nonly in fp32: {only_b:?}");
    // Different dtypes run different ops where the CPU has no native bf16
    // (bf16 linears then go through aten::mm, fp32 through _C::onednn_mm);
    // on a CPU with AVX512-BF16 both run _C::onednn_mm (measured here, with
    // the in-process and with vLLM's worker profiler alike) and only the
    // times differ. Either way the diff is not empty, and a name on one
    // side is truly on that side only.
    let native_bf16 = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains("avx512_bf16") || c.contains("amx_bf16"));
    if native_bf16 {
        assert!(!only_c.is_empty() || !only_b.is_empty() || !d["changed"].as_array().unwrap().is_empty(), "empty diff: {d}");
    } else {
        assert!(!only_c.is_empty() || !only_b.is_empty(), "no op differs: {d}");
    }
    for n in &only_c {
        assert!(bf16.contains(n) && !fp32.contains(n), "{n}");
    }
    for n in &only_b {
        assert!(fp32.contains(n) && !bf16.contains(n), "{n}");
    }
    // The biggest per-step changes come first.
    let deltas: Vec<f64> = d["changed"].as_array().unwrap().iter().map(|x| f(&x["delta_ms"]).abs()).collect();
    assert!(!deltas.is_empty() && deltas.windows(2).all(|w| w[0] >= w[1]), "{deltas:?}");
    // Markdown quotes it; the changelog has no entry for an INCONCLUSIVE
    // gate (its kernel line is in an entry, src/ab/changelog.rs), only the why.
    let md = std::fs::read_to_string(out.join("ab.md")).unwrap();
    assert!(md.contains("#### Kernel diff, ISL/OSL 32/16 TP 1 conc 2"), "{md}");
    assert_eq!(c["gate"]["outcome"], "inconclusive", "{}", c["gate"]);
    let y = std::fs::read_to_string(out.join("changelog.yaml")).unwrap();
    assert!(y.starts_with("# enginebench: no perf-changelog entry for bf16 vs base") && y.contains("# change: "), "{y}");
}

#[test]
fn bad_profile_input_exits_2_before_any_engine() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path());
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let bad_dir = file.join("traces");
    let cases: [(&[&str], &str); 4] = [
        (&["--profile-point", "conc=3"], "--profile-point conc=3: no point of the sweep matches"),
        (&["--profile-steps", "8"], "--profile-steps 8 needs 18 decode steps"),
        (&["--profile-steps", "2", "--profile-dir", bad_dir.to_str().unwrap()], "the trace folder cannot be written"),
        (&["--profile-point", "batch=2"], "unknown key"),
    ];
    for (i, (extra, want)) in cases.iter().enumerate() {
        let out = dir.path().join(format!("out{i}"));
        let mut args = vec!["run", r.as_str(), "--profile", "-o", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = enginebench(&args);
        let log = text(&o);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {log}");
        assert!(log.contains(want), "{extra:?}: want {want:?} in {log}");
        assert!(!out.join("worker.log").exists() && !out.join("result.json").exists(), "{extra:?}: an engine started");
    }
    // The profile options need --profile.
    let o = enginebench(&["run", &r, "--profile-steps", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // overhead runs the engine core out of process: no profile there.
    let o = enginebench(&["overhead", &r, "--profile"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("overhead does not take --profile"), "{}", text(&o));
}

#[test]
fn profile_on_python312_vllm023() {
    let _guard = engine_lock();
    let py = crate::util::install().join("venv-vllm023/bin/python");
    assert!(py.exists(), "second environment missing: run ci/setup.sh --with-vllm023 (ci/test.sh does)");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = enginebench(&[
        "run", &recipe(dir.path()), "--python", py.to_str().unwrap(), "--conc", "2", "--profile", "--profile-steps", "2",
        "-o", out.to_str().unwrap(),
    ]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let r = read_json(&out.join("result.json"));
    let job = &r["jobs"][0];
    assert!(job["engine"]["vllm"].as_str().unwrap().starts_with("0.23.0"), "{}", job["engine"]);
    assert_eq!(job["engine"]["compat"]["torch_profile"]["found"], "torch.profiler:profile");
    let prof = &job["points"][0]["profile"];
    let events = trace_events(&out.join(prof["trace"].as_str().unwrap()));
    assert!(events.iter().any(|e| e["cat"] == "cpu_op"), "no CPU op in the 0.23 trace");
    let k = &prof["kernels"];
    assert!(!k["rows"].as_array().unwrap().is_empty());
    assert!(f(&k["kernel_ms_per_step"]) <= f(&k["step_ms"]), "{k}");
}
