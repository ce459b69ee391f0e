#!/usr/bin/env python3
"""Harness-overhead benchmark of enginebench (issue 9, "Harness overhead").

On one engine configuration and workload, in one run, interleaved repeats of
  eb    enginebench (`enginebench run RECIPE --no-eval --step-trace`)
  py    the pure-Python floor: python-shim/enginebench_shim/pyloop.py, a minimal
        closed loop over the same shim Engine, flags, SamplingParams and
        token-id prompts (drawn by bench/promptgen from enginebench's own code)
  vb    `vllm bench throughput` on the same model, flags and lengths, random
        dataset, with --max-num-seqs = conc (it queues every prompt and lets
        the scheduler batch them, so at most conc run at once, as in a
        closed loop at conc with fixed lengths)
each round in a rotated order (eb py vb, py vb eb, vb eb py, ...), then prints
min/median/max over the rounds of
  * eb / py output tok/s (target >= 0.99) and eb / vb output tok/s (>= 1.0),
    each ratio taken within one round;
  * the harness's own time per step, us: loop wall time minus the time inside
    vLLM's engine core (the in-process client's get_output() and
    add_request()), plus the shim's hooks that run inside the core's step
    (its scheduler count and stat logger), over the steps, with its p50, p99
    and max, the engine core's mean step and the share of wall time the core
    was not stepping. The same Probe (pyloop.py) times both loops: pyloop
    installs it itself, enginebench's embedded interpreter gets it through
    bench/probe/sitecustomize.py;
  * the time outside the harness's step() call per step, us, from enginebench's
    own steps.jsonl (duration_s - sum of dur_ms, over the steps; this one
    leaves out the Rust<->Python crossing, which happens inside that call,
    and includes vLLM's add_request).
With --baseline BIN, another enginebench binary runs as "eb0" in every round
(before/after a change); ebe / pye are eb / py on the shim's LLMEngine.step()
path, ebq eb with the telemetry sampler nearly off. --null-engine replaces
vLLM's engine core by a stand-in with no model (pyloop.null_core); with
--null-step-ms each of its steps takes that long (GPU pace), and the report
gives each loop's output against the step-bound ideal (issue 34). With
--replay, enginebench also runs as "ebr": the same points as a trace replay
(workload = "trace") of a trace this script writes (2 x conc sessions of
back-to-back turns with no think time, each turn ISL tokens: one block
shared by the session's turns, one new block, OSL output tokens), or with
--replay-shape agentx of enginebench's synthetic set of AgentX's full shape
(bench/promptgen agentx), so its harness us/step at conc live sessions sits
beside the fixed-length loop's at the same conc; its per-step figures cover
every step of the replay's loop (primers and warm-ups included).

Every engine runs alone (one at a time), in-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), with the same OMP_NUM_THREADS and
VLLM_CPU_KVCACHE_SPACE.

    bench/harness_overhead.sh [--rounds 3] [--concs 4,64] [--isl 128] [--osl 64] ...
    bench/harness_overhead.sh --report results/harness-overhead-<time>   # tables again
    bench/harness_overhead.sh --resume results/harness-overhead-<time> --rounds 40 [its flags]
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python-shim", "enginebench_shim"))
import pyloop  # noqa: E402  (per-step figures, computed the same way for both loops)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import threads  # noqa: E402  (per-thread CPU and context switches from /proc)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concs", default="4,64")
    p.add_argument("--isl", type=int, default=128)
    p.add_argument("--osl", type=int, default=64)
    p.add_argument("--prompts-per-conc", type=int, default=2, help="measured requests = this x conc")
    p.add_argument("--warmups-per-conc", type=int, default=1, help="warm-up requests = this x conc")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine-args",
                   default="--dtype float32 --enforce-eager --max-model-len 2048 --max-num-batched-tokens 2048",
                   help="vllm serve flags for all three (the default recipe's, plus the CPU serve default "
                        "of --max-num-batched-tokens made explicit: vllm bench throughput's LLM class "
                        "would otherwise use 4096)")
    p.add_argument("--kv-space", default="2", help="VLLM_CPU_KVCACHE_SPACE, GiB")
    p.add_argument("--omp-threads", default=str(os.cpu_count() or 1),
                   help="OMP_NUM_THREADS (enginebench's CPU default: the logical CPUs)")
    p.add_argument("--harnesses", default=None,
                   help="default eb,py,vb (eb,py with --null-engine); also ebe / pye: eb / py on the shim's "
                        "LLMEngine.step() path (ENGINEBENCH_STEP_PATH=engine); ebq: eb with the telemetry "
                        "sampler nearly off (--telemetry-interval-ms 60000)")
    p.add_argument("--null-engine", action="store_true",
                   help="replace vLLM's step by a stand-in with no model (pyloop.null_engine) in eb and py: "
                        "the per-step figures are then the harness's own cost, free of the model's noise")
    p.add_argument("--evict-mb", type=int, default=0,
                   help="with --null-engine: the stand-in copies this many MiB each step (inside the timed "
                        "step), leaving the caches as cold as a real step that streams the weights does")
    p.add_argument("--null-step-ms", default=None,
                   help="with --null-engine: comma list of step times, ms (e.g. 2,5,20): each stand-in step takes "
                        "that long in all, its own work included (GPU pace); every harness runs at each value")
    p.add_argument("--null-step-mode", choices=("spin", "sleep", "async"), default="spin",
                   help="how a null step takes --null-step-ms: spin on the clock (a synchronous step whose host "
                        "thread is busy throughout, so the harness's gap adds to every step), sleep, or async: "
                        "vLLM's default async scheduling, a device running each launched batch on its own clock "
                        "with up to two in flight (pyloop.null_core), where the harness's gap costs only the "
                        "device's idle time; 'of ideal' is then the device's busy share")
    p.add_argument("--replay", action="store_true",
                   help="also run enginebench on a trace replay (harness ebr; shape: --replay-shape)")
    p.add_argument("--replay-shape", choices=("simple", "agentx"), default="simple",
                   help="simple: back-to-back sessions of ISL/OSL turns; agentx: enginebench's synthetic set of "
                        "AgentX's full shape (bench/promptgen agentx: 393 sessions, subagents, contexts to ~198k "
                        "tokens), think times compressed away; its engine needs --replay-engine-args")
    p.add_argument("--replay-sessions", type=int, default=393, help="--replay-shape agentx: sessions in the set")
    p.add_argument("--replay-engine-args",
                   default="--dtype bfloat16 --enforce-eager --max-model-len 200704 --max-num-batched-tokens 8192",
                   help="--replay-shape agentx: the engine's flags (a context of ~200k tokens; bf16 halves the KV "
                        "cache it must hold: with the null engine the model never runs after start-up)")
    p.add_argument("--replay-kv-space", default="5", help="--replay-shape agentx: VLLM_CPU_KVCACHE_SPACE, GiB")
    p.add_argument("--glibc-tunables", default=None, metavar="TUNABLES",
                   help="GLIBC_TUNABLES of every loop's process; default: on the real engine glibc's malloc "
                        "keeps what it frees (STEADY_MALLOC), with --null-engine glibc's own defaults (the gaps "
                        "are the harness's own, measured as a user's run has them); '' for glibc's defaults")
    p.add_argument("--baseline", default=None,
                   help="another enginebench binary, run as harness eb0 in every round (before/after a change)")
    p.add_argument("--report", default=None, metavar="DIR", help="only print the tables of a finished run")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="add rounds to the run in DIR until it has --rounds in all (same flags as its meta.json, "
                        "else exit 2); the rotation of the order goes on from its last round")
    p.add_argument("--out", default=None, help="output folder (default results/harness-overhead-<UTC time>)")
    p.add_argument("--enginebench", default=os.path.join(ROOT, "target/release/enginebench"))
    p.add_argument("--promptgen", default=os.path.join(ROOT, "target/promptgen/release/enginebench-promptgen"))
    p.add_argument("--home", default=os.path.join(ROOT, ".enginebench"))
    return p.parse_args()


def check_promptgen_lock():
    """bench/promptgen must draw with the rand crates enginebench is built
    with; its Cargo.lock is a trimmed copy of enginebench's."""
    import re

    def versions(path):
        text = open(path).read()
        return {(m.group(1), m.group(2)) for m in re.finditer(r'name = "([^"]+)"\nversion = "([^"]+)"', text)
                if m.group(1) in ("rand", "rand_chacha", "rand_core", "ppv-lite86")}

    main = versions(os.path.join(ROOT, "Cargo.lock"))
    mine = versions(os.path.join(ROOT, "bench", "promptgen", "Cargo.lock"))
    if not mine <= main:
        raise SystemExit(f"bench/promptgen/Cargo.lock pins {sorted(mine - main)}, enginebench's Cargo.lock "
                         f"{sorted(main)}: copy Cargo.lock to bench/promptgen/ and rebuild it")


