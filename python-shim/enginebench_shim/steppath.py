"""How the shim adds requests to vLLM and runs one step: the two step paths.

The harness exists to measure the engine's step, so between two steps it does
the least it can (issues 34 and 37). vLLM's in-process `LLMEngine.step()` is
the engine core's step (`engine_core.get_output()`: schedule, execute,
update) followed, on the same thread, by its output processor (a
`RequestOutput` per request per step, incremental detokenization, iteration
stats, stat loggers). A performance sweep needs none of that: token counts,
finish reasons, cached-token counts and the scheduler's statistics are in the
engine core's own outputs. So the shim has two paths, chosen once per engine
(`Engine.step_path`, in the result's `engine.step_path` and in `doctor`):

core (the default where this vLLM has what it needs, `resolve`):
  * a token-id request goes through vLLM's own input processor
    (`LLMEngine.input_processor.process_inputs`, the validation and
    SamplingParams handling `LLMEngine.add_request` does, then
    `assign_request_id`, which may append a random suffix: outputs carry
    "<rid>-<suffix>", and Rust parses the part before the first '-') straight
    to `engine.engine_core.add_request` (the in-process client's
    `preprocess_add_request` + `EngineCore.add_request`), skipping the output
    processor's per-request state and detokenizer;
  * a step is `engine.engine_core.get_output()` (`InprocClient`, the object
    `LLMEngine.step()` calls first). The `EngineCoreOutput` objects of token
    requests go to Rust as they are; Rust reads `request_id`,
    `new_token_ids`, `finish_reason`, `events` (QUEUED/SCHEDULED/PREEMPTED
    timestamps) and `prefill_stats` (on a request's first output:
    `num_cached_tokens`, which is what the output processor copies into
    `RequestOutput.num_cached_tokens`) itself, with no Python object made per
    request per step. vLLM's per-request timings for the cross-check are
    rebuilt from the same inputs the output processor uses
    (vllm/v1/metrics/stats.py `IterationStats`): TTFT = wall clock when the
    step's outputs came back - the request's `arrival_time`, decode = core
    timestamp of the last output - of the first, queued = SCHEDULED - QUEUED
    event;
  * the batch's `scheduler_stats` (running/waiting, KV usage, prefix-cache
    and connector hits, speculative-decoding counts) are read directly, since
    LLMEngine's stat loggers no longer run; when the engine speculates, vLLM's
    stat loggers still get each step's stats (`logger_manager.record`, as
    `LLMEngine.step()` calls it), so vLLM's own Prometheus counters keep
    counting and the spec-decode cross-check compares against them;
  * text requests (evals, stop strings) still go through `LLMEngine.add_request`
    and the output processor: a step that has any in flight hands their
    outputs (only theirs) to `output_processor.process_outputs` and aborts
    those a stop string finished, as `LLMEngine.step()` does;
  * data parallel: the dummy batch `LLMEngine.step()` runs for an idle rank
    (`should_execute_dummy_batch`, and 0.34's `last_step_model_executed`) is
    run here the same way.
engine (the fallback, or `ENGINEBENCH_STEP_PATH=engine`):
  `LLMEngine.add_request` / `LLMEngine.step()` as before, every output through
  the output processor. Used where this vLLM lacks an item of the core path
  (the reason is kept in `Engine.step_path_reason`), or to compare the paths.

Seen here: vLLM 0.23 and 0.32 (CPU builds, run); 0.33 and 0.34 (read: the
same `InprocClient.get_output/add_request/abort_requests`,
`InputProcessor.process_inputs/assign_request_id`).

Prompts are handed over as lists of ints: 0.23-0.33's engine core copies
`prompt_token_ids` with `list.copy()` and appends to it (vllm/v1/request.py),
so an int32 ndarray (what 0.34's own frontends send over ZMQ) is not accepted
in-process there.
"""

import copy
import os
import sys
import time

try:  # as a package (the pure-Python loop of bench/, tests)
    from enginebench_shim import compat
except ImportError:  # compiled into the worker module, loaded as a top-level module
    import enginebench_compat as compat

