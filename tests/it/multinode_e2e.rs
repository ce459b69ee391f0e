//! Jobs over several nodes (`[layout] nodes`, docs/multi-node.md) on one
//! machine: each "node" is a node group (`enginebench __node`) of local
//! rank groups over loopback, the code path a Slurm allocation takes minus
//! `srun`. The real engine runs a MoE DP group over 2 nodes and an engine
//! spanning 2 nodes (vLLM's multi-node executor, a headless follower on
//! node 1); the fake engine shows a dead rank ending every node within the
//! point timeout; bad layouts are refused before any engine starts. (The
//! Slurm script of a 2-node job is checked in slurm_e2e and in the script's
//! unit tests: the one-node test cluster cannot run 2 nodes.)

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::{engine_lock, fake_command, output, read_json, text, write_recipe};

/// The tiny MoE on 2 "nodes": a DP group of 2 ranks (one a node, expert
/// parallel), and TP 2 spanning both nodes.
const TWO_NODES: &str = r#"name = "moe-2node"
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
conc = [3]
num_prompts = 3
warmups = 0
[variants.dp2]
args_add = ["-dp", "2", "--enable-expert-parallel"]
layout = { nodes = 2 }
[variants.tp2]
args_add = ["-tp", "2"]
layout = { nodes = 2 }
"#;

/// Every pid below `pid` (its children, theirs, ...).
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for k in crate::util::children(p) {
            out.push(k);
            todo.push(k);
        }
    }
    out
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline")).map(|b| String::from_utf8_lossy(&b).replace('\0', " ")).unwrap_or_default()
}

#[test]
fn two_nodes_on_one_machine_run_a_moe_dp_group_and_an_engine_spanning_them() {
    let _guard = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let r = write_recipe(dir.path(), "moe-2node", TWO_NODES);
    let out = dir.path().join("out");
    let started = Instant::now();
    let o = crate::util::enginebench(&["run", &r, "--variants", "dp2,tp2", "--no-eval", "--start-timeout", "300", "-o", out.to_str().unwrap()]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains("2 nodes as local rank groups on this machine"), "{log}");
    let v = read_json(&out.join("result.json"));
    let (dp, tp) = (&v["jobs"][0], &v["jobs"][1]);

    // The DP group: rank 0 on node 0, rank 1 on node 1, one master.
    let e = &dp["engine"];
    assert_eq!((e["nodes"].as_u64(), e["data_parallel_size"].as_u64()), (Some(2), Some(2)), "{e}");
    assert_eq!(e["cpu_collectives"], serde_json::json!(["all_gatherv", "reduce_scatterv"]), "{e}");
    let p = &dp["points"][0];
    assert_eq!(p["completed"], 3, "{p}");
    let split: Vec<u64> = p["ranks"].as_array().unwrap().iter().map(|r| r["completed"].as_u64().unwrap()).collect();
    assert_eq!(split, [2, 1], "conc 3 over 2 ranks: {p}");
    let steps: Vec<u64> = p["ranks"].as_array().unwrap().iter().map(|r| r["step_stats"]["steps"].as_u64().unwrap()).collect();
    assert_eq!(steps[0], steps[1], "lockstep across the nodes: {steps:?}");
    let rank1 = std::fs::read_to_string(out.join("worker-0.rank1.log")).unwrap();
    assert!(rank1.contains("assigned as DP rank 1"), "rank 1 joined the group from node 1");
    // Per-node telemetry: each node group sampled its node, merged per point.
    assert_eq!(p["telemetry"]["nodes"].as_array().map(Vec::len), Some(2), "{}", p["telemetry"]);
    let nodes = dp["telemetry"]["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for (n, info) in nodes.iter().enumerate() {
        assert_eq!(info["series_file"], format!("telemetry-0.node{n}.jsonl"));
        assert!(info["samples"].as_u64().unwrap() > 0, "{info}");
        assert!(out.join(format!("telemetry-0.node{n}.jsonl")).is_file());
    }

    // The spanning engine: TP 2 over the 2 nodes, node 1 a headless follower.
    let e = &tp["engine"];
    assert_eq!((e["nodes"].as_u64(), e["tensor_parallel_size"].as_u64(), e["world_size"].as_u64()), (Some(2), Some(2), Some(2)), "{e}");
    assert_eq!(tp["points"][0]["completed"], 3, "{}", tp["points"][0]);
    let follower = std::fs::read_to_string(out.join("worker-1.node1.follower.log")).unwrap();
    assert!(follower.contains("headless multiproc executor"), "node 1 ran vLLM's workers only: {}", &follower[follower.len().saturating_sub(2000)..]);
    let reasons = tp["points"][0]["telemetry"]["power_invalid_reasons"].to_string();
    assert!(reasons.contains("headless follower"), "{reasons}");
    eprintln!("2-node MoE DP group and TP 2 over 2 nodes (one point each, conc 3) in {:?}", started.elapsed());
}