def point_seed(seed, conc, isl, osl):
    # enginebench's Sweep::point_seed (src/recipe/sweep.rs).
    return seed ^ (conc << 40) ^ (isl << 20) ^ osl


def recipe_text(a, concs):
    args = ", ".join(json.dumps(x) for x in a.engine_args.split())
    return f"""# Written by bench/harness_overhead.py.
name = "harness-overhead"
model = "bundled:smollm2-135m-instruct"
hardware = "cpu"
precision = "fp32"
framework = "vllm"

[env]
VLLM_CPU_KVCACHE_SPACE = "{a.kv_space}"
OMP_NUM_THREADS = "{a.omp_threads}"

[engine]
args = [{args}]

[sweep]
isl = {a.isl}
osl = {a.osl}
conc = {json.dumps(concs)}
prompts_per_conc = {a.prompts_per_conc}
warmups_per_conc = {a.warmups_per_conc}
seed = {a.seed}
"""


def replay_recipe_text(a, concs):
    """The same recipe as a trace replay of `trace.jsonl` (beside it); the
    AgentX shape gets its own engine flags (a ~200k context) and compressed
    think times (back-to-back turns: every step has work)."""
    text = recipe_text(a, concs).replace('name = "harness-overhead"', 'name = "harness-overhead-replay"')
    trace = """workload = "trace"
[sweep.trace]
file = "trace.jsonl"
format = "agentx"
"""
    if a.replay_shape != "agentx":
        return text + trace
    args = ", ".join(json.dumps(x) for x in a.replay_engine_args.split())
    text = text.replace(f'VLLM_CPU_KVCACHE_SPACE = "{a.kv_space}"',
                        f'VLLM_CPU_KVCACHE_SPACE = "{a.replay_kv_space}"\nVLLM_ALLOW_LONG_MAX_MODEL_LEN = "1"')
    text = text.replace(text[text.index("args = ["):text.index("]\n", text.index("args = ["))],
                        f"args = [{args}, \"--hf-overrides\", {json.dumps(json.dumps({'max_position_embeddings': 262144}))}")
    return text + trace + "time_scale = 1e-6\n"


def agentx_trace(a):
    """The synthetic AgentX set (bench/promptgen agentx), cached under
    ~/.cache/enginebench/bench keyed by the sessions and the generator's
    source (~385 MB for 393 sessions)."""
    import hashlib

    src = b"".join(open(os.path.join(ROOT, "src", "workload", f), "rb").read()
                   for f in ("agentx_shape.rs", "sessions.rs", "synth.rs"))
    key = hashlib.sha256(src).hexdigest()[:12]
    cache = os.path.join(os.path.expanduser("~"), ".cache", "enginebench", "bench")
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"agentx-{a.replay_sessions}-{key}.jsonl")
    if not os.path.exists(path):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            subprocess.run([a.promptgen, "agentx", "42", str(a.replay_sessions)], stdout=f, check=True)
        os.replace(tmp, path)
    return path