#: ENGINEBENCH_CHECK_SWAP=1 (the tests): every long-prompt request
#: (`CorePath._token_request`) is also made by process_inputs whole, and
#: they must be equal.
_CHECK_SWAP = os.environ.get("ENGINEBENCH_CHECK_SWAP") == "1"

#: A step with no output (an idle DP rank's dummy batch).
_NO_OUTPUTS = []


def resolve(llm_engine):
    """The parts of the core path on this built engine: (parts, None), or
    (None, reason) when the engine path must be used. `ENGINEBENCH_STEP_PATH`
    = `engine` asks for the engine path, `core` makes a missing part an error."""
    wanted = os.environ.get("ENGINEBENCH_STEP_PATH", "auto")
    if wanted not in ("auto", "core", "engine"):
        raise ValueError(f"ENGINEBENCH_STEP_PATH={wanted!r}: use core, engine or auto")
    if wanted == "engine":
        return None, "ENGINEBENCH_STEP_PATH=engine"
    reason = compat.core_path_missing(llm_engine)
    if reason is not None and wanted == "core":
        raise RuntimeError(f"ENGINEBENCH_STEP_PATH=core, but this vLLM has no engine-core path: {reason}")
    if reason is not None:
        return None, reason
    return compat.core_path_parts(llm_engine), None


def request_output_parts(shim, outputs):
    """(deltas, texts, timings, cached) of vLLM `RequestOutput`s, in the
    shapes `Engine.step` documents. Runs once per step for every request that
    went through the output processor: one comprehension over the outputs,
    the rest only for finished requests."""
    if shim._record_ids:
        deltas = [(o.request_id, len(o.outputs[0].token_ids), o.finished,
                   list(o.outputs[0].token_ids)) for o in outputs]
    else:
        deltas = [(o.request_id, len(o.outputs[0].token_ids), o.finished) for o in outputs]
    texts = None
    timings = None
    cached = None
    for out in outputs:
        if not out.finished:
            continue
        rid = int(out.request_id)
        n_cached = getattr(out, "num_cached_tokens", None)
        if n_cached is not None:
            if cached is None:
                cached = []
            cached.extend((rid, n_cached))
        if rid in shim._text_rids:
            shim._text_rids.discard(rid)
            if texts is None:
                texts = []
            comp = out.outputs[0]
            texts.append((rid, comp.text, list(comp.token_ids)))
        m = out.metrics
        if m is not None and shim.crosscheck and m.first_token_ts > 0.0:
            latency = compat.first_token_latency(m)
            if latency is None:
                shim.crosscheck = False
                continue
            if timings is None:
                timings = []
            timings.extend((
                rid,
                latency,
                m.last_token_ts - m.first_token_ts,
                max(0.0, m.scheduled_ts - m.queued_ts),
                m.num_generation_tokens,
            ))
    return deltas, texts, timings, cached


class EnginePath:
    """`LLMEngine.add_request` / `LLMEngine.step()`: every output through
    vLLM's output processor (detokenized, a `RequestOutput` per request)."""

    name = "engine"

    def __init__(self, shim):
        self.shim = shim
        self.engine = shim.engine
        self.tokens_prompt = shim._TokensPrompt

    def add_tokens(self, rid, token_ids, params, shared=False):
        self.engine.add_request(str(rid), self.tokens_prompt(prompt_token_ids=token_ids), params)
        return None

    def prepare(self, token_ids, params):
        return (self.tokens_prompt(prompt_token_ids=token_ids), params)

    def add_prepared(self, rid, handle):
        prompt, params = handle
        self.engine.add_request(str(rid), prompt, params)
        return None

    def step(self):
        shim = self.shim
        sink = shim._sink
        # vLLM records SchedulerStats only on steps that processed a batch
        # (vllm/v1/engine/llm_engine.py:356); a step without must not repeat
        # the previous step's per-step deltas (prefix cache queries/hits).
        sink[0] = None
        sink[1] = 0
        outputs = self.engine.step()
        deltas, texts, timings, cached = request_output_parts(shim, outputs)
        spec = sink[2]
        if spec is not None:
            sink[2] = None
            spec = tuple(spec)
        stats, connector = shim.stats_tuple(sink[0], sink[1], spec)
        return None, deltas, texts, stats, timings, cached, connector, 0.0, 0.0

    def abort(self, rids, core_ids):
        self.engine.abort_request([str(r) for r in rids])

    def has_unfinished(self, local, pending=False):
        mine = self.engine.output_processor.has_unfinished_requests() if hasattr(self.engine, "output_processor") else False
        if getattr(self.engine, "dp_group", None) is None:
            return self.engine.has_unfinished_requests()
        return _dp_any(self.engine, mine, pending)


