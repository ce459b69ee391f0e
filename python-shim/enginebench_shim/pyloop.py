"""The floor any harness can reach: a minimal pure-Python closed loop over the
shim's `Engine` (the same class, flags, SamplingParams and token-id prompts
enginebench uses), for bench/harness_overhead.py.

    python pyloop.py JOB.json OUT.json

JOB.json: {"argv": [model, flag, ...],          # the `vllm serve` list the worker gets
           "points": [{"isl", "osl", "conc", "warmups", "num_prompts", "seed"}, ...],
           "prompts": FILE,                     # optional: {"<conc>": {"prompts", "output_lens"}}
           "promptgen": BIN}                    # else: draw them with bench/promptgen

Like enginebench's worker it builds one engine in-process and runs each point
on it: `warmups` requests closed-loop at `conc` (excluded), then `num_prompts`
requests keeping `conc` in flight, adding requests before each step exactly as
src/workload/driver.rs does, and reading each step's outputs in plain Python
(on the shim's core step path, vLLM's `EngineCoreOutput`s themselves). Per
point it reports output tok/s (output tokens / the time from the first add to
the last step), steps, wall time per step, the time spent outside the shim's
`Engine.step()` per step, and the harness's own time per step: the loop's
wall time minus the time inside the engine core's step and add_request
(`Probe`), divided by the steps, with its distribution over the steps.

The environment must be the worker's: the caller sets OMP_NUM_THREADS and the
recipe's variables (VLLM_CPU_KVCACHE_SPACE ...); in-process mode is forced
here, as enginebench forces it.
"""

import json
import os
import subprocess
import sys
import time


def _load_engine_class():
    # Run as a file (not `-m`): import the shim next to this file.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))
    from enginebench_shim.engine import Engine
    return Engine


def _draw(promptgen, allowed, point):
    args = [promptgen, str(point["isl"]), str(point["osl"]),
            str(point["warmups"] + point["num_prompts"]), str(point["seed"])]
    out = subprocess.run(args, input=json.dumps(allowed), capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)


