"""lm-eval's own evaluation on enginebench's in-process engine.

Two entry points over one task resolution (`_resolve`):

  * `preflight(spec_json)`: run by the orchestrator in the job's interpreter
    (`python -c <this file> preflight SPEC`) before any engine starts. It
    checks that lm-eval imports, that every task is found, is a
    `generate_until` task and decodes greedily, and that its data loads (as
    lm-eval loads it: the Hugging Face cache, else a download). Prints one
    JSON line: the tasks, or the error.
  * `evaluate(spec_json, generate)`: in the worker, on the built engine:
    lm-eval's own `simple_evaluate` (its registry, YAML task files with
    `!function` helpers, filters, metrics, few-shot rules, chat-template
    flags) with `EngineLM` as the model. `EngineLM.generate_until` hands the
    whole batch of lm-eval's requests to `generate`, a Rust callable that
    runs them through enginebench's own driver loop at the eval concurrency
    and returns the completions: Rust owns the loop and every clock, as for
    the built-in GSM8K. lm-eval then filters, scores and writes its own
    result files (results_*.json, samples_*.jsonl) into spec["output_dir"];
    the results (without samples) come back as JSON text.

The spec is `LmEvalJob` of the Rust side (src/protocol/wire.rs) as JSON.
Anything the user can fix (no lm-eval, an unknown task, a loglikelihood
task, sampling, data that does not load) raises LmEvalTaskError: exit 2 with
its message, before any engine starts when preflight finds it.
"""

import glob
import json
import os
import sys

INSTALL = "pip install lm-eval"
# lm-eval's own default for generate_until without max_gen_toks
# (lm_eval/defaults.py DEFAULT_MAX_GEN_TOKS, models' max_gen_toks=256).
DEFAULT_MAX_GEN_TOKS = 256
# generation_kwargs a greedy engine honours (until, the token limit) or that
# greedy decoding makes moot (top_p, top_k, seed).
_GEN_KEYS = {"until", "max_gen_toks", "max_tokens", "do_sample", "temperature", "top_p", "top_k", "seed"}


class LmEvalTaskError(ValueError):
    """The eval selection cannot run here: bad input (exit 2)."""


def _lm_eval():
    try:
        import lm_eval
    except ImportError as e:
        raise LmEvalTaskError(
            f"lm-eval tasks run through the lm-eval package, which {sys.executable} cannot import ({e}): "
            f"`{INSTALL}` into that interpreter, or use a built-in task (gsm8k, gsm8k_cot, gsm8k_inferencex)"
        ) from None
    return lm_eval


def _resolve(spec):
    """(TaskManager, [task names and task configs]) for spec["tasks"]
    (registry names, wildcards allowed) and spec["task_files"] (a YAML file,
    or a folder: every *.yaml in it is a task and the folder is on the
    include path, as lm-eval's CLI treats a folder)."""
    import difflib

    from lm_eval import utils
    from lm_eval.tasks import TaskManager

    folders = [os.path.abspath(f) for f in spec["task_files"] if os.path.isdir(f)]
    # Indexing lm-eval's own ~14k task files takes seconds: only for registry names.
    tm = TaskManager(include_path=folders or None, include_defaults=bool(spec["tasks"]))
    selected = []
    for name in spec["tasks"]:
        found = tm.match_tasks([name])
        if not found:
            close = difflib.get_close_matches(name, tm.all_tasks, n=3, cutoff=0.75)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise LmEvalTaskError(
                f"unknown lm-eval task '{name}'{hint}: `lm-eval ls tasks` lists them; "
                "a task lm-eval does not bundle runs from its YAML file (--task-file)"
            )
        selected.extend(t for t in found if t not in selected)
    for path in spec["task_files"]:
        if not os.path.exists(path):
            raise LmEvalTaskError(f"task file {path}: no such file or folder")
        files = sorted(glob.glob(os.path.join(path, "*.yaml"))) if os.path.isdir(path) else [path]
        configs = []
        for f in files:
            try:
                config = utils.load_yaml_config(os.path.abspath(f))
            except Exception as e:
                raise LmEvalTaskError(f"task file {f}: {type(e).__name__}: {e}") from None
            if isinstance(config, dict) and ("task" in config or "group" in config):
                configs.append(config)
                # Indexed as lm-eval indexes an include path's files: get_task_dict
                # looks every loaded task up in the index (lm-eval 0.4.10 raises
                # KeyError for a file's task that is not there).
                name = config.get("task") or config.get("group")
                if isinstance(name, str):
                    kind = "task" if "task" in config else "group"
                    tm.task_index.setdefault(name, {"type": kind, "yaml_path": os.path.abspath(f)})
                    # And listed as registered: else lm-eval builds a file's task from
                    # the config whose `task` it popped, and the task's name is None.
                    if name not in tm.all_tasks:
                        tm.all_tasks.append(name)
        if not configs:
            raise LmEvalTaskError(f"task file {path}: no lm-eval task (a YAML mapping with `task:`) in it")
        selected.extend(configs)
    return tm, selected


