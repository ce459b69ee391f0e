//! Faults on real processes and the real engine: a killed worker, a flag
//! vLLM rejects, a hung engine, Ctrl-C. Nothing measured may be lost, the
//! next configuration must still run, and `--resume` completes the rest.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::util::{command, engine_lock, enginebench, install, read_json, small_sweep_recipe, text};

fn spawn(args: &[&str]) -> Child {
    install();
    command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Polls result.json until `ready` says yes (or panics after `limit`).
fn wait_for(result: &Path, limit: Duration, ready: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(result) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                if ready(&v) {
                    return v;
                }
            }
        }
        assert!(start.elapsed() < limit, "timed out waiting on {}", result.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn killed_worker_keeps_earlier_points_next_variant_runs_and_resume_completes() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let r = small_sweep_recipe(dir.path(), "kill", 64, "", "[variants.knob]\nenv = { ENGINEBENCH_UNUSED_KNOB = \"1\" }");
    let out = dir.path().join("out");
    let child = spawn(&["run", &r, "--variants", "base,knob", "--no-eval", "-o", out.to_str().unwrap()]);
    let result = out.join("result.json");
    // As soon as the first point is on disk, SIGKILL the worker in the middle of the second.
    let v = wait_for(&result, Duration::from_secs(600), |v| {
        v["jobs"][0]["points"].as_array().is_some_and(|p| p.len() == 1) && v["jobs"][0]["worker_pid"].is_u64()
    });
    let pid = v["jobs"][0]["worker_pid"].as_u64().unwrap() as i32;
    // SAFETY: killing the test's own grandchild by pid.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let output = child.wait_with_output().unwrap();
    let log = text(&output);
    assert_eq!(output.status.code(), Some(1), "{log}");

    let r1 = read_json(&result);
    let base = &r1["jobs"][0];
    assert_eq!(base["status"], "failed");
    assert_eq!(base["points"].as_array().unwrap().len(), 1, "the earlier point is intact");
    assert_eq!(base["points"][0]["status"], "ok");
    assert_eq!(base["unfinished"][0]["conc"], 2);
    assert_eq!(base["unfinished"][0]["status"], "failed");
    let reason = base["unfinished"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("signal 9"), "{reason}");
    assert!(!base["error"]["log_tail"].as_array().unwrap().is_empty());
    let knob = &r1["jobs"][1];
    assert_eq!(knob["status"], "ok", "the next configuration still ran: {log}");
    assert_eq!(knob["points"].as_array().unwrap().len(), 2);
    let lines = std::fs::read_to_string(out.join("points.jsonl")).unwrap().lines().count();
    assert_eq!(lines, 3);

    // --resume runs only the missing point.
    let resumed = enginebench(&["run", &r, "--variants", "base,knob", "--no-eval", "--resume", out.to_str().unwrap()]);
    let log = text(&resumed);
    assert_eq!(resumed.status.code(), Some(0), "{log}");
    assert!(log.contains("1 point(s) left to run"), "{log}");
    let r2 = read_json(&result);
    assert_eq!(r2["status"], "ok");
    assert_eq!(r2["resumes"], 1);
    let concs: Vec<u64> = r2["jobs"][0]["points"].as_array().unwrap().iter().map(|p| p["conc"].as_u64().unwrap()).collect();
    assert_eq!(concs, vec![1, 2]);
    assert!(r2["jobs"][0].get("unfinished").is_none());
    assert_eq!(r2["jobs"][1]["points"].as_array().unwrap().len(), 2);
    assert_eq!(std::fs::read_to_string(out.join("points.jsonl")).unwrap().lines().count(), 4);

    // A changed configuration is refused.
    let changed = small_sweep_recipe(dir.path(), "kill", 64, "OMP_NUM_THREADS = \"1\"", "[variants.knob]\nenv = { ENGINEBENCH_UNUSED_KNOB = \"1\" }");
    let refused = enginebench(&["run", &changed, "--variants", "base,knob", "--no-eval", "--resume", out.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(text(&refused).contains("--force"), "{}", text(&refused));
}

#[test]
fn rejected_flag_in_one_variant_does_not_stop_the_other() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let r = small_sweep_recipe(dir.path(), "badvar", 4, "", "[variants.bad]\nargs_add = [\"--no-such-flag\", \"1\"]");
    let out = dir.path().join("out");
    let o = enginebench(&["run", &r, "--variants", "bad,base", "--no-eval", "-o", out.to_str().unwrap()]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("--no-such-flag"), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!(v["jobs"][0]["status"], "failed");
    assert!(v["jobs"][0]["error"]["message"].as_str().unwrap().contains("--no-such-flag"));
    assert_eq!(v["jobs"][1]["status"], "ok");
    assert_eq!(v["jobs"][1]["points"].as_array().unwrap().len(), 2);
}

#[test]
fn hung_engine_is_cut_by_the_point_timeout() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    // Test-only hook: the shim sleeps in step() after 6 steps.
    let r = small_sweep_recipe(dir.path(), "hang", 8, "ENGINEBENCH_TEST_HANG_AFTER_STEPS = \"6\"", "");
    let out = dir.path().join("out");
    let started = Instant::now();
    let o = enginebench(&["run", &r, "--no-eval", "--point-timeout", "20", "-o", out.to_str().unwrap()]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(1), "{log}");
    assert!(started.elapsed() < Duration::from_secs(300), "the timeout did not cut the hang");
    let v = read_json(&out.join("result.json"));
    let u = &v["jobs"][0]["unfinished"];
    assert_eq!(u[0]["status"], "timeout", "{v}");
    assert!(u[0]["reason"].as_str().unwrap().contains("--point-timeout 20"));
    assert_eq!(u[1]["status"], "not run");
}

#[test]
fn ctrl_c_keeps_a_partial_point_and_valid_files() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let r = small_sweep_recipe(dir.path(), "sigint", 256, "", "");
    let out = dir.path().join("out");
    let child = spawn(&["run", &r, "--no-eval", "-o", out.to_str().unwrap()]);
    let result = out.join("result.json");
    // Engine ready, then well inside the first point (4 requests x 256 tokens).
    wait_for(&result, Duration::from_secs(600), |v| v["jobs"][0]["engine"].is_object());
    std::thread::sleep(Duration::from_secs(4));
    // SAFETY: SIGINT to our own child (what Ctrl-C sends).
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let log = text(&output);
    assert_eq!(output.status.code(), Some(130), "{log}");
    let v = read_json(&result);
    assert_eq!(v["status"], "interrupted");
    let job = &v["jobs"][0];
    assert_eq!(job["status"], "interrupted");
    let partial = job["points"].as_array().unwrap().iter().any(|p| p["status"] == "partial");
    assert!(partial, "the point in progress is kept and marked partial: {job}");
    assert!(log.contains("--resume"), "{log}");
    // Every line on disk parses.
    for l in std::fs::read_to_string(out.join("points.jsonl")).unwrap().lines() {
        serde_json::from_str::<serde_json::Value>(l).unwrap();
    }
}