def null_core(core_client, device=None):
    """Replaces vLLM's in-process engine core (`InprocClient.get_output`,
    `add_request`, `abort_requests`) by a stand-in with no model: every step
    gives each running request one token as a real `EngineCoreOutput` (with
    the QUEUED/SCHEDULED events and `PrefillStats` of a first output, a
    LENGTH finish at max_tokens) and a `SchedulerStats`. Everything above the
    core is vLLM's own: the input processor, and on the engine step path
    LLMEngine.step()'s output processor and detokenizer. The engine is still
    built (model loaded); only the core's work is gone.

    EB_NULL_STEP_MS=T makes each step take T ms in all (its own work
    included): spinning on the clock (EB_NULL_STEP_MODE=spin, the default:
    a GPU step's host thread is busy too, and sleeping overshoots by tens of
    us), or sleeping (=sleep). A loop's time outside the step is then the
    harness's own, at a GPU's step pace (bench/harness_overhead.py
    --null-engine --null-step-ms). Both are a synchronous engine: nothing
    runs while the harness works, so its gap adds to every step.

    EB_NULL_STEP_MODE=async is vLLM's default on GPUs instead, async
    scheduling (vllm/config/vllm.py turns it on unless an option rules it
    out): EngineCore.step_with_batch_queue launches the next batch before
    it blocks on the oldest of at most two in flight (v1/engine/core.py).
    Here a "device" runs each launched batch for T ms on its own clock
    (starting when the previous batch ends, or at the launch when the device
    was idle); a step launches a batch from the running requests (each
    scheduled one token ahead, so a request at max_tokens is not scheduled
    again), returns nothing while the queue fills, and otherwise waits
    (asleep: the GIL is free, as in Future.result()) for the oldest batch
    to end and returns its outputs. The harness's gap then overlaps the
    batch in flight: the device idles only when the gap outlasts it.
    `device`, when given, gets each batch's (start, end) on time.monotonic.

    EB_NULL_EVICT_MB=N: the stand-in copies N MiB each step (inside the
    step), leaving the caches as cold as a real step that streams the
    weights does."""
    from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, EngineCoreOutputs, FinishReason
    from vllm.v1.metrics.stats import PrefillStats, SchedulerStats

    cls = core_client.InprocClient
    evict_mb = int(os.environ.get("EB_NULL_EVICT_MB", "0"))
    evict = (bytearray(evict_mb << 20), bytearray(evict_mb << 20)) if evict_mb else None
    step_s = float(os.environ.get("EB_NULL_STEP_MS", "0")) / 1e3
    mode = os.environ.get("EB_NULL_STEP_MODE", "spin")
    if mode not in ("spin", "sleep", "async"):
        raise ValueError(f"EB_NULL_STEP_MODE={mode!r}: expected spin, sleep or async")
    spin = mode == "spin"
    clock = time.monotonic
    token = int(os.environ.get("EB_NULL_TOKEN", "330"))
    length = FinishReason.LENGTH

    def running(self):
        r = self.__dict__.get("_null_running")
        if r is None:
            r = self._null_running = {}
        return r

    def add_request(self, request):
        # [max_tokens, generated, prompt tokens, QUEUED event, the request].
        # The request (its prompt list) is held until it finishes and freed
        # inside the step that finishes it, as vLLM's scheduler holds its
        # Request and frees it in that step (`_free_request`); dropped here,
        # a 100k-token prompt's list would be freed in the harness's gap.
        running(self)[request.request_id] = [request.sampling_params.max_tokens, 0,
                                             len(request.prompt_token_ids),
                                             EngineCoreEvent.new_event(EngineCoreEventType.QUEUED), request]

    def batch(self):
        """One token for every running request: (outputs, scheduler stats)."""
        r = running(self)
        outs = []
        done = []
        for rid, st in r.items():
            st[1] += 1
            fin = st[1] >= st[0]
            if st[1] == 1:
                pf = PrefillStats()
                pf.set(st[2], 0, 0)
                ev = [st[3], EngineCoreEvent.new_event(EngineCoreEventType.SCHEDULED)]
                outs.append(EngineCoreOutput(request_id=rid, new_token_ids=[token],
                                             finish_reason=length if fin else None, events=ev, prefill_stats=pf))
            else:
                outs.append(EngineCoreOutput(request_id=rid, new_token_ids=[token],
                                             finish_reason=length if fin else None))
            if fin:
                done.append(rid)
        for rid in done:
            del r[rid]
        return outs, (SchedulerStats(num_running_reqs=len(outs)) if outs else None)

    def get_output(self):
        t0 = clock()
        if evict is not None:
            evict[0][:] = evict[1]
        if mode == "async":
            return async_step(self, t0)
        outs, stats = batch(self)
        result = EngineCoreOutputs(outputs=outs, scheduler_stats=stats)
        if step_s:
            end = t0 + step_s
            if spin:
                while clock() < end:
                    pass
            else:
                left = end - clock()
                if left > 0:
                    time.sleep(left)
        return result

    def async_step(self, t0):
        # [(end on the device clock, outputs, stats)], newest first, and
        # when the device is free: EngineCore.batch_queue of size 2.
        queue = self.__dict__.setdefault("_null_queue", [])
        if running(self):
            outs, stats = batch(self)
            start = max(t0, self.__dict__.get("_null_free", 0.0))
            end = self._null_free = start + step_s
            if device is not None:
                device.append((start, end))
            queue.insert(0, (end, outs, stats))
            if len(queue) < 2:
                return EngineCoreOutputs()
        if not queue:
            return EngineCoreOutputs()
        end, outs, stats = queue.pop()
        left = end - clock()
        if left > 2e-4:
            time.sleep(left - 2e-4)
        while clock() < end:
            pass
        return EngineCoreOutputs(outputs=outs, scheduler_stats=stats)

    def abort_requests(self, request_ids):
        r = running(self)
        for rid in request_ids:
            r.pop(rid, None)

    cls.add_request = add_request
    cls.get_output = get_output
    cls.abort_requests = abort_requests


