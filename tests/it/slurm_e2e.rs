//! `--slurm` on a real one-machine Slurm cluster (started by `ci/slurm.sh
//! start`, which ci/test.sh runs) and the real CPU engine with the bundled
//! model. Each array task takes the whole node (`--exclusive`: a CPU engine
//! uses every core), so tasks run one at a time and their perf figures are
//! not disturbed by each other.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{engine_lock, install, output, read_json, small_sweep_recipe, text, write_recipe};

/// The cluster's configuration; panics with the command that starts it.
fn slurm_conf() -> PathBuf {
    let conf = std::env::var_os("SLURM_CONF").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp/enginebench-slurm/slurm.conf"));
    let up = conf.is_file()
        && Command::new("sinfo").args(["-h", "-o", "%t"]).env("SLURM_CONF", &conf).output().is_ok_and(|o| {
            let s = String::from_utf8_lossy(&o.stdout);
            o.status.success() && (s.contains("idle") || s.contains("mix") || s.contains("alloc"))
        });
    assert!(up, "no Slurm cluster at {}: run `ci/slurm.sh start` (ci/test.sh does)", conf.display());
    conf
}

fn command(args: &[&str]) -> Command {
    install();
    let mut c = crate::util::command(args);
    c.env("SLURM_CONF", slurm_conf());
    c
}

fn run(args: &[&str]) -> (Output, String) {
    output(&mut command(args))
}

fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

#[test]
fn two_variants_through_slurm_merge_into_the_shape_of_a_local_run() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let r = small_sweep_recipe(dir.path(), "two", 16, "", "[variants.knob]\nenv = { ENGINEBENCH_INERT_KNOB = \"1\" }\n");
    let local = dir.path().join("local");
    let (o, log) = run(&["run", &r, "--variants", "base,knob", "--no-eval", "-o", local.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let slurm = dir.path().join("slurm");
    let started = Instant::now();
    let (o, log) = run(&["run", &r, "--variants", "base,knob", "--no-eval", "--slurm", "-o", slurm.to_str().unwrap()]);
    eprintln!("--slurm run took {:.1} s:\n{log}", started.elapsed().as_secs_f64());
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("submitted Slurm array") && log.contains("first point"), "{log}");
    let (a, b) = (read_json(&local.join("result.json")), read_json(&slurm.join("result.json")));
    assert_eq!(b["status"], "ok");
    assert_eq!(b["execution"]["executor"], "slurm");
    assert_eq!(keys(&a), keys(&b));
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let sub = read_json(&slurm.join("slurm/submission.json"));
    for (ja, jb) in a["jobs"].as_array().unwrap().iter().zip(b["jobs"].as_array().unwrap()) {
        assert_eq!(keys(ja), keys(jb), "same job fields");
        assert_eq!(ja["label"], jb["label"]);
        let (pa, pb) = (ja["points"].as_array().unwrap(), jb["points"].as_array().unwrap());
        assert_eq!(pa.len(), pb.len());
        for (x, y) in pa.iter().zip(pb) {
            assert_eq!(keys(x), keys(y), "same point fields");
            assert_eq!((&x["isl"], &x["osl"], &x["conc"], &y["status"]), (&y["isl"], &y["osl"], &y["conc"], &serde_json::json!("ok")));
        }
        let p = &jb["placement"];
        assert_eq!(p["node"], node.as_str(), "{p}");
        assert_eq!(p["slurm"]["array_job_id"], sub["array_job_id"]);
        assert_eq!(p["slurm"]["state"], "COMPLETED");
        assert!(p["slurm"]["job_id"].is_u64());
    }
    // The lines of both tasks are in the run's files, as a local run has them.
    let lines = |d: &Path, f: &str| std::fs::read_to_string(d.join(f)).unwrap().lines().count();
    assert_eq!(lines(&local, "points.jsonl"), lines(&slurm, "points.jsonl"));
    assert_eq!(lines(&local, "requests.jsonl"), lines(&slurm, "requests.jsonl"));
    assert!(!slurm.join("tasks").join("0").exists(), "task folders are merged away");
}