def _label(item):
    return item if isinstance(item, str) else str(item.get("task") or item.get("group"))


def _leaves(task_dict):
    """(name, Task) of a get_task_dict() result (groups are nested dicts);
    the name is the dict's key (a task's config may have lost it)."""
    for key, value in task_dict.items():
        if isinstance(value, dict):
            yield from _leaves(value)
        else:
            yield (key if isinstance(key, str) else value.config.task), value


def check_generation(task, kwargs):
    """Refuses generation settings the greedy in-process engine cannot honour."""
    if kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) > 0.0:
        raise LmEvalTaskError(
            f"task {task} samples (do_sample or temperature > 0): the eval on the engine is greedy "
            "(temperature 0), as InferenceX runs lm-eval"
        )
    other = sorted(set(kwargs) - _GEN_KEYS)
    if other:
        raise LmEvalTaskError(
            f"task {task}: generation_kwargs {other} are not supported on the in-process engine "
            f"(greedy decoding with {sorted(_GEN_KEYS)})"
        )


def _check_task(name, task):
    if task.OUTPUT_TYPE != "generate_until":
        raise LmEvalTaskError(
            f"task {name} is a {task.OUTPUT_TYPE} task: enginebench runs generate_until tasks on the "
            "engine (loglikelihood scoring needs prompt log-probabilities, which its driver loop does "
            "not collect); run it with lm-eval's own vllm model instead"
        )
    check_generation(name, task.config.generation_kwargs or {})


def _dataset_of(tm, item):
    """`path (name)` of an item's dataset, from its config, for messages."""
    from lm_eval import utils

    config = item
    if isinstance(item, str):
        try:
            config = utils.load_yaml_config(tm.task_index[item]["yaml_path"], mode="simple")
        except Exception:
            config = {}
    path = config.get("dataset_path") if isinstance(config, dict) else None
    name = config.get("dataset_name") if isinstance(config, dict) else None
    return f"{path} ({name})" if name else str(path)


def _load_error(label, dataset, error):
    return LmEvalTaskError(
        f"task {label}: lm-eval could not load it or its dataset {dataset}: "
        f"{type(error).__name__}: {str(error).strip()}. Datasets load as lm-eval loads them: from the "
        "Hugging Face cache (HF_HOME), else downloaded; a gated dataset (e.g. Idavidrein/gpqa) needs its "
        "terms accepted on huggingface.co and HF_TOKEN set; offline, fetch it on a machine with access "
        "first, or give a task file whose dataset_kwargs.data_files are local (--task-file)"
    )


def preflight(spec_json):
    """Checks spec's tasks without an engine; returns a JSON string:
    {"lm_eval": version, "tasks": [{"name", "docs", "num_fewshot",
    "dataset", "until", "max_gen_toks"}]} or {"error": message}."""
    try:
        spec = json.loads(spec_json)
        lm_eval = _lm_eval()
        from lm_eval.tasks import get_task_dict

        tm, selected = _resolve(spec)
        tasks = []
        for item in selected:
            # get_task_dict consumes a config's keys: name its dataset first.
            label, dataset = _label(item), _dataset_of(tm, item)
            try:
                loaded = get_task_dict([item], tm)
            except LmEvalTaskError:
                raise
            except Exception as e:
                raise _load_error(label, dataset, e) from None
            for name, task in _leaves(loaded):
                _check_task(name, task)
                docs = len(task.eval_docs)
                limit = spec.get("limit")
                shots = spec.get("num_fewshot")
                own = task.config.num_fewshot
                gen = task.config.generation_kwargs or {}
                tasks.append({
                    "name": name,
                    "docs": min(docs, limit) if limit else docs,
                    # simple_evaluate keeps a task's explicit 0 over --num_fewshot
                    # and makes a missing one 0.
                    "num_fewshot": (own or 0) if shots is None or own == 0 else shots,
                    "dataset": dataset,
                    "until": list(gen.get("until") or []),
                    "max_gen_toks": gen.get("max_gen_toks"),
                })
        return json.dumps({"lm_eval": getattr(lm_eval, "__version__", None), "tasks": tasks})
    except LmEvalTaskError as e:
        return json.dumps({"error": str(e)})


