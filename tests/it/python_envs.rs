//! The engine on another Python and vLLM than the set-up venv's, with the
//! same build: the second environment ci/setup.sh --with-vllm023 makes
//! (CPython 3.12 + vLLM 0.23.0), a wrong `--python`, and the wheel.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{engine_lock, enginebench, install, read_json, repo, text};

/// The second environment's interpreter; panics with the set-up command.
fn python_023() -> PathBuf {
    let p = install().join("venv-vllm023/bin/python");
    assert!(p.exists(), "second environment missing: run ci/setup.sh --with-vllm023 (ci/test.sh does)");
    p
}

#[test]
fn doctor_and_run_on_python312_vllm023() {
    let _guard = engine_lock();
    let py = python_023();
    let py = py.to_str().unwrap();

    let out = enginebench(&["doctor", "--python", py, "--json"]);
    assert!(out.status.success(), "doctor failed:\n{}", text(&out));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    assert!(d["python"]["version"].as_str().unwrap().starts_with("3.12"), "{}", d["python"]);
    assert_eq!(d["python"]["origin"], "flag");
    assert!(d["engine"]["vllm"].as_str().unwrap().starts_with("0.23.0"), "{}", d["engine"]);
    assert_eq!(d["engine"]["platform"], "cpu");
    // The serve parser as vLLM's own `serve` subcommand builds it (0.23 has
    // make_arg_parser elsewhere than 0.32; the subcommand finds it in both).
    assert_eq!(d["engine"]["compat"]["serve_parser"]["found"], "vllm.entrypoints.cli.serve:ServeSubcommand");
    assert!(d["release"]["text"].as_str().unwrap().starts_with("vLLM 0.23.0 (cpu build) checked "), "{}", d["release"]);
    assert_eq!(d["can_run"], true);
    assert_eq!(d["engine"]["step_path"]["path"], "core", "{}", d["engine"]["step_path"]);

    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = enginebench(&[
        "run", "--python", py,
        "--conc", "1,2", "--isl", "32", "--osl", "8", "--num-prompts", "4",
        "--eval-limit", "5", "--output", out_dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "run on vLLM 0.23 failed:\n{}", text(&out));
    let r = read_json(&out_dir.join("result.json"));
    assert!(r["versions"]["vllm"].as_str().unwrap().starts_with("0.23.0"), "{}", r["versions"]);
    assert!(r["versions"]["python"].as_str().unwrap().starts_with("3.12"), "{}", r["versions"]);
    let job = &r["jobs"][0];
    assert_eq!(job["python"]["path"], py);
    assert!(job["python"]["vllm_path"].as_str().unwrap().contains("venv-vllm023"), "{}", job["python"]);
    assert_eq!(job["engine"]["scheduler_details"], true, "{}", job["engine"]);
    assert_eq!(job["engine"]["degraded"], serde_json::json!([]), "{}", job["engine"]);
    assert_eq!(job["engine"]["step_path"], "core", "vLLM 0.23 has the engine-core path: {}", job["engine"]);
    for p in job["points"].as_array().unwrap() {
        assert_eq!(p["completed"], 4, "{p}");
        assert_eq!(p["crosscheck"]["agree"], true, "{p}");
        assert_eq!(p["step_stats"]["decode_tokens"].as_u64().unwrap() + 4, 4 * 8, "{p}");
    }
    assert_eq!(job["eval"]["gsm8k"]["n"], 5, "{}", job["eval"]);
}

#[test]
fn wrong_python_is_exit_2_naming_it() {
    // No engine starts: each is refused before (or instead of) building one.
    let missing = enginebench(&["doctor", "--python", "/nonexistent/bin/python3"]);
    assert_eq!(missing.status.code(), Some(2), "{}", text(&missing));
    assert!(text(&missing).contains("/nonexistent/bin/python3") && text(&missing).contains("does not exist"));

    let not_python = enginebench(&["run", "--python", "/bin/true", "--no-eval"]);
    assert_eq!(not_python.status.code(), Some(2), "{}", text(&not_python));
    assert!(text(&not_python).contains("/bin/true") && text(&not_python).contains("not a working Python"), "{}", text(&not_python));

    // pyenv's old Pythons are on these machines; skip the check where they are not.
    let pyenv = PathBuf::from(std::env::var("HOME").unwrap()).join(".pyenv/versions");
    if let Some(old) = std::fs::read_dir(&pyenv).ok().and_then(|d| {
        d.flatten().map(|e| e.path()).find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("3.9")))
    }) {
        let py = old.join("bin/python3");
        let out = enginebench(&["doctor", "--python", py.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("too old") && text(&out).contains("3.9"), "{}", text(&out));
    }

    // A real CPython 3.12 without vLLM: doctor names both missing packages.
    // (The venv's python is a symlink to the Python it was made from.)
    let bare = python_023().canonicalize().unwrap();
    assert!(!bare.starts_with(install()), "{}", bare.display());
    let out = enginebench(&["doctor", "--python", bare.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("vllm cannot be imported") && text(&out).contains("torch cannot be imported"), "{}", text(&out));
}

#[test]
fn wheel_installs_into_a_clean_python312_venv() {
    let _guard = engine_lock();
    let built = Command::new(repo().join("ci/build_wheel.sh")).arg(repo().join("target/wheels")).output().unwrap();
    assert!(built.status.success(), "wheel build failed:\n{}", text(&built));
    let wheel = String::from_utf8_lossy(&built.stdout).trim().to_string();
    assert!(wheel.contains("abi3"), "one stable-ABI wheel expected: {wheel}");

    let base = python_023().canonicalize().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    assert!(Command::new(&base).args(["-m", "venv"]).arg(&venv).status().unwrap().success());
    let pip = Command::new(venv.join("bin/pip")).args(["install", "--quiet", "--no-index", &wheel]).output().unwrap();
    assert!(pip.status.success(), "pip install failed:\n{}", text(&pip));

    // From the venv's PATH, with nothing else set: the console script's own
    // interpreter is the default, and it has no vLLM, which doctor says.
    let path = format!("{}:{}", venv.join("bin").display(), std::env::var("PATH").unwrap());
    let run = |args: &[&str]| {
        Command::new("enginebench").args(args).env("PATH", &path).env_remove("ENGINEBENCH_PYTHON")
            .current_dir(dir.path()).output().unwrap()
    };
    let own = run(&["doctor", "--json"]);
    let d: serde_json::Value = serde_json::from_slice(&own.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&own)));
    assert_eq!(d["python"]["origin"], "host", "{}", d["python"]);
    assert!(d["worker_module"].as_str().unwrap().contains("site-packages/enginebench"), "{}", d["worker_module"]);
    assert_eq!(own.status.code(), Some(2), "a Python without vLLM cannot run:\n{}", text(&own));
    // Both packages this venv lacks are problems, each named.
    assert!(text(&own).contains("vllm cannot be imported") && text(&own).contains("torch cannot be imported"), "{}", text(&own));

    // The same installed command on the vLLM 0.23 environment.
    let other = run(&["doctor", "--python", python_023().to_str().unwrap()]);
    assert!(other.status.success(), "{}", text(&other));
    assert!(text(&other).contains("ok: a run can start") && text(&other).contains("0.23.0"), "{}", text(&other));
}

