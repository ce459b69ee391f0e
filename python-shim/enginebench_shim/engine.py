"""The thin Python side of enginebench: one vLLM engine, driven by Rust.

Rust owns the request loop and every clock. This module only
  * builds the engine from a `vllm serve` flag list through vLLM's own serve
    argument parser (no flag list is kept here),
  * adds requests (token-id prompts for the perf sweep, text prompts for evals),
  * runs one `LLMEngine.step()` and returns what it produced in compact form,
    with the step's scheduler statistics and vLLM's own per-request timings,
  * shuts the engine down.

Everything crossing into Rust is plain ints, floats, strings and lists so that
a step costs as little as possible outside vLLM.
"""

import json
import os
import sys
import time


class FlagError(ValueError):
    """A `vllm serve` flag that vLLM's own parser rejected."""


def _serve_parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))

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
    "vllm_version": str}.
    """
    import dataclasses

    import vllm.envs as envs
    from vllm.engine.arg_utils import EngineArgs

    known_env = set(getattr(envs, "environment_variables", {}))
    out = {
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
        out["unknown_flags"] = unknown
        argv = rest
    engine_fields = {f.name for f in dataclasses.fields(EngineArgs)}
    for token in argv:
        action = parser._option_string_actions.get(token.split("=")[0]) if token.startswith("-") else None
        if action is not None and action.dest not in engine_fields and action.dest != "help":
            out["ignored"].append(token.split("=")[0])
    mml = getattr(args, "max_model_len", None)
    out["max_model_len"] = mml if isinstance(mml, int) and mml > 0 else None
    out["tensor_parallel_size"] = getattr(args, "tensor_parallel_size", None)
    return json.dumps(out)


def parse_serve_args(argv):
    """Parses `argv` (model first, then flags) exactly as `vllm serve` does."""
    args = _serve_parser().parse_args(list(argv))
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    return args


def _stat_logger_class(sink):
    """A vLLM stat logger that keeps the latest scheduler stats of each step.

    `sink` is a two-item list: [latest SchedulerStats or None, preemptions
    since the last step()]. It only keeps a reference: step() reads the
    fields, once per step (this runs inside every step, so it stays cheap)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class StepStatLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index=0):
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
            if scheduler_stats is not None:
                sink[0] = scheduler_stats
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


