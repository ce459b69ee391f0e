//! The shim's GPU-only paths, run for real in the set-up venv's Python on
//! this CPU machine, with only the hardware faked: the traces vLLM's
//! workers would write (named as vLLM 0.32 and torch name them), the
//! engine arguments of a TP > 1 or DP > 1 engine (parsed and configured by
//! the real vLLM, never built).

use std::process::Command;

/// Runs `script` in the venv's Python with the shim importable; returns stdout.
fn shim_python(script: &str) -> String {
    let py = crate::util::install().join("venv/bin/python3");
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .env("PYTHONPATH", crate::util::repo().join("python-shim"))
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
    let model = crate::util::install().join("models/smollm2-135m-instruct");
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
# -dp 2 reaching one in-process engine (a --config file the plan did not
# read) would wait for peers forever: bad input.
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
    assert!(out.contains("dp: --data-parallel-size 2: data parallelism (DP size 2) reached one in-process engine"), "{out}");
}

/// The engine core's batch queue under async scheduling (vLLM 0.32's
/// default on GPU; vllm/v1/engine/core.py:698-812), faked around the real
/// shim: a step schedules batch k and returns batch k-1's outputs, the
/// first step after idle returns nothing and records no SchedulerStats.
/// The shim must give each step the counts of the batch behind its
/// outputs, nothing to an empty step, and never repeat a previous step's
/// prefix-cache counts.
const ASYNC_STEPS: &str = r#"
import types
from enginebench_shim import engine as E
from enginebench_shim import steppath

class Cached:
    def __init__(self, ids, outs):
        self.req_ids, self.num_output_tokens = ids, outs
    def is_context_phase(self, rid):
        return rid in self.req_ids and self.num_output_tokens[self.req_ids.index(rid)] == 0

class Scheduler:
    """Requests (prompt P, max_tokens M); like vLLM's async scheduler it
    counts tokens in flight as output placeholders."""
    def __init__(self):
        self.reqs = {}
    def add(self, rid, prompt, max_tokens):
        self.reqs[rid] = {"P": prompt, "M": max_tokens, "out": 0, "ph": 0, "new": True}
    def has_requests(self):
        return any(r["out"] + r["ph"] < r["M"] for r in self.reqs.values())
    def schedule(self):
        new, cached_ids, cached_outs, nst = [], [], [], {}
        for rid, r in self.reqs.items():
            if r["out"] + r["ph"] >= r["M"]:
                continue
            if r["new"]:
                new.append(types.SimpleNamespace(req_id=rid)); nst[rid] = r["P"]; r["new"] = False
            else:
                cached_ids.append(rid); cached_outs.append(r["out"] + r["ph"]); nst[rid] = 1
            r["ph"] += 1
        return types.SimpleNamespace(scheduled_new_reqs=new, scheduled_cached_reqs=Cached(cached_ids, cached_outs),
                                     num_scheduled_tokens=nst, total_num_scheduled_tokens=sum(nst.values()),
                                     scheduled_encoder_input_stats=None)
    def update_from_output(self, so, model_output):
        outs = []
        for rid in so.num_scheduled_tokens:
            r = self.reqs[rid]; r["out"] += 1; r["ph"] -= 1
            outs.append(types.SimpleNamespace(request_id=rid, outputs=[types.SimpleNamespace(token_ids=[5])],
                                              finished=r["out"] >= r["M"], metrics=None, num_cached_tokens=0))
        for rid in [k for k, r in self.reqs.items() if r["out"] >= r["M"]]:
            del self.reqs[rid]
        return outs, sum(so.num_scheduled_tokens[n.req_id] for n in so.scheduled_new_reqs)

class LLMEngine:
    """step() as step_with_batch_queue with a queue of 2."""
    def __init__(self, logger):
        self.scheduler = Scheduler()
        self.engine_core = types.SimpleNamespace(engine_core=types.SimpleNamespace(scheduler=self.scheduler))
        self.queue, self.logger = [], logger
    def step(self):
        s = self.scheduler
        if s.has_requests():
            self.queue.insert(0, s.schedule())
            if len(self.queue) < 2:
                return []
        if not self.queue:
            return []
        outs, prompt_tokens = s.update_from_output(self.queue.pop(), None)
        stats = types.SimpleNamespace(num_running_reqs=len(s.reqs), num_waiting_reqs=0, kv_cache_usage=0.25,
                                      prefix_cache_stats=types.SimpleNamespace(queries=prompt_tokens, hits=prompt_tokens // 2),
                                      connector_prefix_cache_stats=None, spec_decoding_stats=None)
        self.logger.record(stats, None)
        return outs

eng = E.Engine.__new__(E.Engine)
eng._sink = [None, 0, None]
eng.engine = LLMEngine(E._stat_logger_class(eng._sink)(None))
eng._scheduled, eng._last_stats = [], None
eng.scheduler_details = eng._wrap_scheduler()
eng.num_speculative_tokens, eng._zero_spec = None, (0, 0, 0, [])
eng._record_ids, eng.crosscheck, eng._text_rids = False, True, set()
eng._hang_after, eng._steps = None, 0
eng._TokensPrompt = None
eng._path = steppath.EnginePath(eng)    # the fake has no engine core: vLLM's engine path

def step(label):
    _core, deltas, _texts, stats, *_ = eng.step()
    p_r, p_t, d_r, d_t, running, waiting, kv, queries, hits = stats[:9]
    print(label, len(deltas), (p_r, p_t), (d_r, d_t), running, queries, hits)

s = eng.engine.scheduler
s.add("0", 4, 1); s.add("1", 4, 1)      # wave 1: one token each
step("s1")                               # schedules the prefill, returns nothing
step("s2")                               # the prefill's outputs (both finish)
s.add("2", 4, 2); s.add("3", 4, 2)      # wave 2 after idle
step("s3")                               # schedules its prefill, returns nothing
step("s4")                               # schedules a decode, returns the prefill's outputs
step("s5")                               # returns the decode's outputs
step("s6")                               # idle
"#;

#[test]
fn async_scheduling_steps_follow_the_batch_behind_their_outputs() {
    let out = shim_python(ASYNC_STEPS);
    let lines: Vec<&str> = out.lines().collect();
    // label, outputs, (prefill reqs, tokens), (decode reqs, tokens), running, prefix queries, hits
    assert_eq!(
        lines,
        vec![
            "s1 0 (0, 0) (0, 0) 0 0 0",
            "s2 2 (2, 8) (0, 0) 0 8 4",
            "s3 0 (0, 0) (0, 0) 0 0 0",
            "s4 2 (2, 8) (0, 0) 2 8 4",
            "s5 2 (0, 0) (2, 2) 0 0 0",
            "s6 0 (0, 0) (0, 0) 0 0 0",
        ],
        "{out}"
    );
}