#[test]
fn ab_of_two_vllm_builds_on_the_base_recipe() {
    let _guard = engine_lock();
    let py = python_023();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("ab");
    // One variant in two interpreters: the set-up venv (vLLM 0.32) against the
    // second environment (vLLM 0.23), not an A/A.
    let out = enginebench(&[
        "ab", "--baseline", "base", "--candidate", "base", "--candidate-python", py.to_str().unwrap(),
        "--repeats", "1", "--eval-limit", "3", "--conc", "1", "--isl", "16", "--osl", "8", "--num-prompts", "2",
        "--output", out_dir.to_str().unwrap(),
    ]);
    // One repeat (no performance gate) and 3 questions, which can show a
    // drop beyond 1 point (FAIL, 1) but never that none happened: INCONCLUSIVE (3).
    assert!(matches!(out.status.code(), Some(1 | 3)), "ab failed to run:\n{}", text(&out));
    let r = read_json(&out_dir.join("result.json"));
    let jobs = r["jobs"].as_array().unwrap();
    let by_label = |l: &str| jobs.iter().find(|j| j["label"] == l).unwrap_or_else(|| panic!("no job {l}: {r}"));
    let (base, cand) = (by_label("base"), by_label("base@candidate"));
    assert!(base["python"]["vllm"].as_str().unwrap().starts_with("0.32"), "{}", base["python"]);
    assert!(cand["python"]["vllm"].as_str().unwrap().starts_with("0.23"), "{}", cand["python"]);
    assert_eq!(cand["python"]["path"], py.to_str().unwrap());
    // No one build stands for the run: each is listed with its jobs.
    let v = &r["versions"];
    assert!(v["vllm"].is_null() && v["python"].is_null(), "{v}");
    let builds = v["builds"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(builds.len(), 2, "{v}");
    assert!(builds[0]["vllm"].as_str().unwrap().starts_with("0.32") && builds[0]["jobs"] == serde_json::json!(["base"]), "{v}");
    assert!(builds[1]["vllm"].as_str().unwrap().starts_with("0.23") && builds[1]["jobs"] == serde_json::json!(["base@candidate"]), "{v}");
    assert!(builds[1]["python"].as_str().unwrap().starts_with("3.12"), "{v}");
    for j in [base, cand] {
        assert_eq!(j["points"][0]["completed"], 2, "{j}");
    }
    // The report names both builds in its change line, and is no A/A.
    let md = std::fs::read_to_string(out_dir.join("ab.md")).unwrap();
    let change = md.lines().find(|l| l.starts_with("Change (after vs before)")).unwrap_or_else(|| panic!("{md}"));
    assert!(change.contains("0.32") && change.contains("0.23"), "{change}");
    assert!(!md.contains("A/A"), "{md}");
    // Greedy answers of the two builds compared question by question.
    assert!(md.contains("Greedy-token agreement: ") && md.contains("/3 questions identical"), "{md}");
    let yaml = std::fs::read_to_string(out_dir.join("changelog.yaml")).unwrap();
    assert!(yaml.contains("0.32") && yaml.contains("0.23"), "{yaml}");

    // A bad --baseline-python is refused before any engine starts.
    let bad = enginebench(&["ab", "--baseline", "base", "--candidate", "base", "--baseline-python", "/bin/true", "--no-eval"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("/bin/true"), "{}", text(&bad));
}
