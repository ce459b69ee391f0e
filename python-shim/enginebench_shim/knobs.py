"""The knob report: what each of a recipe's knobs does in *this* vLLM build.

A recipe changes an engine through environment variables, `vllm serve` flags
and `--hf-overrides` keys. vLLM accepts most of them silently whether it
reads them or not; this module asks vLLM's own objects, never a copy of its
lists or rules (docs/knobs.md has the rules and their limits):

  * env: registered in `vllm.envs.environment_variables` or not, listed as
    removed (`envs.removed_environment_variables`, 0.34), and which files of
    this vLLM build mention the name outside envs.py (registered is not
    read: ROCm variables are registered on every build);
  * flags: the value vLLM's own serve parser gave, the parser's default, and
    what the flag changes in the config vLLM builds from the arguments
    (`EngineArgs.create_engine_config`, built with every flag and once more
    without each; no weights are read);
  * hf-overrides: where each key landed (the top-level HF config, or the text
    config the model reads, `model_config.hf_text_config`), whether the
    config had it before, and which files reference the key's name (the
    model's own module first, found through vLLM's `ModelRegistry`);
  * ROCm quick all-reduce: where the recipe sets `VLLM_ROCM_QUICK_REDUCE_*`,
    vLLM's own eligibility rule (`QuickAllReduce.should_quick_allreduce`
    with its `_QR_MIN_SIZE` table, vllm/distributed/device_communicators/
    quick_all_reduce.py) at the job's TP, dtype and hidden size, for the
    sweep's decode batches and the prefill chunk.

The report also carries the resolved config, the HF config and every vLLM
variable's value, flattened to "path": "value" strings: `ab` diffs two arms'
reports before it runs anything.

Everything here is best effort by design: a config vLLM cannot build on this
host (a GPU recipe on a CPU machine, a hub model that is not cached) is
reported as such, with what could still be judged from the parse alone. The
report never stops a run.
"""

import contextlib
import dataclasses
import difflib
import enum
import logging
import os
import re
import sys

try:
    from enginebench_shim import compat
except ImportError:  # compiled into the worker module
    import enginebench_compat as compat

QUICK_REDUCE_PREFIX = "VLLM_ROCM_QUICK_REDUCE_"
# Leaf values are cut to this many characters: enough to tell values apart.
_MAX_VALUE = 240
# Config attributes that are not knobs of the engine: the HF configs are
# reported on their own, the rest are objects or caches vLLM derives.
_SKIP_FIELDS = {"hf_config", "hf_text_config", "hf_image_processor_config", "encoder_config",
                "model_arch_config", "hf_overrides", "multimodal_config"}


def report(argv, env, unset=(), concs=(), parse=None, quick_reduce=False):
    """The knob report of one engine configuration, as a dict (JSON-ready).

    argv: `vllm serve` arguments, model first. env: the variables the recipe
    sets (name -> value), unset: those it removes; they are applied to this
    process's environment while the report is made, then restored. concs:
    the sweep's concurrencies (decode batch sizes for the quick all-reduce
    rule). parse: the shim's `parse_serve_args` (vLLM's serve parser).
    quick_reduce: evaluate the quick all-reduce rule even where `env` sets
    no VLLM_ROCM_QUICK_REDUCE_* variable.
    """
    with _environment(env, unset), _quiet_vllm():
        return _Report(list(argv), dict(env), [int(c) for c in concs], parse, quick_reduce).build()


