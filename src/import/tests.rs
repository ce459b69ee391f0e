//! The importer on the fixture checkout (tests/fixtures/inferencex-checkout):
//! exact `vllm serve` argv and exported environment per point, job grouping
//! and names, the launcher search, the round trip through the recipe
//! loader, and failures that name the line. These run the real sandbox
//! (bash under bubblewrap, or `unshare` without it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::checkout::{import_key, launcher_for};
use super::inferencex::{Imported, import_with};
use super::job::Job;
use super::workflow::matrix;
use super::master_config::read_entry;
use super::sandbox::Settings;
use crate::recipe::{Recipe, Sweep};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inferencex-checkout")
}

fn import(key: &str) -> Imported {
    import_key(&root(), key, None, &[], &Settings::default()).unwrap_or_else(|e| panic!("{key}: {e}")).1
}

fn job<'a>(imported: &'a Imported, name: &str) -> &'a Job {
    imported.jobs.iter().find(|j| j.name == name).unwrap_or_else(|| {
        panic!("no job {name}; jobs: {:?}", imported.jobs.iter().map(|j| &j.name).collect::<Vec<_>>())
    })
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn env(items: &[(&str, &str)]) -> BTreeMap<String, String> {
    items.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// (scenario, conc) of a job's points.
fn points(j: &Job) -> Vec<(u32, u32, u32)> {
    j.points.iter().map(|p| (p.isl, p.osl, p.conc)).collect()
}

#[test]
fn every_branch_resolves_per_point() {
    let im = import("shapes-fp4-mi355x-vllm");
    let names: Vec<&str> = im.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "tp8-1k1k-conc4_8",
            "tp8-ep8-1k1k-conc16",
            "tp8-ep8-1k1k-conc32",
            "tp8-ep8-dpa-1k1k-conc256",
            "tp4-mtp-1k1k-conc4",
            "tp8-8k1k-conc4",
            "tp4-mtp-8k1k-conc4",
        ]
    );
    let served = "example/Shapes-MXFP4";
    // TP only; `case` gives 16 sequences up to conc 8; the ternary 8192 tokens at ISL 1024;
    // the benchmark branch (EVAL_ONLY false) gives MAX_MODEL_LEN = 1024 + 1024 + 256.
    let j = job(&im, "tp8-1k1k-conc4_8");
    assert_eq!(j.engine.model, served, "MODEL_PATH is the model id");
    assert_eq!(
        j.engine.args,
        strings(&[
            "--tensor-parallel-size", "8", "--max-model-len", "2304", "--max-num-seqs", "16",
            "--max-num-batched-tokens", "8192", "--served-model-name", served,
        ])
    );
    assert_eq!(j.engine.env, env(&[("VLLM_ROCM_USE_AITER", "1")]));
    assert_eq!(points(j), [(1024, 1024, 4), (1024, 1024, 8)]);
    assert_eq!(j.line, 39, "the line of `vllm serve`, inside the function that wraps it");
    // EP branch: the flag and its export; $(( CONC * 2 )) sequences, so one job per conc.
    for (name, conc, seqs) in [("tp8-ep8-1k1k-conc16", 16, "32"), ("tp8-ep8-1k1k-conc32", 32, "64")] {
        let j = job(&im, name);
        assert_eq!(
            j.engine.args,
            strings(&[
                "--tensor-parallel-size", "8", "--enable-expert-parallel", "--max-model-len", "2304",
                "--max-num-seqs", seqs, "--max-num-batched-tokens", "8192", "--served-model-name", served,
            ])
        );
        assert_eq!(j.engine.env, env(&[("VLLM_ROCM_USE_AITER", "1"), ("VLLM_ROCM_USE_AITER_MOE", "1")]));
        assert_eq!(points(j), [(1024, 1024, conc)]);
    }
    // DP-attention wins over EP (the `if` comes first).
    let j = job(&im, "tp8-ep8-dpa-1k1k-conc256");
    assert_eq!(
        j.engine.args,
        strings(&[
            "--tensor-parallel-size", "1", "--data-parallel-size", "8", "--enable-expert-parallel",
            "--max-model-len", "2304", "--max-num-seqs", "512", "--max-num-batched-tokens", "8192",
            "--served-model-name", served,
        ])
    );
    assert_eq!(j.engine.env, env(&[("VLLM_ROCM_USE_AITER", "1")]));
    // 8k1k: the ternary's other arm.
    let j = job(&im, "tp8-8k1k-conc4");
    assert_eq!(
        j.engine.args,
        strings(&[
            "--tensor-parallel-size", "8", "--max-model-len", "9472", "--max-num-seqs", "16",
            "--max-num-batched-tokens", "16384", "--served-model-name", served,
        ])
    );
    // spec-decoding mtp picks the _mtp launcher; the draft length comes from the
    // associative array per scenario; the command's own assignment is exported.
    for (name, len, draft, isl) in [("tp4-mtp-1k1k-conc4", "2304", 3, 1024), ("tp4-mtp-8k1k-conc4", "9472", 2, 8192)] {
        let j = job(&im, name);
        assert_eq!(j.launcher, Path::new("benchmarks/single_node/fixed_seq_len/shapes_fp4_mi355x_vllm_mtp.sh"));
        let spec = format!(r#"{{"method": "eagle3", "model": "/tmp/draft/Shapes-Draft", "num_speculative_tokens": {draft}}}"#);
        assert_eq!(
            j.engine.args,
            strings(&["--tensor-parallel-size", "4", "--max-model-len", len, "--speculative-config", &spec])
        );
        assert_eq!(j.engine.env, env(&[("VLLM_USE_FLASHINFER_SAMPLER", "1")]));
        assert_eq!(points(j), [(isl, 1024, 4)]);
    }
}

