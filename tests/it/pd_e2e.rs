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
