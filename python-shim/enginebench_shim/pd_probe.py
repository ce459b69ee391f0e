"""Disaggregated prefill/decode (P/D) on two in-process CPU engines, the caller as the proxy.

The plain-Python proof that KV moves between two vLLM engines in two
processes through vLLM's KV connector API (docs/pd.md has what was seen):

  * two child processes each build one in-process engine, the shim's own
    `Engine` (engine.py: `VLLM_ENABLE_V1_MULTIPROCESSING=0`, `vllm serve`
    flags through vLLM's own parser, the core step path), with
    `--kv-transfer-config` naming the connector (NixlConnector, `kv_role`
    kv_both, `kv_buffer_device` cpu) and a distinct NIXL side-channel port
    each (`VLLM_NIXL_SIDE_CHANNEL_PORT`);
  * the parent is the proxy, as vLLM's toy proxy does over HTTP: each prompt
    goes to the prefill engine with `max_tokens=1` and
    `SamplingParams.extra_args["kv_transfer_params"] = {"do_remote_decode":
    True, ...}` (`Engine.add_tokens(..., kv_transfer_params)`); the finished
    prefill's `EngineCoreOutput.kv_transfer_params` (remote engine id, block
    ids, host, port) go with the same token ids to the decode engine;
  * both engines keep stepping the whole time (the decode side pulls the KV
    inside its steps; the prefill side frees the sent blocks inside its own);
  * then the prefill engine's prefix cache is reset and it runs the same
    prompts whole, alone: the single-engine reference.

The verdict holds when, for every prompt, the decode engine's greedy tokens
equal the reference's, its prompt tokens all arrived by transfer
(`PrefillStats.num_external_cached_tokens` == prompt length, read from the
engine core's outputs: vLLM 0.32's `RequestOutput.num_cached_tokens` on the
decode side is overwritten with the prefill side's own cache hits, the
`remote_prefill_cached_tokens` of the transfer params), the reference's came
from none, and the connector's stats (`SchedulerStats.kv_connector_stats`,
summed by `Engine.take_kv_transfer_stats`) count one transfer per prompt
with no failure.

    python -m enginebench_shim.pd_probe MODEL_DIR [--prompts N] [--isl N]
        [--osl N] [--timeout S] [--port P] [-- extra vllm serve flags]

Prints one JSON object as its last line of stdout (vLLM logs there too);
exit 0 when the verdict holds, 1 when it does not, 2 on bad input (no NIXL
in this Python, a bad flag, an engine that does not start), 3 when the
probe ran past --timeout (the children are then killed).
"""

import argparse
import json
import multiprocessing
import os
import random
import sys
import time

from enginebench_shim.engine import PREFILL_TRANSFER_PARAMS

# The flags every CPU probe engine gets before the caller's own.
BASE_FLAGS = ["--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", "--seed", "0"]


def connector_config(engine_id):
    """The `--kv-transfer-config` JSON of one engine of the pair (NixlConnector on host memory)."""
    return json.dumps({
        "kv_connector": "NixlConnector",
        "kv_role": "kv_both",
        "kv_buffer_device": "cpu",
        "engine_id": engine_id,
    })


def _prefill_stats(ps):
    """PrefillStats as a dict of ints (vLLM 0.32 `v1/metrics/stats.py`)."""
    names = ("num_prompt_tokens", "num_computed_tokens", "num_cached_tokens",
             "num_local_cached_tokens", "num_external_cached_tokens")
    return {n: int(getattr(ps, n, 0)) for n in names}


