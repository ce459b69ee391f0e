//! The job runner's paths on the fake step engine (`ENGINEBENCH_FAKE_ENGINE`,
//! see src/engine/fake.rs): exit codes, resume, Ctrl-C, the accuracy gate,
//! and the local parallel executor. Real worker processes in a real CPython
//! (the system `python3`, no vLLM needed); only the engine is a stand-in.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{fake_command as command, output, read_json, system_python as python, write_recipe};

pub(crate) fn recipe(dir: &Path, variants: &str) -> String {
    let body = format!(
        r#"name = "fake"
model = "fake/model"
hardware = "cpu"
[engine]
args = ["--max-model-len", "512"]
[sweep]
isl = 16
osl = 8
conc = [1, 2]
num_prompts = 4
warmups = 0
{variants}
"#
    );
    write_recipe(dir, "fake", &body)
}

pub(crate) fn run(fake: &str, args: &[&str]) -> (Output, String) {
    output(&mut command(fake, args))
}

#[test]
fn bad_input_alone_is_exit_2_in_run_and_ab() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "[variants.bad]\nargs_add = [\"--bogus\"]\n");
    let out = dir.path().join("run");
    let (o, log) = run("step_ms=0,reject_flag=--bogus", &["run", &r, "--variants", "base,bad", "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!((v["jobs"][0]["status"].as_str(), v["jobs"][1]["status"].as_str()), (Some("ok"), Some("failed")), "{v}");
    assert_eq!(v["jobs"][1]["error"]["bad_input"], true);
    // ab said 1 for the same failure before the runner was shared.
    let out = dir.path().join("ab");
    let (o, log) = run("step_ms=0,reject_flag=--bogus", &["ab", &r, "--baseline", "base", "--candidate", "bad", "--repeats", "1", "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{log}");
}

#[test]
fn failed_point_keeps_the_first_and_resume_completes() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    let out = dir.path().join("out");
    let (o, log) = run("step_ms=0,fail_at_request=4", &["run", &r, "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!(v["jobs"][0]["points"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["jobs"][0]["unfinished"][0]["status"], "failed");
    let (o, log) = run("step_ms=0", &["run", &r, "--no-eval", "--resume", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!((v["status"].as_str(), v["resumes"].as_u64()), (Some("ok"), Some(1)));
    assert_eq!(v["jobs"][0]["points"].as_array().unwrap().len(), 2);
    assert_eq!(v["execution"]["executor"], "local");
}

/// Ctrl-C: exit 130 and an interrupted result. The point in progress is
/// kept as partial: its request in flight aborted (failed), the ones never
/// sent counted apart (not failures), and with nothing completed its
/// figures are null, not 0. `--resume` re-runs it, and every line of the
/// files says which attempt wrote it.
#[test]
fn ctrl_c_is_130_from_the_runner_and_resume_marks_each_attempts_lines() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    let out = dir.path().join("out");
    // 4 requests x 400 tokens at 50 ms a step: ~80 s per point (ISL 16 + OSL 400 fits the recipe's 512).
    let child = command("step_ms=50", &["run", &r, "--osl", "400", "--no-eval", "-o", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !std::fs::read_to_string(out.join("result.json")).is_ok_and(|t| t.contains("\"engine\"")) {
        assert!(start.elapsed() < Duration::from_secs(60), "the fake engine did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: SIGINT to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(130), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!((v["status"].as_str(), v["jobs"][0]["status"].as_str()), (Some("interrupted"), Some("interrupted")));
    // Conc 1: one request in flight (aborted), three never sent.
    let p = &v["jobs"][0]["points"][0];
    assert_eq!((p["status"].as_str(), p["completed"].as_u64(), p["failed"].as_u64(), p["not_sent"].as_u64()), (Some("partial"), Some(0), Some(1), Some(3)), "{p}");
    for key in ["mean_ttft_ms", "median_tpot_ms", "duration_s", "output_throughput"] {
        assert!(p[key].is_null(), "{key} of a point with no completed request: {p}");
    }
    assert!(log.contains("1 requests FAILED, 3 requests not sent"), "{log}");

    let (o, log) = run("step_ms=0", &["run", &r, "--osl", "400", "--no-eval", "--resume", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    for file in ["points.jsonl", "requests.jsonl"] {
        let lines: Vec<serde_json::Value> =
            std::fs::read_to_string(out.join(file)).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let attempts = |a: u64| lines.iter().filter(|l| l["attempt"].as_u64() == Some(a)).count();
        // points: the partial point (attempt 0), both points re-run (attempt 1);
        // requests: its 4, then 4 + 4.
        let (first, second) = if file == "points.jsonl" { (1, 2) } else { (4, 8) };
        assert_eq!((attempts(0), attempts(1), lines.len()), (first, second, first + second), "{file}: {lines:?}");
    }
}

#[test]
fn accuracy_gate_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("evals/fixtures/gsm8k_small");
    let out = dir.path().join("out");
    let common = ["--task", "gsm8k", "--gsm8k-data", data.to_str().unwrap(), "--eval-limit", "4", "--num-fewshot", "0"];
    let mut args = vec!["run", r.as_str(), "--min-accuracy", "0.5", "-o", out.to_str().unwrap()];
    args.extend(common);
    let (o, log) = run("step_ms=0", &args);
    assert_eq!(o.status.code(), Some(1), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!(v["jobs"][0]["eval"]["gate"]["passed"], false, "{v}");
    let out = dir.path().join("out0");
    let mut args = vec!["run", r.as_str(), "--min-accuracy", "0.0", "-o", out.to_str().unwrap()];
    args.extend(common);
    let (o, log) = run("step_ms=0", &args);
    assert_eq!(o.status.code(), Some(0), "{log}");
}

#[test]
fn parallel_jobs_refused_on_cpu_unless_asked_then_concurrent() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "[variants.knob]\nenv = { ENGINEBENCH_INERT_KNOB = \"1\" }\n");
    let out = dir.path().join("out");
    let (o, log) = run("step_ms=0", &["run", &r, "--variants", "base,knob", "--no-eval", "--parallel-jobs", "2", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("CPU recipe") && log.contains("--share-cpu"), "{log}");
    let (o, log) = run("step_ms=5", &["run", &r, "--variants", "base,knob", "--no-eval", "--parallel-jobs", "2", "--share-cpu", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!(v["execution"], serde_json::json!({"executor": "local-parallel", "max_concurrent_jobs": 2, "shared_cpu": true}));
    for j in v["jobs"].as_array().unwrap() {
        assert_eq!(j["status"], "ok", "{j}");
        assert_eq!(j["points"].as_array().unwrap().len(), 2);
        assert_eq!(j["placement"]["concurrent"], true);
    }
    // Both tasks' lines were merged into the run's files, and the task folders removed.
    assert_eq!(std::fs::read_to_string(out.join("points.jsonl")).unwrap().lines().count(), 4);
    assert!(!out.join("tasks/0").exists());
}

#[test]
fn cluster_flag_errors_are_exit_2_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "[variants.knob]\nenv = { ENGINEBENCH_INERT_KNOB = \"1\" }\n");
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&["run", &r, "--partition", "gpu"], "--slurm"),
        (&["run", &r, "--slurm", "--parallel-jobs", "2"], "--parallel-jobs"),
        (&["run", &r, "--no-eval", "--slurm", "--slurm-bin", "/nonexistent", "-o", o], "--slurm-bin"),
        (&["overhead", &r, "--slurm", "-o", o], "overhead compares three serving tiers"),
        (&["ab", &r, "--baseline", "base", "--candidate", "knob", "--slurm", "--detach", "-o", o], "without --detach"),
    ];
    for (args, needle) in cases {
        let (out, log) = run("step_ms=0", args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {log}");
        assert!(log.contains(needle), "{args:?}: {log}");
    }
}

/// "3.11.2": the version of `python`.
fn version_of(python: &Path) -> String {
    let o = Command::new(python).args(["-c", "import platform; print(platform.python_version())"]).output().unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

/// A CPython 3.10+ of another minor version than [`python`]'s (pyenv's,
/// where this machine has it).
fn other_python() -> Option<PathBuf> {
    let minor = |v: &str| v.rsplit_once('.').map(|(m, _)| m.to_string()).unwrap_or_default();
    let ours = minor(&version_of(&python()));
    let pyenv = PathBuf::from(std::env::var_os("HOME")?).join(".pyenv/versions");
    let mut found: Vec<PathBuf> = std::fs::read_dir(pyenv).ok()?.flatten().map(|e| e.path().join("bin/python3")).filter(|p| p.is_file()).collect();
    found.sort();
    found.into_iter().find(|p| {
        let v = minor(&version_of(p));
        v != ours && ["3.10", "3.11", "3.12", "3.13"].contains(&v.as_str())
    })
}

#[test]
fn ab_of_two_interpreters_lists_each_build_not_one() {
    let Some(other) = other_python() else {
        eprintln!("skipped: no second CPython 3.10+ of another minor version under ~/.pyenv/versions");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    // One interpreter: its versions at the top, no per-build list.
    let out = dir.path().join("run");
    let (o, log) = run("step_ms=0", &["run", &r, "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let v = &read_json(&out.join("result.json"))["versions"];
    assert_eq!((v["vllm"].as_str(), v["python"].as_str()), (Some("0.0.0+fake"), Some(version_of(&python()).as_str())), "{v}");
    assert!(v.get("builds").is_none(), "{v}");
    // Two interpreters: no one side at the top; each build with its jobs.
    let out = dir.path().join("ab");
    let (o, log) = run("step_ms=0", &[
        "ab", &r, "--baseline", "base", "--candidate", "base", "--candidate-python", other.to_str().unwrap(),
        "--repeats", "1", "--no-eval", "-o", out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "one repeat, no eval: nothing gated, INCONCLUSIVE: {log}");
    let v = &read_json(&out.join("result.json"))["versions"];
    assert!(v["vllm"].is_null() && v["python"].is_null() && v["torch"].is_null(), "{v}");
    let want = serde_json::json!([
        {"vllm": "0.0.0+fake", "torch": null, "python": version_of(&python()), "jobs": ["base"]},
        {"vllm": "0.0.0+fake", "torch": null, "python": version_of(&other), "jobs": ["base@candidate"]},
    ]);
    assert_eq!(v["builds"], want, "{v}");
}

#[test]
fn one_repeat_ab_makes_no_performance_gate() {
    // The candidate's engine steps 10 ms slower: a clear slowdown, one repeat a side.
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "[variants.slow]\nenv = { ENGINEBENCH_FAKE_ENGINE = \"step_ms=10\" }\n");
    let out = dir.path().join("ab");
    let (o, log) = run("step_ms=0", &["ab", &r, "--baseline", "base", "--candidate", "slow", "--repeats", "1", "--no-eval", "-o", out.to_str().unwrap()]);
    // Nothing gated decides nothing: INCONCLUSIVE, exit 3 (not a PASS).
    assert_eq!(o.status.code(), Some(3), "{log}");
    let c = read_json(&out.join("ab.json"));
    assert!(c["rows"][0]["figures"][0]["delta"].as_f64().unwrap() < -0.5, "the candidate is slower: {}", c["rows"][0]);
    assert_eq!(c["gate"]["outcome"], "inconclusive", "{}", c["gate"]);
    let why = c["gate"]["perf_not_gated"].as_str().unwrap_or_else(|| panic!("{}", c["gate"]));
    assert!(why.starts_with("performance not gated at any point: one repeat"), "{why}");
    assert!(log.contains("INCONCLUSIVE (nothing gated)\n- nothing gated: no point has 2 or more repeats a side and there is no eval\nNote: performance not gated at any point"), "{log}");
    let md = std::fs::read_to_string(out.join("ab.md")).unwrap();
    assert!(md.contains("Note: performance not gated at any point") && md.contains("--repeats 3 or more"), "{md}");
}

#[test]
fn until_ci_gate_stops_once_every_gated_figure_is_decided() {
    // Steps of 20 ms against 40 ms: about half the throughput in every
    // pair, so two pairs already put the whole CI beyond a 5% regression.
    // Conc 1 only: a lone request starts at a step's start, so its TTFT is
    // one step; at conc 2 the second lands anywhere in a step, and with
    // two pairs (t = 12.7 at one degree of freedom) that jitter on a busy
    // machine left the TTFT's CI straddling the limit (once, in a full
    // suite run here: a third pair was run, rightly).
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "[variants.slow]\nenv = { ENGINEBENCH_FAKE_ENGINE = \"step_ms=40\" }\n");
    let out = dir.path().join("ab");
    let (o, log) = run("step_ms=20", &[
        "ab", &r, "--baseline", "base", "--candidate", "slow", "--repeats", "2", "--until-ci", "gate", "--max-repeats", "3",
        "--conc", "1", "--no-eval", "-o", out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "a decided regression: FAIL: {log}");
    assert!(log.contains("then more until every gated figure is PASS or FAIL (at most 3)"), "{log}");
    assert!(log.contains("after 2 repeats: ISL/OSL 16/8 TP 1 conc 1: tok/s/gpu") && log.contains(": decided"), "{log}");
    let jobs = read_json(&out.join("result.json"))["jobs"].as_array().unwrap().len();
    assert_eq!(jobs, 4, "no third pair once decided: {log}");
    let c = read_json(&out.join("ab.json"));
    assert_eq!(c["gate"]["outcome"], "fail", "{}", c["gate"]);
    assert!(c["notes"].to_string().contains("--until-ci gate: every gated figure is PASS or FAIL after 2 repeats"), "{}", c["notes"]);
    let tput = &c["rows"][0]["figures"][0];
    assert_eq!(tput["gate"]["outcome"], "fail", "{tput}");
}

/// A disk that fills after a point has completed: the run stops with exit
/// 1 naming the file it could not write, the finished point survives whole
/// (result.json and the .jsonl files), result.json ends `failed` with the
/// cause instead of `running`, and no temporary file is left.
#[test]
fn a_disk_that_fills_mid_run_keeps_the_finished_point_and_ends_failed() {
    let disk = crate::util::Tmpfs::mount("4m", "");
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    let out = disk.path().join("run");
    // Conc 2 first (2 x 150 steps of 10 ms: ~3 s), then conc 1 (~6 s).
    let mut child = command("step_ms=10", &["run", &r, "--conc", "2,1", "--osl", "150", "--no-eval", "-o", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let done = |v: &serde_json::Value| v["jobs"][0]["points"].as_array().is_some_and(|p| !p.is_empty());
    while !std::fs::read_to_string(out.join("result.json")).ok().and_then(|t| serde_json::from_str(&t).ok()).is_some_and(|v| done(&v)) {
        assert!(start.elapsed() < Duration::from_secs(60), "the first point did not finish");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before its first point");
        std::thread::sleep(Duration::from_millis(50));
    }
    disk.fill();
    let o = child.wait_with_output().unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{log}");
    assert!(log.contains("No space left on device") && log.contains(&format!("writing {}", out.display())), "names the file: {log}");
    assert!(log.contains("keeps its status (failed)"), "says what was kept: {log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!(v["status"], "failed", "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("No space left on device")), "{}", v["error"]);
    let job = &v["jobs"][0];
    assert_eq!(job["status"], "failed");
    let points = job["points"].as_array().unwrap();
    assert_eq!((points.len(), points[0]["conc"].as_u64(), points[0]["status"].as_str()), (1, Some(2), Some("ok")), "{job}");
    assert_eq!(points[0]["completed"], 4);
    assert!(!out.join("result.json.tmp").exists(), "the temporary file is removed");
    // The files hold whole lines of the finished point only.
    let lines = |f: &str| -> Vec<serde_json::Value> { std::fs::read_to_string(out.join(f)).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect() };
    assert_eq!(lines("points.jsonl").len(), 1);
    assert_eq!(lines("requests.jsonl").len(), 4);
}

/// An output folder that cannot be written (a read-only filesystem) is
/// bad input, found before any worker starts: exit 2, not 1.
#[test]
fn an_unwritable_output_folder_is_exit_2_before_any_worker() {
    let disk = crate::util::Tmpfs::mount("1m", "ro");
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    for out in [disk.path().to_path_buf(), disk.path().join("new")] {
        let (o, log) = run("step_ms=0", &["run", &r, "--no-eval", "-o", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{log}");
        assert!(log.contains(&format!("output folder {} cannot be written", out.display())) && log.contains("Read-only file system"), "{log}");
        assert!(!log.contains("engine started"), "{log}");
    }
}

/// ISL + OSL beyond the recipe's --max-model-len is refused before any
/// engine starts and before any result folder exists.
#[test]
fn lengths_beyond_max_model_len_are_refused_before_any_folder() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    let out = dir.path().join("out");
    let (o, log) = run("step_ms=0", &["run", &r, "--isl", "999999", "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("ISL 999999 + OSL 8 needs up to 1000007 tokens per request") && log.contains("--max-model-len 512 allows 512"), "{log}");
    assert!(!out.exists(), "no result folder: {log}");
    assert!(!log.contains("engine started"), "{log}");
}

/// Each phase's marker in the telemetry series is where the phase starts:
/// a point's marker sits at the start of its measured window, not at its
/// first finished request.
#[test]
fn phase_markers_are_placed_at_the_start_of_their_phase() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    let out = dir.path().join("out");
    // A request takes 32 steps of 20 ms: a marker placed at the first finished
    // request would come >= 0.64 s after its phase started.
    let (o, log) = run("step_ms=20", &["run", &r, "--osl", "32", "--warmups", "2", "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let job = &read_json(&out.join("result.json"))["jobs"][0];
    let markers = job["telemetry"]["markers"].as_array().unwrap();
    let at = |label: &str| markers.iter().find(|m| m["label"] == label).map(|m| m["t"].as_f64().unwrap()).unwrap_or_else(|| panic!("no marker {label}: {markers:?}"));
    for p in job["points"].as_array().unwrap() {
        let conc = p["conc"].as_u64().unwrap();
        let t0 = p["telemetry"]["t0"].as_f64().unwrap();
        let measured = at(&format!("16/32 conc {conc}"));
        assert!((measured - t0).abs() < 0.25, "conc {conc}: marker {measured} against the window's start {t0}");
        let warmup = at(&format!("warm-up conc {conc}"));
        assert!(t0 - warmup > 0.4, "conc {conc}: the warm-up (2 requests of 32 steps) starts well before the window: {warmup} vs {t0}");
    }
}

/// A timed trace replays whole by default, whatever request count the
/// recipe's random sweep holds; a count on the command line cuts it, and
/// the cut is said and recorded. One-request sessions have no session span.
#[test]
fn a_timed_trace_replays_whole_unless_cut_and_a_cut_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let r = recipe(dir.path(), "");
    let trace = dir.path().join("timed.jsonl");
    let lines: Vec<String> = (0..12).map(|i| format!(r#"{{"timestamp": {}, "input_length": 32, "output_length": 2, "hash_ids": [{i}]}}"#, i * 10)).collect();
    std::fs::write(&trace, lines.join("\n")).unwrap();
    let t = trace.to_str().unwrap();
    let out = dir.path().join("whole");
    let (o, log) = run("step_ms=0", &["run", &r, "--trace-file", t, "--conc", "4", "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let p = &read_json(&out.join("result.json"))["jobs"][0]["points"][0];
    assert_eq!((p["completed"].as_u64(), p["sessions"]["stopped_by"].as_str(), p["sessions"]["file_requests"].as_u64()), (Some(12), Some("exhausted"), Some(12)), "{p}");
    assert!(p["sessions"].get("session_duration_s").is_none(), "one request per session: {}", p["sessions"]);
    assert!(!log.contains("cut by"), "{log}");
    let out = dir.path().join("cut");
    let (o, log) = run("step_ms=0", &["run", &r, "--trace-file", t, "--conc", "4", "--num-prompts", "5", "--no-eval", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let p = &read_json(&out.join("result.json"))["jobs"][0]["points"][0];
    assert_eq!((p["completed"].as_u64(), p["sessions"]["stopped_by"].as_str()), (Some(5), Some("max_requests")), "{p}");
    assert!(log.contains("5 of 12 trace requests: cut by the request budget, num_prompts 5"), "{log}");
}