class Probe:
    """Times the engine core's own work: the in-process client's
    `get_output()` (one engine-core step: schedule, execute, update) and
    `add_request()` (the core's request set-up and block hashing), and the
    shim's hooks that run inside the core's step (its scheduler wrapper's
    `compute_iteration_details` and `_iteration_details`, and its stat
    logger's `record` where vLLM calls it), on time.monotonic
    (CLOCK_MONOTONIC, the clock of Rust's Instant). Everything else between
    two core steps is the harness's: its own loop, the Rust<->Python
    crossing, vLLM's input processor, and on the engine step path
    LLMEngine.step()'s output processing. pyloop uses it directly;
    bench/probe/sitecustomize.py installs the same probe in enginebench's
    embedded interpreter.

    `install()` must run before vLLM is imported: it patches the classes as
    their modules load (an import hook), so it works in any interpreter.
    With EB_NULL_ENGINE=1 in the environment it first puts `null_core`'s
    stand-in in place of vLLM's engine core, and times that."""

    def __init__(self):
        self.null = os.environ.get("EB_NULL_ENGINE") == "1"
        self.t, self.d = [], []      # InprocClient.get_output: engine-core steps
        self.at, self.ad = [], []    # InprocClient.add_request
        self.ht, self.hd = [], []    # shim hooks inside step()
        self.dev = []                # null engine, async mode: device batches (start, end)
        self.gt, self.gd, self.gg = [], [], []  # Python's cyclic GC: start, duration, generation
        self.pt, self.pd = [], []    # vLLM's input processor (process_inputs), harness time

    def clear(self):
        for x in (self.t, self.d, self.at, self.ad, self.ht, self.hd, self.dev, self.gt, self.gd, self.gg, self.pt, self.pd):
            x.clear()

    def gcs(self):
        return list(zip(self.gt, self.gd, self.gg))

    def steps(self):
        return list(zip(self.t, self.d))

    def adds(self):
        return list(zip(self.at, self.ad))

    def hooks(self):
        return list(zip(self.ht, self.hd))

    def as_json(self):
        return {"t": self.t, "d": self.d, "at": self.at, "ad": self.ad, "ht": self.ht, "hd": self.hd,
                "dev": self.dev, "gt": self.gt, "gd": self.gd, "gg": self.gg, "pt": self.pt, "pd": self.pd}

    def _timed(self, fn, starts, durs):
        mono = time.monotonic

        def timed(*a, **kw):
            t = mono()
            out = fn(*a, **kw)
            starts.append(t)
            durs.append(mono() - t)
            return out

        timed.__wrapped__ = fn
        return timed

    def patch(self, llm_engine):
        """Patches vLLM once `vllm.v1.engine.llm_engine` is loaded (it
        imports the core client, so that is loaded too)."""
        import vllm.v1.utils as vutils
        from vllm.v1.engine import core_client
        from vllm.v1.metrics.loggers import StatLoggerBase

        if self.null:
            null_core(core_client, self.dev)
        cls = core_client.InprocClient
        cls.get_output = self._timed(cls.get_output, self.t, self.d)
        cls.add_request = self._timed(cls.add_request, self.at, self.ad)
        # vLLM's input processor, which the harness calls between steps: its
        # share of a send (issue 46). 0.24+ names the class InputProcessor.
        try:
            from vllm.v1.engine.input_processor import InputProcessor
        except ImportError:
            InputProcessor = None
        if InputProcessor is not None:
            InputProcessor.process_inputs = self._timed(InputProcessor.process_inputs, self.pt, self.pd)
        # The shim imports this when it builds its engine, after vLLM's own
        # modules bound the original.
        vutils.compute_iteration_details = self._timed(vutils.compute_iteration_details, self.ht, self.hd)
        # The shim's own count (what it uses after its first checks): loaded
        # already, since the shim imports vLLM inside Engine(); its scheduler
        # wrapper reads the module global when the engine is built. Module
        # name: pyloop imports the package, enginebench loads the source as
        # `enginebench_shim_engine` (src/engine/vllm.rs).
        shim = sys.modules.get("enginebench_shim.engine") or sys.modules.get("enginebench_shim_engine")
        if shim is None:
            raise RuntimeError("Probe: the shim must be imported before vLLM's engine")
        shim._iteration_details = self._timed(shim._iteration_details, self.ht, self.hd)
        probe = self

        def init_subclass(sub, **kw):
            if sub.__module__.startswith("enginebench_shim") and "record" in sub.__dict__:
                sub.record = probe._timed(sub.__dict__["record"], probe.ht, probe.hd)

        StatLoggerBase.__init_subclass__ = classmethod(init_subclass)

    def install(self):
        import gc
        import importlib.abc
        import importlib.util

        target = "vllm.v1.engine.llm_engine"
        probe = self
        mono = time.monotonic
        began = []

        # Every collection of Python's cyclic GC, wherever it runs (inside a
        # core step or between steps): a stall no step timer names.
        def on_gc(phase, info):
            if phase == "start":
                began.append(mono())
            elif began:
                t = began.pop()
                probe.gt.append(t)
                probe.gd.append(mono() - t)
                probe.gg.append(info.get("generation", -1))

        gc.callbacks.append(on_gc)

        class Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target_=None):
                if name != target:
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(name)
                exec_module = spec.loader.exec_module

                def exec_and_patch(module):
                    exec_module(module)
                    probe.patch(module)

                spec.loader.exec_module = exec_and_patch
                return spec

        sys.meta_path.insert(0, Finder())