#[test]
fn written_recipe_reproduces_every_job() {
    for key in ["shapes-fp4-mi355x-vllm", "tiny-fp32-cpu-vllm", "old-fp8-mi300x-vllm"] {
        let im = import(key);
        let recipe = Recipe::parse(&im.toml, key).unwrap_or_else(|e| panic!("{key}: {e:#}\n{}", im.toml));
        assert_eq!(recipe.name, key);
        for (i, j) in im.jobs.iter().enumerate() {
            let variant = if i == 0 { vec![] } else { vec![j.name.clone()] };
            let configs = recipe.engine_configs(&variant, &Sweep::default()).unwrap();
            assert_eq!(configs.len(), 1, "{key} {}", j.name);
            assert_eq!(configs[0].args, j.engine.args, "{key} {}", j.name);
            assert_eq!(configs[0].env, j.engine.env, "{key} {}", j.name);
            assert_eq!(configs[0].points.len(), j.points.len(), "{key} {}", j.name);
        }
    }
}

#[test]
fn launcher_search_follows_the_runners() {
    // No framework-suffixed name: the bare name under deprecated/, -tp kept as written.
    let im = import("old-fp8-mi300x-vllm");
    let [j] = im.jobs.as_slice() else { panic!("{:?}", im.jobs) };
    assert_eq!(j.launcher, Path::new("benchmarks/single_node/fixed_seq_len/deprecated/old_fp8_mi300x.sh"));
    assert_eq!(j.engine.args, strings(&["-tp", "8", "--max-model-len", "9472"]));
    assert_eq!(j.engine.env, env(&[("VLLM_ATTENTION_BACKEND", "TRITON_ATTN")]));
    assert_eq!(points(j), [(1024, 8192, 4), (1024, 8192, 8)]);
    // The CPU entry: the bundled model, one job for both concurrencies.
    let im = import("tiny-fp32-cpu-vllm");
    let [j] = im.jobs.as_slice() else { panic!("{:?}", im.jobs) };
    assert_eq!(j.engine.model, "bundled:smollm2-135m-instruct");
    assert_eq!(
        j.engine.args,
        strings(&["--tensor-parallel-size", "1", "--dtype", "float32", "--enforce-eager", "--max-model-len", "392"])
    );
    assert_eq!(j.engine.env, env(&[("VLLM_CPU_KVCACHE_SPACE", "2")]));
    // A missing launcher names every name tried.
    let yaml = std::fs::read_to_string(root().join("configs/demo-master.yaml")).unwrap();
    let mut e = read_entry(&yaml, "tiny-fp32-cpu-vllm").unwrap();
    e.precision = Some("fp8".into());
    let p = &matrix(&e, None, None).unwrap()[0];
    let err = launcher_for(&root(), &e, p).unwrap_err();
    assert!(err.contains("tiny_fp8_cpu_vllm.sh") && err.contains("deprecated/tiny_fp8_cpu.sh"), "{err}");
}