class Engine:
    """One in-process vLLM engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`)."""

    def __init__(self, argv):
        from vllm.engine.arg_utils import EngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.llm_engine import LLMEngine

        args = parse_serve_args(argv)
        engine_args = EngineArgs.from_cli_args(args)
        self._sink = [None, 0]
        # OPENAI_API_SERVER gives `vllm serve` defaults (max_num_seqs, batched tokens).
        self.engine = LLMEngine.from_engine_args(
            engine_args,
            usage_context=UsageContext.OPENAI_API_SERVER,
            stat_loggers=[_stat_logger_class(self._sink)],
        )
        self.model_config = self.engine.model_config
        tok = self.engine.get_tokenizer()
        self.tokenizer = tok
        special = set(getattr(tok, "all_special_ids", []) or [])
        vocab = len(tok)
        # Token ids a random prompt may use: the whole vocabulary minus special
        # tokens, as vLLM's RandomDataset samples them.
        self.allowed_token_ids = [i for i in range(vocab) if i not in special]
        self._scheduled = []
        self.scheduler_details = self._wrap_scheduler()

        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        self._TokensPrompt = TokensPrompt
        self._SamplingParams = SamplingParams
        self._DELTA = RequestOutputKind.DELTA
        self._FINAL = RequestOutputKind.FINAL_ONLY
        self._text_rids = set()
        # Test-only fault hook: hang (sleep) in step() after this many steps,
        # so tests can check that a per-point timeout cuts a hung engine.
        hang = os.environ.get("ENGINEBENCH_TEST_HANG_AFTER_STEPS")
        self._hang_after = int(hang) if hang else None
        self._steps = 0
        # SamplingParams per (max_tokens, ignore_eos): vLLM copies the params
        # of each request it adds, so one object can serve many requests.
        self._token_params = {}

    def _wrap_scheduler(self):
        """Counts the prefill/decode tokens each schedule() call hands the model.

        Only possible in-process (the scheduler lives in this interpreter);
        returns False when it is not reachable.
        """
        try:
            from vllm.v1.utils import compute_iteration_details

            scheduler = self.engine.engine_core.engine_core.scheduler
        except (AttributeError, ImportError):
            return False
        schedule = scheduler.schedule
        scheduled = self._scheduled
        # The first few steps are also counted by vLLM's own function; a
        # difference (another vLLM version) switches to vLLM's for good.
        checks = [16]
        details = _iteration_details

        def reference(out):
            d = compute_iteration_details(out)
            return (d.num_ctx_requests, d.num_ctx_tokens,
                    d.num_generation_requests, d.num_generation_tokens)

        def counting_schedule(*a, **kw):
            nonlocal details
            out = schedule(*a, **kw)
            try:
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
                scheduler.schedule = schedule
                self.scheduler_details = False
            return out

        scheduler.schedule = counting_schedule
        return True

    def info(self):
        """Engine facts for the result file: dict of str -> str/int."""
        import platform

        import torch
        import vllm

        mc = self.model_config
        pc = self.engine.vllm_config.parallel_config
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
            "vocab_size": len(self.tokenizer),
            # With vocab_size, what random prompts draw from (other clients of
            # the same workload rebuild the allowed ids from these two).
            "special_token_ids": sorted(set(getattr(self.tokenizer, "all_special_ids", []) or [])),
            "device": str(self.engine.vllm_config.device_config.device_type),
            "scheduler_details": self.scheduler_details,
        }

    def add_tokens(self, rid, token_ids, max_tokens, ignore_eos):
        """Adds a perf request: token-id prompt, greedy, outputs as per-step deltas.

        With ignore_eos the request runs to max_tokens (vLLM then stops on
        neither the EOS token nor the generation config's eos ids), as
        `vllm bench serve` asks for it: no min_tokens, whose logits
        processor would run on every step."""
        params = self._token_params.get((max_tokens, ignore_eos))
        if params is None:
            params = self._token_params[(max_tokens, ignore_eos)] = self._SamplingParams(
                max_tokens=max_tokens,
                ignore_eos=ignore_eos,
                temperature=0.0,
                output_kind=self._DELTA,
            )
        self.engine.add_request(
            str(rid), self._TokensPrompt(prompt_token_ids=token_ids), params
        )

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
        """Adds an eval request from chat messages [(role, content), ...]: the
        tokenizer's chat template with the generation prompt, tokenized without
        adding special tokens again (as vLLM's chat endpoint does)."""
        conversation = [{"role": r, "content": c} for r, c in messages]
        text = self.tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True
        )
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        self._add_eval(rid, self._TokensPrompt(prompt_token_ids=ids), max_tokens, stop)

    def step(self):
        """Runs one engine step.

        Returns (deltas, texts, stats, timings):
          deltas: [(rid, new_tokens, finished), ...] with rid the request id
                  string (Rust parses it), one per request that got output
          texts:  [(rid, text, output_token_ids)] of finished text requests, or None
          stats:  (prefill_reqs, prefill_tokens, decode_reqs, decode_tokens,
                   running, waiting, kv_cache_usage, prefix_queries, prefix_hits,
                   preempted) for this step; scheduled counts are -1 when unknown
          timings: flat [rid, ttft_s, decode_s, queued_s, gen_tokens, ...] from
                   vLLM's RequestStateStats of requests finished in this step, or None

        This runs once per step for every request in flight: one comprehension
        over the outputs, the rest only for finished requests.
        """
        sink = self._sink
        sink[1] = 0
        if self._hang_after is not None:
            self._steps += 1
            if self._steps > self._hang_after:
                time.sleep(1e6)
        outputs = self.engine.step()
        deltas = [(o.request_id, len(o.outputs[0].token_ids), o.finished) for o in outputs]
        texts = None
        timings = None
        for out in outputs:
            if not out.finished:
                continue
            rid = int(out.request_id)
            if rid in self._text_rids:
                self._text_rids.discard(rid)
                if texts is None:
                    texts = []
                comp = out.outputs[0]
                texts.append((rid, comp.text, list(comp.token_ids)))
            m = out.metrics
            if m is not None and m.first_token_ts > 0.0:
                if timings is None:
                    timings = []
                timings.extend((
                    rid,
                    m.first_token_latency,
                    m.last_token_ts - m.first_token_ts,
                    max(0.0, m.scheduled_ts - m.queued_ts),
                    m.num_generation_tokens,
                ))
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
        st = sink[0]
        if st is None:
            stats = (p_r, p_t, d_r, d_t, 0, 0, 0.0, 0, 0, sink[1])
        else:
            pc = st.prefix_cache_stats
            stats = (p_r, p_t, d_r, d_t, st.num_running_reqs, st.num_waiting_reqs,
                     st.kv_cache_usage, pc.queries if pc is not None else 0,
                     pc.hits if pc is not None else 0, sink[1])
        return deltas, texts, stats, timings

    def abort(self, rids):
        self.engine.abort_request([str(r) for r in rids])

    def has_unfinished(self):
        return self.engine.has_unfinished_requests()

    def shutdown(self):
        core = getattr(self.engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


def set_multiprocessing_executable(python):
    """Makes spawned children run the venv's python, never the Rust binary."""
    import multiprocessing

    multiprocessing.set_executable(python)
    sys.executable = python