def closed_loop(engine, prompts, output_lens, conc, first_rid):
    """Keeps `conc` requests in flight until all are done, as
    src/workload/driver.rs does. Returns (start, end, output tokens,
    [(start, end)] of the shim's step() calls), on time.perf_counter."""
    clock = time.perf_counter
    n = len(prompts)
    step = engine.step
    add = engine.add_tokens
    marks = []
    nxt = in_flight = finished = tokens = 0
    t0 = clock()
    end = t0
    while finished < n:
        while in_flight < conc and nxt < n:
            add(first_rid + nxt, prompts[nxt], output_lens[nxt], True)
            nxt += 1
            in_flight += 1
        s = clock()
        out = step()
        end = clock()
        marks.append((s, end))
        raw, deltas = out[0], out[1]
        if raw is not None:  # the core path: vLLM's EngineCoreOutputs
            for o in raw:
                tokens += len(o.new_token_ids)
                if o.finish_reason is not None:
                    finished += 1
                    in_flight -= 1
        if deltas is not None:  # through vLLM's output processor
            for d in deltas:
                tokens += d[1]
                if d[2]:
                    finished += 1
                    in_flight -= 1
    return t0, end, tokens, marks


def harness_per_step(t0, marks, inner, adds, hooks=()):
    """The harness's own time before and around each step, s: the gap since
    the previous step returned (since the loop started for the first), plus
    the step call's time outside the engine core's step, minus the time
    inside the core's add_request() in that gap, plus the shim's hooks
    inside that step. Sums to wall - core step time - core add time + hook
    time. (The core's add_request is the engine's work: vLLM's engine core
    does it in its own process under `vllm serve`.)

    marks: [(start, end)] of the harness's step calls, on the harness's clock
    (t0 = when the loop started); inner: [(start, duration)] of the core's
    steps, one per mark; adds: [(start, duration)] of the core's add_request()
    calls of this loop; hooks: [(start, duration)] of the shim's hooks;
    inner, adds and hooks on one clock (not necessarily marks')."""
    out = []
    j = h = 0
    prev = t0
    hooks = sorted(hooks)
    for (s, e), (t, d) in zip(marks, inner, strict=True):
        a = 0.0
        while j < len(adds) and adds[j][0] < t:
            a += adds[j][1]
            j += 1
        k = 0.0
        while h < len(hooks) and hooks[h][0] < t + d:
            if hooks[h][0] >= t:
                k += hooks[h][1]
            h += 1
        out.append((s - prev) + (e - s - d) - a + k)
        prev = e
    if j != len(adds):
        raise ValueError(f"{len(adds) - j} add_request calls after the last step")
    return out


