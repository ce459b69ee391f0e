"""The thin Python side of enginebench: one vLLM engine, driven by Rust.

Rust owns the request loop and every clock. This module only
  * builds the engine from a `vllm serve` flag list through vLLM's own serve
    argument parser (no flag list is kept here),
  * adds requests (token-id prompts for the perf sweep, text prompts for evals),
  * runs one engine step and returns what it produced in compact form, with
    the step's scheduler statistics and what vLLM's own per-request timings
    need,
  * shuts the engine down.

Between two engine steps, the least work (issues 34 and 37; the Rust side of
the same design is in src/workload/driver.rs):
  * one engine step, two paths (steppath.py has the details): "core" drives
    vLLM's in-process engine core directly (requests through vLLM's input
    processor, the core's `EngineCoreOutput`s handed to Rust as they are, no
    output processor, detokenizer or stat logger between steps); "engine"
    is `LLMEngine.add_request/step()` with vLLM's output processor, the
    fallback where this vLLM lacks what the core path needs
    (`ENGINEBENCH_STEP_PATH=engine` forces it). Text requests (evals, stop
    strings) always go through the output processor, only theirs;
  * requests known before a loop starts are prepared then
    (`prepare_tokens`: vLLM's input processor makes the EngineCoreRequest;
    `add_prepared` at the send stamps id and arrival time);
  * prompts arrive as lists of ints (Rust builds them from one shared int
    object per vocabulary id): vLLM 0.23-0.33's in-process core copies and
    appends to the list, an int32 ndarray is refused by 0.32's input
    processor (`if prompt_ids:`), and its validation (`max`/`min` over the
    ids, O(prompt) Python) is vLLM's own cost of any in-process send;
  * vLLM's per-request timings for the cross-check come from the output
    processor on the engine path, and are rebuilt in Rust from the core's
    outputs on the core path (the request's arrival time, the step's wall
    clock, the core's timestamps and events).
Everything crossing into Rust is plain ints, floats, strings and lists, or
the core's own output objects, so a step costs as little as possible
outside vLLM.
"""

import copy
import gc
import json
import os
import sys
import time

try:  # as a package (the pure-Python loop of bench/, tests)
    from enginebench_shim import compat, cpu_collectives, knobs, steppath
except ImportError:  # compiled into the worker module, loaded as top-level modules
    import enginebench_compat as compat
    import enginebench_cpu_collectives as cpu_collectives
    import enginebench_knobs as knobs
    import enginebench_steppath as steppath


class FlagError(ValueError):
    """A `vllm serve` flag that vLLM's own parser rejected."""


def _serve_parser():
    parser = compat.serve_parser()

    def _error(message):
        # argparse would print usage and sys.exit(2); Rust wants an exception.
        raise FlagError(message + _suggestions(parser, message))

    parser.error = _error
    return parser


def _suggestions(parser, message):
    """' (did you mean --x?)' for each unrecognized flag in an argparse message."""
    import difflib

    prefix = "unrecognized arguments:"
    if not message.startswith(prefix):
        return ""
    options = list(parser._option_string_actions)
    hints = []
    for token in message[len(prefix):].split():
        if token.startswith("--"):
            close = difflib.get_close_matches(token.split("=")[0], options, n=3, cutoff=0.75)
            if close:
                hints.append(f"{token}: did you mean {', '.join(close)}?")
    return (" (" + "; ".join(hints) + ")") if hints else ""


def check_args(argv, env_names):
    """Checks a `vllm serve` argument list without building anything.

    Returns a JSON string: {"error": message or null, "ignored": [flags that
    only the API server uses], "max_model_len": int or null,
    "tensor_parallel_size": int or null, "unknown_env": [VLLM_* names this
    vLLM does not know], "known_env_count": int, "unknown_flags": [tokens
    this vLLM's parser does not know; the rest is then parsed without them],
    "vllm_version": str, "platform": vLLM's device type here or null (none
    found: the flags are checked with vLLM's CPU platform standing in for
    the parser's defaults), "removed_env": {name: vLLM's own
    hint} for names vLLM lists as removed (0.34's
    `envs.removed_environment_variables`; it refuses them at engine start)}.
    Data parallelism is not judged here: the Rust side decides it for the
    flag and the environment alike (src/recipe/parallel.rs).
    """
    import dataclasses

    # Before anything resolves vLLM's platform: without one (a GPU build on
    # a machine without its GPU) the parser cannot be built.
    stand_in = compat.stand_in_platform_for_parsing()
    EngineArgs = compat.get("EngineArgs")
    known_env = set(compat.get("envs") or {})
    removed = getattr(sys.modules.get("vllm.envs"), "removed_environment_variables", None) or {}
    platform = None
    if not stand_in:
        try:
            platform = compat.platform()
        except compat.VllmUnusable as e:
            # No platform and no CPU stand-in (a vLLM without vLLM's own
            # platform resolver): its parser may still check the flags.
            if e.cause != "platform":
                raise
    out = {
        "platform": platform,
        "removed_env": {n: str(removed[n]) for n in env_names if n in removed},
        "error": None,
        "ignored": [],
        "max_model_len": None,
        "tensor_parallel_size": None,
        "unknown_env": sorted(n for n in env_names if n.startswith("VLLM_") and n not in known_env),
        "known_env_count": len(known_env),
        "unknown_flags": [],
        "vllm_version": getattr(__import__("vllm"), "__version__", None),
    }
    parser = _serve_parser()
    argv = list(argv)
    try:
        args = parser.parse_args(argv)
    except FlagError as e:
        # A flag of a newer or GPU-only vLLM: report it, and check the rest.
        prefix = "unrecognized arguments:"
        unknown = str(e).split(" (")[0][len(prefix):].split() if str(e).startswith(prefix) else []
        rest = list(argv)
        for token in unknown:
            if token in rest:
                rest.remove(token)
        try:
            if not unknown:
                raise e
            args = parser.parse_args(rest)
        except FlagError as e2:
            out["error"] = str(e2)
            return json.dumps(out)
        # Each with the nearest valid flags, if any (a typo reads as one).
        out["unknown_flags"] = [t + _suggestions(parser, prefix + " " + t) for t in unknown]
        argv = rest
    engine_fields = {f.name for f in dataclasses.fields(EngineArgs)}
    for token in argv:
        action = parser._option_string_actions.get(token.split("=")[0]) if token.startswith("-") else None
        if action is not None and action.dest not in engine_fields and action.dest != "help":
            out["ignored"].append(token.split("=")[0])
    spec_error = _check_speculative_config(getattr(args, "speculative_config", None))
    if spec_error:
        out["error"] = spec_error
        return json.dumps(out)
    mml = getattr(args, "max_model_len", None)
    out["max_model_len"] = mml if isinstance(mml, int) and mml > 0 else None
    out["tensor_parallel_size"] = getattr(args, "tensor_parallel_size", None)
    return json.dumps(out)