#[test]
fn scancel_mid_point_keeps_finished_points_and_resume_completes() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    // conc 1 then conc 2 at 64 output tokens: the second point runs for seconds.
    let r = small_sweep_recipe(dir.path(), "cancel", 64, "", "");
    let out = dir.path().join("out");
    let child = command(&["run", &r, "--no-eval", "--slurm", "-o", out.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let first_point = out.join("tasks/0/points.jsonl");
    while !std::fs::read_to_string(&first_point).is_ok_and(|t| t.lines().count() >= 1) {
        // Generous: on a loaded 2-core machine a CPU engine was seen at ~1 tok/s.
        assert!(start.elapsed() < Duration::from_secs(1500), "no first point");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The second point starts as the first ends: cancel inside it.
    std::thread::sleep(Duration::from_millis(500));
    let id = read_json(&out.join("slurm/submission.json"))["array_job_id"].as_u64().unwrap();
    let s = Command::new("scancel").arg(format!("{id}_0")).env("SLURM_CONF", slurm_conf()).status().unwrap();
    assert!(s.success());
    let o = child.wait_with_output().unwrap();
    let log = text(&o);
    eprintln!("{log}");
    assert_eq!(o.status.code(), Some(1), "{log}");
    let v = read_json(&out.join("result.json"));
    let job = &v["jobs"][0];
    assert_eq!(job["status"], "failed", "{job}");
    let points = job["points"].as_array().unwrap();
    assert!(!points.is_empty() && points.iter().all(|p| p["status"] == "ok"), "finished points kept, the cut one dropped: {job}");
    assert_eq!(job["placement"]["slurm"]["state"], "CANCELLED", "{job}");
    assert!(job["error"]["message"].as_str().unwrap().contains("CANCELLED"), "{job}");
    assert!(!job["unfinished"].as_array().unwrap().is_empty());
    let kept = points.len();

    let (o, log) = run(&["run", &r, "--no-eval", "--slurm", "--resume", out.to_str().unwrap()]);
    eprintln!("{log}");
    assert_eq!(o.status.code(), Some(0), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!((v["status"].as_str(), v["resumes"].as_u64()), (Some("ok"), Some(1)));
    let job = &v["jobs"][0];
    assert_eq!(job["points"].as_array().unwrap().len(), 2, "{job}");
    assert_eq!(job["placement"]["slurm"]["state"], "COMPLETED");
    assert_ne!(job["placement"]["slurm"]["array_job_id"].as_u64(), Some(id), "a new array ran the rest");
    assert!(log.contains(&format!("{} point(s) left", 2 - kept)), "{log}");
}

#[test]
fn detach_then_status_and_collect() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let r = small_sweep_recipe(dir.path(), "detach", 16, "", "");
    let out = dir.path().join("out");
    let (o, log) = run(&["run", &r, "--no-eval", "--slurm", "--detach", "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("enginebench collect"), "{log}");
    assert_eq!(read_json(&out.join("result.json"))["status"], "running");
    let (o, log) = run(&["status", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("task ") && log.contains("Slurm array"), "{log}");
    let (o, log) = run(&["collect", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!(v["status"], "ok");
    assert_eq!(v["jobs"][0]["points"].as_array().unwrap().len(), 2);
    // Not a Slurm folder: a clear usage error.
    let (o, log) = run(&["collect", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{log}");
}

#[test]
fn ctrl_c_on_the_submitter_cancels_the_array() {
    let _guard = engine_lock();
    // The fake engine (src/engine/fake.rs) under real Slurm: this tests the
    // submitter's Ctrl-C, not the engine. sbatch passes the environment on.
    let dir = tempfile::tempdir().unwrap();
    let body = "name = \"fake\"\nmodel = \"fake/model\"\nhardware = \"cpu\"\n[sweep]\nisl = 16\nosl = 3000\nconc = [1]\nnum_prompts = 2\nwarmups = 0\n";
    let r = write_recipe(dir.path(), "fake", body);
    let out = dir.path().join("out");
    let child = command(&["run", &r, "--no-eval", "--slurm", "-o", out.to_str().unwrap()])
        .env("ENGINEBENCH_FAKE_ENGINE", "step_ms=20")
        .env("ENGINEBENCH_PYTHON", "/usr/bin/python3")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !std::fs::read_to_string(out.join("tasks/0/result.json")).is_ok_and(|t| t.contains("\"engine\"")) {
        assert!(start.elapsed() < Duration::from_secs(120), "the task did not start its engine");
        std::thread::sleep(Duration::from_millis(200));
    }
    // SAFETY: SIGINT to our own child (what Ctrl-C sends).
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    let log = text(&o);
    assert_eq!(o.status.code(), Some(130), "{log}");
    assert!(log.contains("cancelling Slurm array"), "{log}");
    let v = read_json(&out.join("result.json"));
    assert_eq!(v["status"], "interrupted", "{v}");
    assert_eq!(v["jobs"][0]["placement"]["slurm"]["state"], "CANCELLED", "{v}");
}

#[test]
fn ab_keeps_each_pair_in_one_task_and_records_the_node_of_every_repeat() {
    let _guard = engine_lock();
    // The fake engine: this tests the grouping and the records, not the engine.
    let dir = tempfile::tempdir().unwrap();
    let body = "name = \"fakeab\"\nmodel = \"fake/model\"\nhardware = \"cpu\"\n[sweep]\nisl = 16\nosl = 8\nconc = [1]\nnum_prompts = 4\nwarmups = 0\n[variants.knob]\nenv = { ENGINEBENCH_INERT_KNOB = \"1\" }\n";
    let r = write_recipe(dir.path(), "fakeab", body);
    let out = dir.path().join("out");
    let o = command(&["ab", &r, "--baseline", "base", "--candidate", "knob", "--repeats", "2", "--no-eval", "--slurm", "-o", out.to_str().unwrap()])
        .env("ENGINEBENCH_FAKE_ENGINE", "step_ms=2")
        .env("ENGINEBENCH_PYTHON", "/usr/bin/python3")
        .output()
        .unwrap();
    let log = text(&o);
    // The gate's 0 (PASS), 1 (FAIL: timing noise of the stand-in read as a
    // regression) or 3 (INCONCLUSIVE); never bad input or interrupted.
    assert!(matches!(o.status.code(), Some(0 | 1 | 3)), "{log}");
    let v = read_json(&out.join("result.json"));
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 4);
    let node = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let task = |j: &serde_json::Value| j["placement"]["slurm"]["array_task_id"].as_u64().unwrap();
    // Repeat 1 (base, knob) is task 0, repeat 2 (knob, base) task 2: one task per pair.
    assert_eq!(jobs.iter().map(task).collect::<Vec<_>>(), vec![0, 0, 2, 2], "{v}");
    assert_eq!(jobs.iter().map(|j| j["label"].as_str().unwrap()).collect::<Vec<_>>(), vec!["base", "knob", "knob", "base"]);
    for j in jobs {
        assert_eq!(j["status"], "ok", "{j}");
        assert_eq!(j["placement"]["node"], node.as_str());
    }
    let md = std::fs::read_to_string(out.join("ab.md")).unwrap();
    assert!(md.contains("baseline and candidate ran back to back in one task on one node"), "{md}");
}
