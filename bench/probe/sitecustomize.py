"""Step probe for bench/harness_overhead.py (not part of enginebench).

With this folder on PYTHONPATH and EB_STEP_PROBE=<dir>, a Python interpreter
(enginebench's embedded one included) installs pyloop's `Probe` at start-up:
once vLLM loads, the engine core's steps and add_request calls (the
in-process client's `get_output`/`add_request`) and the shim's hooks inside
them are timed on CLOCK_MONOTONIC, and the records are written to
`<dir>/probe-<pid>.json` ({"t", "d": step starts and durations; "at", "ad":
add_request; "ht", "hd": shim hooks}, seconds) when the engine core shuts
down (the shim's Engine.shutdown) and at exit. pyloop.py uses the same Probe,
so both loops are timed by the same code (EB_NULL_ENGINE=1 included: the
Probe then also puts pyloop's `null_core` stand-in in place of vLLM's
engine core).
"""

import os
import sys

_DIR = os.environ.get("EB_STEP_PROBE")


def _install():
    import atexit
    import json

    shim = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "python-shim", "enginebench_shim")
    sys.path.insert(0, shim)
    try:
        import pyloop
    finally:
        sys.path.remove(shim)
    probe = pyloop.Probe()
    path = os.path.join(_DIR, f"probe-{os.getpid()}.json")

    def flush():
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(probe.as_json(), f)
        os.replace(tmp, path)

    patch = probe.patch

    def patch_and_hook_shutdown(module):
        patch(module)
        from vllm.v1.engine import core_client

        shutdown = core_client.InprocClient.shutdown

        def shutdown_and_flush(self, *a, **kw):
            flush()
            return shutdown(self, *a, **kw)

        core_client.InprocClient.shutdown = shutdown_and_flush

    probe.patch = patch_and_hook_shutdown
    probe.install()
    atexit.register(flush)


if _DIR:
    _install()
