//! Data-parallel jobs (`-dp N`): one worker per rank, started and ended
//! together, one point from every rank's requests. The dense path on real
//! vLLM (CPU build, bundled model, each rank on its own core); the rank
//! fan-in, the merge and a rank killed mid-point on the fake engine; bad DP
//! input refused before any engine starts. Every run is bounded by
//! `--start-timeout`/`--point-timeout` and the test's own deadline.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::{bundled_recipe_head, children, engine_lock, f, fake_command, fake_model, output, read_json, text, write_recipe};

/// A fake-engine recipe on a model folder whose config names no experts
/// (dense), with `args` as the engine flags.
fn fake_recipe(dir: &Path, args: &str, sweep: &str) -> String {
    let model = fake_model(dir, "dense-model", r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}"#);
    let body = format!(
        "name = \"fake-dp\"\nmodel = \"{}\"\nhardware = \"cpu\"\n[engine]\nargs = [{args}]\n[sweep]\n{sweep}\n",
        model.display()
    );
    write_recipe(dir, "fake-dp", &body)
}

#[test]
fn dense_dp_ranks_split_the_load_and_merge_into_one_point() {
    let dir = tempfile::tempdir().unwrap();
    let r = fake_recipe(dir.path(), r#""-dp", "2""#, "isl = 16\nosl = 8\nconc = [1, 4]\nnum_prompts = 6\nwarmups = 2");
    let out = dir.path().join("out");
    let (o, log) = output(&mut fake_command("step_ms=1", &["run", &r, "--no-eval", "-o", out.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(0), "{log}");
    let v = read_json(&out.join("result.json"));
    let job = &v["jobs"][0];
    assert_eq!(job["engine"]["data_parallel_size"], 2, "{}", job["engine"]);
    for (p, split) in job["points"].as_array().unwrap().iter().zip([[6, 0], [3, 3]]) {
        assert_eq!(p["completed"], 6, "every rank's requests, once: {p}");
        assert_eq!(p["total_output_tokens"], 48);
        let ranks = p["ranks"].as_array().unwrap();
        let got: Vec<u64> = ranks.iter().map(|r| r["completed"].as_u64().unwrap()).collect();
        assert_eq!(got, split, "conc {}: requests i mod active ranks", p["conc"]);
        assert_eq!(ranks.iter().map(|r| r["rank"].as_u64().unwrap()).collect::<Vec<_>>(), vec![0, 1]);
        let steps: u64 = ranks.iter().map(|r| r["step_stats"]["steps"].as_u64().unwrap()).sum();
        assert_eq!(p["step_stats"]["steps"].as_u64().unwrap(), steps, "the point's steps are every rank's");
    }
    for rank in 0..2 {
        assert!(out.join(format!("worker.rank{rank}.log")).is_file(), "a log per rank");
    }
}

#[test]
fn a_killed_rank_ends_every_rank_within_the_point_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // ~50 ms a step, 8 tokens a request, 400 requests: minutes if left alone.
    let r = fake_recipe(dir.path(), r#""-dp", "2""#, "isl = 16\nosl = 8\nconc = [2]\nnum_prompts = 400\nwarmups = 0");
    let out = dir.path().join("out");
    let mut child = fake_command("step_ms=50", &["run", &r, "--no-eval", "--point-timeout", "60", "-o", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // Both ranks up and stepping: the job is running and its rank logs exist.
    let ranks = loop {
        assert!(started.elapsed() < Duration::from_secs(60), "the ranks did not start");
        let kids: Vec<i32> = children(child.id()).into_iter().map(|k| k as i32).collect();
        let running = out.join("result.json").is_file() && read_json(&out.join("result.json"))["jobs"][0]["status"] == "running";
        if running && kids.len() == 2 {
            break kids;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(2));
    let killed_at = Instant::now();
    // SAFETY: SIGKILL to the second rank, a child of the run we started.
    unsafe { libc::kill(ranks[1], libc::SIGKILL) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if killed_at.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the run did not end within the point timeout after a rank was killed");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(1));
    assert!(killed_at.elapsed() < Duration::from_secs(20), "ended {:?} after the kill", killed_at.elapsed());
    let v = read_json(&out.join("result.json"));
    let job = &v["jobs"][0];
    assert_eq!(job["status"], "failed", "{job}");
    let msg = job["error"]["message"].as_str().unwrap();
    assert!(msg.contains("data-parallel rank"), "{msg}");
    assert_eq!(job["unfinished"][0]["status"], "failed", "the point in progress is named, resumable: {job}");
    // SAFETY: the surviving rank must be gone too (kill 0 probes).
    assert!(unsafe { libc::kill(ranks[0], 0) } != 0, "rank 0 still alive");
}

#[test]
fn bad_dp_input_is_exit_2_before_any_engine() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = |r: &str, env: &[(&str, &str)]| {
        let mut c = fake_command("1", &["run", r, "--no-eval", "-o", out.to_str().unwrap()]);
        c.envs(env.iter().copied());
        output(&mut c)
    };
    let r = fake_recipe(dir.path(), r#""-dp", "2", "--enable-expert-parallel""#, "isl = 16\nosl = 8\nconc = [1]\nnum_prompts = 2");
    let (o, log) = run(&r, &[]);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("--enable-expert-parallel") && log.contains("dense model"), "{log}");
    assert!(!out.join("result.json").exists(), "refused before any run started");
    // hardware = "gpu": 3 visible GPUs do not split over 2 ranks.
    let gpu = std::fs::read_to_string(fake_recipe(dir.path(), r#""-dp", "2""#, "isl = 16\nosl = 8\nconc = [1]\nnum_prompts = 2")).unwrap();
    let gpu = write_recipe(dir.path(), "gpu-dp", &gpu.replace("hardware = \"cpu\"", "hardware = \"nvidia\""));
    let (o, log) = run(&gpu, &[("CUDA_VISIBLE_DEVICES", "0,1,2")]);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("3 are visible"), "{log}");
    let moe = dir.path().join("moe-model");
    std::fs::create_dir_all(&moe).unwrap();
    std::fs::write(moe.join("config.json"), r#"{"num_local_experts": 4}"#).unwrap();
    let body = format!("name = \"m\"\nmodel = \"{}\"\nhardware = \"cpu\"\n[env]\nVLLM_DP_SIZE = \"2\"\nVLLM_DP_MASTER_IP = \"10.1.2.3\"\n[engine]\nargs = []\n[sweep]\nisl = 16\nosl = 8\nconc = [1]\nnum_prompts = 2\n", moe.display());
    let (o, log) = run(&write_recipe(dir.path(), "moe-dp", &body), &[]);
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("VLLM_DP_MASTER_IP=10.1.2.3 without VLLM_DP_MASTER_PORT"), "{log}");
}

/// Dense `-dp 2` on the bundled model, each rank an engine on its own core,
/// against the same workload at `-dp 1` in the same run (two variants).
#[test]
fn dense_dp2_on_the_real_engine_counts_both_ranks_once() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let body = bundled_recipe_head("dp-dense", 512, "")
        + "[sweep]\nisl = 32\nosl = 16\nconc = [4]\nnum_prompts = 8\nwarmups = 2\n[variants.dp2]\nargs_add = [\"-dp\", \"2\"]\n";
    let r = write_recipe(dir.path(), "dp-dense", &body);
    let out = dir.path().join("out");
    let o = crate::util::enginebench(&["run", &r, "--variants", "base,dp2", "--no-eval", "--start-timeout", "300", "--point-timeout", "300", "-o", out.to_str().unwrap()]);
    let log = text(&o);
    assert!(o.status.success(), "{log}");
    let v = read_json(&out.join("result.json"));
    let (one, two) = (&v["jobs"][0], &v["jobs"][1]);
    assert_eq!(two["engine"]["data_parallel_size"], 2, "{}", two["engine"]);
    let (p1, p2) = (&one["points"][0], &two["points"][0]);
    assert_eq!((p1["completed"].as_u64(), p2["completed"].as_u64()), (Some(8), Some(8)), "both ranks' requests, once");
    assert_eq!(p2["total_output_tokens"], 8 * 16);
    let ranks = p2["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for r in ranks {
        assert_eq!(r["completed"], 4, "conc 4 over 2 ranks: 4 requests each: {r}");
        assert!(f(&r["output_throughput"]) > 0.0 && r["step_stats"]["steps"].as_u64().unwrap() > 0, "{r}");
    }
    assert!(f(&p2["p99_ttft_ms"]) >= f(&p2["median_ttft_ms"]), "{p2}");
    // Each rank ran on one core of its own, with the DP flag taken off.
    for rank in 0..2 {
        let log = std::fs::read_to_string(out.join(format!("worker-1.rank{rank}.log"))).unwrap_or_default();
        assert!(!log.is_empty(), "rank {rank} log");
    }
    eprintln!(
        "dense -dp 1 vs -dp 2 (conc 4, ISL/OSL 32/16, 8 prompts): {:.1} vs {:.1} out tok/s",
        f(&p1["output_throughput"]),
        f(&p2["output_throughput"])
    );
}

/// A MoE job's ranks in lockstep, on the fake engine's DP group (a blocking
/// all-reduce in every `keep_stepping`, `sync_ranks` and step, as vLLM's
/// group does: ranks out of step hang). At conc 1 rank 1 has no request and
/// drains first: it runs dummy steps beside rank 0, and both ranks take the
/// same number of steps. With the lockstep off, the same run cannot finish.
#[test]
fn moe_ranks_step_in_lockstep_and_out_of_step_they_hang() {
    let dir = tempfile::tempdir().unwrap();
    let model = fake_model(dir.path(), "moe-model", r#"{"architectures": ["MixtralForCausalLM"], "num_local_experts": 4}"#);
    let body = format!(
        "name = \"fake-moe\"\nmodel = \"{}\"\nhardware = \"cpu\"\n[engine]\nargs = [\"-dp\", \"2\", \"--enable-expert-parallel\"]\n[sweep]\nisl = 16\nosl = 8\nconc = [1, 3]\nnum_prompts = 6\nwarmups = 2\n",
        model.display()
    );
    let r = write_recipe(dir.path(), "fake-moe", &body);
    let out = dir.path().join("out");
    let (o, log) = output(&mut fake_command("step_ms=1", &["run", &r, "--no-eval", "--point-timeout", "60", "-o", out.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(0), "{log}");
    let v = read_json(&out.join("result.json"));
    for (p, split) in v["jobs"][0]["points"].as_array().unwrap().iter().zip([[6, 0], [3, 3]]) {
        assert_eq!(p["completed"], 6, "{p}");
        let ranks = p["ranks"].as_array().unwrap();
        let got: Vec<u64> = ranks.iter().map(|r| r["completed"].as_u64().unwrap()).collect();
        assert_eq!(got, split, "conc {}", p["conc"]);
        let steps: Vec<u64> = ranks.iter().map(|r| r["step_stats"]["steps"].as_u64().unwrap()).collect();
        assert_eq!(steps[0], steps[1], "lockstep: every rank steps as often (conc {}): {p}", p["conc"]);
        assert!(steps[1] > 0);
    }
    // Each rank deciding alone when to stop: a rank leaves the loop while
    // its peer still steps, and the peer's step waits for it. The run
    // fails, bounded by --point-timeout; it never completes.
    let out = dir.path().join("out-of-step");
    let started = Instant::now();
    let (o, log) = output(&mut fake_command("step_ms=1,no_lockstep=1", &["run", &r, "--no-eval", "--point-timeout", "10", "-o", out.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(1), "{log}");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    let job = &read_json(&out.join("result.json"))["jobs"][0];
    let msg = job["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("timeout") || msg.contains("peer rank is gone"), "{job}");
}

/// The tiny MoE (`bundled:tiny-moe`, set-up writes it) as one vLLM DP group
/// of 2 ranks with expert parallelism on the CPU build, against the same
/// prompts on one engine, through `ab` (which records every perf request's
/// greedy token ids). At conc 1 rank 1 has no request and drains first (it
/// runs dummy batches beside rank 0); at conc 3 the ranks hold 2 and 1
/// requests. The collectives and the expert map the shim supplies are named
/// in the result, and the group's greedy outputs are the single engine's,
/// request by request.
#[test]
fn moe_dp2_with_expert_parallel_on_the_real_engine_matches_dp1() {
    let _guard = engine_lock();
    assert!(crate::util::install().join("models/tiny-moe/config.json").is_file(), "set-up has no tiny-moe: run ci/setup.sh");
    let dir = tempfile::tempdir().unwrap();
    let body = r#"name = "moe-dp"
model = "bundled:tiny-moe"
hardware = "cpu"
point_timeout_s = 120
[env]
VLLM_CPU_KVCACHE_SPACE = "1"
[engine]
args = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "256"]
[sweep]
isl = 16
osl = 8
conc = [1, 3]
num_prompts = 6
warmups = 2
[variants.dp2]
args_add = ["-dp", "2", "--enable-expert-parallel"]
"#;
    let r = write_recipe(dir.path(), "moe-dp", body);
    let out = dir.path().join("ab");
    let started = Instant::now();
    let o = crate::util::enginebench(&[
        "ab", &r, "--baseline", "base", "--candidate", "dp2", "--repeats", "1", "--no-eval", "--start-timeout", "300",
        "-o", out.to_str().unwrap(),
    ]);
    let log = text(&o);
    // One repeat a side gates nothing: INCONCLUSIVE (exit 3), never a failure.
    assert_eq!(o.status.code(), Some(3), "{log}");
    let v = read_json(&out.join("result.json"));
    let jobs = v["jobs"].as_array().unwrap();
    let dp2 = jobs.iter().find(|j| j["label"] == "dp2").expect("a dp2 job");
    assert!(jobs.iter().all(|j| j["status"] == "ok"), "{v}");
    let e = &dp2["engine"];
    assert_eq!(e["data_parallel_size"], 2, "{e}");
    assert_eq!(e["cpu_collectives"], serde_json::json!(["all_gatherv", "reduce_scatterv"]), "{e}");
    assert_eq!(e["cpu_expert_map"], true, "{e}");
    assert!(jobs.iter().find(|j| j["label"] == "base").unwrap()["engine"].get("cpu_collectives").is_none(), "one engine: nothing supplied");
    for (p, split) in dp2["points"].as_array().unwrap().iter().zip([[6, 0], [3, 3]]) {
        let ranks = p["ranks"].as_array().unwrap();
        let got: Vec<u64> = ranks.iter().map(|r| r["completed"].as_u64().unwrap()).collect();
        assert_eq!(got, split, "conc {}: {p}", p["conc"]);
        let steps: Vec<u64> = ranks.iter().map(|r| r["step_stats"]["steps"].as_u64().unwrap()).collect();
        assert!(steps[0] > 0 && steps[0] == steps[1], "lockstep, a drained rank's dummy batches counted: {steps:?}");
    }
    let c = read_json(&out.join("ab.json"));
    let outputs = c["spec"]["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 2, "{c}");
    for o in outputs {
        assert_eq!((o["compared"].as_u64(), o["changed"].as_u64()), (Some(6), Some(0)), "greedy outputs of -dp 2 = -dp 1: {o}");
    }
    eprintln!("tiny MoE -dp 1 vs -dp 2 -ep (conc 1 and 3, 6 requests each, greedy outputs equal) in {:?}", started.elapsed());
}

/// The shim's `all_gatherv` / `reduce_scatterv` on two real gloo ranks,
/// against what the collectives mean: uneven sizes, a list of tensors, a
/// non-zero dim for the reduce-scatter, and integer ids.
#[test]
fn cpu_collectives_gather_and_reduce_uneven_rows_on_two_gloo_ranks() {
    let python = crate::util::install().join("venv/bin/python3");
    let script = r#"
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from enginebench_shim import cpu_collectives as cc

class Comm:
    def __init__(self, rank):
        self.rank_in_group, self.world_size, self.device_group = rank, 2, dist.group.WORLD

def run(rank, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    c, sizes = Comm(rank), [3, 1]
    mine = torch.arange(sizes[rank] * 2, dtype=torch.float32).reshape(sizes[rank], 2) + 100 * rank
    ids = torch.full((sizes[rank], 2), rank, dtype=torch.int32)
    h, i = cc.all_gatherv(c, [mine, ids], 0, sizes)
    want = torch.cat([torch.arange(6.).reshape(3, 2), torch.arange(2.).reshape(1, 2) + 100])
    assert torch.equal(h, want), h
    assert i.dtype == torch.int32 and i[:, 0].tolist() == [0, 0, 0, 1], i
    assert torch.equal(cc.all_gatherv(c, mine, 0, sizes), want), "a tensor gives a tensor"
    full = torch.arange(8.).reshape(4, 2) * (rank + 1)
    got = cc.reduce_scatterv(c, full, 0, sizes)
    both = torch.arange(8.).reshape(4, 2) * 3
    assert torch.equal(got, both[:3] if rank == 0 else both[3:]), got
    t = cc.reduce_scatterv(c, full.t().contiguous(), 1, sizes)
    assert torch.equal(t, (both[:3] if rank == 0 else both[3:]).t()), t
    eq = cc.reduce_scatterv(c, full, 0, None)
    assert torch.equal(eq, both[:2] if rank == 0 else both[2:]), eq
    dist.destroy_process_group()
    print(f"rank {rank} ok", flush=True)

if __name__ == "__main__":
    mp.spawn(run, args=(int(sys.argv[1]),), nprocs=2, join=True)
"#;
    // A file, not `-c`: spawned processes import the main module by its path.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("collectives.py");
    std::fs::write(&file, script).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut c = std::process::Command::new(python);
    c.arg(&file).arg(port.to_string()).env("PYTHONPATH", crate::util::repo().join("python-shim"));
    let (o, log) = output(&mut c);
    assert!(o.status.success(), "{log}");
    assert!(log.contains("rank 0 ok") && log.contains("rank 1 ok"), "{log}");
}