#[test]
fn eval_selection_and_checkout_thresholds_come_along() {
    // The launcher's EVAL_CONCURRENT_REQUESTS goes to [eval], not to the
    // engine; the checkout's thresholds resolve for the entry's model prefix.
    let im = import("tiny-fp32-cpu-vllm");
    assert!(!im.jobs[0].engine.env.contains_key("EVAL_CONCURRENT_REQUESTS"), "{:?}", im.jobs[0].engine.env);
    let recipe = Recipe::parse(&im.toml, "tiny").unwrap();
    let eval = recipe.eval.expect("an [eval] section");
    assert_eq!((eval.tasks, eval.concurrency), (vec!["gsm8k_inferencex".to_string()], 4));
    assert_eq!(eval.model_prefix.as_deref(), Some("tiny"));
    assert_eq!(eval.thresholds.get("gsm8k"), Some(&0.02), "{}", im.toml);
    assert_eq!(eval.thresholds.get("gpqa_diamond_cot_n_shot"), Some(&0.30), "{}", im.toml);
    assert_eq!(eval.min_accuracy, None);
    // No EVAL_CONCURRENT_REQUESTS: the entry's highest concurrency; another prefix: the defaults.
    let im = import("old-fp8-mi300x-vllm");
    let eval = Recipe::parse(&im.toml, "old").unwrap().eval.unwrap();
    assert_eq!(eval.concurrency, 8, "{}", im.toml);
    assert_eq!(eval.thresholds.get("gsm8k"), Some(&0.90), "{}", im.toml);
    // Without a thresholds file: InferenceX's 0.90 on every exact_match.
    let im = import_text(&std::fs::read_to_string(root().join("benchmarks/single_node/fixed_seq_len/tiny_fp32_cpu_vllm.sh")).unwrap()).unwrap();
    let eval = Recipe::parse(&im.toml, "t").unwrap().eval.unwrap();
    assert_eq!((eval.min_accuracy, eval.thresholds.len()), (Some(0.90), 0), "{}", im.toml);
}

#[test]
fn scenario_filter_and_unknown_scenario() {
    let (_, im) = import_key(&root(), "shapes-fp4-mi355x-vllm", Some("8k1k"), &[], &Settings::default()).unwrap();
    assert_eq!(im.jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(), ["tp8", "tp4-mtp"]);
    let err = import_key(&root(), "shapes-fp4-mi355x-vllm", Some("1k8k"), &[], &Settings::default()).unwrap_err();
    assert!(err.contains("1k1k, 8k1k"), "{err}");
    let err = import_key(&root(), "no-such-key", None, &[], &Settings::default()).unwrap_err();
    assert!(err.contains("no-such-key"), "{err}");
}

#[test]
fn machine_dependent_value_fails_with_its_line() {
    let err = import_key(&root(), "broken-fp8-h200-vllm", None, &[], &Settings::default()).unwrap_err();
    assert!(err.contains("line 5: the output of `nvidia-smi -L` is used"), "{err}");
}

/// Imports a launcher written by the test with the tiny entry's matrix.
fn import_text(script: &str) -> Result<Imported, String> {
    import_text_with(script, &Settings::default())
}

