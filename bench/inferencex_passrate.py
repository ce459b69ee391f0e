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


def check_all(exe, files):
    """One `recipe check` over every imported file (one vLLM parser process);
    returns {file: (ok, problem lines)} from its per-recipe report."""
    c = subprocess.run([exe, "recipe", "check", *files], capture_output=True, text=True, timeout=3600)
    result, current = {}, None
    for line in c.stdout.splitlines():
        if line.startswith("recipe "):
            current = next((f for f in files if f"({f})" in line), None)
            result[current] = [True, []]
        elif current and line.strip().startswith(("error:", "warning:")):
            result[current][1].append(line.strip())
            if line.strip().startswith("error:"):
                result[current][0] = False
    if not result:
        for f in files:
            result[f] = [False, [last_error(c.stdout + c.stderr)]]
    return result


def main():
    root = sys.argv[1]
    exe = sys.argv[2] if len(sys.argv) > 2 else "target/release/enginebench"
    rows, imported, total, skipped = [], [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for cfg, key, fixed, agentic in entries(root):
            if not fixed:
                skipped += 1
                rows.append(f"SKIP   {key} ({cfg}): agentic-coding only, no fixed-seq-len scenario")
                continue
            total += 1
            out = os.path.join(tmp, f"{key}.toml")
            p = subprocess.run([exe, "import", "inferencex", "--inferencex-checkout", root, "--key", key, "-o", out],
                               capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                rows.append(f"IMPORT {key} ({cfg}): exit {p.returncode}: {last_error(p.stderr)}")
            else:
                jobs = sum(1 for l in p.stderr.splitlines() if l.startswith("job "))
                imported.append((cfg, key, out, jobs))
            print(rows[-1] if p.returncode else f"imported {key}", file=sys.stderr, flush=True)
        checked = check_all(exe, [o for _, _, o, _ in imported]) if imported else {}
        ok = 0
        for cfg, key, out, jobs in imported:
            good, problems = checked.get(out, [False, ["not in recipe check's report"]])
            warn = f"; {len(problems)} warning(s): {' | '.join(problems)[:400]}" if problems else ""
            if good:
                ok += 1
                rows.append(f"OK     {key} ({cfg}): {jobs} job(s){warn}")
            else:
                rows.append(f"CHECK  {key} ({cfg}): {' | '.join(problems)[:600]}")
    print("\n".join(rows))
    print(f"\nentries (single-node vLLM with fixed-seq-len scenarios): {total}; imported: {len(imported)}; "
          f"imported and checked: {ok} ({100.0 * ok / max(total, 1):.0f}%); agentic-only entries skipped: {skipped}")


if __name__ == "__main__":
    main()
