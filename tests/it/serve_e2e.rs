//! The serving tier end to end: a real `vllm serve` (CPU build, bundled
//! model) on 127.0.0.1, driven by the Rust streaming client for a tiny sweep;
//! and the server (every process of its group) gone afterwards, also when
//! the test body panics.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::util::{engine_lock, install};
use enginebench::metrics::stats::{mean, median};
use enginebench::protocol::RequestRecord;
use enginebench::serve::client::ServeOutcome;
use enginebench::serve::process::{group_members, pid_alive};
use enginebench::serve::{ClientConfig, ServerSpec, VllmServer, run_benchmark};

const ISL: usize = 32;
const OSL: u32 = 8;
const NUM_PROMPTS: usize = 8;

/// The CPU flags for the bundled model (float32, eager, 1 GiB KV cache), plus a `--host`/`--port`
/// the harness must override.
fn spec(log_dir: &std::path::Path) -> ServerSpec {
    let root = install();
    let args = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", "--host", "0.0.0.0", "--port=8000"];
    let mut spec = ServerSpec::new(
        root.join("venv"),
        root.join("models/smollm2-135m-instruct").to_str().unwrap(),
        args.iter().map(|s| s.to_string()).collect(),
        log_dir.join("serve.log"),
    );
    spec.env = BTreeMap::from([
        ("VLLM_CPU_KVCACHE_SPACE".to_string(), "1".to_string()),
        ("OMP_NUM_THREADS".to_string(), "2".to_string()),
    ]);
    spec.ready_timeout = Duration::from_secs(300);
    spec
}

/// Deterministic token-id prompts away from the special tokens (ids < 100).
fn prompts() -> Vec<Vec<u32>> {
    let mut x: u64 = 12345;
    (0..NUM_PROMPTS)
        .map(|_| {
            (0..ISL)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    1000 + ((x >> 33) % 30000) as u32
                })
                .collect()
        })
        .collect()
}

fn wait_dead(pids: &[i32]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| pid_alive(p)) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Every request completed with OSL tokens, and its figures hang together.
fn check_point(label: &str, out: &ServeOutcome) {
    assert_eq!(out.records.len(), NUM_PROMPTS);
    for (i, r) in out.records.iter().enumerate() {
        assert!(r.ok(), "{label} request {i}: {r:?}");
        assert_eq!(r.input_tokens, ISL as u32, "{label} request {i}: {r:?}");
        assert_eq!(r.output_tokens, OSL, "{label} request {i}: {r:?}");
        let (ttft, e2el) = (r.ttft_s().unwrap(), r.e2el_s().unwrap());
        assert!(r.send_s >= 0.0 && ttft > 0.0 && ttft <= e2el, "{label} request {i}: {r:?}");
        assert!(r.last_token_s.unwrap() <= out.duration_s, "{label} request {i}: {r:?}");
        // One ITL per chunk after the first. vllm serve sends one chunk per
        // token and engine step, except that its API server merges the
        // outputs of several steps into one chunk when its streaming task
        // falls behind the engine (RequestOutputCollector in
        // vllm/v1/engine/output_processor.py), seen on this 2-core machine
        // under load: so at most OSL - 1 ITLs, exactly that when each chunk
        // carries one token.
        assert!(r.itl_s.len() <= OSL as usize - 1, "{label} request {i}: {r:?}");
        assert!(r.itl_s.iter().all(|&g| g >= 0.0));
        assert!((ttft + r.itl_s.iter().sum::<f64>() - e2el).abs() < 1e-9, "{label} request {i}: {r:?}");
        if r.itl_s.len() == OSL as usize - 1 {
            let tpot = r.tpot_s().unwrap();
            assert!((tpot - mean(&r.itl_s)).abs() < 1e-9, "TPOT = mean ITL when each chunk is one token");
        }
    }
    let merged = out.records.iter().filter(|r| r.itl_s.len() < OSL as usize - 1).count();
    eprintln!("{label}: {merged} of {} requests had steps merged into one chunk by the server", out.records.len());
}

fn summary(label: &str, out: &ServeOutcome) -> String {
    let ok: Vec<&RequestRecord> = out.records.iter().filter(|r| r.ok()).collect();
    let ms = |f: &dyn Fn(&RequestRecord) -> Option<f64>| -> Vec<f64> { ok.iter().filter_map(|r| f(r)).map(|s| s * 1e3).collect() };
    let ttft = ms(&|r| r.ttft_s());
    let tpot = ms(&|r| r.tpot_s());
    let e2el = ms(&|r| r.e2el_s());
    let itl: Vec<f64> = ok.iter().flat_map(|r| r.itl_s.iter().map(|s| s * 1e3)).collect();
    let out_tok: u32 = ok.iter().map(|r| r.output_tokens).sum();
    format!(
        "{label}: {}/{} done in {:.2} s, {:.1} out tok/s, {:.2} req/s | TTFT ms mean/med {:.1}/{:.1} | \
         TPOT ms {:.1}/{:.1} | ITL ms {:.1}/{:.1} | E2EL ms {:.1}/{:.1}",
        ok.len(),
        out.records.len(),
        out.duration_s,
        f64::from(out_tok) / out.duration_s,
        ok.len() as f64 / out.duration_s,
        mean(&ttft),
        median(&ttft),
        mean(&tpot),
        median(&tpot),
        mean(&itl),
        median(&itl),
        mean(&e2el),
        median(&e2el),
    )
}