def percentile(xs, q):
    """The q-th percentile (0..100) of xs, linear between closest ranks (numpy's default)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def device_busy(device, lo, hi):
    """The share of [lo, hi] (s) covered by the null device's batches
    [(start, end)] (they never overlap: each starts when the last ends)."""
    busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in device)
    return busy / (hi - lo) if hi > lo else 0.0


def gap_causes(inner, gcs, over_s=0.010):
    """The gaps between engine-core steps (end of one to the start of the
    next) longer than `over_s`, and how much of them Python's cyclic GC
    took: {"gaps_over_10ms", "gaps_over_10ms_gc" (GC took half or more of
    the gap), "gap_max_ms", "gap_max_gc_ms", "gc_ms" (all collections in the
    window, inside steps or not), "gc_full" (generation-2 collections),
    "gc_max_ms"}; `gcs`: [(start, duration, generation)] on the steps' clock."""
    lo, hi = inner[0][0], inner[-1][0] + inner[-1][1]
    gcs = sorted((t, d, g) for t, d, g in gcs if lo <= t <= hi)

    def gc_in(a, b):
        return sum(max(0.0, min(b, t + d) - max(a, t)) for t, d, _ in gcs if t < b and t + d > a)

    long_gaps = []
    for (t1, d1), (t2, _) in zip(inner, inner[1:]):
        if t2 - (t1 + d1) > over_s:
            long_gaps.append((t2 - (t1 + d1), gc_in(t1 + d1, t2)))
    worst = max(long_gaps, default=(0.0, 0.0))
    return {
        "gaps_over_10ms": len(long_gaps),
        "gaps_over_10ms_gc": sum(1 for g, c in long_gaps if c >= g / 2),
        "gap_max_ms": max((t2 - (t1 + d1) for (t1, d1), (t2, _) in zip(inner, inner[1:])), default=0.0) * 1e3,
        "gap_max_gc_ms": worst[1] * 1e3 if long_gaps and worst[0] == max(g for g, _ in long_gaps) else 0.0,
        "gc_ms": sum(d for _, d, _ in gcs) * 1e3,
        "gc_full": sum(1 for _, _, g in gcs if g == 2),
        "gc_max_ms": max((d for _, d, _ in gcs), default=0.0) * 1e3,
    }


