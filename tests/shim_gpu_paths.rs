//! The shim's GPU-only paths, run for real in the set-up venv's Python on
//! this CPU machine, with only the hardware faked: the traces vLLM's
//! workers would write (named as vLLM 0.32 and torch name them), the
//! engine arguments of a TP > 1 or DP > 1 engine (parsed and configured by
//! the real vLLM, never built).

mod common;

use std::process::Command;

/// Runs `script` in the venv's Python with the shim importable; returns stdout.
fn shim_python(script: &str) -> String {
    let py = common::install().join("venv/bin/python3");
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .env("PYTHONPATH", common::repo().join("python-shim"))
        .output()
        .expect("python runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn rank_traces_of_a_tp4_window_are_placed_and_rank_0_is_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let ranks = dir.path().join("vllm-profiler");
    std::fs::create_dir(&ranks).unwrap();
    // What four workers write for the window "enginebench-7-1" (vLLM's
    // `{prefix}_{get_worker_rank_suffix}` + torch's `.{time_ns}.pt.trace.json.gz`),
    // an earlier window's trace and vLLM's op-table text file.
    for r in 0..4 {
        std::fs::write(ranks.join(format!("enginebench-7-1_dp0_pp0_tp{r}_dcp0_ep0_rank{r}.171000000{r}.pt.trace.json.gz")), format!("rank{r}")).unwrap();
    }
    std::fs::write(ranks.join("enginebench-7-10_dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz"), "other window").unwrap();
    std::fs::write(ranks.join("enginebench-7-1_dp0_pp0_tp0_dcp0_ep0_rank0.profiler_out.txt"), "table").unwrap();
    let target = dir.path().join("trace-base-isl32-osl16-conc2.json.gz");
    let out = shim_python(&format!(
        "from enginebench_shim.engine import _place_rank_traces\nprint('\\n'.join(_place_rank_traces({:?}, 'enginebench-7-1', {:?})))",
        ranks.to_str().unwrap(),
        target.to_str().unwrap()
    ));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "rank0");
    let others: Vec<&str> = out.lines().collect();
    assert_eq!(others.len(), 3, "{out}");
    for (i, p) in others.iter().enumerate() {
        let r = i + 1;
        assert!(p.ends_with(&format!("trace-base-isl32-osl16-conc2.rank{r}.json.gz")), "{p}");
        assert_eq!(std::fs::read_to_string(p).unwrap(), format!("rank{r}"));
    }
    assert!(ranks.join("enginebench-7-10_dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz").exists(), "another window's trace stays");

    // A window whose workers wrote nothing (vLLM only logs a failed stop) is an error.
    let script = format!(
        "from enginebench_shim.engine import _place_rank_traces\ntry:\n    _place_rank_traces({:?}, 'enginebench-7-2', {:?})\nexcept RuntimeError as e:\n    print(e)",
        ranks.to_str().unwrap(),
        target.to_str().unwrap()
    );
    assert!(shim_python(&script).contains("wrote no rank-0 trace for window enginebench-7-2"));
}

#[test]
fn profile_of_a_tp2_engine_configures_vllms_worker_profiler() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::install().join("models/smollm2-135m-instruct");
    let script = format!(
        r#"
from enginebench_shim import engine as e
from enginebench_shim import compat
args = compat.get("EngineArgs").from_cli_args(e.parse_serve_args([{model:?}, "-tp", "2", "--distributed-executor-backend", "mp"]))
kind = e._use_worker_profiler(args, {dir:?})
pc = args.profiler_config
print(kind, pc.profiler, pc.torch_profiler_dir, list(pc.torch_profiler_activities), pc.torch_profiler_with_stack, pc.torch_profiler_dump_cuda_time_total)
# The recipe's own --profiler-config is refused: --profile owns it.
args = compat.get("EngineArgs").from_cli_args(e.parse_serve_args([{model:?}, "--profiler-config.profiler=torch", "--profiler-config.torch_profiler_dir=/tmp/x"]))
try:
    e._use_worker_profiler(args, {dir:?})
except e.FlagError as err:
    print("refused:", err)
# -dp 2 in-process would wait for peers forever: bad input.
args = compat.get("EngineArgs").from_cli_args(e.parse_serve_args([{model:?}, "-dp", "2"]))
try:
    e._refuse_in_process_data_parallel(args)
except e.FlagError as err:
    print("dp:", err)
"#,
        model = model.to_str().unwrap(),
        dir = dir.path().join("vllm-profiler").to_str().unwrap(),
    );
    let out = shim_python(&script);
    let first = out.lines().next().unwrap_or_default();
    let want = format!("vllm torch {} ['CPU'] False False", dir.path().join("vllm-profiler").display());
    assert_eq!(first, want, "{out}");
    assert!(out.contains("refused: --profile configures vLLM's --profiler-config itself"), "{out}");
    assert!(out.contains("dp: --data-parallel-size 2: enginebench runs one in-process engine"), "{out}");
}