/// The same, with the sandbox's `settings`.
fn import_text_with(script: &str, settings: &Settings) -> Result<Imported, String> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("l.sh"), script).unwrap();
    let yaml = std::fs::read_to_string(root().join("configs/demo-master.yaml")).unwrap();
    let e = read_entry(&yaml, "tiny-fp32-cpu-vllm").unwrap();
    import_with(dir.path(), &|_| Ok(PathBuf::from("l.sh")), &e, None, None, &crate::import::render::CheckoutEvals::default(), &[], settings)
}

#[test]
fn unresolvable_constructs_fail_with_the_line() {
    let err = import_text("#!/bin/bash\nX=1\nprobe-rdma --all\nvllm serve \"$MODEL\"\n").unwrap_err();
    assert!(err.contains("line 3: `probe-rdma` is not a command the importer can run"), "{err}");
    let err = import_text("if [ \"$TP\" = 2 ]; then\n  vllm serve \"$MODEL\"\nfi\n").unwrap_err();
    assert!(err.contains("`vllm serve` never ran"), "{err}");
    let err = import_text("set -e\nN=$(( CONC / 0 ))\nvllm serve \"$MODEL\"\n").unwrap_err();
    assert!(err.contains("line 2: bash (l.sh): ") && err.contains("division by 0"), "{err}");
    // `sleep` is a recorder: the loop spins until the limit; the second point is not run.
    let quick = Settings { point_limit: std::time::Duration::from_secs(1), ..Settings::default() };
    let err = import_text_with("while true; do sleep 1; done\n", &quick).unwrap_err();
    assert!(err.contains("conc 1: the launcher did not finish within 1 s"), "{err}");
    assert!(err.contains("conc 2: not evaluated: an earlier point ran past the launcher's time limit"), "{err}");
    let err = import_text("vllm serve \"$MODEL\" -tp 1\nvllm serve \"$MODEL\" -tp 2\n").unwrap_err();
    assert!(err.contains("ran 2 times with different arguments (lines 1, 2)"), "{err}");
}

#[test]
fn the_sandbox_keeps_files_and_network_out() {
    // No network; writes land in the throwaway /workspace; the checkout is read-only.
    let script = "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && exit 5\necho x > /workspace/ok || exit 6\necho y > \"$(dirname \"$0\")/written\" || exit 7\nvllm serve \"$MODEL\"\n";
    let err = import_text(script).unwrap_err();
    assert!(err.contains("exited with status 7"), "{err}");
    assert!(err.contains("line 3: bash (l.sh): ") && err.contains("Read-only file system"), "{err}");
}

/// The client's options become the recipe's workload settings: the MTP
/// launcher's `--use-chat-template` (1k1k) and `--dsv4` (8k1k) give
/// `chat_random` (the DeepSeek-V4 encoder named as not reproduced), the
/// range ratio and `CONC * 10` prompts carry over, and the written recipe
/// gives them back; a fixed `--num-prompts 64` stays one count across
/// concurrencies.
#[test]
fn client_options_become_workload_settings() {
    use super::client::Prompts;
    use super::job::Bench;
    use crate::protocol::{LengthConvention, Workload};

    let im = import("shapes-fp4-mi355x-vllm");
    let client = |name: &str| match &job(&im, name).bench {
        Bench::Fixed(c) => c.clone(),
        Bench::Agentic(_) => panic!("{name} is a replay"),
    };
    let (short, long, plain) = (client("tp4-mtp-1k1k-conc4"), client("tp4-mtp-8k1k-conc4"), client("tp8-8k1k-conc4"));
    assert_eq!((short.chat, short.dsv4, long.chat, long.dsv4, plain.chat), (true, false, true, true, false));
    assert_eq!((short.range_ratio, short.prompts), (0.8, Prompts::PerConc(10)));
    assert!(im.notes.iter().any(|n| n.contains("job tp4-mtp-8k1k-conc4: client --dsv4")), "{:?}", im.notes);
    let recipe = Recipe::parse(&im.toml, "shapes").unwrap();
    for (name, workload) in [("tp4-mtp-8k1k-conc4", Workload::ChatRandom), ("tp8-8k1k-conc4", Workload::Random)] {
        let c = &recipe.engine_configs(&[name.to_string()], &Sweep::default()).unwrap()[0];
        assert_eq!(c.sweep.workload, workload, "{name}");
        assert_eq!((c.sweep.length_convention, c.sweep.range_ratio, c.sweep.ignore_eos), (LengthConvention::Inferencex, 0.8, true));
        assert_eq!((c.points[0].num_prompts, c.points[0].warmups), (40, 8), "{name}: 10 x conc prompts, 2 x conc warm-ups");
    }
    let old = import("old-fp8-mi300x-vllm");
    let [j] = old.jobs.as_slice() else { panic!("{:?}", old.jobs) };
    assert!(matches!(&j.bench, Bench::Fixed(c) if c.prompts == Prompts::Fixed(64)), "{:?}", j.bench);
}

