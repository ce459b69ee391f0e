//! Disaggregated prefill/decode on real vLLM (CPU build, bundled model):
//! KV moves between two in-process engines in two processes through vLLM's
//! NixlConnector (the registry's `nixl` on host memory, from the venv that
//! `ci/setup.sh` layers on the main one), the caller as the proxy
//! (`enginebench_shim.pd_probe`). Bounded by the probe's own `--timeout`
//! (it kills its engines) and this test's deadline (it kills the probe).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{engine_lock, install, repo};

#[test]
fn decode_engine_pulls_the_prompt_kv_and_matches_a_single_engine() {
    let root = install();
    let python = root.join("venv-pd/bin/python");
    assert!(python.exists(), "set-up missing: run ci/setup.sh (it makes .enginebench/venv-pd)");
    let model = root.join("models/smollm2-135m-instruct");
    let _engines = engine_lock();
    let started = Instant::now();
    let out = tempfile::NamedTempFile::new().unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(&python)
        .args(["-m", "enginebench_shim.pd_probe"])
        .arg(&model)
        .args(["--prompts", "2", "--isl", "96", "--osl", "12", "--timeout", "240", "--port", "5640"])
        .env("PYTHONPATH", repo().join("python-shim"))
        .env("OMP_NUM_THREADS", "1")
        .stdout(Stdio::from(out.reopen().unwrap()))
        .stderr(Stdio::from(err.reopen().unwrap()))
        .spawn()
        .expect("the probe starts");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            panic!("the P/D probe ran past 300 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stderr = std::fs::read_to_string(err.path()).unwrap();
    let stdout = std::fs::read_to_string(out.path()).unwrap();
    // vLLM logs to stdout too: the report is the last line.
    let last = stdout.lines().last().unwrap_or("");
    let report: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("no JSON report ({e}); stderr:\n{stderr}\nstdout tail:\n{last}"));
    eprintln!("pd probe: {:.1} s, pd_wall_s {}", started.elapsed().as_secs_f64(), report["pd_wall_s"]);
    assert_eq!(status.code(), Some(0), "{report}\n{stderr}");
    let requests = report["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2);
    for r in requests {
        assert_eq!(r["prefill_engine"], "prefill0", "{r}");
        let prompt = r["prompt_tokens"].as_u64().unwrap();
        // Greedy outputs equal the single engine's, token for token.
        assert_eq!(r["decode_tokens"], r["reference_tokens"], "{r}");
        assert_eq!(r["decode_tokens"].as_array().unwrap().len(), 12);
        // Every prompt token arrived by transfer; the reference computed its own.
        assert_eq!(r["decode_external_cached"].as_u64(), Some(prompt), "{r}");
        assert_eq!(r["remote_num_tokens"].as_u64(), Some(prompt), "{r}");
        assert_eq!(r["reference_cached"].as_u64(), Some(0), "{r}");
    }
    // vLLM's NIXL worker pins the engine thread to a core while the engine
    // is built; the shim gives it back the CPUs it had (the probe's own).
    for e in report["engines"].as_array().unwrap() {
        assert!(!e["kv_transfer_affinity"].as_array().expect("the pinning recorded").is_empty(), "{e}");
        assert_eq!(e["cpus"], report["cpus"], "{e}");
    }
    let decode = &report["connector"]["decode0"];
    assert_eq!(decode["transfers"].as_u64(), Some(2), "{decode}");
    assert_eq!(decode["failed_transfers"].as_u64(), Some(0), "{decode}");
    // One 128-token block per prompt, K and V of 30 layers, 3 KV heads x 64, fp32.
    assert_eq!(decode["bytes"].as_u64(), Some(2 * 30 * 2 * 128 * 3 * 64 * 4), "{decode}");
    assert_eq!(report["connector"]["prefill0"]["transfers"].as_u64(), Some(0));
}

/// A fake-engine P/D recipe (src/engine/fake.rs: its prefill hands back
/// parameters, its decode counts the prompt as transferred): `prefill` and
/// `decode` are extra TOML lines of the roles, `sweep` the `[sweep]` body.
fn fake_pd_recipe(dir: &std::path::Path, prefill: &str, decode: &str, sweep: &str) -> String {
    let model = crate::util::fake_model(dir, "dense-model", r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}"#);
    let kv = |role: &str, extra: &str| {
        format!(r#"'{{"kv_connector": "NixlConnector", "kv_role": "{role}", "kv_buffer_device": "cpu"{extra}}}'"#)
    };
    let body = format!(
        "name = \"fake-pd\"\nmodel = \"{}\"\nhardware = \"cpu\"\n[engine]\nargs = [\"--block-size\", \"16\"]\n\
         [roles.prefill]\nargs = [\"--kv-transfer-config\", {}]\n{prefill}\n\
         [roles.decode]\nargs = [\"--kv-transfer-config\", {}]\n\n[sweep]\n{sweep}\n",
        model.display(),
        kv("kv_producer", ""),
        kv("kv_consumer", decode),
    );
    crate::util::write_recipe(dir, "fake-pd", &body)
}

/// The decode worker's proxy over two prefill workers (fake engines): round
/// robin in send order, every request's TTFT in parts that add up, each
/// worker's log; then a prefill worker killed mid-point: with vLLM's default
/// `kv_load_failure_policy` ("fail") its requests fail and the point ends
/// long before the point timeout, the other worker serving the rest; with
/// "recompute" the decode engine computes them and the run passes.
#[test]
fn fake_pair_balances_splits_ttft_and_survives_a_dead_prefill_worker() {
    use crate::util::{fake_command, output, read_json};
    let dir = tempfile::tempdir().unwrap();
    let r = fake_pd_recipe(dir.path(), "layout = { workers = 2 }", "", "isl = 16\nosl = 4\nconc = [1, 4]\nnum_prompts = 8\nwarmups = 2");
    let out = dir.path().join("out");
    let started = Instant::now();
    let (o, log) = output(&mut fake_command("step_ms=2", &["run", &r, "-o", out.to_str().unwrap(), "--point-timeout", "60"]));
    assert_eq!(o.status.code(), Some(0), "{log}");
    eprintln!("fake 2P1D: {:.1} s", started.elapsed().as_secs_f64());
    assert!(log.contains("P/D TTFT median ms: prefill queue"), "{log}");
    let v = read_json(&out.join("result.json"));
    for p in v["jobs"][0]["points"].as_array().unwrap() {
        let pd = &p["pd"];
        assert_eq!(p["completed"], 8, "{p}");
        assert_eq!(pd["requests_per_prefill_worker"], serde_json::json!([4, 4]), "round robin over both: {pd}");
        assert_eq!((pd["prompt_tokens"].as_u64(), pd["transferred_tokens"].as_u64()), (Some(128), Some(128)), "{pd}");
        assert_eq!(pd["ttft_split"]["requests"], 8, "{pd}");
        assert_eq!((pd["prefill_gpus"].as_u64(), pd["decode_gpus"].as_u64()), (Some(2), Some(1)), "{pd}");
        let total = crate::util::f(&p["total_token_throughput"]);
        assert!((crate::util::f(&pd["tput_per_gpu"]) - total / 3.0).abs() < 1e-6, "{pd}");
    }
    let lines = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    for line in lines.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let pd = &r["pd"];
        let parts: f64 = ["prefill_queue_ms", "prefill_ms", "handoff_ms", "kv_wait_ms", "first_token_ms"].iter().map(|k| crate::util::f(&pd[k])).sum();
        assert!((parts - crate::util::f(&r["ttft_ms"])).abs() < 1e-6, "the parts add up to TTFT: {r}");
    }
    for i in 0..2 {
        assert!(out.join(format!("worker.prefill{i}.log")).is_file());
    }

    // 2P2D: two decode workers split each point as dense DP ranks, each the
    // proxy to both prefill workers (decode worker j starts at prefill j).
    let sub = dir.path().join("2p2d");
    std::fs::create_dir_all(&sub).unwrap();
    let r = fake_pd_recipe(&sub, "layout = { workers = 2 }", "", "isl = 16\nosl = 4\nconc = [4]\nnum_prompts = 8\nwarmups = 0");
    let r = crate::util::write_recipe(&sub, "fake-2p2d", &std::fs::read_to_string(&r).unwrap().replace("[roles.decode]\n", "[roles.decode]\nlayout = { workers = 2 }\n"));
    let out = sub.join("out");
    let (o, log) = output(&mut fake_command("step_ms=2", &["run", &r, "-o", out.to_str().unwrap(), "--point-timeout", "60"]));
    assert_eq!(o.status.code(), Some(0), "{log}");
    let p = &read_json(&out.join("result.json"))["jobs"][0]["points"][0];
    let pd = &p["pd"];
    assert_eq!((p["completed"].as_u64(), p["failed"].as_u64()), (Some(8), Some(0)), "{p}");
    assert_eq!(pd["requests_per_prefill_worker"], serde_json::json!([4, 4]), "{pd}");
    assert_eq!((pd["decode_workers"].as_u64(), pd["decode_gpus"].as_u64(), pd["prefill_gpus"].as_u64()), (Some(2), Some(2), Some(2)), "{pd}");
    assert_eq!((pd["prompt_tokens"].as_u64(), pd["transferred_tokens"].as_u64()), (Some(128), Some(128)), "{pd}");
    assert_eq!(pd["ttft_split"]["requests"], 8, "{pd}");
    let ranks = p["ranks"].as_array().unwrap();
    assert_eq!(ranks.iter().map(|r| r["completed"].as_u64().unwrap()).collect::<Vec<_>>(), vec![4, 4], "each decode worker its share: {p}");
    for name in ["worker.decode0.log", "worker.decode1.log", "worker.prefill0.log", "worker.prefill1.log"] {
        assert!(out.join(name).is_file(), "{name}");
    }

    // A prefill worker killed while requests are at it.
    for (policy, code) in [("", 1), (r#", "kv_load_failure_policy": "recompute""#, 0)] {
        let sub = dir.path().join(if code == 0 { "recompute" } else { "fail" });
        std::fs::create_dir_all(&sub).unwrap();
        // Slow prefills (200 ms a step), so that requests are at worker 1 when it dies.
        let r = fake_pd_recipe(&sub, "layout = { workers = 2 }\nenv = { ENGINEBENCH_FAKE_ENGINE = \"step_ms=200\" }", policy, "isl = 16\nosl = 8\nconc = [4]\nnum_prompts = 100\nwarmups = 0");
        let out = sub.join("out");
        let mut child = fake_command("step_ms=20", &["run", &r, "-o", out.to_str().unwrap(), "--point-timeout", "120"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        // The pair up: three workers, the decode one stepping (the job is running).
        let prefill1 = loop {
            assert!(t0.elapsed() < Duration::from_secs(60), "the pair did not start");
            let kids: Vec<i32> = crate::util::children(child.id()).into_iter().map(|k| k as i32).collect();
            let job = if out.join("result.json").is_file() { read_json(&out.join("result.json"))["jobs"][0].clone() } else { serde_json::Value::Null };
            if let (true, 3, Some(decode)) = (job["status"] == "running", kids.len(), job["worker_pid"].as_i64()) {
                // The decode worker is the job's worker; prefill worker 1 the later-started of the others.
                break kids.into_iter().filter(|&k| k != decode as i32).max().unwrap();
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        std::thread::sleep(Duration::from_secs(2));
        // Frozen first, so that requests are surely at it when it dies: the
        // proxy keeps sending it every other prompt (round robin), which
        // wait there. Killed outright, it could die between batches with
        // none at it (its batch back at the decode side).
        // SAFETY: signals to the second prefill worker, a child of the run we started.
        unsafe { libc::kill(prefill1, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_secs(1));
        let killed_at = Instant::now();
        // SAFETY: as above.
        unsafe { libc::kill(prefill1, libc::SIGKILL) };
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if killed_at.elapsed() > Duration::from_secs(100) {
                let _ = child.kill();
                panic!("the run did not end after a prefill worker was killed");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        eprintln!("dead prefill worker ({}): ended {:.1} s after the kill", if code == 0 { "recompute" } else { "fail" }, killed_at.elapsed().as_secs_f64());
        assert_eq!(status.code(), Some(code), "policy {policy:?}");
        let v = read_json(&out.join("result.json"));
        let p = &v["jobs"][0]["points"][0];
        let (completed, failed) = (p["completed"].as_u64().unwrap(), p["failed"].as_u64().unwrap());
        assert_eq!(completed + failed, 100, "{p}");
        let served = p["pd"]["requests_per_prefill_worker"].as_array().unwrap().clone();
        assert!(served[0].as_u64().unwrap() > served[1].as_u64().unwrap(), "the live worker took the rest: {served:?}");
        if code == 1 {
            assert!(failed > 0 && completed > failed, "{p}");
            let lines = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
            assert!(lines.contains("prefill failed: prefill worker 1"), "the failed requests name the worker");
        } else {
            assert_eq!(failed, 0, "{p}");
            assert!(p["pd"]["recomputed"].as_u64().unwrap() > 0, "{}", p["pd"]);
        }
    }
}

/// Runs enginebench with `args` until it exits or `limit` passes (then
/// kills it and fails), returning its exit code and output.
fn run_bounded(args: &[&str], limit: Duration) -> (Option<i32>, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    // One open file for both streams, so that neither overwrites the other.
    let file = log.reopen().unwrap();
    let mut child = crate::util::command(args)
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("enginebench {args:?} ran past {limit:?}:\n{}", std::fs::read_to_string(log.path()).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("enginebench {}: {:.1} s", args[1], started.elapsed().as_secs_f64());
    (status.code(), std::fs::read_to_string(log.path()).unwrap())
}

/// Each request's generated token ids in a run folder, by (point, request).
fn token_ids(out: &std::path::Path) -> std::collections::BTreeMap<(u64, u64), serde_json::Value> {
    let text = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|r| ((r["point"].as_u64().unwrap(), r["request"].as_u64().unwrap()), r["token_ids"].clone()))
        .collect()
}

/// `enginebench run` of the shipped 1P1D recipe on real vLLM (CPU build):
/// the driver as the proxy between a prefill and a decode engine in two
/// worker processes. Every prompt token reaches the decode engine by
/// transfer, the connector counts one 128-token block per request, the
/// TTFT parts add up, and the greedy outputs equal one engine's (the same
/// flags without roles, the same prompts). Then 2P1D: the requests alternate
/// over the two prefill workers.
#[test]
fn pd_jobs_of_the_bundled_model_transfer_the_kv_and_match_one_engine() {
    let root = install();
    assert!(root.join("venv-pd/bin/python").exists(), "set-up missing: run ci/setup.sh (it makes .enginebench/venv-pd)");
    let _engines = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let shipped = repo().join("recipes/cpu/smollm2-135m-pd.toml");
    let text = std::fs::read_to_string(&shipped).unwrap();
    let limits = ["--start-timeout", "240", "--point-timeout", "240"];
    let bound = Duration::from_secs(420);

    // 1P1D, as shipped.
    let pd_out = dir.path().join("pd");
    let mut args = vec!["run", shipped.to_str().unwrap(), "--record-token-ids", "-o", pd_out.to_str().unwrap()];
    args.extend(limits);
    let (code, log) = run_bounded(&args, bound);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("P/D TTFT median ms"), "{log}");
    let v = crate::util::read_json(&pd_out.join("result.json"));
    let job = &v["jobs"][0];
    for p in job["points"].as_array().unwrap() {
        let pd = &p["pd"];
        let n = p["completed"].as_u64().unwrap();
        // prompts_per_conc = 2.
        assert_eq!((n, p["failed"].as_u64()), (2 * p["conc"].as_u64().unwrap(), Some(0)), "{p}");
        assert_eq!(pd["transferred_tokens"], pd["prompt_tokens"], "every prompt token by transfer: {pd}");
        assert_eq!(pd["whole_prompt_transferred"].as_u64(), Some(n), "{pd}");
        let t = &pd["transfers"];
        assert_eq!((t["transfers"].as_u64(), t["failed_transfers"].as_u64()), (Some(n), Some(0)), "{pd}");
        // One 128-token block per prompt: K and V of 30 layers, 3 KV heads x 64, fp32.
        assert_eq!(t["bytes"].as_u64(), Some(n * 30 * 2 * 128 * 3 * 64 * 4), "{pd}");
        assert_eq!(pd["ttft_split"]["requests"].as_u64(), Some(n), "{pd}");
    }
    for line in std::fs::read_to_string(pd_out.join("requests.jsonl")).unwrap().lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let pd = &r["pd"];
        assert_eq!(pd["external_cached_tokens"], r["input_tokens"], "{r}");
        let parts: f64 = ["prefill_queue_ms", "prefill_ms", "handoff_ms", "kv_wait_ms", "first_token_ms"].iter().map(|k| crate::util::f(&pd[k])).sum();
        assert!((parts - crate::util::f(&r["ttft_ms"])).abs() < 1e-6, "the parts add up to TTFT: {r}");
        assert!(crate::util::f(&pd["prefill_ms"]) > 0.0 && crate::util::f(&pd["handoff_ms"]) >= 0.0, "{r}");
    }
    for name in ["worker.log", "worker.prefill0.log"] {
        assert!(pd_out.join(name).is_file(), "{name}");
    }

    // One engine: the same shared flags and sweep, no roles.
    let single = text[..text.find("[roles.prefill]").unwrap()].to_string() + &text[text.find("[sweep]").unwrap()..];
    let single = crate::util::write_recipe(dir.path(), "single", &single.replace("smollm2-135m-pd-cpu", "smollm2-135m-single-cpu"));
    let one_out = dir.path().join("one");
    let mut args = vec!["run", single.as_str(), "--record-token-ids", "-o", one_out.to_str().unwrap()];
    args.extend(limits);
    let (code, log) = run_bounded(&args, bound);
    assert_eq!(code, Some(0), "{log}");
    let (pd_ids, one_ids) = (token_ids(&pd_out), token_ids(&one_out));
    assert_eq!(pd_ids.len(), 6);
    assert!(pd_ids.values().all(|t| t.as_array().is_some_and(|a| a.len() == 16)), "{pd_ids:?}");
    assert_eq!(pd_ids, one_ids, "the decode engine's greedy outputs equal one engine's");

    // 2P1D and 2P2D: two prefill workers, one point of 4 requests at conc 2,
    // balanced by the round robin. Two decode workers each run half of the
    // point and link to both prefill workers.
    for decode_workers in [1u64, 2] {
        let mut recipe = text.replace("[roles.prefill]\n", "[roles.prefill]\nlayout = { workers = 2 }\n");
        if decode_workers > 1 {
            recipe = recipe.replace("[roles.decode]\n", &format!("[roles.decode]\nlayout = {{ workers = {decode_workers} }}\n"));
        }
        let name = format!("two-{decode_workers}d");
        let two = crate::util::write_recipe(dir.path(), &name, &recipe);
        let two_out = dir.path().join(&name);
        let mut args = vec!["run", two.as_str(), "--conc", "2", "--num-prompts", "4", "-o", two_out.to_str().unwrap()];
        args.extend(limits);
        let (code, log) = run_bounded(&args, bound);
        assert_eq!(code, Some(0), "{name}: {log}");
        let p = &crate::util::read_json(&two_out.join("result.json"))["jobs"][0]["points"][0];
        let pd = &p["pd"];
        assert_eq!(p["completed"].as_u64(), Some(4), "{name}: {p}");
        assert_eq!(pd["requests_per_prefill_worker"], serde_json::json!([2, 2]), "{name}, round robin: {pd}");
        assert_eq!(pd["transferred_tokens"], pd["prompt_tokens"], "{name}: {pd}");
        assert_eq!(pd["prefill_gpus"].as_u64(), Some(2), "{name}: {pd}");
        assert_eq!((pd["decode_workers"].as_u64(), pd["decode_gpus"].as_u64()), (Some(decode_workers), Some(decode_workers)), "{name}: {pd}");
        let decode_logs: Vec<String> = if decode_workers == 1 { vec!["worker.log".into()] } else { (0..decode_workers).map(|j| format!("worker.decode{j}.log")).collect() };
        for log in decode_logs.iter().map(String::as_str).chain(["worker.prefill0.log", "worker.prefill1.log"]) {
            assert!(two_out.join(log).is_file(), "{name}: {log}");
        }
    }
}