def _engine_worker(role, argv, side_channel_port, conn):
    """One engine (the shim's `Engine`, on its core step path) in this child
    process, driven by the parent over `conn`.

    Messages in: ("add", rid, token_ids, max_tokens, kv_transfer_params or
    None), ("reset_prefix_cache",), ("stop",). Messages out: ("ready", info),
    ("done", rid, token_ids, kv_transfer_params, prefill_stats,
    finish_reason), ("reset", ok), ("stopped", transfer stats or None),
    ("error", text).
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_NIXL_SIDE_CHANNEL_HOST"] = "127.0.0.1"
    os.environ["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(side_channel_port)
    # GiB of KV cache per engine (vLLM's CPU default takes most of the memory).
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    try:
        from enginebench_shim import engine as eb

        engine = eb.Engine(argv)
        if engine.step_path != "core":
            raise RuntimeError(f"the probe reads PrefillStats on the core step path; this engine runs "
                               f"{engine.step_path} ({engine.step_path_reason})")
    except Exception as e:  # the parent reports it; no traceback as the only message
        conn.send(("error", f"{role} engine: {type(e).__name__}: {e}"))
        return
    conn.send(("ready", {"role": role, "kv_transfer_affinity": engine.kv_transfer_affinity,
                         "cpus": sorted(os.sched_getaffinity(0)),
                         "kv_block_size": engine.engine.vllm_config.cache_config.block_size}))
    # Per request in flight (the core's id): its tokens so far, its PrefillStats.
    tokens, stats = {}, {}
    while True:
        busy = bool(tokens)
        while conn.poll(0 if busy else 0.005):
            msg = conn.recv()
            if msg[0] == "stop":
                conn.send(("stopped", engine.take_kv_transfer_stats()))
                return
            if msg[0] == "reset_prefix_cache":
                conn.send(("reset", engine.reset_prefix_cache()))
                continue
            _, rid, ids, max_tokens, params = msg
            core_id, _ = engine.add_tokens(rid, list(ids), max_tokens, True, params)
            tokens[core_id] = []
            busy = True
        # Step even when idle: the prefill side frees blocks the decode side
        # has read, and the decode side heartbeats, inside steps.
        raw = engine.step()[0]
        for o in raw or ():
            if o.request_id not in tokens:
                continue
            tokens[o.request_id].extend(o.new_token_ids)
            if o.prefill_stats is not None:
                stats[o.request_id] = _prefill_stats(o.prefill_stats)
            if o.finish_reason is not None:
                conn.send(("done", int(o.request_id.split("-")[0]), tokens.pop(o.request_id),
                           o.kv_transfer_params, stats.pop(o.request_id, None), str(o.finish_reason)))


class _Deadline(Exception):
    pass


def _recv(conn, deadline, what):
    while not conn.poll(0.05):
        if time.monotonic() > deadline:
            raise _Deadline(what)
    msg = conn.recv()
    if msg[0] == "error":
        raise RuntimeError(msg[1])
    return msg


#: Request ids of the reference run on the prefill engine (the P/D requests are 0..prompts).
REFERENCE_RID = 1000

#: The transfer stats of an engine that reported none.
NO_TRANSFERS = {"transfers": 0, "bytes": 0, "transfer_s": 0.0, "failed_transfers": 0,
                "failed_notifications": 0, "failed_handshakes": 0, "expired_requests": 0}


def run(model, prompts, isl, osl, timeout_s, port, extra_flags, recompute=False, prefill_engines=1):
    """Runs the probe; returns (exit code, report dict).

    `prefill_engines` prefill engines (side-channel ports `port`, `port`+1,
    ...) and one decode engine (the next port); prompt i goes to prefill
    engine i mod `prefill_engines` (round robin: equal prompts, so every
    engine gets the same share), and the reference runs on prefill engine 0.
    """
    rng = random.Random(0)
    # Token ids well inside SmolLM2's vocabulary (49,152) and clear of its special ids.
    token_prompts = [[rng.randrange(100, 40000) for _ in range(isl + 8 * i)] for i in range(prompts)]
    ctx = multiprocessing.get_context("spawn")
    ctx.set_executable(sys.executable)
    deadline = time.monotonic() + timeout_s
    names = [f"prefill{k}" for k in range(prefill_engines)] + ["decode0"]
    procs = {}
    report = {"model": model, "recompute_control": recompute, "prompts": prompts,
              "isl": [len(p) for p in token_prompts], "osl": osl, "balance": "round robin: prompt i to prefill i mod N",
              "cpus": sorted(os.sched_getaffinity(0))}
    try:
        for offset, name in enumerate(names):
            argv = [model, *BASE_FLAGS, "--kv-transfer-config", connector_config(name), *extra_flags]
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_engine_worker, args=(name, argv, port + offset, child), daemon=True)
            proc.start()
            procs[name] = (proc, parent)
        report["engines"] = [_recv(procs[n][1], deadline, f"{n} engine start")[1] for n in names]
        prefill = [procs[n][1] for n in names[:-1]]
        D = procs["decode0"][1]
        t0 = time.monotonic()
        for i, ids in enumerate(token_prompts):
            prefill[i % prefill_engines].send(("add", i, ids, 1, PREFILL_TRANSFER_PARAMS))
        handoff, decoded = {}, {}
        while len(decoded) < prompts:
            if time.monotonic() > deadline:
                raise _Deadline(f"P/D requests ({len(decoded)} of {prompts} decoded)")
            for k, P in enumerate(prefill):
                if P.poll(0.002):
                    _, i, _, params, _, _ = _recv(P, deadline, f"prefill{k} output")
                    handoff[i] = params
                    D.send(("add", i, token_prompts[i], osl, None if recompute else params))
            if D.poll(0.002):
                _, i, ids, _, stats, _ = _recv(D, deadline, "decode output")
                decoded[i] = (ids, stats)
        report["pd_wall_s"] = round(time.monotonic() - t0, 3)
        P = prefill[0]
        P.send(("reset_prefix_cache",))
        report["prefix_cache_reset"] = _recv(P, deadline, "prefix cache reset")[1]
        for i, ids in enumerate(token_prompts):
            P.send(("add", REFERENCE_RID + i, ids, osl, None))
        single = {}
        while len(single) < prompts:
            _, rid, ids, _, stats, _ = _recv(P, deadline, "reference output")
            single[rid - REFERENCE_RID] = (ids, stats)
        for name in names:
            procs[name][1].send(("stop",))
        stats = {name: _recv(procs[name][1], deadline, f"{name} stop")[1] or dict(NO_TRANSFERS) for name in names}
    except _Deadline as e:
        report["error"] = f"ran past --timeout {timeout_s} s waiting for {e}"
        return 3, report
    except RuntimeError as e:
        report["error"] = str(e)
        return 2, report
    finally:
        for proc, _ in procs.values():
            proc.join(max(0.0, min(30.0, deadline - time.monotonic())))
            if proc.is_alive():
                proc.kill()
    rows = []
    for i, ids in enumerate(token_prompts):
        d_ids, d_stats = decoded[i]
        s_ids, s_stats = single[i]
        rows.append({
            "prompt_tokens": len(ids),
            "prefill_engine": (handoff[i] or {}).get("remote_engine_id"),
            "equal": d_ids == s_ids,
            "decode_external_cached": (d_stats or {}).get("num_external_cached_tokens"),
            "reference_cached": (s_stats or {}).get("num_cached_tokens"),
            "remote_num_tokens": (handoff[i] or {}).get("remote_num_tokens"),
            "decode_tokens": d_ids,
            "reference_tokens": s_ids,
        })
    report["requests"] = rows
    report["connector"] = stats
    decode = stats["decode0"]
    ok = (
        all(r["equal"] and r["decode_external_cached"] == r["prompt_tokens"] and r["reference_cached"] == 0
            and r["prefill_engine"] == f"prefill{i % prefill_engines}" for i, r in enumerate(rows))
        and decode["transfers"] == prompts and decode["bytes"] > 0
        and not any(v for k, v in decode.items() if k.startswith(("failed", "expired")))
    )
    report["verdict"] = ok
    return (0 if ok else 1), report


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m enginebench_shim.pd_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="model folder or name")
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--isl", type=int, default=96,
                   help="prompt tokens of the first prompt (each next one 8 more)")
    p.add_argument("--osl", type=int, default=16)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for the whole probe")
    p.add_argument("--prefill-engines", type=int, default=1,
                   help="prefill engines (prompt i goes to engine i mod N); one decode engine")
    p.add_argument("--port", type=int, default=5600,
                   help="NIXL side-channel port of prefill engine 0 (each next engine, the decode one last: +1)")
    p.add_argument("--recompute", action="store_true",
                   help="control: the decode requests go without the prefill's kv_transfer_params, so the "
                        "decode engine recomputes the prompts and the verdict must fail (exit 1)")
    p.add_argument("extra", nargs="*", help="more `vllm serve` flags for both engines (after --)")
    a = p.parse_args(argv)
    if a.prompts < 1 or a.isl < 1 or a.osl < 1 or a.timeout <= 0 or a.prefill_engines < 1:
        print("pd_probe: --prompts, --isl, --osl, --timeout and --prefill-engines must be positive", file=sys.stderr)
        return 2
    import importlib.util
    if importlib.util.find_spec("nixl") is None:
        print("pd_probe: this Python has no `nixl` package (vLLM's NixlConnector needs it): "
              "use .enginebench/venv-pd/bin/python (ci/setup.sh makes it)", file=sys.stderr)
        return 2
    code, report = run(a.model, a.prompts, a.isl, a.osl, a.timeout, a.port, a.extra, a.recompute, a.prefill_engines)
    print(json.dumps(report))
    if "error" in report:
        print(f"pd_probe: {report['error']}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