class _Report:
    def __init__(self, argv, env, concs, parse, quick_reduce):
        self.argv, self.env, self.concs, self.parse = argv, env, concs, parse
        self.quick_reduce = quick_reduce
        self.notes = []

    def build(self):
        groups = flag_groups(self.argv[1:], _option_actions())
        args = self.parse(self.argv)
        full, error = self.config(self.argv)
        if full is not None:
            # Fields that differ between two builds of the same arguments
            # (instance ids, timestamps) are not knobs.
            again, _ = self.config(self.argv)
            volatile = {k for k in full["config"] if again is None or again["config"].get(k) != full["config"][k]}
            for k in volatile:
                full["config"].pop(k, None)
        else:
            volatile = set()
        index = SourceIndex()
        out = {
            "vllm_version": getattr(sys.modules.get("vllm"), "__version__", None),
            "config_error": error,
            "env": self.env_report(index),
            "flags": [],
            "hf_overrides": [],
            "quick_reduce": None,
            "config": full["config"] if full else None,
            "hf_config": full["hf_config"] if full else None,
            "vllm_env": vllm_env_values(),
            "notes": self.notes,
        }
        without_overrides = None
        for group in groups:
            entry = self.flag_report(group, args, full, volatile)
            out["flags"].append(entry)
            if group[0].split("=")[0] == "--hf-overrides":
                without_overrides = entry.pop("_without", None)
            else:
                entry.pop("_without", None)
        overrides = getattr(args, "hf_overrides", None)
        if isinstance(overrides, dict) and overrides:
            out["hf_overrides"] = self.override_report(overrides, full, without_overrides, index)
        if self.quick_reduce or any(n.startswith(QUICK_REDUCE_PREFIX) for n in self.env):
            out["quick_reduce"] = quick_reduce_report(args, full, self.concs)
        return out

    def config(self, argv):
        """(flattened config dict, None) or (None, error text)."""
        missing = _config_not_here(argv[0])
        if missing:
            return None, missing
        try:
            args = self.parse(argv)
            engine_args = compat.get("EngineArgs").from_cli_args(args)
            # As the engine builds it: `vllm serve`'s defaults (max_num_seqs,
            # batched tokens) come with the API server's usage context.
            usage = compat.get("UsageContext").OPENAI_API_SERVER
            vllm_config = engine_args.create_engine_config(usage_context=usage)
        except BaseException as e:  # whatever vLLM raised is the finding
            if isinstance(e, KeyboardInterrupt):
                raise
            return None, _one_line(e)
        model_config = vllm_config.model_config
        flat = {}
        _flatten(vllm_config, "", flat, 0)
        return {
            "config": flat,
            "hf_config": _flatten_hf(model_config.hf_config),
            "objects": (model_config.hf_config, model_config.hf_text_config),
            "architectures": list(getattr(model_config, "architectures", None) or []),
            "dtype": str(model_config.dtype).replace("torch.", ""),
            "hidden_size": getattr(model_config.hf_text_config, "hidden_size", None),
            "max_num_batched_tokens": getattr(vllm_config.scheduler_config, "max_num_batched_tokens", None),
            "tp": vllm_config.parallel_config.tensor_parallel_size,
        }, None

    def env_report(self, index):
        names = compat.get("envs") or {}
        envs_module = sys.modules.get("vllm.envs")
        removed = getattr(envs_module, "removed_environment_variables", None) or {}
        out = []
        for name in sorted(self.env):
            entry = {"name": name, "value": self.env[name]}
            if name in removed:
                entry.update(status="removed", hint=str(removed[name]))
            elif name in names:
                entry["status"] = "registered"
                entry["readers"] = index.files_mentioning(name, exclude=("envs.py",))
            elif name.startswith("VLLM_"):
                entry["status"] = "unknown"
                entry["close"] = difflib.get_close_matches(name, list(names), n=3, cutoff=0.8)
            else:
                # Not vLLM's variable; vLLM may still read it directly
                # (os.environ outside envs.py), e.g. NCCL_* in its NCCL wrapper.
                entry["status"] = "other"
                entry["readers"] = index.files_mentioning(name, exclude=("envs.py",))
            out.append(entry)
        return out

    def flag_report(self, group, args, full, volatile):
        flag = group[0].split("=")[0]
        action = _option_actions().get(flag)
        dest = getattr(action, "dest", None)
        entry = {"tokens": group, "flag": flag, "dest": dest}
        if dest is not None:
            entry["value"] = _text(getattr(args, dest, None))
            entry["default"] = _text(getattr(action, "default", None))
            entry["restates_default"] = entry["value"] == entry["default"]
        if full is None:
            return entry
        rest = list(self.argv)
        start = _find_group(rest, group)
        if start is None:
            return entry
        del rest[start:start + len(group)]
        without, error = self.config(rest)
        if without is None:
            entry["without_error"] = error
            return entry
        entry["_without"] = without
        changes = []
        for key in sorted(set(full["config"]) | set(without["config"])):
            if key in volatile:
                continue
            a, b = without["config"].get(key), full["config"].get(key)
            if a != b:
                changes.append({"field": key, "without": a, "with": b})
        # The field named after the flag first: what the flag is about.
        changes.sort(key=lambda c: c["field"].rsplit(".", 1)[-1] != dest)
        entry["changes"] = changes
        entry["resolved"] = {k: v for k, v in full["config"].items() if dest and k.rsplit(".", 1)[-1] == dest}
        return entry

    def override_report(self, overrides, full, without, index):
        out = []
        objects = full["objects"] if full else None
        module, module_files = model_module(full["architectures"] if full else [], index)
        for path, value in _leaves(overrides):
            key = path[-1]
            entry = {"key": ".".join(path), "value": _text(value), "model_module": module}
            readers = index.files_mentioning(key)
            mine = [f for f in readers if f in module_files]
            models = [f for f in readers if _is_model_file(f) and f not in module_files]
            generic = [f for f in readers if not _is_model_file(f)]
            entry.update(model_readers=mine, other_model_readers=models[:8], generic_readers=generic[:8])
            if objects is not None:
                top, text = objects
                target, where = _landing(top, text, path)
                entry["landed"] = where
                entry["text_config_is_top"] = top is text
                if without is not None:
                    entry["had_key"] = ".".join(path) in without["hf_config"]
                entry["value_after"] = _text(getattr(target, key, None)) if target is not None else None
            entry["verdict"] = _override_verdict(entry, readers, module is not None)
            out.append(entry)
        return out