def summary(t0, marks, inner, adds, hooks=(), device=(), gcs=()):
    """Per-step figures of one loop, us: the harness time per step (mean,
    median, p99, max; see harness_per_step), outside-step() time (the step
    call's own overhead left out), crossing (the step call's time outside
    the engine core's step), the shim's hooks inside the core's step, the
    mean add_request() time per request, the engine core's mean and median
    step time,
    and the share of the loop's wall time the engine core was not stepping
    (from the first add_request to the last step's end, on the probe's clock);
    with the null engine's device batches (async mode, `device`), the share
    of that window the device was idle, which is what the harness's gap
    costs there."""
    import statistics

    n = len(marks)
    wall = marks[-1][1] - t0
    per = harness_per_step(t0, marks, inner, adds, hooks)
    crossing = [(e - s) - d for (s, e), (_, d) in zip(marks, inner)]
    start = min(adds[0][0], inner[0][0]) if adds else inner[0][0]
    window = inner[-1][0] + inner[-1][1] - start
    stepping = sum(d for _, d in inner)
    return {
        "steps": n,
        # The loop's stepping window on the probe's clock (bench/threads.py
        # reads each thread's counters over it).
        "window": [start, inner[-1][0] + inner[-1][1]],
        "step_wall_us": wall / n * 1e6,
        "core_step_us": stepping / n * 1e6,
        # Robust to a step the VM stalled (a noisy host's steal time).
        "core_step_median_us": statistics.median(d for _, d in inner) * 1e6,
        # Every step, ms: which steps a loop slows (a prefill's or a decode's).
        "core_steps_ms": [round(d * 1e3, 3) for _, d in inner],
        "not_stepping": 1.0 - stepping / window if window > 0 else 0.0,
        "harness_us": sum(per) / n * 1e6,
        "harness_median_us": statistics.median(per) * 1e6,
        "harness_p99_us": percentile(per, 99) * 1e6,
        "harness_max_us": max(per) * 1e6,
        "outside_step_us": (wall - sum(e - s for s, e in marks)) / n * 1e6,
        "crossing_us": sum(crossing) / n * 1e6,
        "crossing_median_us": statistics.median(crossing) * 1e6,
        "hooks_us": sum(d for t, d in hooks if inner[0][0] <= t <= inner[-1][0] + inner[-1][1]) / n * 1e6,
        "add_request_us": sum(d for _, d in adds) / len(adds) * 1e6 if adds else 0.0,
        **({"device_idle": 1.0 - device_busy(device, start, inner[-1][0] + inner[-1][1])} if device else {}),
        **gap_causes(inner, gcs),
    }


def main(job_path, out_path):
    with open(job_path) as f:
        job = json.load(f)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    probe = Probe()
    probe.install()
    Engine = _load_engine_class()
    started = time.monotonic()
    engine = Engine(job["argv"])
    engine_start_s = time.monotonic() - started

    allowed = set(engine.allowed_token_ids)
    prepared = None
    if job.get("prompts") and os.path.exists(job["prompts"]):
        with open(job["prompts"]) as f:
            prepared = json.load(f)
    rid = 0
    results = []
    drawn = {}
    for point in job["points"]:
        key = str(point["conc"])
        if prepared is not None and key in prepared:
            w = prepared[key]
        else:
            w = _draw(job["promptgen"], engine.allowed_token_ids, point)
        drawn[key] = w
        prompts, lens = w["prompts"], w["output_lens"]
        assert len(prompts) == point["warmups"] + point["num_prompts"], "prompt count"
        assert all(t in allowed for p in prompts for t in p), "prompt token outside the vocabulary"
        k = point["warmups"]
        if k:
            closed_loop(engine, prompts[:k], lens[:k], point["conc"], rid)
            rid += k
        probe.clear()
        t0, end, tokens, marks = closed_loop(engine, prompts[k:], lens[k:], point["conc"], rid)
        rid += point["num_prompts"]
        inner, adds, hooks, device, gcs = probe.steps(), probe.adds(), probe.hooks(), list(probe.dev), probe.gcs()
        assert len(adds) == point["num_prompts"]
        assert tokens == sum(lens[k:]), f"got {tokens} output tokens, expected {sum(lens[k:])}"
        results.append({
            **point,
            "output_tokens": tokens,
            "duration_s": end - t0,
            "output_throughput": tokens / (end - t0),
            **summary(t0, marks, inner, adds, hooks, device, gcs),
        })
    engine.shutdown()
    out = {"engine_start_s": engine_start_s, "points": results,
           "env": {k: os.environ.get(k) for k in
                   ("OMP_NUM_THREADS", "VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING")}}
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
    if job.get("prompts") and prepared is None:
        with open(job["prompts"], "w") as f:
            json.dump(drawn, f)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: pyloop.py JOB.json OUT.json")
    main(sys.argv[1], sys.argv[2])