class CorePath:
    """vLLM's engine core driven directly (module doc)."""

    name = "core"

    def __init__(self, shim, parts):
        self.shim = shim
        self.engine = shim.engine
        self.client = parts["client"]
        self.process_inputs = parts["process_inputs"]
        self.assign_request_id = parts["assign_request_id"]
        self.output_processor = parts["output_processor"]
        self.iteration_stats = parts["IterationStats"]
        self.supported_tasks = parts["supported_tasks"]
        # The rendered form of a token prompt (what vLLM's renderer makes of
        # a TokensPrompt), else the raw TokensPrompt.
        tokens_input = parts["tokens_input"]
        if tokens_input is not None:
            self.prompt_of = tokens_input
        else:
            tokens_prompt = shim._TokensPrompt
            self.prompt_of = lambda ids: tokens_prompt(prompt_token_ids=ids)
        self.get_output = self.client.get_output
        self.add_request = self.client.add_request
        self.max_model_len = getattr(getattr(self.engine, "model_config", None), "max_model_len", None)
        # `_token_request` with shared params: the one-token request the
        # input processor made, by ignore_eos, and its processed params by
        # (max_tokens, ignore_eos).
        self._templates = {}
        self._processed = {}
        # vLLM's Prometheus counters are the spec-decode cross-check's
        # reference: keep feeding them when the engine speculates.
        self.loggers = parts["logger_manager"] if shim.num_speculative_tokens else None
        self.dp_group = getattr(self.engine, "dp_group", None)
        self._executed = True
        core = getattr(self.client, "engine_core", None)
        if (self.dp_group is not None and not hasattr(self.client, "last_step_model_executed")
                and hasattr(core, "step_fn") and hasattr(core, "post_step")):
            # vLLM 0.32/0.33's InprocClient.get_output drops whether the step
            # ran a forward (0.34 keeps it as `last_step_model_executed`): the
            # same three calls, keeping it (v1/engine/core_client.py).
            # The class InprocClient.get_output returns when there is nothing.
            empty = sys.modules[type(self.client).__module__].EngineCoreOutputs

            def get_output():
                outputs, executed = core.step_fn()
                core.post_step(model_executed=executed)
                self._executed = executed
                return outputs and outputs.get(0) or empty()

            self.get_output = get_output

    def _model_executed(self):
        """Whether the last step ran a forward (vLLM 0.34's client flag, else
        the one kept by this path's get_output)."""
        return getattr(self.client, "last_step_model_executed", self._executed)

    #: Prompts at least this long are processed as their first token, then
    #: given their ids (`_token_request`).
    SWAP_MIN_TOKENS = 1024

    def _token_request(self, rid, token_ids, params, shared=False):
        """vLLM's EngineCoreRequest of a token prompt sent at its send time
        (a replay's turn). On a token prompt, the input processor's only work
        that grows with the prompt is its validation: the length against
        max_model_len and the out-of-vocabulary check (a max() over the ids,
        ~11 ms at AgentX's 198k tokens on these CPUs: issue 34's "p99 gap"),
        while the request it makes holds the ids as given. So a long prompt
        (SWAP_MIN_TOKENS or more, shorter than max_model_len) is processed
        as its first token, with everything else the same (SamplingParams
        cloned and defaulted, id, arrival time), and then given its ids: the
        same request, made in the time a one-token prompt takes. The ids the
        harness sends are drawn from the tokenizer's vocabulary
        (`Engine.allowed_token_ids`), so the check it skips cannot fail. A
        prompt at or over max_model_len, or a vLLM whose request does not
        hold the ids as a list, goes through process_inputs whole (its own
        error message for the first).

        `shared`: `params` are the shim's perf params, which differ only in
        max_tokens and ignore_eos. Then the input processor runs once per
        ignore_eos: each send copies that one-token request and sets its
        id, arrival time, ids, and its processed params, one object per
        (max_tokens, ignore_eos) shared by all its requests, made by copying
        the processed ones and setting max_tokens (nothing the processor
        derives depends on it when it is set). Sharing is safe for params
        without extra_args (a KV connector writes its transfer params
        there) and structured outputs, which only these are (checked):
        the engine core and workers only read the rest, and vLLM shares
        one params object among the live children of an n > 1 request the
        same way (v1/engine/parallel_sampling.py, ParentRequest). That
        takes the input processor out of the send: ~300-480 us between two
        steps at AgentX's 256 sessions on these CPUs (mostly its
        SamplingParams deepcopy, on caches the step had evicted; 67 us in a
        warm loop), against two copies and four stores.
        ENGINEBENCH_CHECK_SWAP compares it with the processor's own request
        too. The template is copied before `assign_request_id` sees it
        (that sets the external id, which it refuses to set twice)."""
        n = len(token_ids)
        limit = self.max_model_len
        if n >= self.SWAP_MIN_TOKENS and limit and n < limit:
            shared = (shared and getattr(params, "extra_args", None) is None
                      and getattr(params, "structured_outputs", None) is None)
            req = self._from_template(rid, params) if shared else None
            if req is None:
                req = self.process_inputs(str(rid), self.prompt_of(token_ids[:1]), params,
                                          supported_tasks=self.supported_tasks)
                if shared and type(req.prompt_token_ids) is list:
                    self._templates[params.ignore_eos] = copy.copy(req)
                    self._processed[(params.max_tokens, params.ignore_eos)] = req.sampling_params
            if type(req.prompt_token_ids) is list:
                req.prompt_token_ids = token_ids
                if _CHECK_SWAP:
                    whole = self.process_inputs(str(rid), self.prompt_of(token_ids), params,
                                                supported_tasks=self.supported_tasks)
                    whole.arrival_time = req.arrival_time
                    if whole != req:
                        raise AssertionError(f"request {rid}: the long-prompt request differs from "
                                             f"process_inputs' own:\n{req!r}\n{whole!r}")
                return req
        return self.process_inputs(str(rid), self.prompt_of(token_ids), params, supported_tasks=self.supported_tasks)

    def _from_template(self, rid, params):
        """A copy of the one-token request made for params' ignore_eos, with
        rid, the arrival time now and the processed params of params'
        max_tokens (`_token_request`); None before the first."""
        template = self._templates.get(params.ignore_eos)
        if template is None:
            return None
        key = (params.max_tokens, params.ignore_eos)
        processed = self._processed.get(key)
        if processed is None:
            processed = self._processed[key] = copy.copy(template.sampling_params)
            processed.max_tokens = params.max_tokens
        req = copy.copy(template)
        req.request_id = str(rid)
        req.arrival_time = time.time()
        req.sampling_params = processed
        return req

    def add_tokens(self, rid, token_ids, params, shared=False):
        """Returns (vLLM's request id, arrival time on time.time()): outputs
        carry the first, vLLM's TTFT is measured from the second.
        `shared`: as in `_token_request`."""
        req = self._token_request(rid, token_ids, params, shared)
        if self.assign_request_id is not None:
            self.assign_request_id(req)
        self.add_request(req)
        return req.request_id, req.arrival_time

    def prepare(self, token_ids, params):
        """The EngineCoreRequest vLLM's input processor makes of the
        request (validation, SamplingParams clone and defaults), made before
        the loop's clock starts; add_prepared gives it its id and arrival
        time at the send, which is all process_inputs does with them."""
        return self.process_inputs("prepared", self.prompt_of(token_ids), params, supported_tasks=self.supported_tasks)

    def add_prepared(self, rid, req):
        req.request_id = str(rid)
        req.arrival_time = time.time()
        if self.assign_request_id is not None:
            self.assign_request_id(req)
        self.add_request(req)
        return req.request_id, req.arrival_time

    def step(self):
        shim = self.shim
        engine = self.engine
        if engine.should_execute_dummy_batch:
            # An idle DP rank joins its peers' forward (LLMEngine.step()).
            engine.should_execute_dummy_batch = False
            self.client.execute_dummy_batch()
            stats, connector = shim.stats_tuple(None, 0, None)
            return _NO_OUTPUTS, None, None, stats, None, None, connector, 0.0, 0.0
        outs = self.get_output()
        wall = time.time()
        if self.dp_group is not None and not self._model_executed():
            # A rank whose step ran no forward joins its peers' with a dummy
            # batch (vLLM 0.34 LLMEngine.step(); carried here for 0.32/0.33).
            self.client.execute_dummy_batch()
        raw = outs.outputs
        st = outs.scheduler_stats
        deltas = texts = timings = cached = None
        preempted = 0
        if shim._text_rids:
            # Text requests in flight: their outputs (only theirs) go through
            # the output processor, as in LLMEngine.step().
            op = self.output_processor
            known = op.request_states
            theirs = [o for o in raw if o.request_id in known]
            if theirs:
                raw = [o for o in raw if o.request_id not in known]
                it = self.iteration_stats()
                processed = op.process_outputs(theirs, engine_core_timestamp=outs.timestamp, iteration_stats=it)
                op.update_scheduler_stats(st)
                if processed.reqs_to_abort:
                    self.client.abort_requests(processed.reqs_to_abort)
                deltas, texts, timings, cached = request_output_parts(shim, processed.request_outputs)
                preempted = it.num_preempted_reqs
        spec = None
        if st is not None:
            sd = getattr(st, "spec_decoding_stats", None)
            if sd is not None:
                spec = (sd.num_drafts, sd.num_draft_tokens, sd.num_accepted_tokens,
                        list(getattr(sd, "num_accepted_tokens_per_pos", None) or []))
            if self.loggers is not None:
                self.loggers.record(scheduler_stats=st, iteration_stats=None)
        stats, connector = shim.stats_tuple(st, preempted, spec)
        return raw, deltas, texts, stats, timings, cached, connector, wall, outs.timestamp

    def abort(self, rids, core_ids):
        """`core_ids`: vLLM's ids of token requests (from add_tokens); `rids`:
        enginebench ids of text requests (through LLMEngine, which maps them)."""
        if core_ids:
            self.client.abort_requests(list(core_ids))
        if rids:
            self.engine.abort_request([str(r) for r in rids])

    def has_unfinished(self, local, pending=False):
        """Whether any request is unfinished: `local` is the caller's own
        count of token requests in flight (the output processor does not
        know them; `pending`: it has more to send); with data parallelism,
        across the DP group, as LLMEngine.has_unfinished_requests() does (an
        idle rank then runs a dummy batch in its next step)."""
        mine = bool(local) or self.output_processor.has_unfinished_requests()
        if self.dp_group is None:
            return mine
        return _dp_any(self.engine, mine, pending)


def _dp_any(engine, mine, pending):
    """vLLM's DP all-reduce (LLMEngine.has_unfinished_requests_dp), with this
    rank's requests not yet sent counted as work: whether any rank of the
    group has work; a rank with nothing in the engine while another has work
    runs a dummy batch in its next step (engine.should_execute_dummy_batch,
    as vLLM sets it)."""
    anywhere = _dp_all_reduce(engine, bool(mine or pending))
    if not mine and anywhere:
        engine.should_execute_dummy_batch = True
    return anywhere


def _dp_all_reduce(engine, flag):
    """ParallelConfig.has_unfinished_dp (vllm/config/parallel.py: an
    all-reduce MAX of one int over the DP group), through the engine's own
    config class."""
    return type(engine.vllm_config.parallel_config).has_unfinished_dp(engine.dp_group, flag)