def _config_not_here(model):
    """Why the model's config.json is not on this machine (neither a local
    folder nor in the Hugging Face cache), or None. The report never
    downloads: a check must not wait on the network (or fail for lack of
    one)."""
    if os.path.isdir(os.path.expanduser(model)):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        if isinstance(try_to_load_from_cache(model, "config.json"), str):
            return None
    except Exception:  # not a hub id huggingface_hub accepts
        pass
    return (f"the model's config is not on this machine ({model} is neither a local folder nor in the Hugging Face "
            "cache, and the report downloads nothing)")


def _override_verdict(entry, readers, module_known):
    """One of: nowhere, wrong_level, other_models, read, unknown (the
    rules of docs/knobs.md)."""
    if not readers:
        return "nowhere"
    if entry.get("landed") == "top" and not entry.get("text_config_is_top", True):
        return "wrong_level"
    if module_known and not entry["model_readers"] and not entry["generic_readers"]:
        return "other_models"
    return "read" if module_known and "landed" in entry else "unknown"


def _landing(top, text, path):
    """(the config object a key path lands on, "top" | "text" | NAME):
    vLLM's own rule (ModelConfig._apply_dict_overrides): a leading key that
    names a nested config descends into it; a flat key is set on the
    top-level config."""
    obj, where = top, ("text" if top is text else "top")
    for part in path[:-1]:
        child = getattr(obj, part, None)
        if child is None or isinstance(child, dict):
            return obj, where
        obj = child
        where = "text" if child is text else part
    return obj, where


def _leaves(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, prefix + (str(k),))
        else:
            yield prefix + (str(k),), v


def model_module(architectures, index):
    """(module name, set of its files relative to the vllm package) of the
    model's first architecture in vLLM's ModelRegistry; a package's whole
    folder counts as the module. (None, set()) when unknown."""
    try:
        from vllm.model_executor.models import ModelRegistry
    except Exception:
        return None, set()
    for arch in architectures:
        entry = getattr(ModelRegistry, "models", {}).get(arch)
        name = getattr(entry, "module_name", None)
        if not name:
            continue
        rel = name.split(".", 1)[1].replace(".", "/") if "." in name else name
        files = {f for f in index.files if f == rel + ".py" or f.startswith(rel + "/")}
        return name, files
    return None, set()


def _is_model_file(rel):
    return rel.startswith("model_executor/models/") or rel.startswith("models/")


class SourceIndex:
    """The .py files of the installed vllm package (paths relative to it),
    searched for whole-word mentions of a name."""

    _files = None

    def __init__(self):
        if SourceIndex._files is None:
            import vllm

            root = os.path.dirname(vllm.__file__)
            files = {}
            for base, _dirs, names in os.walk(root):
                for n in names:
                    if n.endswith(".py"):
                        p = os.path.join(base, n)
                        try:
                            with open(p, encoding="utf-8", errors="replace") as f:
                                files[os.path.relpath(p, root)] = f.read()
                        except OSError:
                            continue
            SourceIndex._files = files
        self.files = SourceIndex._files

    def files_mentioning(self, name, exclude=()):
        pattern = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])")
        return sorted(f for f, text in self.files.items()
                      if name in text and os.path.basename(f) not in exclude and pattern.search(text))


def vllm_env_values():
    """Every registered vLLM variable's value as vLLM reads it now
    (`vllm.envs.NAME`), as text; a getter that raises gives "error: ..."."""
    getters = compat.get("envs") or {}
    out = {}
    for name, getter in getters.items():
        try:
            out[name] = _text(getter())
        except Exception as e:  # an invalid value: vLLM would raise too
            out[name] = "error: " + _one_line(e)
    return out