def knob_report(argv, env, unset, concs, quick_reduce=False):
    """The knob report of one engine configuration as JSON (knobs.py has
    what it holds); `quick_reduce` evaluates vLLM's quick all-reduce rule
    even where this configuration sets no VLLM_ROCM_QUICK_REDUCE_* (the
    other arm of an `ab` does)."""
    report = knobs.report(argv, env, unset=unset, concs=concs, parse=parse_serve_args, quick_reduce=quick_reduce)
    return json.dumps(report)


def _check_speculative_config(spec):
    """Checks a parsed `--speculative-config` dict against vLLM's own
    SpeculativeConfig without building it (that needs the target model):
    every key must be one of its fields and `method` one vLLM accepts.
    Returns an error message or None; a vLLM without these names is not
    checked."""
    if not isinstance(spec, dict):
        return None
    try:
        import dataclasses
        import difflib

        from vllm.config.speculative import SpeculativeConfig
    except ImportError:
        return None
    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    for key in spec:
        name = str(key).replace("-", "_")
        if name not in fields:
            close = difflib.get_close_matches(name, sorted(fields), n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            return f"--speculative-config: unknown key {key!r}{hint}"
    method = spec.get("method")
    return None if method is None else _check_speculative_method(SpeculativeConfig, method)


def _check_speculative_method(config_cls, method):
    """vLLM's own verdict on a speculative `method`, or None when it is
    accepted. vLLM 0.34 takes a built-in `SpeculativeMethod` or the name of
    a method a plugin registered (`method: SpeculativeMethod | str`, checked
    by SpeculativeConfig._validate_method against
    registered_speculative_methods(), vllm/config/speculative.py): its
    validator runs here after vLLM's general plugins are loaded, as the
    engine loads them. Earlier releases take only the `SpeculativeMethod`
    literals (a pydantic check of that type)."""
    validate = getattr(config_cls, "_validate_method", None)
    if callable(validate):
        try:
            from vllm.plugins import load_general_plugins

            load_general_plugins()
        except Exception:  # a plugin that fails to load is the engine's to report
            pass
        try:
            validate(method)
        except (ValueError, TypeError) as e:
            return f"--speculative-config: {e}"
        return None
    try:
        import typing

        from pydantic import TypeAdapter, ValidationError
        from vllm.config.speculative import SpeculativeMethod
    except ImportError:
        return None
    try:
        TypeAdapter(SpeculativeMethod).validate_python(method)
    except ValidationError:
        def flat(t):
            args = typing.get_args(t)
            return [v for a in args for v in (flat(a) if typing.get_args(a) else [a])] if args else [t]

        return (f"--speculative-config: method {method!r} is not one of vLLM's speculative methods: "
                + ", ".join(sorted(str(m) for m in flat(SpeculativeMethod))))
    return None


def parse_serve_args(argv):
    """Parses `argv` (model first, then flags) exactly as `vllm serve` does."""
    args = _serve_parser().parse_args(list(argv))
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    return args


def _stat_logger_class(sink):
    """A vLLM stat logger that keeps the latest scheduler stats of each step.

    `sink` is a three-item list: [latest SchedulerStats or None, preemptions
    since the last step(), speculative-decoding counters since the last
    step() or None]. It only keeps a reference: step() reads the fields, once
    per step (this runs inside every step, so it stays cheap).

    The speculative counters are vLLM's own `SpecDecodingStats` of each
    recorded step (vllm/v1/spec_decode/metrics.py: num_drafts,
    num_draft_tokens, num_accepted_tokens, num_accepted_tokens_per_pos),
    summed here as [drafts, draft_tokens, accepted, [accepted per position]]
    so that two records in one step() are not lost. A vLLM whose
    SchedulerStats has no `spec_decoding_stats` attribute gives None."""
    StatLoggerBase = compat.get("StatLoggerBase")
    if StatLoggerBase is None:
        return None

    class StepStatLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index=0):
            pass

        # Positional as every version passes them; the rest (mm_cache_stats,
        # engine_idx) differ between versions and are not used.
        def record(self, scheduler_stats, iteration_stats, *args, **kwargs):
            if scheduler_stats is not None:
                sink[0] = scheduler_stats
                sd = getattr(scheduler_stats, "spec_decoding_stats", None)
                if sd is not None:
                    try:
                        per_pos = list(getattr(sd, "num_accepted_tokens_per_pos", None) or [])
                        acc = sink[2]
                        if acc is None:
                            sink[2] = [sd.num_drafts, sd.num_draft_tokens, sd.num_accepted_tokens, per_pos]
                        else:
                            acc[0] += sd.num_drafts
                            acc[1] += sd.num_draft_tokens
                            acc[2] += sd.num_accepted_tokens
                            pos = acc[3]
                            for i, n in enumerate(per_pos):
                                if i < len(pos):
                                    pos[i] += n
                                else:
                                    pos.append(n)
                    except AttributeError:  # another vLLM's shape: no figures, no crash
                        pass
            if iteration_stats is not None and iteration_stats.num_preempted_reqs:
                sink[1] += iteration_stats.num_preempted_reqs

        def log_engine_initialized(self):
            pass

    return StepStatLogger


def _iteration_details(out):
    """(prefill reqs, prefill tokens, decode reqs, decode tokens) of a
    SchedulerOutput, as vLLM's `compute_iteration_details` counts them
    (a request is prefill while it has no output token: new requests and
    chunked-prefill continuations), without its per-request loop: in a decode
    step only `0 in num_output_tokens` looks at every request (C speed)."""
    nst = out.num_scheduled_tokens
    p_r = p_t = 0
    for r in out.scheduled_new_reqs:
        p_r += 1
        p_t += nst[r.req_id]
    cached = out.scheduled_cached_reqs
    if 0 in cached.num_output_tokens:
        for rid, n in zip(cached.req_ids, cached.num_output_tokens):
            if n == 0 and rid in nst:
                p_r += 1
                p_t += nst[rid]
    return (p_r, p_t, len(nst) - p_r, out.total_num_scheduled_tokens - p_t)


