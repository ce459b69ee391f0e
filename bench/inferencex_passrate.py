#!/usr/bin/env python3
"""Pass rate of `enginebench import inferencex` over an InferenceX checkout.

For every single-node vLLM entry of configs/*master*.yaml and
configs/deprecated/*master*.yaml (framework vllm, not multinode, with
fixed-seq-len scenarios), runs
  enginebench import inferencex --inferencex-checkout DIR --key KEY -o F
and then `enginebench recipe check F`, and prints one line per entry and the
totals. Nothing of the checkout is copied; it is only read.

usage: bench/inferencex_passrate.py INFERENCEX_DIR [ENGINEBENCH_BINARY]
"""
import glob
import os
import subprocess
import sys
import tempfile

import yaml


def entries(root):
    files = sorted(glob.glob(f"{root}/configs/*master*.yaml")) + sorted(glob.glob(f"{root}/configs/deprecated/*master*.yaml"))
    for f in files:
        doc = yaml.safe_load(open(f)) or {}
        for key, e in doc.items():
            if not isinstance(e, dict) or e.get("framework") != "vllm" or e.get("multinode"):
                continue
            sc = e.get("scenarios") or {}
            fixed = sc.get("fixed-seq-len") or e.get("seq-len-configs")
            yield os.path.relpath(f, root), key, bool(fixed), bool(sc.get("agentic-coding"))


def last_error(text):
    lines = [l for l in text.splitlines() if l.strip()]
    errs = [l for l in lines if "error" in l.lower()]
    return " | ".join((errs or lines)[-4:])[:600]


def main():
    root = sys.argv[1]
    exe = sys.argv[2] if len(sys.argv) > 2 else "target/release/enginebench"
    rows, ok, imported, total, agentic_only = [], 0, 0, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for cfg, key, fixed, agentic in entries(root):
            if not fixed:
                agentic_only += 1
                rows.append(f"SKIP   {key} ({cfg}): agentic-coding only, no fixed-seq-len scenario")
                continue
            total += 1
            out = os.path.join(tmp, f"{key}.toml")
            p = subprocess.run([exe, "import", "inferencex", "--inferencex-checkout", root, "--key", key, "-o", out],
                               capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                rows.append(f"IMPORT {key} ({cfg}): exit {p.returncode}: {last_error(p.stderr)}")
                continue
            imported += 1
            c = subprocess.run([exe, "recipe", "check", out], capture_output=True, text=True, timeout=900)
            if c.returncode != 0:
                rows.append(f"CHECK  {key} ({cfg}): exit {c.returncode}: {last_error(c.stdout + c.stderr)}")
                continue
            ok += 1
            rows.append(f"OK     {key} ({cfg})")
    print("\n".join(rows))
    print(f"\nentries (single-node vLLM, fixed-seq-len): {total}; imported: {imported}; imported and checked: {ok} "
          f"({100.0 * ok / max(total, 1):.0f}%); agentic-only entries skipped: {agentic_only}")


if __name__ == "__main__":
    main()