def quick_reduce_report(args, full, concs):
    """vLLM's quick all-reduce rule for this job, evaluated with the
    installed module's own class (its table, its limits, its
    `should_quick_allreduce`) on tensors of the all-reduce sizes the job
    makes: decode batches conc x hidden x dtype bytes, prefill chunks
    max_num_batched_tokens x hidden x dtype bytes."""
    out = {"notes": []}
    try:
        import torch

        from vllm import envs
        from vllm.distributed.device_communicators import quick_all_reduce as qr
    except Exception as e:
        out["error"] = ("vLLM's quick_all_reduce module does not load here (" + _one_line(e) + "): the rule needs "
                        "QuickAllReduce._QR_MIN_SIZE[(dtype, TP)][level], the VLLM_ROCM_QUICK_REDUCE_* values and "
                        "the ROCm library's qr_max_size()")
        return out
    cls = qr.QuickAllReduce
    tp = (full or {}).get("tp") or getattr(args, "tensor_parallel_size", None) or 1
    dtype_name = (full or {}).get("dtype")
    hidden = (full or {}).get("hidden_size")
    batched = (full or {}).get("max_num_batched_tokens") or getattr(args, "max_num_batched_tokens", None)
    level = str(envs.VLLM_ROCM_QUICK_REDUCE_QUANTIZATION)
    cast = bool(envs.VLLM_ROCM_QUICK_REDUCE_CAST_BF16_TO_FP16)
    out.update(level=level, cast_bf16_to_fp16=cast, tp=tp, dtype=dtype_name, hidden_size=hidden,
               max_num_batched_tokens=batched, supported_world_sizes=list(cls._SUPPORTED_WORLD_SIZES))
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_rocm():
            out["notes"].append(f"this host's platform is {current_platform.device_type}, not ROCm: the rule is "
                                "evaluated as on an MI300/MI355 host (quick all-reduce runs only there)")
    except Exception:
        pass
    if level not in qr.QuickReduceRegime.__members__ or level == "NONE":
        out["fires"] = "never"
        out["why"] = f"level {level}: quick all-reduce is off"
        return out
    if tp not in cls._SUPPORTED_WORLD_SIZES:
        out["fires"] = "never"
        out["why"] = f"TP {tp} is not one of {list(cls._SUPPORTED_WORLD_SIZES)}"
        return out
    if level == "INT3" and tp != 2:
        out["fires"] = "never"
        out["why"] = "INT3 runs only at TP2"
        return out
    dtype = getattr(torch, dtype_name, None) if dtype_name else None
    if dtype not in cls._SUPPORTED_DTYPES:
        out["fires"] = "never" if dtype is not None else None
        out["why"] = (f"dtype {dtype_name}: only float16/bfloat16 all-reduces qualify" if dtype is not None
                      else "the model's dtype is unknown here (the config could not be built)")
        return out
    if not hidden:
        out["why"] = "the model's hidden size is unknown here (the config could not be built)"
        return out
    max_mb = envs.VLLM_ROCM_QUICK_REDUCE_MAX_SIZE_BYTES_MB
    max_bytes = max_mb * qr.MB if max_mb is not None else None
    if max_bytes is None:
        try:
            max_bytes = int(qr.ops.qr_max_size())
        except Exception:
            out["notes"].append("the upper limit is the ROCm library's qr_max_size(), not in this build: "
                                "sizes are judged against the lower limit only")
    rule = object.__new__(cls)
    rule.disabled = False
    rule.world_size = tp
    rule.use_fp16_kernels = cast
    rule.qr_quant_level = qr.QuickReduceRegime[level]
    try:
        rule.qr_min_size = cls._get_qr_min_size(max_bytes)
        rule.qr_quantization_min_size = cls._get_qr_quantization_min_size()
    except ValueError as e:  # vLLM refuses these values at start
        out["error"] = _one_line(e)
        return out
    rule.qr_max_size = max_bytes if max_bytes is not None else 1 << 62
    item = torch.empty((), dtype=dtype).element_size()
    row = hidden * item

    def fires(tokens):
        return bool(rule.should_quick_allreduce(torch.empty((tokens, hidden), dtype=dtype, device="meta")))

    def fires_bytes(units):  # an all-reduce of units x 16 bytes (the rule wants multiples of 16)
        return bool(rule.should_quick_allreduce(torch.empty(units * 16 // item, dtype=dtype, device="meta")))

    def codec(tokens):
        t = torch.empty((tokens, hidden), dtype=dtype, device="meta")
        return qr.QuickReduceRegime(rule._get_qr_quant_level(t)).name

    top = (rule.qr_max_size // row) if max_bytes is not None else 1 << 24
    if not fires(max(1, top)):
        out["fires"] = "never"
        out["why"] = "no all-reduce of up to the upper limit qualifies"
        return out
    # The rule is a range (min <= bytes <= max): the smallest size that
    # fires, in tokens and in bytes, found by asking the rule itself.
    min_tokens = _first_true(fires, 1, max(1, top))
    min_units = _first_true(fires_bytes, 1, max(1, min_tokens * row // 16))
    out.update(min_tokens=min_tokens, min_bytes=min_units * 16, max_bytes=max_bytes, row_bytes=row,
               kernel_dtype="float16" if (cast and dtype == torch.bfloat16) else dtype_name,
               quantization_min_bytes=rule.qr_quantization_min_size)
    out["decode"] = [{"conc": c, "bytes": c * row, "fires": fires(c), "codec": codec(c) if fires(c) else None}
                     for c in sorted(set(concs)) if c > 0]
    if batched:
        b = int(batched)
        out["prefill"] = {"tokens": b, "bytes": b * row, "fires": fires(b), "codec": codec(b) if fires(b) else None}
    out["fires"] = "range"
    return out


def _first_true(pred, lo, hi):
    """The smallest n in [lo, hi] with pred(n), for a pred false then true (hi if none)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def flag_groups(tokens, actions):
    """Splits flag tokens into groups: a flag with its values (`--x v`,
    `--x=v`, a switch alone, a list flag with all its values up to the next
    flag). Positional tokens before any flag are their own groups."""
    groups = []
    for tok in tokens:
        starts = tok.startswith("-") and not _is_number(tok)
        if starts or not groups:
            groups.append([tok])
            continue
        head = groups[-1][0]
        action = actions.get(head.split("=")[0])
        nargs = getattr(action, "nargs", None)
        taken = len(groups[-1]) - 1
        if "=" in head or nargs == 0 or (nargs in (None, "?") and taken >= 1) or (
                isinstance(nargs, int) and taken >= nargs) or (action is None and taken >= 1):
            groups.append([tok])
        else:
            groups[-1].append(tok)
    return groups


def _option_actions():
    parser = compat.serve_parser()
    return dict(parser._option_string_actions)


def _find_group(argv, group):
    n = len(group)
    for i in range(1, len(argv) - n + 1):
        if argv[i:i + n] == group:
            return i
    return None


def _is_number(tok):
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _flatten(obj, prefix, out, depth):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and depth < 4:
        for f in dataclasses.fields(obj):
            if f.name.startswith("_") or f.name in _SKIP_FIELDS:
                continue
            try:
                value = getattr(obj, f.name)
            except Exception:
                continue
            _flatten(value, f"{prefix}{f.name}.", out, depth + 1)
    elif isinstance(obj, dict) and depth < 4 and all(isinstance(k, str) for k in obj):
        if not obj:
            out[prefix[:-1]] = "{}"
        for k, v in obj.items():
            _flatten(v, f"{prefix}{k}.", out, depth + 1)
    else:
        out[prefix[:-1]] = _text(obj)


def _flatten_hf(config):
    try:
        d = config.to_dict()
    except Exception:
        return {}
    out = {}

    def walk(v, prefix):
        if isinstance(v, dict) and v:
            for k, x in v.items():
                walk(x, f"{prefix}{k}.")
        else:
            out[prefix[:-1]] = _text(v)

    walk(d, "")
    return out


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _text(v):
    """A value as comparable text: enums by name, no object addresses."""
    if isinstance(v, enum.Enum):
        s = str(v.name)
    elif v is None or isinstance(v, (bool, int, float, str)):
        s = repr(v) if not isinstance(v, str) else v
    else:
        s = _ADDRESS.sub("", repr(v))
    return s if len(s) <= _MAX_VALUE else s[:_MAX_VALUE] + "..."


def _one_line(e):
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:400] if text else type(e).__name__


@contextlib.contextmanager
def _environment(env, unset):
    saved = dict(os.environ)
    try:
        for k in unset:
            os.environ.pop(k, None)
        os.environ.update({k: str(v) for k, v in env.items()})
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _quiet_vllm():
    """vLLM logs every config build (architecture, max model len, warnings):
    dozens of lines for one report. Errors still show."""
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