def write_trace(path, a, sessions, turns):
    """AgentX-shaped sessions of back-to-back turns: turn k starts when turn
    k-1 ends (t_k = t_(k-1) + api_time, so no think time), sends ISL tokens
    (block 0 shared by the session's turns, block k+1 new; blocks of ISL/2
    tokens) and asks for OSL tokens."""
    if a.isl % 2:
        raise SystemExit("--replay needs an even --isl (two blocks of ISL/2 tokens per turn)")
    with open(path, "w") as f:
        for s in range(sessions):
            reqs = [{"t": float(k), "type": "s", "in": a.isl, "out": a.osl, "hash_ids": [0, k + 1],
                     "api_time": 1.0} for k in range(turns)]
            f.write(json.dumps({"id": f"loop-{s}", "block_size": a.isl // 2, "requests": reqs}) + "\n")


# glibc's malloc as the benchmark runs it: big blocks (up to 32 MiB, the
# most mmap_threshold takes on 64-bit) come from the heap, and the heap's top
# is not given back (trim_threshold 16 GiB). With glibc's defaults the mmap
# threshold moves with what was freed before (mallopt(3): "dynamic mmap
# threshold"), so one run of the CPU engine gives a prefill step's 10-25 MiB
# activations back to the kernel after each use and faults them in again
# (1.4-1.5 million minor faults in 22 s) and the next run keeps them (0.2-0.6
# million): its 2,048-token prefill steps took 1.3-1.5 s in the first kind
# of run, 1.0-1.15 s in the second, under either loop (docs/benchmarks.md,
# 2026-12-06). Fixed thresholds take that coin toss out of the engine-step
# ratio; both loops run under the same setting.
STEADY_MALLOC = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=17179869184"
# What a run's meta.json meant by a key it lacks (a run made before the key
# was added), so --resume compares like with like.
META_BEFORE = {"glibc_tunables": ""}


def run(cmd, env, log, timeout=3600):
    """Runs `cmd` to its end; (seconds, its process tree's thread
    snapshots (threads.Sampler), its pid)."""
    t = time.monotonic()
    with open(log, "w") as f:
        child = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        sampler = threads.Sampler(child.pid).start()
        try:
            rc = child.wait(timeout=timeout)
        finally:
            if child.poll() is None:
                child.kill()
            samples = sampler.stop()
    if rc != 0:
        tail = open(log).read()[-3000:]
        raise SystemExit(f"{cmd[0]} failed ({rc}), log {log}:\n{tail}")
    return time.monotonic() - t, samples, child.pid


def add_threads(res, samples, engine_pid):
    """Puts each point's per-thread figures over its measured steps
    (threads.summarize over the point's `window`) into its figures."""
    for fig in res.values():
        if "window" in fig:
            fig["threads"] = threads.summarize(samples, fig["window"], engine_pid)


def first_measured_step(probe, adds_before):
    """Index of the first probe step of a point's measured loop: the first
    vLLM step() after its first measured add_request (`adds_before` = the
    add_request calls of all earlier points and this point's warm-ups; every
    request, warm-up or measured, is one add_request call, in order)."""
    import bisect

    if adds_before >= len(probe["at"]):
        raise SystemExit(f"probe: {len(probe['at'])} add_request calls, expected more than {adds_before}")
    return bisect.bisect_right(probe["t"], probe["at"][adds_before])


def load_eb(out, probe_dir, n_points):
    """One enginebench run's result.json, its steps.jsonl by point, the
    probe's record of vLLM's own step/add_request calls, and its one job."""
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    steps = {}
    with open(os.path.join(out, "steps.jsonl")) as f:
        for line in f:
            s = json.loads(line)
            steps.setdefault(s["point"], []).append(s)
    # Every Python enginebench starts writes one (the interpreter probe too):
    # the worker's is the one that saw vLLM's step() calls.
    found = engine_probe(probe_dir)
    (job,) = result["jobs"]
    if result["status"] != "ok" or len(job["points"]) != n_points:
        raise SystemExit(f"enginebench run in {out}: status {result['status']}")
    return result, steps, found, job


def engine_probe(probe_dir):
    """The probe record of the process that stepped vLLM, with its "pid"
    (from the file's name, probe-<pid>.json)."""
    found = []
    for name in sorted(x for x in os.listdir(probe_dir) if x.endswith(".json")):
        with open(os.path.join(probe_dir, name)) as f:
            p = json.load(f)
        if p.get("d"):
            p["pid"] = int(name[len("probe-"):-len(".json")])
            found.append(p)
    if len(found) != 1:
        raise SystemExit(f"expected one probe with engine steps in {probe_dir}, found {len(found)}")
    return found[0]


def probe_gcs(probe):
    """The probe's GC collections, [(start, duration, generation)]."""
    return list(zip(probe.get("gt", ()), probe.get("gd", ()), probe.get("gg", ())))


def parse_eb(out, probe_dir, points):
    """Per-conc figures of one enginebench run (fixed-length points)."""
    result, steps, probe, job = load_eb(out, probe_dir, len(points))
    res = {}
    adds_before = 0
    keys = sorted(steps)
    for p, key, want in zip(job["points"], keys, points):
        assert (p["conc"], p["num_prompts"], p["warmups"]) == (want["conc"], want["num_prompts"], want["warmups"])
        st = steps[key]
        n = len(st)
        adds_before += p["warmups"]
        k = first_measured_step(probe, adds_before)
        adds_before += p["num_prompts"]
        if k + n > len(probe["d"]):
            raise SystemExit(f"probe: {len(probe['d'])} step calls, the point needs {k + n}")
        # The harness's step call holds vLLM's: a negative mean difference
        # would mean the two records are out of step.
        mismatch = sum(s["dur_ms"] / 1e3 - d for s, d in zip(st, probe["d"][k:k + n])) / n
        if mismatch < 0:
            raise SystemExit(f"probe: enginebench's step calls are shorter than vLLM's by {-mismatch * 1e6:.0f} us")
        lo = probe["t"][k - 1] + probe["d"][k - 1] if k > 0 else 0.0  # end of the warm-up's last step
        hi = probe["t"][k + n - 1]
        adds = [(t, d) for t, d in zip(probe["at"], probe["ad"]) if lo < t < hi]
        if len(adds) != p["num_prompts"]:
            raise SystemExit(f"probe: {len(adds)} add_request calls in the window, expected {p['num_prompts']}")
        marks = [(s["t_s"], s["t_s"] + s["dur_ms"] / 1e3) for s in st]
        inner = list(zip(probe["t"][k:k + n], probe["d"][k:k + n]))
        hooks = [(t, d) for t, d in zip(probe["ht"], probe["hd"]) if lo < t < hi + probe["d"][k + n - 1]]
        res[p["conc"]] = {
            "output_throughput": p["output_throughput"],
            "duration_s": p["duration_s"],
            "output_tokens": p["total_output_tokens"],
            "crossing_check_us": mismatch * 1e6,
            **pyloop.summary(0.0, marks, inner, adds, hooks, probe.get("dev", ()), probe_gcs(probe)),
        }
    return res, result


def parse_eb_replay(out, probe_dir, concs):
    """Per-conc figures of one enginebench trace replay, against the probe's
    record of vLLM's step/add_request calls, points in order: `harness_us`
    etc. over the measured phase's steps (from the first measured request's
    send, requests.jsonl), `all_harness_us` over every step of the point's
    loop (primers and warm-ups, which send and finish a request per lane per
    step, included)."""
    result, steps, probe, job = load_eb(out, probe_dir, len(concs))
    measure_start = {}
    with open(os.path.join(out, "requests.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("phase") == "measured":
                k = r["point"]
                measure_start[k] = min(measure_start.get(k, r["send_s"]), r["send_s"])
    if sum(len(v) for v in steps.values()) != len(probe["d"]):
        raise SystemExit(f"probe: {len(probe['d'])} step calls, steps.jsonl {sum(len(v) for v in steps.values())}")

    def window(st, k, m):
        """summary() of steps st[m:], probe steps from k + m on."""
        n = len(st)
        inner = list(zip(probe["t"][k + m:k + n], probe["d"][k + m:k + n]))
        mismatch = sum(s["dur_ms"] / 1e3 - d for s, (_, d) in zip(st[m:], inner)) / (n - m)
        if mismatch < 0:
            raise SystemExit(f"probe: enginebench's step calls are shorter than vLLM's by {-mismatch * 1e6:.0f} us")
        j = k + m
        lo = probe["t"][j - 1] + probe["d"][j - 1] if j > 0 else 0.0
        hi = inner[-1][0]
        adds = [(t, d) for t, d in zip(probe["at"], probe["ad"]) if lo < t < hi]
        hooks = [(t, d) for t, d in zip(probe["ht"], probe["hd"]) if lo < t < hi + inner[-1][1]]
        marks = [(s["t_s"], s["t_s"] + s["dur_ms"] / 1e3) for s in st[m:]]
        t0 = st[m - 1]["t_s"] + st[m - 1]["dur_ms"] / 1e3 if m > 0 else 0.0
        return {"requests": len(adds), "crossing_check_us": mismatch * 1e6,
                **pyloop.summary(t0, marks, inner, adds, hooks, probe.get("dev", ()), probe_gcs(probe))}

    res = {}
    k = 0
    for p, key in zip(job["points"], sorted(steps)):
        st = steps[key]
        if key not in measure_start:
            raise SystemExit(f"enginebench replay in {out}: no measured request in point {key}")
        m = next((i for i, s in enumerate(st) if s["t_s"] >= measure_start[key]), None)
        if m is None:
            raise SystemExit(f"enginebench replay in {out}: no step after the first measured send")
        every = window(st, k, 0)
        res[p["conc"]] = {
            "output_throughput": p["output_throughput"],
            "duration_s": p["duration_s"],
            **window(st, k, m),
            "all_steps": every["steps"],
            "all_harness_us": every["harness_us"],
        }
        k += len(st)
    return res, result


def run_eb(a, d, env, binary, recipe, parse, extra=()):
    """One enginebench run of `recipe` (in the output folder) with the
    probe installed, `extra` run options added; `parse(out, probe_dir)`
    gives its per-conc figures."""
    os.makedirs(d, exist_ok=True)
    probe_dir = os.path.join(d, "probe")
    os.makedirs(probe_dir, exist_ok=True)
    env = dict(env, PYTHONPATH=os.path.join(ROOT, "bench", "probe"), EB_STEP_PROBE=probe_dir)
    out = os.path.join(d, "run")
    secs, samples, _ = run([binary, "run", os.path.join(a.out, recipe), "--no-eval", "--step-trace",
                            "-o", out, *extra], env, os.path.join(d, "stderr.log"))
    res, _ = parse(out, probe_dir)
    add_threads(res, samples, engine_probe(probe_dir)["pid"])
    return res, secs


def run_py(a, points, d, env):
    os.makedirs(d, exist_ok=True)
    job = {
        "argv": [a.model_path] + a.engine_args.split(),
        "points": points,
        "prompts": os.path.join(a.out, "prompts.json"),
        "promptgen": a.promptgen,
    }
    jf = os.path.join(d, "job.json")
    with open(jf, "w") as f:
        json.dump(job, f)
    of = os.path.join(d, "out.json")
    py = os.path.join(a.home, "venv", "bin", "python")
    secs, samples, pid = run([py, os.path.join(ROOT, "python-shim", "enginebench_shim", "pyloop.py"), jf, of],
                             env, os.path.join(d, "stderr.log"))
    with open(of) as f:
        out = json.load(f)
    res = {p["conc"]: p for p in out["points"]}
    add_threads(res, samples, pid)  # pyloop steps vLLM in the child itself
    return res, secs


def run_vb(a, points, d, env):
    os.makedirs(d, exist_ok=True)
    res = {}
    secs = 0.0
    vllm = os.path.join(a.home, "venv", "bin", "vllm")
    for p in points:
        of = os.path.join(d, f"conc{p['conc']}.json")
        cmd = [vllm, "bench", "throughput", "--model", a.model_path, *a.engine_args.split(),
               "--max-num-seqs", str(p["conc"]),
               "--dataset-name", "random", "--random-input-len", str(a.isl),
               "--random-output-len", str(a.osl), "--num-prompts", str(p["num_prompts"]),
               "--num-warmups", str(p["warmups"]), "--seed", str(a.seed), "--output-json", of]
        secs += run(cmd, env, os.path.join(d, f"conc{p['conc']}.log"))[0]
        with open(of) as f:
            r = json.load(f)
        out_tokens = r["num_requests"] * a.osl  # ignore_eos: exactly OSL each
        res[p["conc"]] = {
            "output_throughput": out_tokens / r["elapsed_time"],
            "elapsed_time": r["elapsed_time"],
            "prompt_tokens": r["total_num_tokens"] - out_tokens,
        }
    return res, secs


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{min(xs):.3f} / {statistics.median(xs):.3f} / {max(xs):.3f}" if max(xs) < 10 else \
        f"{min(xs):.0f} / {statistics.median(xs):.0f} / {max(xs):.0f}"


def us(xs):
    xs = [x for x in xs if x is not None]
    return f"{min(xs):.1f} / {statistics.median(xs):.1f} / {max(xs):.1f}" if xs else "-"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    a = parse_args()
    if a.report:
        with open(os.path.join(a.report, "meta.json")) as f:
            meta = json.load(f)
        with open(os.path.join(a.report, "rounds.json")) as f:
            print(report(meta, json.load(f)))
        return
    check_promptgen_lock()
    concs = [int(c) for c in a.concs.split(",")]
    harnesses = (a.harnesses or ("eb,py" if a.null_engine else "eb,py,vb")).split(",")
    if a.null_engine and "vb" in harnesses:
        raise SystemExit("--null-engine: vllm bench throughput (vb) cannot run the stand-in; use --harnesses eb,py")
    if a.evict_mb and not a.null_engine:
        raise SystemExit("--evict-mb needs --null-engine")
    if a.null_step_ms and not a.null_engine:
        raise SystemExit("--null-step-ms needs --null-engine")
    step_ms = [float(x) for x in a.null_step_ms.split(",")] if a.null_step_ms else [None]
    if a.glibc_tunables is None:
        a.glibc_tunables = "" if a.null_engine else STEADY_MALLOC
    if a.baseline:
        a.baseline = os.path.abspath(a.baseline)
        harnesses.append("eb0")
    # ebr is the replay: named in --harnesses or asked for by --replay, it runs once.
    if "ebr" in harnesses:
        a.replay = True
    elif a.replay:
        harnesses.append("ebr")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    if a.resume:
        a.out = a.resume
    a.out = os.path.abspath(a.out or os.path.join(ROOT, "results", f"harness-overhead-{stamp}"))
    machine = f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.node()}"
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "machine": machine,
            "vllm": vllm_version(a), "concs": concs, "step_ms": step_ms, "load": os.getloadavg(),
            **{k: getattr(a, k) for k in (
                "engine_args", "omp_threads", "kv_space", "isl", "osl", "prompts_per_conc", "warmups_per_conc",
                "null_engine", "evict_mb", "replay", "replay_shape", "replay_sessions", "null_step_mode",
                "glibc_tunables")}}
    rounds = []
    if a.resume:  # checked before anything in the folder is written
        meta, rounds = resumed(a.out, meta, harnesses)
    os.makedirs(a.out, exist_ok=True)
    a.model_path = os.path.realpath(os.path.join(a.home, "models", "smollm2-135m-instruct"))
    points = [{"isl": a.isl, "osl": a.osl, "conc": c, "warmups": a.warmups_per_conc * c,
               "num_prompts": a.prompts_per_conc * c, "seed": point_seed(a.seed, c, a.isl, a.osl)}
              for c in concs]
    with open(os.path.join(a.out, "recipe.toml"), "w") as f:
        f.write(recipe_text(a, concs))
    if a.replay:
        with open(os.path.join(a.out, "replay.toml"), "w") as f:
            f.write(replay_recipe_text(a, concs))
        trace = os.path.join(a.out, "trace.jsonl")
        if os.path.lexists(trace):
            os.remove(trace)
        if a.replay_shape == "agentx":
            os.symlink(agentx_trace(a), trace)
        else:
            # Enough turns that no lane runs out: every lane's primers, warm-ups
            # and its share of the measured requests come from its own sessions.
            write_trace(trace, a, 2 * max(concs), 4 * (a.prompts_per_conc + a.warmups_per_conc) + 20)
    # The stand-in is switched on the same way in both loops (pyloop's Probe and null_engine read these).
    env = dict(os.environ, EB_NULL_ENGINE="1" if a.null_engine else "0", EB_NULL_EVICT_MB=str(a.evict_mb),
               EB_NULL_STEP_MODE=a.null_step_mode,
               OMP_NUM_THREADS=a.omp_threads, VLLM_CPU_KVCACHE_SPACE=a.kv_space,
               VLLM_ENABLE_V1_MULTIPROCESSING="0", PYTHONUNBUFFERED="1", ENGINEBENCH_HOME=a.home)
    for k in ("PYTHONPATH", "EB_STEP_PROBE", "EB_NULL_STEP_MS", "ENGINEBENCH_STEP_PATH", "GLIBC_TUNABLES"):
        env.pop(k, None)
    if a.glibc_tunables:
        env["GLIBC_TUNABLES"] = a.glibc_tunables
    print(f"harness overhead: {machine}; ISL/OSL {a.isl}/{a.osl}, conc {concs}, "
          f"{a.prompts_per_conc} x conc prompts, {a.warmups_per_conc} x conc warm-ups, "
          f"{a.rounds} rounds; engine args: {a.engine_args}; OMP_NUM_THREADS={a.omp_threads}, "
          f"VLLM_CPU_KVCACHE_SPACE={a.kv_space}, GLIBC_TUNABLES={a.glibc_tunables or '(glibc defaults)'}"
          f"{'; NULL ENGINE' if a.null_engine else ''}"
          f"{f', evicting {a.evict_mb} MiB per step' if a.evict_mb else ''}"
          f"{f', step {a.null_step_ms} ms ({a.null_step_mode})' if a.null_step_ms else ''}; out: {a.out}",
          file=sys.stderr)

    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    for r in range(len(rounds), a.rounds):
        order = harnesses[r % len(harnesses):] + harnesses[:r % len(harnesses)]
        rec = {"order": order}
        for ms in step_ms:
            for h in order:
                key = h if ms is None else f"{h}@{ms:g}"
                d = os.path.join(a.out, f"round{r + 1}", key)
                run_env = dict(env, **({"EB_NULL_STEP_MS": str(ms)} if ms is not None else {}),
                               **({"ENGINEBENCH_STEP_PATH": "engine"} if h in ("ebe", "pye") else {}))
                if h in ("eb", "eb0", "ebe", "ebq"):
                    # ebq: the telemetry sampler nearly off (one sample a minute).
                    extra = ("--telemetry-interval-ms", "60000") if h == "ebq" else ()
                    rec[key], secs = run_eb(a, d, run_env, a.baseline if h == "eb0" else a.enginebench,
                                            "recipe.toml", lambda out, probe: parse_eb(out, probe, points), extra)
                elif h == "ebr":
                    rec[key], secs = run_eb(a, d, run_env, a.enginebench, "replay.toml",
                                            lambda out, probe: parse_eb_replay(out, probe, concs))
                elif h in ("py", "pye"):
                    rec[key], secs = run_py(a, points, d, run_env)
                elif h == "vb":
                    rec[key], secs = run_vb(a, points, d, run_env)
                else:
                    raise SystemExit(f"unknown harness {h}")
                figs = "  ".join(f"conc {c}: {rec[key][c]['output_throughput']:.1f} tok/s, "
                                 f"harness {rec[key][c].get('harness_us', float('nan')):.0f} us/step" for c in concs)
                print(f"round {r + 1}/{a.rounds} {key}: {figs}  ({secs:.0f} s)", file=sys.stderr)
        rounds.append(rec)
        with open(os.path.join(a.out, "rounds.json"), "w") as f:
            json.dump(rounds, f, indent=1, default=str)
    text = report(meta, rounds)
    print(text)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text + "\n")


def resumed(out, meta, harnesses):
    """The meta and rounds of the unfinished run in `out`, with this
    session's date and load added to meta["resumed"]; exits 2 when its
    flags or harnesses differ from this invocation's (rounds of two set-ups
    must not be pooled)."""
    try:
        with open(os.path.join(out, "meta.json")) as f:
            old = json.load(f)
        with open(os.path.join(out, "rounds.json")) as f:
            rounds = json.load(f)
    except (OSError, ValueError) as e:
        print(f"--resume {out}: no finished round to add to ({e}); start a new run with --out", file=sys.stderr)
        sys.exit(2)
    if not isinstance(rounds, list) or not rounds or not isinstance(old, dict):
        print(f"--resume {out}: rounds.json holds no finished round; start a new run with --out", file=sys.stderr)
        sys.exit(2)
    differ = [k for k in meta if k not in ("date", "load", "machine", "resumed")
              and old.get(k, META_BEFORE.get(k)) != meta[k]]
    if rounds[0]["order"] != harnesses:
        differ.append(f"harnesses (the run has {','.join(rounds[0]['order'])})")
    if differ:
        print(f"--resume {out}: this invocation differs from the run's meta.json in: {', '.join(differ)}; "
              f"pass the run's own flags", file=sys.stderr)
        sys.exit(2)
    # A round stopped part-way left folders; it runs again from the start.
    shutil.rmtree(os.path.join(out, f"round{len(rounds) + 1}"), ignore_errors=True)
    old.setdefault("resumed", []).append({"date": meta["date"], "load": meta["load"], "machine": meta["machine"],
                                          "from_round": len(rounds) + 1})
    return old, rounds


def gpu_pace_report(meta, rounds):
    """The tables of a --null-step-ms run (issue 34): per step time, conc
    and harness, the output tok/s against the step-bound ideal (the same
    steps with nothing between them: out tok/s / the share of wall time the
    engine core was stepping), the harness time between steps (mean, p50,
    p99, max, us) and the share of wall time the core was not stepping;
    min / median / max over the rounds where it says so, else medians."""
    concs = meta["concs"]
    rounds = [{h: ({int(c): v for c, v in x.items()} if isinstance(x, dict) else x) for h, x in r.items()}
              for r in rounds]
    med = statistics.median

    def get(key, c, k):
        return [r[key][c][k] for r in rounds if key in r and c in r[key] and k in r[key][c]]

    def mmm(xs, fmt):
        return " / ".join(format(x, fmt) for x in (min(xs), med(xs), max(xs))) if xs else "-"

    harnesses = [h for h in ("eb", "eb0", "ebe", "ebq", "ebr", "py", "pye")
                 if any(k.split("@")[0] == h for r in rounds for k in r)]
    # Async scheduling: the harness's gap overlaps the batch in flight, and
    # what it costs is the time the device had no batch.
    asynchronous = meta.get("null_step_mode") == "async"
    idle = "device_idle" if asynchronous else "not_stepping"
    how = ("async scheduling: a device runs each batch for the step time on its own clock, two in flight, "
           "'of ideal' = the device's busy share" if asynchronous else
           f"every step takes the step time in all ({meta.get('null_step_mode', 'spin')}): a synchronous engine")
    lines = [
        f"Harness at GPU pace, {meta['date']}, {meta['machine']}, load average at start "
        f"{' / '.join(f'{x:.2f}' for x in meta.get('load', []))}.",
        f"Null engine (vLLM's engine core replaced by a stand-in, pyloop.null_core): every step gives each "
        f"running request one token; {how}; "
        f"ISL/OSL {meta['isl']}/{meta['osl']}, {meta['prompts_per_conc']} x conc measured and "
        f"{meta['warmups_per_conc']} x conc warm-up requests per point"
        + (f", {meta['evict_mb']} MiB evicted per step (cold caches)" if meta.get("evict_mb") else "")
        + (f"; ebr: trace replay, shape {meta.get('replay_shape', 'simple')}" if meta.get("replay") else "")
        + f"; {len(rounds)} rounds.",
        "",
        "| step ms | conc | harness | out tok/s | of ideal (min/med/max) | gap us mean / p50 / p99 / max "
        f"| {'device idle' if asynchronous else 'not stepping'} | harness us/step (min/med/max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for ms in meta["step_ms"]:
        for c in concs:
            for h in harnesses:
                key = f"{h}@{ms:g}"
                if not get(key, c, "harness_us"):
                    continue
                share = [1.0 - x for x in get(key, c, idle)]
                lines.append(
                    f"| {ms:g} | {c} | {h} | {med(get(key, c, 'output_throughput')):.0f} | {mmm(share, '.4f')} "
                    f"| {med(get(key, c, 'harness_us')):.0f} / {med(get(key, c, 'harness_median_us')):.0f} / "
                    f"{med(get(key, c, 'harness_p99_us')):.0f} / {max(get(key, c, 'harness_max_us')):.0f} "
                    f"| {med(get(key, c, idle)):.4f} | {mmm(get(key, c, 'harness_us'), '.0f')} |")
    lines += ["", "Gaps between engine-core steps longer than 10 ms (medians over the rounds; the largest of all "
              "rounds) and Python's cyclic GC: 'by GC' = gaps GC took half or more of; GC ms = every collection "
              "in the window, inside steps or between them; full = generation-2 collections.", "",
              "| step ms | conc | harness | gaps > 10 ms | by GC | largest gap ms | its GC ms | GC ms | full GCs "
              "| longest GC ms |", "|---|---|---|---|---|---|---|---|---|---|"]
    for ms in meta["step_ms"]:
        for c in concs:
            for h in harnesses:
                key = f"{h}@{ms:g}"
                if not get(key, c, "gap_max_ms"):
                    continue
                worst = max(range(len(get(key, c, "gap_max_ms"))), key=lambda i: get(key, c, "gap_max_ms")[i])
                lines.append(
                    f"| {ms:g} | {c} | {h} | {med(get(key, c, 'gaps_over_10ms')):.0f} "
                    f"| {med(get(key, c, 'gaps_over_10ms_gc')):.0f} | {get(key, c, 'gap_max_ms')[worst]:.1f} "
                    f"| {get(key, c, 'gap_max_gc_ms')[worst]:.1f} | {med(get(key, c, 'gc_ms')):.0f} "
                    f"| {med(get(key, c, 'gc_full')):.0f} | {max(get(key, c, 'gc_max_ms')):.1f} |")
    lines += threads_table(rounds, concs, loops=[k for k in dict.fromkeys(k for r in rounds for k in r)
                                                  if k != "order"])
    lines.append("")
    for ms in meta["step_ms"]:
        if ms != 5:
            continue
        for c in concs:
            gaps = get(f"ebr@5", c, "gap_max_ms")
            if gaps:
                ok = "meets" if max(gaps) <= 20 else "misses"
                lines.append(f"5 ms, conc {c}, AgentX replay: largest gap {max(gaps):.1f} ms (all rounds) {ok} <= 20 ms")
        for h in ("eb", "ebr"):
            for c in concs:
                share = [1.0 - x for x in get(f"{h}@5", c, idle)]
                if share:
                    ok = "meets" if med(share) >= 0.99 else "misses"
                    lines.append(f"5 ms, conc {c}, {h}: {med(share):.4f} of the ideal (median) {ok} >= 0.99")
        p99 = get("ebr@5", 256, "harness_p99_us")
        if p99 and meta.get("replay_shape") == "agentx":
            ok = "meets" if med(p99) <= 500 else "misses"
            lines.append(f"5 ms, conc 256, AgentX replay: p99 gap {med(p99):.0f} us (median) {ok} <= 500 us")
    for ms in meta["step_ms"]:
        for c in concs:
            e, p_ = get(f"eb@{ms:g}", c, "harness_us"), get(f"py@{ms:g}", c, "harness_us")
            if e and p_:
                ok = "meets" if med(e) <= med(p_) else "misses"
                cold = " (cold caches)" if meta.get("evict_mb") else ""
                lines.append(f"{ms:g} ms, conc {c}: harness us/step eb {med(e):.0f} vs py {med(p_):.0f}{cold}: {ok} eb <= py")
    return "\n".join(lines)


def report(meta, rounds):
    """The Markdown tables of a run (min / median / max over the rounds)."""
    if meta.get("step_ms") and meta["step_ms"] != [None]:
        return gpu_pace_report(meta, rounds)
    concs = meta["concs"]
    # JSON turns the conc keys into strings.
    rounds = [{h: ({int(c): v for c, v in x.items()} if isinstance(x, dict) else x) for h, x in r.items()}
              for r in rounds]

    def get(h, c, k):
        return [r[h][c][k] for r in rounds if h in r and k in r[h][c]]

    def ratio(h1, h2, c):
        return [r[h1][c]["output_throughput"] / r[h2][c]["output_throughput"]
                for r in rounds if h1 in r and h2 in r]

    def diff(h1, h2, c, k):
        return [r[h1][c][k] - r[h2][c][k] for r in rounds if h1 in r and h2 in r]

    def ratio_of(h1, h2, c, k):
        return [r[h1][c][k] / r[h2][c][k] for r in rounds
                if h1 in r and h2 in r and k in r[h1][c] and k in r[h2][c] and r[h2][c][k]]

    def mmm(xs, fmt):
        if not xs:
            return "-"
        return " / ".join(format(x, fmt) for x in (min(xs), statistics.median(xs), max(xs)))

    med = statistics.median
    lines = [
        f"Harness overhead, {meta['date']}, {meta['machine']}.",
        f"vLLM {meta['vllm']}, bundled SmolLM2-135M, `{meta['engine_args']}`, in-process, "
        f"OMP_NUM_THREADS={meta['omp_threads']}, VLLM_CPU_KVCACHE_SPACE={meta['kv_space']}, "
        f"GLIBC_TUNABLES={meta.get('glibc_tunables') or '(glibc defaults)'}; random token-id "
        f"prompts, ISL/OSL {meta['isl']}/{meta['osl']}, {meta['prompts_per_conc']} x conc measured and "
        f"{meta['warmups_per_conc']} x conc warm-up requests per point; {len(rounds)} interleaved rounds; "
        "min / median / max over the rounds.",
        *(["", "**Null engine**: vLLM's step() replaced by a stand-in with no model (bench's pyloop.null_engine), "
                "in both loops: tok/s is the loops' speed, not the engine's; harness us/step is what each loop "
                "costs per step."
           + (f" The stand-in copies {meta['evict_mb']} MiB per step (inside its timed step), leaving the "
              "caches cold as a real step does." if meta.get("evict_mb") else "")] if meta.get("null_engine") else []),
        "",
        ("| conc | eb/py loop speed (null engine: no target) | eb/vb | harness us/step eb (<= 50 at 64) "
         if meta.get("null_engine") else
         "| conc | eb/py out tok/s (>= 0.99) | eb/vb out tok/s (>= 1.0) | harness us/step eb (<= 50 at 64) ")
        + "| harness us/step py | eb - py us/step | out tok/s eb | out tok/s py | out tok/s vb |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in concs:
        lines.append(
            f"| {c} | {mmm(ratio('eb', 'py', c), '.3f')} | {mmm(ratio('eb', 'vb', c), '.3f')} "
            f"| {mmm(get('eb', c, 'harness_us'), '.0f')} | {mmm(get('py', c, 'harness_us'), '.0f')} "
            f"| {mmm(diff('eb', 'py', c, 'harness_us'), '.0f')} | {mmm(get('eb', c, 'output_throughput'), '.1f')} "
            f"| {mmm(get('py', c, 'output_throughput'), '.1f')} | {mmm(get('vb', c, 'output_throughput'), '.1f')} |")
    lines += [
        "",
        "Per step, us (medians over the rounds): harness = mean per step (everything but the engine core's "
        "step and add_request: the loop, the crossing, vLLM's input processor, and on the engine step path "
        "LLMEngine.step()'s output processing); p50 = median step's harness time; crossing = the harness's "
        "step() call minus the core's step; hooks = the shim's scheduler count and stat logger inside the "
        "core's step; outside step() = (duration - time in the harness's step() calls) / steps, from "
        "steps.jsonl for eb; engine step = the engine core's mean step; step = wall time per step.",
        "",
        "| conc | loop | harness | p50 | crossing p50 | hooks | outside step() | steps | engine step ms | step ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in concs:
        for h in ("eb", "eb0", "ebe", "ebq", "ebr", "py", "pye"):
            if not get(h, c, "harness_us"):
                continue
            core = get(h, c, "core_step_us")
            lines.append(
                f"| {c} | {h} | {med(get(h, c, 'harness_us')):.0f} | {med(get(h, c, 'harness_median_us')):.0f} "
                f"| {med(get(h, c, 'crossing_median_us')):.0f} | {med(get(h, c, 'hooks_us')):.0f} "
                f"| {med(get(h, c, 'outside_step_us')):.0f} | {med(get(h, c, 'steps')):.0f} "
                f"| {f'{med(core) / 1e3:.1f}' if core else '-'} | {med(get(h, c, 'step_wall_us')) / 1e3:.1f} |")
    lines += threads_table(rounds, concs)
    if any("eb0" in r for r in rounds):
        lines += ["", "Baseline binary (eb0) vs this one (eb), same rounds:", "",
                  "| conc | eb/eb0 out tok/s | harness us/step eb0 | harness us/step eb |", "|---|---|---|---|"]
        for c in concs:
            lines.append(f"| {c} | {mmm(ratio('eb', 'eb0', c), '.3f')} | {mmm(get('eb0', c, 'harness_us'), '.0f')} "
                         f"| {mmm(get('eb', c, 'harness_us'), '.0f')} |")
    if any("ebr" in r for r in rounds):
        lines += ["", "Trace replay (ebr: the same points as AgentX-style sessions, conc = live sessions; "
                  "its measured phase, and every step of its loop: primers and warm-ups send and finish "
                  "a request per lane per step) vs the fixed-length loop (eb), same rounds:", "",
                  "| conc | harness us/step ebr / eb (<= 1.10) | harness us/step ebr | harness us/step eb "
                  "| harness us/step py | steps ebr | ebr, every step: us/step (steps) |",
                  "|---|---|---|---|---|---|---|"]
        for c in concs:
            rr = [r["ebr"][c]["harness_us"] / r["eb"][c]["harness_us"] for r in rounds if "ebr" in r and "eb" in r]
            lines.append(f"| {c} | {mmm(rr, '.3f')} | {mmm(get('ebr', c, 'harness_us'), '.0f')} "
                         f"| {mmm(get('eb', c, 'harness_us'), '.0f')} | {mmm(get('py', c, 'harness_us'), '.0f')} "
                         f"| {mmm(get('ebr', c, 'steps'), '.0f')} "
                         f"| {mmm(get('ebr', c, 'all_harness_us'), '.0f')} ({mmm(get('ebr', c, 'all_steps'), '.0f')}) |")
    lines.append("")
    for c in concs:
        r = ratio("eb", "py", c)
        if r and not meta.get("null_engine"):
            lines.append(f"conc {c}: eb/py {med(r):.3f} (median) {'meets' if med(r) >= 0.99 else 'misses'} >= 0.99")
        r = ratio("eb", "vb", c)
        if r:
            lines.append(f"conc {c}: eb/vb {med(r):.3f} (median) {'meets' if med(r) >= 1.0 else 'misses'} >= 1.0")
        h = get("eb", c, "harness_us")
        hp = get("py", c, "harness_us")
        if h and hp:
            lines.append(f"conc {c}: harness us/step eb {med(h):.0f} vs py {med(hp):.0f} (medians) "
                         f"{'meets' if med(h) < med(hp) else 'misses'} eb < py")
        st = ratio_of("eb", "py", c, "core_step_us")
        if st and not meta.get("null_engine"):
            lines.append(f"conc {c}: mean engine step eb / py {med(st):.4f} (median of rounds) "
                         f"{'meets' if abs(med(st) - 1) <= 0.01 else 'misses'} within 1%")
            # The issue-46 targets: the step ratio's 95% CI inside [0.99, 1.01],
            # out tok/s eb/py >= 0.99 with its CI, over interleaved rounds.
            lines.append(f"conc {c}: engine step eb / py, geometric mean with 95% CI: {ci_text(st)}: "
                         f"{within_1pct(st)} inside [0.99, 1.01]")
            rr = ratio("eb", "py", c)
            lines.append(f"conc {c}: out tok/s eb / py, geometric mean with 95% CI: {ci_text(rr)}")
            # Which steps differ: the long ones (a prefill's chunk) or the rest.
            for part, pick in (("long", True), ("short", False)):
                pr = step_part_ratios(rounds, "eb", "py", c, pick)
                if pr:
                    lines.append(f"conc {c}: engine steps {'over' if pick else 'up to'} 5x the median ({part}) "
                                 f"eb / py: {ci_text(pr)}")
            # Crossover pairs: a round and the next, run in opposite orders.
            for key, what in (("core_step_us", "mean"), ("core_step_median_us", "median")):
                pr = abba_pairs(rounds, "eb", "py", c, key)
                if pr:
                    lines.append(f"conc {c}: {what} engine step eb / py over ABBA pairs of rounds: "
                                 f"{ci_text(pr, 'pairs')}: {within_1pct(pr)} inside [0.99, 1.01]")
    return "\n".join(lines)


def threads_table(rounds, concs, loops=("eb", "eb0", "ebe", "ebq", "ebr", "py", "pye")):
    """Markdown lines: per conc and loop, medians over the rounds of what
    each thread did during the point's measured steps (bench/threads.py):
    CPU as a share of the window (100% = one core) and involuntary context
    switches per second (the core taken away); [] when no run has them."""
    med = statistics.median
    rows = []
    for c in concs:
        for h in loops:
            runs = [r[h][c]["threads"] for r in rounds if h in r and c in r[h] and r[h][c].get("threads")]
            if not runs:
                continue

            def rate(label, key):
                return med([t["threads"].get(label, {}).get(key, 0) / t["window_s"] for t in runs])

            def group(pred, key):
                return med([sum(v[key] for k, v in t["threads"].items() if pred(k)) / t["window_s"] for t in runs])

            labels = sorted({k for t in runs for k in t["threads"]}, key=lambda k: -rate(k, "cpu_s"))
            engine_rest = [k for k in labels if k.startswith("engine:") and k != "engine:main"]
            others = [k for k in labels if not k.startswith("engine:")]

            def named(ks):
                shown = [f"{k.split(':', 1)[0] + ':' if not k.startswith('engine:') else ''}{k.split(':', 1)[1]} "
                         f"{rate(k, 'cpu_s') * 100:.1f}%/{rate(k, 'invol'):.0f}" for k in ks[:4]
                         if rate(k, "cpu_s") >= 0.001 or rate(k, "invol") >= 1]
                return ", ".join(shown) or "-"

            # Runs before 2026-12-06 did not read the faults.
            counted = all("minflt" in v for t in runs for v in t["threads"].values())
            faults = f"{group(lambda k: k.startswith('engine:'), 'minflt'):.0f}" if counted else "-"
            rows.append(
                f"| {c} | {h} | {med([t['window_s'] for t in runs]):.1f} "
                f"| {rate('engine:main', 'cpu_s') * 100:.1f}% | {rate('engine:main', 'invol'):.0f} "
                f"| {rate('engine:main', 'vol'):.0f} "
                f"| {group(lambda k: k.startswith('engine:') and k != 'engine:main', 'cpu_s') * 100:.1f}% "
                f"| {group(lambda k: k.startswith('engine:') and k != 'engine:main', 'invol'):.0f} "
                f"| {named(engine_rest)} | {faults} "
                f"| {group(lambda k: not k.startswith('engine:'), 'cpu_s') * 100:.1f}% "
                f"| {named(others)} |")
    if not rows:
        return []
    return ["", "Threads during the measured steps (medians over the rounds; bench/threads.py reads /proc every "
            "0.25 s): CPU as a share of the window (100% = one core), context switches per second, "
            "involuntary = the scheduler took the thread's core for another runnable thread; engine = the "
            "process stepping vLLM (main: the thread that steps it; the rest: OpenMP's team, gloo, ...), "
            "other = every other process of the loop (enginebench's orchestrator); named threads as "
            "name CPU%/involuntary per s; engine faults/s = the engine process's minor page faults "
            "(memory the allocator had given back, touched again).", "",
            "| conc | loop | window s | engine main CPU | main invol/s | main vol/s | engine rest CPU "
            "| rest invol/s | engine rest, top | engine faults/s | other processes CPU | other, top |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|", *rows]


# Two-sided 95% Student t quantiles t(0.975, df), df = 1..30 (standard
# tables); the normal quantile 1.96 beyond.
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]


def t975(df):
    return _T975[df - 1] if df <= len(_T975) else 1.96


def ratio_ci(ratios):
    """(geometric mean, lo, hi) of per-round ratios with a 95% paired t
    interval on their logs (the method `ab` uses for repeats,
    docs/ab.md); None with fewer than 2 rounds."""
    import math

    if len(ratios) < 2:
        return None
    logs = [math.log(x) for x in ratios]
    m, sd = statistics.mean(logs), statistics.stdev(logs)
    half = t975(len(logs) - 1) * sd / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def rounds_to_resolve(ratios, within=0.01):
    """How many rounds would make the 95% interval's half-width <= `within`
    (as a log ratio) at the spread these rounds showed: the least n with
    t(0.975, n-1) x sd / sqrt(n) <= ln(1 + within); None with fewer than
    2 rounds, and '>1000' past that."""
    import math

    if len(ratios) < 2:
        return None
    sd = statistics.stdev([math.log(x) for x in ratios])
    target = math.log(1 + within)
    for n in range(2, 1001):
        if t975(n - 1) * sd / math.sqrt(n) <= target:
            return n
    return ">1000"


def within_1pct(ratios):
    """Issue 46's verdict on a ratio's 95% CI (ratio_ci): "meets" when it
    lies inside [0.99, 1.01], "misses" when it lies wholly outside, else
    "cannot decide"."""
    ci = ratio_ci(ratios)
    if ci and 0.99 <= ci[1] and ci[2] <= 1.01:
        return "meets"
    if ci and (ci[2] < 0.99 or ci[1] > 1.01):
        return "misses"
    return "cannot decide"


def ci_text(ratios, unit="rounds"):
    ci = ratio_ci(ratios)
    if ci is None:
        return "-"
    return f"{ci[0]:.4f} [{ci[1]:.4f}, {ci[2]:.4f}] ({len(ratios)} {unit}; {rounds_to_resolve(ratios)} resolve ±1%)"


def step_part_ratios(rounds, h1, h2, c, long):
    """Per-round ratios h1/h2 of the summed engine step times of one part
    of the steps: those over 5x the median step (`long`: at these fixed
    lengths, steps that prefill a wave's prompts, ~14x a decode step on
    the bundled model) or the rest. Both loops run the same requests
    through the same scheduler, so they have the same steps; a round
    where the parts' counts differ is left out."""
    out = []
    for r in rounds:
        try:
            a, b = r[h1][c]["core_steps_ms"], r[h2][c]["core_steps_ms"]
        except KeyError:
            continue

        def part(xs):
            m = statistics.median(xs)
            return [x for x in xs if (x > 5 * m) == long]

        pa, pb = part(a), part(b)
        if pa and len(pa) == len(pb):
            out.append(sum(pa) / sum(pb))
    return out


def abba_pairs(rounds, h1, h2, c, key):
    """Per-pair ratios h1/h2 of `key` over crossover pairs: rounds 2k-1
    and 2k when they ran h1 and h2 in opposite orders (AB then BA). A
    pair's ratio is the geometric mean of its two rounds' ratios, which
    cancels a drift of the machine's speed linear over the pair (a round
    alone carries it with the sign of its order). [] when the rounds do
    not pair so."""
    import math

    out = []
    for a, b in zip(rounds[0::2], rounds[1::2]):
        oa = [h for h in a.get("order", ()) if h in (h1, h2)]
        ob = [h for h in b.get("order", ()) if h in (h1, h2)]
        if len(oa) != 2 or oa != ob[::-1]:
            return []
        try:
            ra, rb = (r[h1][c][key] / r[h2][c][key] for r in (a, b))
        except (KeyError, ZeroDivisionError):
            return []
        out.append(math.sqrt(ra * rb))
    return out


def vllm_version(a):
    import glob
    import re

    for f in glob.glob(os.path.join(a.home, "venv", "lib", "python3*", "site-packages", "vllm", "_version.py")):
        m = re.search(r"__version__ = version = '([^']+)'", open(f).read())
        if m:
            return m.group(1)
    return "?"


if __name__ == "__main__":
    main()