def _engine_lm(generate, model, chat):
    from lm_eval.api.model import LM

    try:
        from lm_eval.defaults import DEFAULT_MAX_GEN_TOKS as default_max
    except ImportError:
        default_max = DEFAULT_MAX_GEN_TOKS

    class EngineLM(LM):
        """lm-eval's model interface over enginebench's engine: generate_until
        only. With the chat template on, a prompt is the JSON of its messages
        (as lm-eval's own API models send chat requests) and the engine puts
        them through the tokenizer's chat template, as `vllm serve`'s chat
        endpoint does."""

        def __init__(self):
            super().__init__()

        @property
        def tokenizer_name(self):
            return model

        def chat_template(self, chat_template=False):
            return None

        def apply_chat_template(self, chat_history, add_generation_prompt=True):
            return json.dumps([{"role": m["role"], "content": m["content"]} for m in chat_history],
                              ensure_ascii=False)

        def generate_until(self, requests, disable_tqdm=False):
            batch = []
            for r in requests:
                context, kwargs = r.args
                kwargs = dict(kwargs or {})
                check_generation(r.task_name, kwargs)
                until = kwargs.get("until") or []
                if isinstance(until, str):
                    until = [until]
                max_tokens = kwargs.get("max_tokens", kwargs.get("max_gen_toks", default_max))
                prompt = [(m["role"], m["content"]) for m in json.loads(context)] if chat else context
                batch.append((r.task_name, prompt, [str(u) for u in until], int(max_tokens)))
            return list(generate(batch)) if batch else []

        def loglikelihood(self, requests, disable_tqdm=False):
            raise LmEvalTaskError("loglikelihood requests: enginebench runs generate_until tasks only")

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise LmEvalTaskError("loglikelihood_rolling requests: enginebench runs generate_until tasks only")

    return EngineLM()


def evaluate(spec_json, generate):
    """Runs spec's tasks through lm-eval with `generate` as the model's
    generation; writes lm-eval's result and sample files into
    spec["output_dir"]; returns lm-eval's results (without samples) as JSON."""
    spec = json.loads(spec_json)
    _lm_eval()
    from lm_eval import evaluator
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.utils import handle_non_serializable

    tm, selected = _resolve(spec)
    lm = _engine_lm(generate, spec["model"], spec["chat"])
    os.makedirs(spec["output_dir"], exist_ok=True)
    # A path ending in .json: lm-eval writes results_<date>.json and
    # samples_<task>_<date>.jsonl beside it (no model-name subfolder).
    tracker = EvaluationTracker(output_path=os.path.join(spec["output_dir"], "results.json"))
    # InferenceX passes the token limit the same way (--gen_kwargs max_tokens=N).
    gen_kwargs = {"max_tokens": spec["max_tokens"]} if spec.get("max_tokens") else None
    results = evaluator.simple_evaluate(
        model=lm,
        model_args=f"model={spec['model']}",
        tasks=selected,
        num_fewshot=spec.get("num_fewshot"),
        limit=spec.get("limit"),
        log_samples=True,
        evaluation_tracker=tracker,
        system_instruction=spec.get("system_instruction"),
        apply_chat_template=bool(spec["chat"]),
        fewshot_as_multiturn=bool(spec["fewshot_as_multiturn"]),
        gen_kwargs=gen_kwargs,
        task_manager=tm,
    )
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task_name in results["configs"]:
        tracker.save_results_samples(task_name=task_name, samples=samples[task_name])
    return json.dumps(results, default=handle_non_serializable, ensure_ascii=False)


if __name__ == "__main__":
    # python -c <this file> preflight SPEC_JSON: the last stdout line is the answer.
    if len(sys.argv) != 3 or sys.argv[1] != "preflight":
        sys.exit("usage: python lmeval.py preflight SPEC_JSON")
    print(preflight(sys.argv[2]))