/// An agentic entry: one job per engine configuration with the replay's
/// settings (`trace` workload, InferenceX's dataset, duration, warm-ups),
/// the DRAM budget from runners.yaml in the offload connector, the matrix
/// TP as `${TP}` also where DP attention runs vLLM with `-tp 1 -dp 8`, and
/// the helper servers and data parallelism named per job.
#[test]
fn agentic_entry_imports_as_trace_replays() {
    use super::job::Bench;
    use crate::protocol::Workload;

    let im = import("relay-fp4-b200-vllm-agentic-mtp");
    let names: Vec<&str> = im.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "tp8-agentic-conc1",
            "tp8-agentic-conc4",
            "tp8-vllm-simple-agentic-conc8",
            "tp4-mooncake-agentic-conc4",
            "tp8-ep8-dpa-vllm-simple-agentic-conc16"
        ]
    );
    let simple = job(&im, "tp8-vllm-simple-agentic-conc8");
    // 1_000_000 MiB x 0.5 x 8/8 GPUs = 524 GB over 8 ranks.
    assert!(simple.engine.args.iter().any(|a| a.contains("\"cpu_bytes_to_use_per_rank\":65500000000")), "{:?}", simple.engine.args);
    assert!(simple.engine.args.iter().any(|a| a.contains("\"rejection_sample_method\":\"synthetic\"")), "synthetic acceptance");
    assert_eq!(simple.engine.env.get("PYTHONHASHSEED").map(String::as_str), Some("42"));
    let Bench::Agentic(r) = &simple.bench else { panic!("{:?}", simple.bench) };
    assert_eq!((r.dataset.as_str(), r.duration_s, r.warmup_requests_per_lane), ("semianalysisai/cc-traces-weka-062126-256k", 3600, 10));
    let dpa = job(&im, "tp8-ep8-dpa-vllm-simple-agentic-conc16");
    assert_eq!(dpa.engine.data_parallel().map(|d| d.size), Some(8));
    let note = |needle: &str| assert!(im.notes.iter().any(|n| n.contains(needle)), "{needle}: {:?}", im.notes);
    note("job tp4-mooncake-agentic-conc4: conc 4: the launcher starts mooncake_master (line 48)");
    note("job tp8-ep8-dpa-vllm-simple-agentic-conc16: conc 16: the launcher starts vllm-router");
    note("job tp8-ep8-dpa-vllm-simple-agentic-conc16: vLLM runs with --data-parallel-size 8");
    let recipe = Recipe::parse(&im.toml, "relay").unwrap();
    let c = &recipe.engine_configs(&[dpa.name.clone()], &Sweep::default()).unwrap()[0];
    assert_eq!(c.tp, Some(8), "the recipe's TP is InferenceX's matrix TP");
    assert!(c.args.windows(2).any(|w| w == ["--data-parallel-size", "8"]) && c.args.windows(2).any(|w| w == ["--tensor-parallel-size", "1"]));
    let Workload::Trace(t) = &c.sweep.workload else { panic!("{:?}", c.sweep.workload) };
    assert_eq!(t.path, Path::new("hf://datasets/semianalysisai/cc-traces-weka-062126-256k"));
    assert_eq!((t.duration_s, t.start_min_ratio, t.start_max_ratio, t.seed), (Some(3600.0), 0.25, 0.75, 42));
    assert!(!c.sweep.request_budget, "the duration ends a replay point");
}