def _refuse_in_process_data_parallel(engine_args, environ=None):
    """An in-process LLMEngine with data_parallel_size > 1 joins a DP group
    at construction and waits for peers that never come (its master port is
    picked in this process: vllm/v1/engine/llm_engine.py:82-95,
    vllm/config/parallel.py:979-996) unless its peers are started too.

    The run plan starts one worker per DP rank when the flags or
    `VLLM_DP_SIZE` ask for DP (src/orchestrate/dp/), each with the DP flag
    removed and, for a lockstep group, `VLLM_DP_RANK` set; this is the
    backstop for what only vLLM's parser sees (a `--config` file's
    `data-parallel-size`) and for a `VLLM_DP_SIZE` in `environ` (the
    engine's environment) without a rank: bad input, up front."""
    dp = int(getattr(engine_args, "data_parallel_size", 1) or 1)
    spelled = f"--data-parallel-size {dp}"
    environ = environ if environ is not None else {}
    if dp <= 1 and "VLLM_DP_RANK" not in environ:
        try:
            dp = int(str(environ.get("VLLM_DP_SIZE", "1")).strip())
        except ValueError:  # vLLM's own int() fails on it at start, with its message
            dp = 1
        spelled = f"VLLM_DP_SIZE={dp} in the environment"
    if dp > 1 and getattr(engine_args, "distributed_executor_backend", None) != "external_launcher":
        raise FlagError(
            f"{spelled}: data parallelism (DP size {dp}) reached one in-process engine, which would wait for "
            "peer engines that never start: enginebench starts one worker per DP rank when the recipe's flags "
            "(-dp N) or its environment (VLLM_DP_SIZE) ask for it; put the DP size there, not in a --config file")


def _world_size_of(engine_args):
    """Worker processes the engine will have: PP x TP x PCP (vLLM's
    ParallelConfig.world_size, vllm/config/parallel.py:944-949)."""
    size = 1
    for name in ("pipeline_parallel_size", "tensor_parallel_size", "prefill_context_parallel_size"):
        size *= int(getattr(engine_args, name, 1) or 1)
    return size


def _use_worker_profiler(engine_args, profile_dir):
    """Configures vLLM's own worker profiler for `--profile`, which profiles
    every worker process (the model runs in them when the world size is > 1,
    so a profiler in this process would see no kernel): `--profiler-config`
    with `profiler=torch` and `torch_profiler_dir` (vllm/config/profiler.py),
    then LLMEngine.start_profile/stop_profile -> collective_rpc("profile") to
    every worker (vllm/v1/executor/abstract.py:285-305). Returns "vllm", or
    "torch" (a torch profiler in this process) on a vLLM without a
    per-window trace name (WorkerProfiler.set_output_name, 0.32) when the
    model runs in this process.

    Raises FlagError when the recipe sets its own --profiler-config (--profile
    owns it), or when this vLLM has no worker profiler and the world size is > 1."""
    import dataclasses

    current = getattr(engine_args, "profiler_config", None)
    if getattr(current, "profiler", None) is not None:
        raise FlagError("--profile configures vLLM's --profiler-config itself: remove --profiler-config from the recipe's args")
    config_cls = compat.get("ProfilerConfig")
    worker_profiler = compat.get("WorkerProfiler")
    usable = (config_cls is not None and worker_profiler is not None
              and hasattr(worker_profiler, "set_output_name")
              and hasattr(compat.get("LLMEngine"), "start_profile"))
    if not usable:
        if _world_size_of(engine_args) > 1:
            raise FlagError(
                f"--profile with a world size of {_world_size_of(engine_args)} needs vLLM's worker profiler "
                "(vLLM 0.32 or later: --profiler-config and per-window trace names); this vLLM has none, "
                "and a profiler in the engine-core process would see no kernel")
        return "torch"
    from vllm.platforms import current_platform

    device = str(current_platform.device_type)
    # Device kernels wherever there is a device (ROCm reports "cuda").
    activities = {"cpu": ["CPU"], "cuda": ["CPU", "CUDA"], "xpu": ["CPU", "XPU"]}.get(device, ["CPU"])
    wanted = {
        "profiler": "torch",
        "torch_profiler_dir": os.path.abspath(profile_dir),
        "torch_profiler_activities": activities,
        # Stacks and the printed op table cost time at stop; shapes and
        # memory are off by default already.
        "torch_profiler_with_stack": False,
        "torch_profiler_dump_cuda_time_total": False,
        "torch_profiler_record_shapes": False,
        "torch_profiler_with_memory": False,
        "torch_profiler_use_gzip": True,
    }
    fields = {f.name for f in dataclasses.fields(config_cls)}
    engine_args.profiler_config = config_cls(**{k: v for k, v in wanted.items() if k in fields})
    return "vllm"