#[test]
fn tiny_sweep_through_real_vllm_serve() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let server = VllmServer::start(&spec(dir.path())).unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("vllm serve ready in {:.1} s on {} (model {})", t0.elapsed().as_secs_f64(), server.base_url(), server.model_id());
    assert_eq!(server.overridden_flags(), ["--host 0.0.0.0", "--port=8000"]);
    assert_ne!(server.port(), 8000);
    let pids = server.processes();
    assert!(pids.contains(&server.pid()) && pids.len() >= 2, "API server and engine core expected: {pids:?}");

    let prompts = prompts();
    let osl = vec![OSL; NUM_PROMPTS];
    // warm-up, not measured
    let warm = run_benchmark(&ClientConfig::new(server.base_url(), server.model_id(), 2), &prompts[..2], &osl[..2], None).unwrap();
    assert!(warm.records.iter().all(|r| r.ok()), "{:?}", warm.records);

    for conc in [1, 4] {
        let cfg = ClientConfig::new(server.base_url(), server.model_id(), conc);
        let out = run_benchmark(&cfg, &prompts, &osl, None).unwrap();
        let label = format!("conc {conc}");
        eprintln!("{}", summary(&label, &out));
        check_point(&label, &out);
        let mut sends: Vec<f64> = out.records.iter().map(|r| r.send_s).collect();
        sends.sort_by(f64::total_cmp);
        if conc == 1 {
            // closed loop at 1: each request is sent after the previous one ended
            for w in out.records.windows(2) {
                assert!(w[1].send_s >= w[0].last_token_s.unwrap(), "{:?}", out.records);
            }
        } else {
            // the first `conc` go out at once, the rest wait for a slot
            assert!(sends[conc - 1] < 0.1, "{sends:?}");
            assert!(sends[conc] > 0.1, "{sends:?}");
        }
    }

    // request-rate mode: releases at 0, 0.25, 0.5, ... s
    let arrivals: Vec<f64> = (0..NUM_PROMPTS).map(|i| i as f64 * 0.25).collect();
    let cfg = ClientConfig::new(server.base_url(), server.model_id(), 4);
    let out = run_benchmark(&cfg, &prompts, &osl, Some(&arrivals)).unwrap();
    eprintln!("{}", summary("rate 4 req/s, conc 4", &out));
    check_point("rate", &out);
    for (r, at) in out.records.iter().zip(&arrivals) {
        assert!(r.send_s >= *at - 1e-3, "sent at {} before its arrival {at}", r.send_s);
    }

    let pgid = server.pid();
    server.stop().unwrap();
    assert!(wait_dead(&pids), "still alive: {:?}", pids.iter().filter(|&&p| pid_alive(p)).collect::<Vec<_>>());
    assert!(group_members(pgid).is_empty());
    eprintln!("test body {:.1} s", t0.elapsed().as_secs_f64());
}

#[test]
fn server_is_gone_when_the_test_body_panics() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let seen: Mutex<(i32, Vec<i32>)> = Mutex::new((0, Vec::new()));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let server = VllmServer::start(&spec(dir.path())).unwrap_or_else(|e| panic!("{e:#}"));
        *seen.lock().unwrap() = (server.pid(), server.processes());
        let cfg = ClientConfig::new(server.base_url(), server.model_id(), 1);
        let out = run_benchmark(&cfg, &prompts()[..1], &[2], None).unwrap();
        assert!(out.records[0].ok(), "{:?}", out.records[0]);
        panic!("deliberate panic with the server running");
    }));
    let payload = outcome.expect_err("the body panics");
    let msg = payload.downcast_ref::<&str>().copied().unwrap_or("");
    let (pgid, pids) = seen.into_inner().unwrap();
    assert!(!pids.is_empty(), "the server never started: {msg}");
    assert!(wait_dead(&pids), "still alive after the panic: {:?}", pids.iter().filter(|&&p| pid_alive(p)).collect::<Vec<_>>());
    assert!(group_members(pgid).is_empty());
    if msg != "deliberate panic with the server running" {
        std::panic::resume_unwind(payload);
    }
}

#[test]
fn server_that_fails_to_start_reports_its_log() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec(dir.path());
    spec.args.extend(["--dtype".to_string(), "not-a-dtype".to_string()]);
    let t0 = Instant::now();
    let err = format!("{:#}", VllmServer::start(&spec).unwrap_err());
    assert!(err.contains("exited") && err.contains("not-a-dtype"), "{err}");
    eprintln!("failed start reported in {:.1} s", t0.elapsed().as_secs_f64());
}