/// Commands that read the machine: `hostname` runs here and its output is
/// recorded; `rocm-smi` (absent here) stops the import with the command and
/// the flag, and a value given with `--machine-fact` picks the branch; a
/// stubbed download into a folder counts the checkpoint as present.
#[test]
fn machine_facts_run_here_or_are_given_and_checkpoints_count_as_present() {
    let script = r#"set -eo pipefail
NODE=$(hostname)
mec=$(rocm-smi --showfw 2>/dev/null | grep MEC | head -n 1 | awk '{print $NF}')
if [[ "$mec" == "" || ${mec:-0} -lt 177 ]]; then export HSA_NO_SCRATCH_RECLAIM=1; fi
ckpt_ok() { [[ -d "$1" && -f "$1/config.json" ]]; }
if ! ckpt_ok /models/tiny; then
    hf download example/tiny --local-dir /models/tiny
    ckpt_ok /models/tiny || { echo "incomplete" >&2; exit 1; }
fi
export NODE_NAME="$NODE"
vllm serve /models/tiny
source "$(dirname "$0")/benchmark_lib.sh"
run_benchmark_serving --model "$MODEL" --port "$PORT" --backend vllm --result-filename r --result-dir /workspace/ --input-len "$ISL" --output-len "$OSL" --random-range-ratio "$RANDOM_RANGE_RATIO" \
    --num-prompts "$((CONC * 10))" --max-concurrency "$CONC"
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("l.sh"), script).unwrap();
    let yaml = std::fs::read_to_string(root().join("configs/demo-master.yaml")).unwrap();
    let e = read_entry(&yaml, "tiny-fp32-cpu-vllm").unwrap();
    let with = |facts: &[&str]| {
        let facts: Vec<String> = facts.iter().map(|f| f.to_string()).collect();
        import_with(dir.path(), &|_| Ok(PathBuf::from("l.sh")), &e, None, None, &crate::import::render::CheckoutEvals::default(), &facts, &Settings::default())
    };
    let err = with(&[]).unwrap_err();
    assert!(err.contains("l.sh line 3: the output of `rocm-smi --showfw` is used"), "{err}");
    assert!(err.contains("--machine-fact 'rocm-smi --showfw=OUTPUT'"), "{err}");
    let host = std::process::Command::new("hostname").output().unwrap();
    let host = String::from_utf8_lossy(&host.stdout).trim().to_string();
    let old = with(&["rocm-smi --showfw=GPU[0] : MEC firmware version: 170"]).unwrap();
    let j = &old.jobs[0];
    assert_eq!(j.engine.env.get("HSA_NO_SCRATCH_RECLAIM").map(String::as_str), Some("1"), "{:?}", j.engine.env);
    assert_eq!(j.engine.env.get("NODE_NAME"), Some(&host), "hostname ran on this machine");
    let notes = old.notes.join("\n");
    assert!(notes.contains("machine fact: `hostname` (line 2)") && notes.contains("run on the machine that imported"), "{notes}");
    assert!(notes.contains("machine fact: `rocm-smi --showfw` (line 3) read as \"GPU[0] : MEC firmware version: 170\" (given with --machine-fact)"), "{notes}");
    assert!(notes.contains("the checkpoint at /models/tiny is counted as present"), "{notes}");
    assert!(old.toml.contains("machine fact: `rocm-smi --showfw`"), "the recipe records the fact");
    let new = with(&["rocm-smi --showfw=GPU[0] : MEC firmware version: 180"]).unwrap();
    assert!(!new.jobs[0].engine.env.contains_key("HSA_NO_SCRATCH_RECLAIM"), "{:?}", new.jobs[0].engine.env);
    let unused = with(&["rocm-smi --showfw=MEC 180", "nvidia-smi -L=GPU 0"]).unwrap();
    assert!(unused.notes.iter().any(|n| n.contains("\"nvidia-smi -L=GPU 0\": no launcher read")), "{:?}", unused.notes);
}