class Engine:
    """One in-process vLLM engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`)."""

    def __init__(self, argv, profile_dir=None):
        # No platform (a CUDA build on a machine without a GPU): say so
        # before vLLM fails somewhere deep in the engine's construction.
        compat.platform()
        args = parse_serve_args(argv)
        engine_args = compat.get("EngineArgs").from_cli_args(args)
        _refuse_in_process_data_parallel(engine_args, os.environ)
        # A rank of a MoE DP group on CPU: what vLLM's CPU build lacks for
        # it, supplied here and in the workers vLLM spawns (None: nothing).
        self.cpu_supplied = cpu_collectives.enable()
        # --profile: how windows are profiled (None: no --profile).
        self.profiler_kind = _use_worker_profiler(engine_args, profile_dir) if profile_dir else None
        self._profile_dir = os.path.abspath(profile_dir) if profile_dir else None
        self._profile_windows = 0
        self._sink = [None, 0, None]
        logger = _stat_logger_class(self._sink)
        # OPENAI_API_SERVER gives `vllm serve` defaults (max_num_seqs, batched tokens).
        self.engine, self.kv_transfer_affinity = _build_undoing_kv_transfer_pinning(
            lambda: compat.get("LLMEngine").from_engine_args(
                engine_args,
                usage_context=compat.get("UsageContext").OPENAI_API_SERVER,
                stat_loggers=[logger] if logger is not None else None,
            ))
        # NixlKVConnectorStats dicts of the steps since take_kv_transfer_stats.
        self._kv_transfers = []
        self.step_stats = logger is not None
        self.model_config = self.engine.model_config
        tok = self.engine.get_tokenizer()
        self.tokenizer = tok
        special = set(getattr(tok, "all_special_ids", []) or [])
        vocab = len(tok)
        # Token ids a random prompt may use: the whole vocabulary minus special
        # tokens, as vLLM's RandomDataset samples them.
        self.allowed_token_ids = [i for i in range(vocab) if i not in special]
        self._scheduled = []
        self._last_stats = None
        self.scheduler_details = self._wrap_scheduler()
        # Draft tokens per step (k) when the engine speculates, else None:
        # then every step reports speculative counters (zeros when no request
        # drafted), and a non-speculating engine reports none at all.
        spec = getattr(self.engine.vllm_config, "speculative_config", None)
        self.num_speculative_tokens = getattr(spec, "num_speculative_tokens", None) if spec else None
        self._zero_spec = (0, 0, 0, [0] * (self.num_speculative_tokens or 0))
        # Perf requests' generated token ids ride on the deltas only when
        # asked (record_token_ids): the lossless check of `ab` needs them.
        self._record_ids = False

        self._TokensPrompt = compat.get("TokensPrompt")
        self._SamplingParams = compat.get("SamplingParams")
        kind = compat.get("RequestOutputKind")
        self._DELTA = kind.DELTA
        self._FINAL = kind.FINAL_ONLY
        # Resolved at the first finished request / first stats (None: missing).
        self.crosscheck = True
        self._text_rids = set()
        # Test-only fault hook: hang (sleep) in step() after this many steps,
        # so tests can check that a per-point timeout cuts a hung engine.
        hang = os.environ.get("ENGINEBENCH_TEST_HANG_AFTER_STEPS")
        self._hang_after = int(hang) if hang else None
        self._steps = 0
        # SamplingParams per (max_tokens, ignore_eos): vLLM copies the params
        # of each request it adds, so one object can serve many requests.
        self._token_params = {}
        # One constructed SamplingParams per ignore_eos, the others copies.
        self._token_params_like = {}
        # How requests are added and steps run (steppath.py).
        parts, self.step_path_reason = steppath.resolve(self.engine)
        self._path = steppath.CorePath(self, parts) if parts is not None else steppath.EnginePath(self)
        self.step_path = self._path.name

    def _wrap_scheduler(self):
        """Counts the prefill/decode tokens of each batch whose outputs the
        scheduler takes in (`update_from_output(scheduler_output, ...)`), so a
        step's counts are those of the batch that produced its outputs.

        With async scheduling (vLLM 0.32's default on GPU) the engine core
        keeps a batch queue: a step() schedules batch k and returns batch
        k-1's outputs, and the first step after idle schedules a batch and
        returns nothing (vllm/v1/engine/core.py:698-812, step_with_batch_queue).
        Counting at schedule() time would give each step the next batch's
        counts; counting the batch handed to update_from_output gives the
        batch behind the outputs, and nothing to a step that returned none.
        Without a batch queue (CPU) both are the same batch (core.py:657-687).

        Only possible in-process (the scheduler lives in this interpreter);
        returns False when it is not reachable.
        """
        scheduler = compat.scheduler_of(self.engine)
        if scheduler is None:
            return False
        compute_iteration_details = compat.get("compute_iteration_details")
        update = scheduler.update_from_output
        scheduled = self._scheduled
        # The first few steps are also counted by vLLM's own function; a
        # difference (another vLLM version) switches to vLLM's for good.
        # Without vLLM's function the fast count runs unchecked (doctor says so).
        checks = [16 if compute_iteration_details is not None else 0]
        details = _iteration_details

        def reference(out):
            d = compute_iteration_details(out)
            return (d.num_ctx_requests, d.num_ctx_tokens,
                    d.num_generation_requests, d.num_generation_tokens)

        def counting_update(*a, **kw):
            nonlocal details
            out = a[0] if a else kw.get("scheduler_output")
            try:
                try:
                    counts = details(out)
                except Exception:
                    # The fast count met a SchedulerOutput it does not know:
                    # fall back to vLLM's own count where there is one.
                    if details is reference or compute_iteration_details is None:
                        raise
                    details = reference
                    counts = details(out)
                if checks[0]:
                    checks[0] -= 1
                    expected = reference(out)
                    if counts != expected:
                        details = reference
                        counts = expected
                        checks[0] = 0
                scheduled.append(counts)
            except Exception:  # never let bookkeeping break the engine
                scheduler.update_from_output = update
                self.scheduler_details = False
            return update(*a, **kw)

        scheduler.update_from_output = counting_update
        return True

    def info(self):
        """Engine facts for the result file: dict of str -> str/int."""
        import platform

        import torch
        import vllm

        mc = self.model_config
        pc = self.engine.vllm_config.parallel_config
        cc = self.engine.vllm_config.cache_config
        return {
            "vllm": vllm.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "model": str(mc.model),
            "dtype": str(mc.dtype).replace("torch.", ""),
            "max_model_len": int(mc.max_model_len),
            "tensor_parallel_size": int(pc.tensor_parallel_size),
            "pipeline_parallel_size": int(pc.pipeline_parallel_size),
            "data_parallel_size": int(pc.data_parallel_size),
            "prefill_context_parallel_size": int(getattr(pc, "prefill_context_parallel_size", 1) or 1),
            "decode_context_parallel_size": int(getattr(pc, "decode_context_parallel_size", 1) or 1),
            "world_size": int(pc.world_size),
            "device_ids": compat.device_ordinals(self.engine.vllm_config),
            "async_scheduling": compat.async_scheduling(self.engine.vllm_config),
            "profiler": self.profiler_kind,
            "vocab_size": len(self.tokenizer),
            # With vocab_size, what random prompts draw from (other clients of
            # the same workload rebuild the allowed ids from these two).
            "special_token_ids": sorted(set(getattr(self.tokenizer, "all_special_ids", []) or [])),
            "device": str(self.engine.vllm_config.device_config.device_type),
            "scheduler_details": self.scheduler_details,
            "python_executable": sys.executable,
            "vllm_path": os.path.dirname(os.path.abspath(vllm.__file__)),
            "compat": compat.report(),
            "degraded": self.degraded(),
            "num_speculative_tokens": self.num_speculative_tokens,
            "speculative_method": self._spec_method(),
            "enable_prefix_caching": bool(getattr(cc, "enable_prefix_caching", False)),
            "block_size": getattr(cc, "block_size", None),
            "kv_cache_tokens": compat.kv_cache_tokens(self.engine),
            "kv_connector": getattr(getattr(self.engine.vllm_config, "kv_transfer_config", None), "kv_connector", None),
            "kv_transfer_affinity": self.kv_transfer_affinity,
            "step_path": self.step_path,
            "step_path_reason": self.step_path_reason,
            "cpu_collectives": (self.cpu_supplied or {}).get("collectives") or None,
            "cpu_expert_map": (self.cpu_supplied or {}).get("expert_map"),
        }

    def degraded(self):
        """Features off on this vLLM, each with the reason (empty: none)."""
        out = []
        if not self.step_stats:
            out.append("step_stats: vLLM's StatLoggerBase not found")
        if not self.scheduler_details:
            out.append("scheduler_details: the in-process scheduler is not reachable")
        if not self.crosscheck:
            out.append("crosscheck: RequestStateStats has no first_token_latency")
        seen = self._last_stats or self._sink[0]
        if seen is not None and compat.kv_cache_usage(seen) is None:
            out.append("kv_cache_usage: SchedulerStats has neither kv_cache_usage nor gpu_cache_usage")
        return out

    def _spec_method(self):
        spec = getattr(self.engine.vllm_config, "speculative_config", None)
        method = getattr(spec, "method", None) if spec else None
        return str(method) if method is not None else None

    def record_token_ids(self, on):
        """From now on, deltas carry the new token ids (a 4th tuple item)."""
        self._record_ids = bool(on)

    def spec_counters(self):
        """vLLM's own running totals of speculative decoding, or None.

        Read from the in-process Prometheus registry, where vLLM's
        PrometheusStatLogger counts `vllm:spec_decode_num_drafts`,
        `..._num_draft_tokens`, `..._num_accepted_tokens` and
        `..._num_accepted_tokens_per_pos{position=...}` - the counters
        `vllm bench serve` reads from a server's /metrics before and after a
        run. Returns (drafts, draft_tokens, accepted, [accepted per
        position]) summed over labels (engines), or None when there are none.
        """
        try:
            import prometheus_client
        except ImportError:
            return None
        drafts = draft_tokens = accepted = 0
        per_pos = {}
        found = False
        for metric in prometheus_client.REGISTRY.collect():
            if not metric.name.startswith("vllm:spec_decode"):
                continue
            for sample in metric.samples:
                name = sample.name
                if not name.endswith("_total"):
                    continue
                found = True
                value = int(sample.value)
                if "num_accepted_tokens_per_pos" in name:
                    pos = int(sample.labels.get("position", 0))
                    per_pos[pos] = per_pos.get(pos, 0) + value
                elif "num_draft_tokens" in name:
                    draft_tokens += value
                elif "num_drafts" in name:
                    drafts += value
                elif "num_accepted_tokens" in name:
                    accepted += value
        if not found:
            return None
        width = max(per_pos) + 1 if per_pos else 0
        return (drafts, draft_tokens, accepted, [per_pos.get(i, 0) for i in range(width)])

    def add_tokens(self, rid, token_ids, max_tokens, ignore_eos, kv_transfer_params=None):
        """Adds a perf request: token-id prompt (a list of ints), greedy,
        outputs as per-step deltas. Returns None on the engine path; on the
        core path (vLLM's request id, its arrival time on time.time()).

        With ignore_eos the request runs to max_tokens (vLLM then stops on
        neither the EOS token nor the generation config's eos ids), as
        `vllm bench serve` asks for it: no min_tokens, whose logits
        processor would run on every step.

        kv_transfer_params (a dict, prefill/decode disaggregation): what
        vLLM's KV connector reads from `SamplingParams.extra_args
        ["kv_transfer_params"]` (vllm/v1/request.py): PREFILL_TRANSFER_PARAMS
        on a prefill engine (with max_tokens 1), the finished prefill's
        `kv_transfer_params` on a decode engine (docs/pd.md)."""
        if kv_transfer_params is not None:
            params = self._SamplingParams(
                max_tokens=max_tokens, ignore_eos=ignore_eos, temperature=0.0, output_kind=self._DELTA,
                extra_args={"kv_transfer_params": dict(kv_transfer_params)})
            return self._path.add_tokens(rid, token_ids, params)
        return self._path.add_tokens(rid, token_ids, self._token_params_for(max_tokens, ignore_eos), shared=True)

    def add_prefill(self, rid, token_ids):
        """A P/D prefill request: the prompt, max_tokens 1, greedy, with
        PREFILL_TRANSFER_PARAMS (the connector keeps its KV for a remote
        decode). Returns what add_tokens returns."""
        return self.add_tokens(rid, token_ids, 1, True, PREFILL_TRANSFER_PARAMS)

    def add_decode(self, rid, token_ids, max_tokens, ignore_eos, params_json):
        """A P/D decode request: add_tokens with a finished prefill's
        kv_transfer_params, given as JSON text (from the prefill worker)."""
        return self.add_tokens(rid, token_ids, max_tokens, ignore_eos, json.loads(params_json))

    @staticmethod
    def kv_params_json(params):
        """A finished output's kv_transfer_params as JSON text (what goes to
        the decode worker), None when it has none."""
        return None if params is None else json.dumps(params)

    def take_kv_transfer_stats(self):
        """The KV connector's transfer statistics since the last call, summed
        (vLLM's `SchedulerStats.kv_connector_stats`, on the steps that
        completed transfers; NixlConnector's `NixlKVConnectorStats` keeps one
        list entry per transfer): {"transfers", "bytes", "transfer_s",
        "failed_transfers", "failed_notifications", "failed_handshakes",
        "expired_requests"}, or None when no step reported any. Only the side
        that pulls (the decode engine, NixlConnector's default) reports
        transfers."""
        if not self._kv_transfers:
            return None
        total = {}
        for d in self._kv_transfers:
            for k, v in d.items():
                if isinstance(v, list):
                    total.setdefault(k, []).extend(v)
        self._kv_transfers = []
        return {
            "transfers": len(total.get("transfer_duration", [])),
            "bytes": int(sum(total.get("bytes_transferred", []))),
            "transfer_s": float(sum(total.get("transfer_duration", []))),
            "failed_transfers": len(total.get("num_failed_transfers", [])),
            "failed_notifications": len(total.get("num_failed_notifications", [])),
            "failed_handshakes": len(total.get("num_failed_handshakes", [])),
            "expired_requests": len(total.get("num_kv_expired_reqs", [])),
        }

    def _token_params_for(self, max_tokens, ignore_eos):
        """The perf requests' SamplingParams for (max_tokens, ignore_eos),
        made once. A replay's turns each bring their own max_tokens: a new
        one is a copy of one made with the same ignore_eos and its
        max_tokens set, which is all the constructor would do differently
        (it derives nothing from max_tokens; it checks >= 1, which a copy
        is only made for), without its checks on the send's path; with
        ENGINEBENCH_CHECK_SWAP (the tests) each copy is compared with the
        constructor's."""
        params = self._token_params.get((max_tokens, ignore_eos))
        if params is None:
            like = self._token_params_like.get(ignore_eos) if max_tokens >= 1 else None
            if like is not None:
                params = copy.copy(like)
                params.max_tokens = max_tokens
                if steppath._CHECK_SWAP:
                    made = self._new_token_params(max_tokens, ignore_eos)
                    if made != params:
                        raise AssertionError(f"max_tokens {max_tokens}: the copied SamplingParams differ "
                                             f"from the constructor's:\n{params!r}\n{made!r}")
            else:
                params = self._token_params_like[ignore_eos] = self._new_token_params(max_tokens, ignore_eos)
            self._token_params[(max_tokens, ignore_eos)] = params
        return params

    def _new_token_params(self, max_tokens, ignore_eos):
        """A perf request's SamplingParams, constructed: greedy, outputs as
        per-step deltas."""
        return self._SamplingParams(
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
            temperature=0.0,
            output_kind=self._DELTA,
        )

    def prepare_tokens(self, token_ids, max_tokens, ignore_eos):
        """A perf request made ready before the loop's clock starts (a
        handle for add_prepared): on the core path, vLLM's input processor
        has already turned it into an EngineCoreRequest; the send then only
        stamps its id and arrival time (steppath.CorePath.prepare)."""
        return self._path.prepare(token_ids, self._token_params_for(max_tokens, ignore_eos))

    def add_prepared(self, rid, handle):
        """Adds a request prepare_tokens made; returns what add_tokens does."""
        return self._path.add_prepared(rid, handle)

    def _add_eval(self, rid, prompt, max_tokens, stop):
        """Eval requests: greedy, only the final output is returned."""
        params = self._SamplingParams(
            max_tokens=max_tokens,
            temperature=0.0,
            stop=list(stop),
            output_kind=self._FINAL,
        )
        self._text_rids.add(rid)
        self.engine.add_request(str(rid), prompt, params)

    def add_text(self, rid, prompt, max_tokens, stop):
        """Adds an eval request with a text prompt."""
        self._add_eval(rid, prompt, max_tokens, stop)

    def add_chat(self, rid, messages, max_tokens, stop):
        """Adds an eval request from chat messages [(role, content), ...]."""
        ids = self.tokenize_chat(messages)
        self._add_eval(rid, self._TokensPrompt(prompt_token_ids=ids), max_tokens, stop)

    def tokenize_chat(self, messages):
        """Token ids of chat messages [(role, content), ...] through the
        tokenizer's chat template with the generation prompt, tokenized
        without adding special tokens again (the template emits them), as
        vLLM's chat endpoint and `LLM.preprocess_chat` do. A final assistant
        message (an lm-eval task's `gen_prefix`) is continued instead of
        closed, as lm-eval's own models do (`continue_final_message`)."""
        conversation = [{"role": r, "content": c} for r, c in messages]
        if conversation and conversation[-1]["role"] == "assistant":
            text = self.tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=False, continue_final_message=True
            )
        else:
            text = self.tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=True
            )
        return self.tokenizer.encode(text, add_special_tokens=False)

    def count_tokens(self, text):
        """How many tokens `text` is, without special tokens."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def chat_frame(self):
        """(prefix ids, suffix ids): what the chat template puts before and
        after the content of one user message (with the generation prompt).
        A prompt of random ids framed by them is a templated prompt of an
        exact length: the template is rendered around a marker, split there,
        and each side tokenized on its own (no merge across the boundary)."""
        marker = "<<enginebench-content>>"
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=True
        )
        before, found, after = text.partition(marker)
        if not found:
            raise ValueError("the chat template dropped the message content: no frame to put prompts in")
        enc = self.tokenizer.encode
        return (enc(before, add_special_tokens=False), enc(after, add_special_tokens=False))

    def reset_prefix_cache(self):
        """Empties the prefix cache, and a KV connector's (CPU offload) where
        this vLLM can (`LLMEngine.reset_prefix_cache(reset_connector=True)`).
        Only valid with no request in the engine. Returns True when reset,
        False when vLLM refused (blocks still held), None when this vLLM has
        no reset."""
        reset = getattr(self.engine, "reset_prefix_cache", None)
        if reset is None:
            return None
        try:
            return bool(reset(reset_connector=True))
        except TypeError:  # a vLLM without the connector argument
            return bool(reset())

    def step(self):
        """Runs one engine step on this engine's step path (steppath.py).

        Returns (outputs, deltas, texts, stats, timings, cached, connector, wall_s, core_ts):
          outputs: core path: vLLM's EngineCoreOutput objects of the token
                  requests that got output (Rust reads request_id,
                  new_token_ids, finish_reason, events and prefill_stats);
                  engine path: None
          deltas: [(rid, new_tokens, finished), ...] of the requests whose
                  outputs went through vLLM's output processor (engine path:
                  all; core path: text requests), rid the request id string
                  (Rust parses it), or None; a 4th item (the new token ids)
                  when record_token_ids is on
          texts:  [(rid, text, output_token_ids)] of finished text requests, or None
          stats:  (prefill_reqs, prefill_tokens, decode_reqs, decode_tokens,
                   running, waiting, kv_cache_usage, prefix_queries, prefix_hits,
                   preempted, spec) for this step; the scheduled counts are
                   those of the batch whose outputs this step returned (0 when
                   it returned none: the first step after idle under async
                   scheduling), -1 when unknown; running/waiting/kv are as
                   last reported, the prefix-cache counts this step's only;
                   kv_cache_usage None when unknown; spec is (drafts, draft_tokens, accepted,
                   [accepted per position]) when the engine speculates, else None;
                   preempted: the output processor's count (core path: Rust
                   adds the PREEMPTED events of `outputs`)
          timings: flat [rid, ttft_s, decode_s, queued_s, gen_tokens, ...] from
                   vLLM's RequestStateStats of requests finished in this step
                   that went through the output processor, or None
          cached:  flat [rid, num_cached_tokens, ...] of those requests
                   finished in this step (prompt tokens served from the prefix
                   cache, KV connector hits included), or None
          connector: (queries, hits) of the KV connector's prefix cache
                   (CPU offload) this step, or None without a connector
          wall_s:  core path: time.time() when the outputs came back (the
                   clock of vLLM's IterationStats, TTFT = this - arrival); 0.0
          core_ts: core path: the EngineCoreOutputs' timestamp (the engine
                   core's monotonic clock, vLLM's first/last token times); 0.0
        """
        if self._hang_after is not None:
            self._steps += 1
            if self._steps > self._hang_after:
                time.sleep(1e6)
        return self._path.step()

    def stats_tuple(self, st, preempted, spec):
        """(the step's stats tuple, connector (queries, hits) or None) from
        the batch's SchedulerStats (None: no batch this step), the output
        processor's preemption count and the step's spec-decode counts; the
        scheduled counts come from the scheduler wrapper."""
        sched = self._scheduled
        if len(sched) == 1:
            p_r, p_t, d_r, d_t = sched.pop()
        elif sched:
            p_r = sum(s[0] for s in sched)
            p_t = sum(s[1] for s in sched)
            d_r = sum(s[2] for s in sched)
            d_t = sum(s[3] for s in sched)
            sched.clear()
        elif self.scheduler_details:
            p_r = p_t = d_r = d_t = 0
        else:
            p_r = p_t = d_r = d_t = -1
        if spec is None and self.num_speculative_tokens:
            spec = self._zero_spec
        connector = None
        if st is None:
            # No stats this step: the gauges stay as last reported, the deltas are 0.
            last = self._last_stats
            if last is None:
                stats = (p_r, p_t, d_r, d_t, 0, 0, None, 0, 0, preempted, spec)
            else:
                stats = (p_r, p_t, d_r, d_t, last.num_running_reqs, last.num_waiting_reqs,
                         compat.kv_cache_usage(last), 0, 0, preempted, spec)
        else:
            self._last_stats = st
            pc = getattr(st, "prefix_cache_stats", None)
            stats = (p_r, p_t, d_r, d_t, st.num_running_reqs, st.num_waiting_reqs,
                     compat.kv_cache_usage(st), pc.queries if pc is not None else 0,
                     pc.hits if pc is not None else 0, preempted, spec)
            cpc = getattr(st, "connector_prefix_cache_stats", None)
            if cpc is not None:
                connector = (cpc.queries, cpc.hits)
            kv = getattr(st, "kv_connector_stats", None)
            if kv:
                self._kv_transfers.append(kv)
        return stats, connector

    def profile_start(self):
        """Opens a profiler window; returns the activity names it records.

        vLLM's worker profiler ("vllm"): start_profile with a prefix unique
        to this window, so its traces are told apart by name
        (`{prefix}_{rank suffix}.{time_ns}.pt.trace.json.gz`,
        vllm/v1/worker/gpu_worker.py:1365-1421, torch's
        tensorboard_trace_handler). Otherwise a torch profiler in this
        process (CPU, plus CUDA/ROCm when torch has a device), which exists
        only between start and stop."""
        if self.profiler_kind == "vllm":
            self._profile_windows += 1
            self._profile_prefix = f"enginebench-{os.getpid()}-{self._profile_windows}"
            self.engine.start_profile(self._profile_prefix)
            return list(self.engine.vllm_config.profiler_config.torch_profiler_activities or ["CPU"])
        acts, names = compat.profiler_activities()
        self._profiler = compat.get("torch_profile")(activities=acts, record_shapes=False, with_stack=False)
        self._profiler.start()
        return names

    def profile_stop(self, path):
        """Closes the window and puts rank 0's Chrome trace at `path`
        (gzipped when the name ends in .gz). Returns (stop_s, export_s,
        [other ranks' trace paths]): the other ranks' traces of the window
        go beside it as `<path stem>.rank<N>.json.gz`."""
        if self.profiler_kind == "vllm":
            t0 = time.perf_counter()
            # Waits for every worker's stop and trace export (collective_rpc).
            self.engine.stop_profile()
            t1 = time.perf_counter()
            others = _place_rank_traces(self._profile_dir, self._profile_prefix, path)
            return (t1 - t0, time.perf_counter() - t1, others)
        prof, self._profiler = self._profiler, None
        t0 = time.perf_counter()
        # Kernels still queued must land in the trace; only where this
        # process already holds a CUDA context (never create one here).
        cuda = torch_cuda()
        if getattr(cuda, "is_initialized", lambda: False)():
            cuda.synchronize()
        prof.stop()
        t1 = time.perf_counter()
        prof.export_chrome_trace(path)
        return (t1 - t0, time.perf_counter() - t1, [])

    def abort(self, rids, core_ids=()):
        """Aborts requests in flight: `rids` by enginebench id (text
        requests, and everything on the engine path), `core_ids` by vLLM's
        id (token requests on the core path, as add_tokens returned them)."""
        self._path.abort(rids, core_ids)

    def has_unfinished(self, local=0, pending=False):
        """Whether any request is unfinished (`local`: the caller's count of
        token requests in flight, which only it knows on the core path;
        `pending`: the caller has more to send); with data parallelism,
        across the DP group (steppath.CorePath.has_unfinished)."""
        return self._path.has_unfinished(local, pending)

    @property
    def dp_lockstep(self):
        """This engine is a rank of a vLLM DP group (in-process, from
        VLLM_DP_SIZE/RANK/MASTER_*): its steps must go in lockstep."""
        return getattr(self.engine, "dp_group", None) is not None

    def sync_ranks(self):
        """Waits for every rank of the DP group: the group's own all-reduce
        (vLLM's ParallelConfig.has_unfinished_dp), with nothing to report."""
        if getattr(self.engine, "dp_group", None) is not None:
            steppath._dp_all_reduce(self.engine, False)

    def loop_starts(self):
        """Called once before each request loop's clock starts (Rust's
        StepEngine::sync_ranks). Freezes the heap made so far, as vLLM's
        own server does once it has started (vllm.utils.gc_utils
        .freeze_gc_heap: a full collection, then gc.freeze()): in-process,
        the engine's and the harness's long-lived objects share one heap,
        and a full collection in the loop walked all of it (0.5-0.75 s each
        in an AgentX replay on these CPUs) while the engine did not step.
        Then, with data parallelism, waits for every rank (sync_ranks)."""
        gc.collect()
        gc.freeze()
        self.sync_ranks()

    def shutdown(self):
        core = getattr(self.engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


#: What a prefill request carries into a P/D pair's prefill engine (with
#: max_tokens 1): the keys vLLM's toy proxy sends
#: (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py).
PREFILL_TRANSFER_PARAMS = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}


def _build_undoing_kv_transfer_pinning(build):
    """Runs `build()` (the engine's construction) and undoes one thing it may
    do to the calling thread: vLLM 0.32's NIXL worker on the CPU platform
    pins the thread that builds it to the last core of each NUMA node
    (`os.sched_setaffinity(0, ...)` in
    distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py, meant for
    its KV loads), and an in-process engine runs entirely on that thread.
    Only a call made from a module under `vllm.distributed.kv_transfer` is
    undone: the thread gets back the CPUs it had just before that call, so
    vLLM's own OpenMP binding (`VLLM_CPU_OMP_THREADS_BIND`, made earlier in
    the build) stays. Returns (what build() returned, the CPUs the thread
    had been pinned to, sorted, or None when no such call was made)."""
    set_affinity = getattr(os, "sched_setaffinity", None)
    if set_affinity is None:
        return build(), None
    before_pin = []

    def recording(pid, cpus):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if pid == 0 and ".kv_transfer." in caller:
            before_pin.append(os.sched_getaffinity(0))
        return set_affinity(pid, cpus)

    os.sched_setaffinity = recording
    try:
        built = build()
    finally:
        os.sched_setaffinity = set_affinity
    if not before_pin:
        return built, None
    pinned = sorted(os.sched_getaffinity(0))
    set_affinity(0, before_pin[0])
    return built, pinned


def _rank_of(name):
    """The global rank in a worker trace name (`..._rank3.<ns>.pt.trace...`,
    or `rank3...` without parallel state: vllm/distributed/utils.py:685-723),
    else None."""
    import re

    m = re.search(r"(?:^|_)rank(\d+)\.", name)
    return int(m.group(1)) if m else None


def _place_rank_traces(directory, prefix, path):
    """Moves the traces vLLM's workers wrote for the window `prefix` into
    place: rank 0's to `path`, each other rank's beside it as
    `<stem>.rank<N>.json.gz`. Returns the other ranks' paths. Raises
    RuntimeError when rank 0 wrote none (vLLM only logs a failed start or
    stop as a warning, vllm/profiler/wrapper.py:86-101)."""
    try:
        names = sorted(n for n in os.listdir(directory)
                       if n.startswith(prefix + "_") or n.startswith(prefix + "."))
    except FileNotFoundError:
        names = []
    traces = [n for n in names if ".pt.trace.json" in n]
    ranks = {}
    for n in traces:
        rank = _rank_of(n[len(prefix):])
        ranks[0 if rank is None and len(traces) == 1 else rank] = n
    if 0 not in ranks:
        raise RuntimeError(
            f"vLLM's profiler wrote no rank-0 trace for window {prefix} into {directory} "
            f"(found: {traces or 'nothing'}); its start/stop errors are only logged: see the worker log")
    os.replace(os.path.join(directory, ranks.pop(0)), path)
    stem = path[:-len(".json.gz")] if path.endswith(".json.gz") else path.rsplit(".", 1)[0]
    others = []
    for rank in sorted(r for r in ranks if r is not None):
        target = f"{stem}.rank{rank}.json.gz"
        os.replace(os.path.join(directory, ranks[rank]), target)
        others.append(target)
    return others


def torch_cuda():
    import torch

    return torch.cuda


def _doctor_import(name, out):
    """The package `name`, or None: one `import` cannot find is listed in
    out["missing"] (the Rust side's probe names the interpreter for it); one
    that is there but fails to import is an error."""
    import importlib.util

    try:
        found = importlib.util.find_spec(name) is not None
    except Exception:  # a broken finder: let the import say what is wrong
        found = True
    if not found:
        out["missing"].append(name)
        return None
    if compat.import_error(name) is not None:
        # The words of compat's VllmUnusable("import"): one cause, one message.
        shown = {"vllm": "vLLM"}.get(name, name)
        out["errors"].append(f"{shown} is installed in {sys.executable} but `import {name}` fails ({compat.import_error(name)})")
        return None
    return sys.modules[name]


def doctor():
    """What this interpreter's vLLM is, without building an engine: a JSON
    string {vllm, vllm_path, torch, build, platform, no_platform, devices,
    compat, step_path, missing, errors} (src/protocol/doctor.rs `DoctorReport`,
    the same shape typed); step_path: {path: "core" or "engine", reason} as
    far as it can be told without an engine (steppath.resolve checks the
    rest). Every problem is reported, not raised, so doctor can name them
    all: `missing` lists packages `import` cannot find, `errors` the rest;
    `no_platform` says why vLLM found no platform (e.g. its CUDA build on a
    machine without a GPU); `compat` and `platform` need vLLM, `devices`
    ({kind, count, names}) needs torch."""
    out = {"vllm": None, "vllm_path": None, "torch": None, "build": None, "platform": None,
           "no_platform": None, "devices": None, "compat": None, "missing": [], "errors": []}
    torch = _doctor_import("torch", out)
    vllm = _doctor_import("vllm", out)
    if torch is not None:
        out["torch"] = getattr(torch, "__version__", None)
        out["build"] = compat.build_in_words()
        try:
            if torch.cuda.is_available():
                names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
                out["devices"] = {"kind": kind, "count": len(names), "names": names}
            else:
                out["devices"] = {"kind": "cpu", "count": 0, "names": []}
        except Exception as e:
            out["errors"].append(f"torch device query failed: {type(e).__name__}: {e}")
    if vllm is not None:
        out["vllm"] = getattr(vllm, "__version__", None)
        out["vllm_path"] = os.path.dirname(os.path.abspath(vllm.__file__))
        try:
            out["platform"] = compat.platform()
        except compat.VllmUnusable as e:
            out["no_platform"] = str(e)
        except Exception as e:
            out["errors"].append(f"vLLM's platform detection failed: {type(e).__name__}: {e}")
        out["compat"] = compat.report()
        path, reason = compat.core_path_available()
        out["step_path"] = {"path": path, "reason": reason}
    return json.dumps(out)