/// A fake-engine recipe of a MoE DP group over 2 nodes (one rank a node).
fn fake_two_nodes(dir: &Path, extra: &str) -> String {
    let model = crate::util::fake_model(dir, "moe-model", r#"{"architectures": ["MixtralForCausalLM"], "num_local_experts": 4}"#);
    let body = format!(
        "name = \"fake-2node\"\nmodel = \"{}\"\nhardware = \"cpu\"\n[engine]\nargs = [\"-dp\", \"2\", \"--enable-expert-parallel\"]\n[sweep]\nisl = 16\nosl = 8\nconc = [2]\nnum_prompts = 400\nwarmups = 0\n[layout]\nnodes = 2\n{extra}",
        model.display()
    );
    write_recipe(dir, "fake-2node", &body)
}

#[test]
fn a_killed_rank_on_node_1_ends_every_node_within_the_point_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let r = fake_two_nodes(dir.path(), "");
    let out = dir.path().join("out");
    let mut child = fake_command("step_ms=50", &["run", &r, "--no-eval", "--point-timeout", "60", "-o", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // Both node groups up, each with its rank worker, and the job running.
    let (groups, ranks) = loop {
        assert!(started.elapsed() < Duration::from_secs(60), "the node groups did not start");
        let all = descendants(child.id());
        let groups: Vec<u32> = all.iter().copied().filter(|&p| cmdline(p).contains("__node")).collect();
        let ranks: Vec<u32> = groups.iter().flat_map(|&g| descendants(g)).collect();
        let running = out.join("result.json").is_file() && read_json(&out.join("result.json"))["jobs"][0]["status"] == "running";
        if running && groups.len() == 2 && ranks.len() == 2 {
            break (groups, ranks);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    std::thread::sleep(Duration::from_secs(2));
    // Node 1's rank: the worker below the second node group. Its group is
    // stopped meanwhile, so rank 0's error ("a peer rank is gone") reaches
    // the orchestrator half a second before the death does: the order a
    // loaded machine or a slow remote node gives, in which the failure
    // must still name the dead rank, not the survivor that reported first.
    let victim = descendants(groups[1])[0];
    let killed_at = Instant::now();
    // SAFETY: SIGSTOP / SIGKILL / SIGCONT to processes of the run we started.
    unsafe {
        libc::kill(groups[1] as i32, libc::SIGSTOP);
        libc::kill(victim as i32, libc::SIGKILL);
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: as above.
    unsafe { libc::kill(groups[1] as i32, libc::SIGCONT) };
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
    assert!(killed_at.elapsed() < Duration::from_secs(30), "ended {:?} after the kill", killed_at.elapsed());
    let job = &read_json(&out.join("result.json"))["jobs"][0];
    assert_eq!(job["status"], "failed", "{job}");
    let msg = job["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with("data-parallel rank 1 (node 1)"), "{msg}");
    assert_eq!(job["unfinished"][0]["status"], "failed", "the point in progress is named, resumable: {job}");
    for pid in groups.iter().chain(&ranks) {
        // SAFETY: kill 0 probes a pid we saw under the run.
        assert!(unsafe { libc::kill(*pid as i32, 0) } != 0, "process {pid} ({}) still alive", cmdline(*pid));
    }
}

#[test]
fn layouts_that_cannot_hold_the_job_are_exit_2_before_any_engine() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = |r: &str| output(&mut fake_command("1", &["run", r, "--no-eval", "-o", out.to_str().unwrap()]));
    let three = std::fs::read_to_string(fake_two_nodes(dir.path(), "")).unwrap().replace("nodes = 2", "nodes = 3");
    let (o, log) = run(&write_recipe(dir.path(), "three", &three));
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("nodes = 3") && log.contains("DP size 2"), "{log}");
    let master = std::fs::read_to_string(fake_two_nodes(dir.path(), "")).unwrap().replace("[engine]", "[env]\nVLLM_DP_MASTER_IP = \"10.0.0.9\"\nVLLM_DP_MASTER_PORT = \"29500\"\n[engine]");
    let (o, log) = run(&write_recipe(dir.path(), "master", &master));
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("VLLM_DP_MASTER_IP=10.0.0.9") && log.contains("first node"), "{log}");
    let workers = std::fs::read_to_string(fake_two_nodes(dir.path(), "workers = 2\n")).unwrap();
    let (o, log) = run(&write_recipe(dir.path(), "workers", &workers));
    assert_eq!(o.status.code(), Some(2), "{log}");
    assert!(log.contains("workers = 2"), "{log}");
    assert!(!out.join("result.json").exists(), "refused before any run started");
}

/// `--slurm` on a 2-node DP job submits one allocation of 2 nodes (one task
/// a node), not an array task per rank. The one-node test cluster cannot
/// run 2 nodes (its sbatch refuses them), so a recording `sbatch`
/// (`--slurm-bin`) takes the script and `--detach` ends the submission there.
#[test]
fn slurm_submits_a_two_node_job_as_one_allocation_of_two_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let r = fake_two_nodes(dir.path(), "");
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let sbatch = bin.join("sbatch");
    std::fs::write(
        &sbatch,
        format!("#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'slurm 22.05.8 (recording)'; exit 0; }}\ncp \"$2\" {}/submitted.sh\necho 4242\n", dir.path().display()),
    )
    .unwrap();
    std::fs::set_permissions(&sbatch, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = dir.path().join("out");
    let (o, log) = output(&mut fake_command("1", &["run", &r, "--no-eval", "--slurm", "--slurm-bin", bin.to_str().unwrap(), "--detach", "-o", out.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(0), "{log}");
    let script = std::fs::read_to_string(dir.path().join("submitted.sh")).unwrap();
    let lines: Vec<&str> = script.lines().collect();
    for want in ["#SBATCH --array=0", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --exclusive"] {
        assert!(lines.contains(&want), "{want} missing:\n{script}");
    }
    assert!(!script.contains("--ntasks=1") && !script.contains("--gpus"), "{script}");
    assert!(lines.last().unwrap().contains("__task") && lines.last().unwrap().contains("SLURM_ARRAY_TASK_ID"), "{script}");
    assert!(log.contains("submitted Slurm array 4242"), "{log}");
}
