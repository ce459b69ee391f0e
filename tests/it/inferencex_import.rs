//! InferenceX import through the CLI, on the fixture checkout
//! (tests/fixtures/inferencex-checkout): `import`, `recipe show/check` and
//! `run` with `--inferencex-checkout DIR --key KEY`, one end-to-end run on
//! the CPU engine (a fixed-length and an agentic entry), the recipe checks
//! found while trying real launchers, and a data-parallel recipe that checks.

use crate::util::{engine_lock, enginebench, read_json, repo, text};

fn checkout() -> String {
    repo().join("tests/fixtures/inferencex-checkout").to_string_lossy().into_owned()
}

#[test]
fn import_writes_a_recipe_with_one_variant_per_engine_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("shapes.toml");
    let ix = checkout();
    let out = enginebench(&["import", "inferencex", "--inferencex-checkout", &ix, "--key", "shapes-fp4-mi355x-vllm", "-o", f.to_str().unwrap()]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("job tp8-ep8-dpa-1k1k-conc256: 1 point(s), vllm serve at line 39"), "{log}");
    let show = enginebench(&["recipe", "show", f.to_str().unwrap(), "--variant", "tp8-ep8-1k1k-conc16", "--no-knobs"]);
    let shown = text(&show);
    assert!(show.status.success(), "{shown}");
    assert!(shown.contains("--tensor-parallel-size 8 --enable-expert-parallel --max-model-len 2304 --max-num-seqs 32"), "{shown}");
    assert!(shown.contains("VLLM_ROCM_USE_AITER_MOE=1"), "{shown}");
    // The same straight from the checkout, with the plan printed.
    let show = enginebench(&["recipe", "show", "--inferencex-checkout", &ix, "--key", "shapes-fp4-mi355x-vllm", "--scenario", "8k1k", "--no-knobs"]);
    let shown = text(&show);
    assert!(show.status.success(), "{shown}");
    assert!(shown.contains("tp4-mtp (variant): benchmarks/single_node/fixed_seq_len/shapes_fp4_mi355x_vllm_mtp.sh line 19"), "{shown}");
    assert!(shown.contains(r#""num_speculative_tokens": 2"#), "{shown}");
}

#[test]
fn an_unresolvable_launcher_is_exit_2_with_its_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("broken.toml");
    let out = enginebench(&["import", "inferencex", "--inferencex-checkout", &checkout(), "--key", "broken-fp8-h200-vllm", "-o", f.to_str().unwrap()]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("line 5: the output of `nvidia-smi -L` is used"), "{log}");
    assert!(!f.exists());
    let out = enginebench(&["run", "--inferencex-checkout", &checkout(), "--key", "no-such-entry"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("\"no-such-entry\""), "{}", text(&out));
}

/// The background-server shape of InferenceX's MiniMax-M3 agentic launchers
/// (the server started with `&` right after the exports, an EXIT trap that
/// ends in `exit`) imports to the same bytes every time, with every
/// variable of the engine's environment, while other processes load the CPUs.
#[test]
fn an_agentic_import_is_the_same_bytes_every_time_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let ix = checkout();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                x
            })
        })
        .collect();
    let started = std::time::Instant::now();
    // Four imports at a time (each evaluates three points in its own sandboxes).
    let results: Vec<Result<String, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let (dir, ix) = (dir.path(), &ix);
                s.spawn(move || {
                    (0..5)
                        .map(|k| {
                            let f = dir.join(format!("bg-{w}-{k}.toml"));
                            let out = enginebench(&[
                                "import", "inferencex", "--inferencex-checkout", ix, "--key", "bgserve-fp8-mi300x-vllm-agentic-mtp", "-o", f.to_str().unwrap(),
                            ]);
                            if out.status.success() { Ok(std::fs::read_to_string(&f).unwrap()) } else { Err(text(&out)) }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let failures: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    let recipes: std::collections::BTreeSet<&String> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.into_iter().for_each(|t| drop(t.join()));
    eprintln!("20 imports under load: {:.1} s", started.elapsed().as_secs_f64());
    assert!(failures.is_empty(), "{} of 20 imports failed, e.g.:\n{}", failures.len(), failures[0]);
    assert_eq!(recipes.len(), 1, "{} different recipes from one checkout and key", recipes.len());
    let recipe = *recipes.iter().next().unwrap();
    assert!(recipe.contains("\"VLLM_ROCM_USE_AITER\" = \"1\"") && recipe.contains("\"GPU_MAX_HW_QUEUES\" = \"2\""), "{recipe}");
    assert!(!recipe.contains("env_unset"), "no point lost its environment:\n{recipe}");
}

#[test]
fn recipe_check_names_missing_models_removed_variables_and_unknown_flags() {
    let dir = tempfile::tempdir().unwrap();
    let base = "[sweep]\nisl = 32\nosl = 8\nconc = [1]\n";
    let missing = dir.path().join("missing.toml");
    std::fs::write(&missing, format!("name = \"m\"\nmodel = \"/nonexistent/model\"\nhardware = \"cpu\"\n{base}")).unwrap();
    let newer = dir.path().join("newer.toml");
    std::fs::write(
        &newer,
        format!(
            "name = \"n\"\nmodel = \"bundled:smollm2-135m-instruct\"\nimage = \"example/vllm:nightly\"\nhardware = \"cpu\"\n\
             [env]\nVLLM_ATTENTION_BACKEND = \"TRITON_ATTN\"\n[engine]\nargs = [\"--dtype\", \"float32\", \"--future-flag\", \"x\"]\n{base}"
        ),
    )
    .unwrap();
    let out = enginebench(&["recipe", "check", newer.to_str().unwrap()]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(0), "warnings only:\n{log}");
    assert!(log.contains("warning: --future-flag x not known to this vLLM (0.32.0"), "{log}");
    assert!(log.contains("the recipe pins image example/vllm:nightly"), "{log}");
    assert!(log.contains("VLLM_ATTENTION_BACKEND was removed from vLLM: use the flag --attention-backend"), "{log}");
    let out = enginebench(&["recipe", "check", missing.to_str().unwrap()]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("model /nonexistent/model: no such local path"), "{log}");
    let strict = std::fs::read_to_string(&newer).unwrap().replace("name = \"n\"", "name = \"n\"\nstrict = true");
    std::fs::write(&newer, strict).unwrap();
    let out = enginebench(&["recipe", "check", newer.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "strict: an unknown flag is an error\n{}", text(&out));
}

/// `run --inferencex-checkout DIR --key K` end to end on the CPU engine: the
/// fixture entry's launcher on the bundled model, InferenceX's client
/// settings (10 x conc prompts), two concurrencies at ISL/OSL 128/8 (chat-shaped prompts: the
/// tokenizer's chat template takes part of the 128).
#[test]
fn run_from_a_checkout_end_to_end() {
    let _engine = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let out = enginebench(&[
        "run", "--inferencex-checkout", &checkout(), "--key", "tiny-fp32-cpu-vllm", "--no-eval",
        "-o", out_dir.to_str().unwrap(),
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("InferenceX entry tiny-fp32-cpu-vllm"), "the plan is shown:\n{log}");
    assert!(log.contains("vllm serve bundled:smollm2-135m-instruct --tensor-parallel-size 1 --dtype float32 --enforce-eager --max-model-len 392"), "{log}");
    let r = read_json(&out_dir.join("result.json"));
    let job = &r["jobs"][0];
    assert_eq!(job["status"], "ok", "{job}");
    let points = job["points"].as_array().unwrap();
    assert_eq!(points.iter().map(|p| p["conc"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2]);
    assert!(points.iter().all(|p| p["num_prompts"].as_u64() == Some(10 * p["conc"].as_u64().unwrap())), "{points:?}");
}

/// An agentic entry from the checkout on the CPU engine: the launcher's
/// replay settings become a `trace` recipe naming InferenceX's dataset by
/// address; with the fixture trace standing for it (`--trace-file`) and a
/// few seconds for InferenceX's hour, one replay point runs (conc 2, the
/// duration ends it).
#[test]
fn run_an_agentic_entry_from_a_checkout() {
    let key = "tinyagent-fp32-cpu-vllm-agentic";
    let show = enginebench(&["recipe", "show", "--inferencex-checkout", &checkout(), "--key", key, "--no-knobs"]);
    assert!(text(&show).contains("hf://datasets/semianalysisai/cc-traces-weka-062126-256k"), "{}", text(&show));

    let _engine = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let trace = repo().join("tests/fixtures/traces/agentx_e2e.jsonl");
    let started = std::time::Instant::now();
    let out = enginebench(&[
        "run", "--inferencex-checkout", &checkout(), "--key", key, "--no-eval", "--trace-file", trace.to_str().unwrap(),
        "--duration", "3", "-o", out_dir.to_str().unwrap(),
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    eprintln!("agentic checkout run: {:.1} s", started.elapsed().as_secs_f64());
    assert!(log.contains("differs in-process from InferenceX's HTTP replay"), "the notes are shown:\n{log}");
    let r = read_json(&out_dir.join("result.json"));
    let job = &r["jobs"][0];
    assert_eq!(job["status"], "ok", "{job}");
    let p = &job["points"][0];
    assert_eq!((p["conc"].as_u64(), p["workload"]["kind"].as_str()), (Some(2), Some("trace")), "{p}");
    let w = &p["workload"];
    assert_eq!((w["seed"].as_u64(), w["warmup_requests_per_lane"].as_u64(), w["start_min_ratio"].as_f64()), (Some(42), Some(1), Some(0.25)), "{w}");
    assert!(w.get("max_requests").is_none_or(|m| m.is_null()), "the duration, not a request count, ends the point: {w}");
    assert!(p["completed"].as_u64() > Some(0), "{p}");
}

/// A data-parallel recipe passes `recipe check` (DP runs, one worker per
/// rank: tests/it/dp_e2e.rs runs it); an engine start past
/// `--start-timeout` is a failed job, not a wait.
#[test]
fn a_data_parallel_recipe_checks_and_a_slow_start_ends_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let body = crate::util::bundled_recipe_head("dp2", 512, "").replace("\"--enforce-eager\",", "\"--enforce-eager\", \"-dp\", \"2\",")
        + "[sweep]\nisl = 32\nosl = 8\nconc = [1]\nnum_prompts = 2\n";
    let recipe = crate::util::write_recipe(dir.path(), "dp2", &body);
    let out = enginebench(&["recipe", "check", &recipe]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let _engine = engine_lock();

    // A start that does not finish within --start-timeout: killed, recorded as a failed job.
    let ok = crate::util::write_recipe(dir.path(), "dp1", &body.replace("\"-dp\", \"2\", ", ""));
    let out = enginebench(&["run", &ok, "--no-eval", "--start-timeout", "1", "-o", dir.path().join("slow").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r = read_json(&dir.path().join("slow/result.json"));
    let job = &r["jobs"][0];
    assert_eq!(job["status"], "failed", "{job}");
    assert!(job["error"]["message"].as_str().unwrap().contains("did not start within --start-timeout 1 s"), "{job}");
}

/// InferenceX's multi-node aggregated recipes (srt-slurm YAML under
/// benchmarks/multi_node/srt-slurm-recipes/vllm/ of the fixture checkout):
/// named by `name:` or path, the vllm serve keys as flags through vLLM's
/// parser (`recipe check`), the environment, `resources` as `[layout]`, the
/// concurrencies of the master-config entry that names the file, Dynamo's
/// frontend and settings in the notes; a multi-node master-config entry
/// names its recipes.
#[test]
fn srt_slurm_aggregated_recipes_import_with_their_layout_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let ix = checkout();
    let f = dir.path().join("dep8.toml");
    let out = enginebench(&["import", "inferencex", "--inferencex-checkout", &ix, "--key", "demo-moe-vllm-agg-dep8-agentic", "-o", f.to_str().unwrap()]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let toml = std::fs::read_to_string(&f).unwrap();
    assert!(toml.contains("\n[layout]\nnodes = 2\ngpus_per_node = 4\nworkers = 1\n"), "{toml}");
    assert!(toml.contains("model = \"example/Demo-MoE-FP4\"") && toml.contains("hardware = \"gb200\""), "{toml}");
    assert!(toml.contains("\"--data-parallel-size\", \"8\", \"--enable-expert-parallel\""), "{toml}");
    assert!(!toml.contains("--data-parallel-rpc-port\"") && !toml.contains("\"--enforce-eager\""), "derived flags and false switches are not flags: {toml}");
    assert!(toml.contains("\"DEMO_KNOB\" = \"7\"") && toml.contains("\"NCCL_CUMEM_ENABLE\" = \"1\""), "{toml}");
    assert!(toml.starts_with("# Imported by `enginebench import inferencex` from the srt-slurm recipe demo-moe-vllm-agg-dep8-agentic"), "{toml}");
    assert!(toml.contains("conc = [4, 16]") && toml.contains("hf://datasets/semianalysisai/cc-traces-weka-062126"), "{toml}");
    assert!(toml.contains("tree_idle_cap_s = 120"), "the benchmark env's AIPerf settings: {toml}");
    for note in ["frontend dynamo", "etcd and NATS", "dyn-reasoning-parser", "--data-parallel-rpc-port 13345", "--enforce-eager: false"] {
        assert!(toml.contains(note), "note {note:?} missing: {toml}");
    }
    // By path, the spanning TP8 one and the sa-bench one.
    let mut files = vec![f.to_str().unwrap().to_string()];
    for (i, (key, want)) in [
        ("benchmarks/multi_node/srt-slurm-recipes/vllm/demo-moe/agentic/agg-tp8-agentic.yaml", "conc = [1, 2]"),
        ("demo-moe/8k1k/agg-tp4-sabench.yaml", "isl_osl = [[8192, 1024]]"),
    ]
    .into_iter()
    .enumerate()
    {
        let f = dir.path().join(format!("by-path-{i}.toml"));
        let out = enginebench(&["import", "inferencex", "--inferencex-checkout", &ix, "--key", key, "-o", f.to_str().unwrap()]);
        assert!(out.status.success(), "{key}: {}", text(&out));
        let toml = std::fs::read_to_string(&f).unwrap();
        assert!(toml.contains(want), "{key}: {toml}");
        files.push(f.to_str().unwrap().to_string());
    }
    // vLLM's parser takes every imported flag list (one check of the three).
    let mut args = vec!["recipe", "check"];
    args.extend(files.iter().map(String::as_str));
    let check = enginebench(&args);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    // The multi-node master-config entry names its srt-slurm recipes.
    let out = enginebench(&["import", "inferencex", "--inferencex-checkout", &ix, "--key", "demo-moe-fp4-gb200-dynamo-vllm-agentic"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("srt-slurm-recipes/vllm/demo-moe/agentic/agg-tp8-agentic.yaml"), "{}", text(&out));
}

/// InferenceX's srt-slurm prefill/decode recipes (issue 44), on the fixture
/// checkout: a 1P1D file by `name:` and a 2P3D one by path become P/D
/// recipes (each side's flags, env and layout; what both share in
/// `[engine]` / `[env]`; the router, node packing, the Mooncake store,
/// Dynamo's keys and a recipe's engine id in the notes) that pass `recipe
/// check` (both sides through vLLM's parser, the P/D checks); a file whose
/// sides disagree on the KV block size is refused with exit 2 naming the
/// file and the flag.
#[test]
fn srt_slurm_pd_recipes_import_with_their_roles_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let ix = checkout();
    let one = dir.path().join("1p1d.toml");
    let out = enginebench(&["import", "inferencex", "--inferencex-checkout", &ix, "--key", "demo-moe-vllm-disagg-1p1d", "-o", one.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let toml = std::fs::read_to_string(&one).unwrap();
    let recipe: toml::Table = toml::from_str(&toml).unwrap();
    let args = |t: &toml::Value| t["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(
        args(&recipe["engine"]),
        ["--block-size", "64", "--kv-cache-dtype", "fp8", "--served-model-name", "example/Demo-MoE-FP4", "--tensor-parallel-size", "4"],
        "the keys both sides give alike: {toml}"
    );
    let nixl = r#"{"kv_connector":"NixlConnector","kv_role":"kv_both"}"#;
    let (p, d) = (&recipe["roles"]["prefill"], &recipe["roles"]["decode"]);
    assert_eq!(args(p), ["--enforce-eager", "--kv-transfer-config", nixl, "--max-num-batched-tokens", "16384"], "{toml}");
    assert_eq!(args(d), ["--kv-transfer-config", nixl, "--max-num-batched-tokens", "512", "--max-num-seqs", "256"], "{toml}");
    assert_eq!(recipe["env"]["VLLM_ENGINE_READY_TIMEOUT_S"].as_str(), Some("3600"), "{toml}");
    assert_eq!(p["env"]["DEMO_PREFILL_KNOB"].as_str(), Some("1"), "{toml}");
    assert!(d.get("env").is_none(), "{toml}");
    for side in [p, d] {
        assert_eq!(side["layout"].to_string(), "{ gpus_per_node = 4, nodes = 1, workers = 1 }", "{toml}");
    }
    assert!(recipe.get("layout").is_none() && toml.contains("conc = [8, 32]"), "{toml}");
    assert!(toml.contains("frontend dynamo with {\"router-mode\":\"round-robin\"}") && toml.contains("between the sides the harness is the proxy"), "{toml}");

    // xPyD by path: DP prefill workers and TP decode workers packed on
    // nodes, the decode keys merged from the prefill's (a YAML anchor).
    let two = dir.path().join("2p3d.toml");
    let key = "demo-moe/disagg/disagg-2p3d.yaml";
    let out = enginebench(&["import", "inferencex", "--inferencex-checkout", &ix, "--key", key, "-o", two.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let toml = std::fs::read_to_string(&two).unwrap();
    let recipe: toml::Table = toml::from_str(&toml).unwrap();
    let (p, d) = (&recipe["roles"]["prefill"], &recipe["roles"]["decode"]);
    assert_eq!(args(&recipe["engine"]), ["--block-size", "64", "--served-model-name", "example/Demo-MoE-FP4"], "{toml}");
    assert_eq!(&args(p)[..3], ["--data-parallel-size", "4", "--enable-expert-parallel"], "{toml}");
    let (pa, da) = (args(p), args(d));
    assert!(pa.ends_with(&["--max-num-batched-tokens".into(), "16384".into(), "--tensor-parallel-size".into(), "1".into()]), "{toml}");
    assert!(da.ends_with(&["--max-num-batched-tokens".into(), "256".into(), "--tensor-parallel-size".into(), "4".into()]), "{toml}");
    assert!(!da.contains(&"--enable-expert-parallel".to_string()) && da[..2] == ["--data-parallel-size", "1"], "{toml}");
    assert_eq!(p["layout"].to_string(), "{ gpus_per_node = 8, nodes = 1, workers = 2 }", "{toml}");
    assert_eq!(d["layout"].to_string(), "{ gpus_per_node = 8, nodes = 1, workers = 3 }", "{toml}");
    assert_eq!((recipe["env"]["PYTHONHASHSEED"].as_str(), recipe["env"]["UCX_TLS"].as_str()), (Some("0"), Some("rc,cuda_copy")), "{toml}");
    assert_eq!((p["env"]["DEMO_SIDE"].as_str(), d["env"]["DEMO_SIDE"].as_str()), (Some("prefill"), Some("decode")), "{toml}");
    for note in [
        "both sides: dyn-reasoning-parser: demo: a Dynamo worker setting",
        "both sides: --data-parallel-rpc-port 13345",
        "resources.prefill_nodes 1 for 2 prefill worker(s)",
        "resources.decode_nodes 2 for 3 decode worker(s)",
        "[roles.decode] --kv-transfer-config engine_id \"decode-fixed\"",
        "[roles.prefill] --kv-transfer-config is a MultiConnector of NixlConnector + MooncakeStoreConnector",
        "[roles.decode] --enable-expert-parallel: false in the recipe",
        "(4 frontends behind nginx)",
    ] {
        assert!(toml.contains(note), "note {note:?} missing: {toml}");
    }
    // Both sides of both through vLLM's serve parser and the P/D checks.
    let check = enginebench(&["recipe", "check", one.to_str().unwrap(), two.to_str().unwrap()]);
    let log = text(&check);
    assert_eq!(check.status.code(), Some(0), "{log}");
    assert_eq!(log.matches("base prefill [ok]").count() + log.matches("base decode [ok]").count(), 4, "{log}");

    // Sides that disagree on the KV block size: refused, nothing written.
    let bad = dir.path().join("bad.toml");
    let out = enginebench(&["import", "inferencex", "--inferencex-checkout", &ix, "--key", "demo-moe-vllm-disagg-1p1d-bad-block", "-o", bad.to_str().unwrap()]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("disagg/disagg-1p1d-bad-block.yaml") && log.contains("prefill has --block-size 64 but decode has 128"), "{log}");
    assert!(!bad.exists());
}

/// A CPU srt-slurm recipe (the tiny MoE as a DP group over 2 "nodes")
/// runs straight from the checkout on the CPU engine, through the
/// multi-node code path.
#[test]
fn a_cpu_srt_slurm_recipe_runs_from_the_checkout_over_two_nodes() {
    let _engine = engine_lock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = enginebench(&[
        "run", "--inferencex-checkout", &checkout(), "--key", "tiny-moe-vllm-agg-dep2-2node-cpu", "--no-eval", "--start-timeout", "300",
        "--point-timeout", "120", "--num-prompts", "3", "-o", out.to_str().unwrap(),
    ]);
    let log = text(&o);
    assert_eq!(o.status.code(), Some(0), "{log}");
    let job = &read_json(&out.join("result.json"))["jobs"][0];
    assert_eq!((job["engine"]["nodes"].as_u64(), job["engine"]["data_parallel_size"].as_u64()), (Some(2), Some(2)), "{}", job["engine"]);
    assert_eq!(job["points"][0]["completed"], 3, "{}", job["points"][0]);
}