/// Files of the machine are facts too: a launcher that picks its RDMA rail
/// from `/sys/class/infiniband/DEV/ports/1/state` (the loop shape of the
/// Kimi-K3 B300 agentic launcher, written here in our words) stops at the
/// first rail whose state is unknown, naming the path and the flag (this
/// machine has no /sys/class/infiniband); given states, the loop runs as on
/// that node, only the files it read are asked for, and the recipe records
/// each with where it came from.
#[test]
fn machine_files_are_given_one_at_a_time_in_the_order_read() {
    let script = r#"set -eo pipefail
RAIL=""
for d in mlx5_0 mlx5_1 mlx5_2 mlx5_3; do
    if grep -q ACTIVE "/sys/class/infiniband/$d/ports/1/state" 2>/dev/null; then
        RAIL="$d"
        break
    fi
done
[ -n "$RAIL" ] || { echo "no active rail on $(hostname)" >&2; exit 1; }
export RDMA_RAIL="$RAIL"
vllm serve "$MODEL"
source "$(dirname "$0")/benchmark_lib.sh"
run_benchmark_serving --model "$MODEL" --port "$PORT" --backend vllm --result-filename r --result-dir /workspace/ --input-len "$ISL" --output-len "$OSL" --random-range-ratio "$RANDOM_RANGE_RATIO" \
    --num-prompts "$((CONC * 10))" --max-concurrency "$CONC"
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("l.sh"), script).unwrap();
    let yaml = std::fs::read_to_string(root().join("configs/demo-master.yaml")).unwrap();
    let e = read_entry(&yaml, "tiny-fp32-cpu-vllm").unwrap();
    let with = |facts: &[&str]| {
        let facts: Vec<String> = facts.iter().map(|f| f.to_string()).collect();
        import_with(dir.path(), &|_| Ok(PathBuf::from("l.sh")), &e, None, None, &crate::import::render::CheckoutEvals::default(), &facts, &Settings::default())
    };
    let state = |d: &str| format!("/sys/class/infiniband/{d}/ports/1/state");
    let err = with(&[]).unwrap_err();
    assert!(err.contains(&format!("l.sh line 4: the launcher reads the file {}", state("mlx5_0"))), "{err}");
    assert!(err.contains("does not exist on this machine"), "{err}");
    assert!(err.contains(&format!("--machine-fact '{}=CONTENT'", state("mlx5_0"))), "{err}");
    assert!(!err.contains("mlx5_1"), "only the first file the launcher reads is asked for: {err}");
    // mlx5_0 down: the launcher goes on to mlx5_1, and only that is asked for next.
    let down = format!("{}=1: DOWN", state("mlx5_0"));
    let err = with(&[&down]).unwrap_err();
    assert!(err.contains(&state("mlx5_1")) && !err.contains(&state("mlx5_2")), "{err}");
    let up = format!("{}=4: ACTIVE", state("mlx5_1"));
    let unused = format!("{}=4: ACTIVE", state("mlx5_3"));
    let ok = with(&[&down, &up, &unused]).unwrap();
    let j = &ok.jobs[0];
    assert_eq!(j.engine.env.get("RDMA_RAIL").map(String::as_str), Some("mlx5_1"), "{:?}", j.engine.env);
    let notes = ok.notes.join("\n");
    assert!(notes.contains(&format!("machine fact: `{}` (line 4) read as \"1: DOWN\" (given with --machine-fact)", state("mlx5_0"))), "{notes}");
    assert!(notes.contains(&format!("machine fact: `{}` (line 4) read as \"4: ACTIVE\" (given with --machine-fact)", state("mlx5_1"))), "{notes}");
    assert!(notes.contains(&format!("--machine-fact \"{unused}\": no launcher read")), "{notes}");
    assert!(ok.toml.contains(&state("mlx5_1")), "the recipe records the file fact");
}

