#!/usr/bin/env python3
"""Pass rate of `enginebench import inferencex` over an InferenceX checkout.

For every single-node vLLM entry of configs/*master*.yaml and
configs/deprecated/*master*.yaml (framework vllm, not multinode), runs
  enginebench import inferencex --inferencex-checkout DIR --key KEY [--scenario S] -o F
and then `enginebench recipe check F`, and prints one line per entry and
the totals per kind: current fixed-seq-len (the entry's fixed-seq-len
scenarios, from configs/), current agentic (its agentic-coding configs,
`--scenario agentic`; an entry with both kinds counts in both rows) and
deprecated (entries of configs/deprecated/). Data-parallel jobs (vLLM
-dp > 1, DP attention) run since issue 31 and are checked like any other;
the "checked but for their -dp jobs" column counts entries whose only
errors are an older enginebench's refusal of data parallelism (empty with
this one). Nothing of the checkout is copied; it is only read.

The multi-node aggregated row: every srt-slurm recipe under
benchmarks/multi_node/srt-slurm-recipes/vllm/ whose
`backend.vllm_config.aggregated` is set, imported by its path
(`import inferencex --inferencex-checkout DIR --key PATH`), then checked;
each refused one is listed with the reason the importer gave (the arm).

The multi-node P/D row: every srt-slurm recipe with
`backend.vllm_config.prefill` / `.decode` (issue 44), imported and checked
the same way (both sides through vLLM's parser and the P/D checks); the
refused and failed ones are also counted by reason (the importer's or
`recipe check`'s error, the file's own names taken out).

usage: bench/inferencex_passrate.py [--only KIND] [--machine-fact 'CMD=OUTPUT' ...]
                                     [--vllm-parser VERSION=PYTHON ...]
                                     INFERENCEX_DIR [ENGINEBENCH_BINARY]
  --only KIND: only the entries of one row (fixed-seq-len, agentic,
  deprecated, multi-node-agg or multi-node-pd).
  --machine-fact: passed to every import (repeatable): the output of a
  command a launcher reads off its machine, e.g. an MI355X node's
  `rocm-smi --showfw` or a large node's `df -BG --output=avail /dev/shm`,
  for a pass rate measured away from those machines; or a machine file's
  content, '/sys/...=CONTENT' (Kimi-K3 B300's RDMA rail state). Commands
  without a given fact run on this machine, and files are read here, only
  when this machine is the entry's kind (a CPU runner, or a GPU of the
  runner's); otherwise every fact must be given (docs/import.md).
  --vllm-parser VERSION=PYTHON (repeatable): `recipe check` of an imported
  recipe whose image is a vLLM release's (vllm/vllm-openai[-rocm]:vVERSION,
  any suffix) runs with PYTHON's vLLM, e.g. the parse-only overlay
  `ci/setup.sh --with-vllm-parser 0.21.0` makes
  (.enginebench/vllm-parser-0.21.0/bin/python); every other recipe (nightly
  and custom images, CPU recipes) with the interpreter enginebench picks.
  The totals say how many were checked with each.
"""
import glob
import os
import re
import subprocess
import sys
import tempfile
import tomllib

import yaml


def entries(root):
    """(config file, key, kind, scenario argument) per imported unit."""
    files = sorted(glob.glob(f"{root}/configs/*master*.yaml")) + sorted(glob.glob(f"{root}/configs/deprecated/*master*.yaml"))
    for f in files:
        doc = yaml.safe_load(open(f)) or {}
        deprecated = "/deprecated/" in f
        for key, e in doc.items():
            if not isinstance(e, dict) or e.get("framework") != "vllm" or e.get("multinode"):
                continue
            sc = e.get("scenarios") or {}
            fixed = bool(sc.get("fixed-seq-len") or e.get("seq-len-configs"))
            agentic = bool(sc.get("agentic-coding"))
            rel = os.path.relpath(f, root)
            if deprecated:
                yield rel, key, "deprecated", None
                continue
            if fixed:
                # Only the fixed-length scenarios when the entry has both kinds.
                yield rel, key, "fixed-seq-len", (None if not agentic else "fixed")
            if agentic:
                yield rel, key, "agentic", "agentic"


SRT_DIR = "benchmarks/multi_node/srt-slurm-recipes/vllm"


def srt_recipes(root):
    """(relative path, aggregated?) of every srt-slurm vLLM recipe."""
    out = []
    for f in sorted(glob.glob(f"{root}/{SRT_DIR}/**/*.yaml", recursive=True)):
        doc = yaml.safe_load(open(f)) or {}
        cfg = ((doc.get("backend") or {}).get("vllm_config") or {})
        out.append((os.path.relpath(f, root), "aggregated" in cfg))
    return out


def last_error(text):
    lines = [l for l in text.splitlines() if l.strip()]
    errs = [l for l in lines if "error" in l.lower()]
    return " | ".join((errs or lines)[-4:])[:600]


def reason(text, rel):
    """An error with what names one file taken out (its recipe name and path,
    the temp file, per-recipe values in vLLM's messages), so that files
    failing for one reason count together."""
    text = re.sub(r"^.*?\(" + re.escape(rel) + r"\): ", "", text)
    text = re.sub(r"error: |\S*/tmp\S*|\b(base|job base)( prefill| decode)?:? ", "", text)
    # vLLM's parser quotes the whole flag value: keep only what it objects to.
    text = re.sub(r"'\{.*?\}'", "'{...}'", text)
    text = re.sub(r"\b\d+\b", "N", text)
    return text.strip()[:300]


# An image of a vLLM release: vllm/vllm-openai:v0.21.0, ...:v0.20.1-ubuntu2404.
RELEASE_IMAGE = re.compile(r"^vllm/vllm-openai(?:-rocm)?:v(\d+\.\d+\.\d+)(?:-|$)")


def release_of(recipe_file):
    """The vLLM release the recipe's pinned image runs, or None."""
    with open(recipe_file, "rb") as f:
        m = RELEASE_IMAGE.match(tomllib.load(f).get("image") or "")
    return m.group(1) if m else None


def check_by_release(exe, files, parsers):
    """`recipe check` of every file, one process per interpreter: a file
    whose image is a release in `parsers` ({version: python}) with that
    Python, the rest with enginebench's own pick. Returns ({file: (ok,
    problem lines)}, {interpreter label: files checked})."""
    groups = {}
    for f in files:
        v = release_of(f)
        groups.setdefault(v if v in parsers else None, []).append(f)
    result, used = {}, {}
    for v, group in groups.items():
        result.update(check_all(exe, group, parsers.get(v)))
        used[f"vLLM {v} ({parsers[v]})" if v else "enginebench's default interpreter"] = len(group)
    return result, used


def check_all(exe, files, python=None):
    """One `recipe check` over every imported file (one vLLM parser process);
    returns {file: (ok, problem lines)} from its per-recipe report."""
    cmd = [exe, "recipe", "check", *(["--python", python] if python else []), *files]
    c = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    result, current = {}, None
    for line in c.stdout.splitlines():
        if line.startswith("recipe "):
            current = next((f for f in files if f"({f})" in line), None)
            result[current] = [True, []]
        elif current and line.strip().startswith(("error:", "warning:")):
            result[current][1].append(line.strip())
            if line.strip().startswith("error:"):
                result[current][0] = False
        elif current and result[current][1] and line[:1].strip() and not line.startswith(("checking ", "error: ")):
            # A message of several lines (pydantic's names the field on the
            # next one, at the margin): joined to its error.
            result[current][1][-1] += f" ({line.strip()})"
    if not result:
        for f in files:
            result[f] = [False, [last_error(c.stdout + c.stderr)]]
    return result


KINDS = ("fixed-seq-len", "agentic", "deprecated", "multi-node-agg", "multi-node-pd")


def main():
    args = sys.argv[1:]
    only, facts, parsers = None, [], {}
    while args[:1] in (["--only"], ["--machine-fact"], ["--vllm-parser"]):
        if args[0] == "--only":
            only = args[1]
            if only not in KINDS:
                sys.exit(f"--only {only}: give one of {', '.join(KINDS)}")
        elif args[0] == "--vllm-parser":
            version, _, python = args[1].partition("=")
            if not re.fullmatch(r"\d+\.\d+\.\d+", version) or not python:
                sys.exit(f"--vllm-parser {args[1]}: give VERSION=PYTHON, e.g. 0.21.0=.enginebench/vllm-parser-0.21.0/bin/python")
            parsers[version] = python
        else:
            facts += ["--machine-fact", args[1]]
        args = args[2:]
    root = args[0]
    exe = args[1] if len(args) > 1 else "target/release/enginebench"
    rows, imported = [], []
    # kind -> [(stage, reason)] of the srt-slurm recipes that failed
    reasons = {}
    total = {k: 0 for k in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        for cfg, key, kind, scenario in entries(root):
            if only and kind != only:
                continue
            total[kind] += 1
            scenarios = [scenario]
            if scenario == "fixed":
                # Each fixed-length scenario of an entry that also has agentic ones.
                doc = yaml.safe_load(open(os.path.join(root, cfg)))[key]
                scenarios = [f"{seq(s['isl'])}{seq(s['osl'])}" for s in doc["scenarios"]["fixed-seq-len"]]
            outs, failed = [], None
            for i, sc in enumerate(scenarios):
                out = os.path.join(tmp, f"{key}-{kind}-{i}.toml")
                cmd = [exe, "import", "inferencex", "--inferencex-checkout", root, "--key", key, "-o", out, *facts]
                if sc:
                    cmd[5:5] = ["--scenario", sc]
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                if p.returncode != 0:
                    failed = f"exit {p.returncode}: {last_error(p.stderr)}"
                    break
                outs.append((out, sum(1 for l in p.stderr.splitlines() if l.startswith("job "))))
            if failed:
                rows.append((kind, f"IMPORT {key} ({cfg}): {failed}"))
            else:
                imported.append((cfg, key, kind, outs))
            print(rows[-1][1] if failed else f"imported {key} ({kind})", file=sys.stderr, flush=True)
        for rel, agg in srt_recipes(root):
            kind = "multi-node-agg" if agg else "multi-node-pd"
            if only not in (None, kind):
                continue
            total[kind] += 1
            out = os.path.join(tmp, rel.replace("/", "_") + ".toml")
            p = subprocess.run([exe, "import", "inferencex", "--inferencex-checkout", root, "--key", rel, "-o", out, *facts],
                               capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                rows.append((kind, f"IMPORT {rel}: exit {p.returncode}: {last_error(p.stderr)}"))
                reasons.setdefault(kind, []).append(("import", reason(last_error(p.stderr), rel)))
            else:
                imported.append((rel, rel, kind, [(out, 1)]))
            print(rows[-1][1] if p.returncode != 0 else f"imported {rel}", file=sys.stderr, flush=True)
        checked, used = check_by_release(exe, [o for *_, outs in imported for o, _ in outs], parsers) if imported else ({}, {})
        ok = {k: 0 for k in KINDS}
        done = {k: 0 for k in KINDS}
        dp = {k: 0 for k in KINDS}
        for cfg, key, kind, outs in imported:
            done[kind] += 1
            results = [checked.get(o, [False, ["not in recipe check's report"]]) for o, _ in outs]
            problems = [pr for _, prs in results for pr in prs]
            jobs = sum(j for _, j in outs)
            errors = [p for p in problems if p.startswith("error:")]
            if all(good for good, _ in results):
                ok[kind] += 1
                warn = f"; {len(problems)} warning(s): {' | '.join(problems)[:400]}" if problems else ""
                rows.append((kind, f"OK     {key} ({cfg}): {jobs} job(s){warn}"))
            elif all("--data-parallel-size" in e and "in-process" in e for e in errors):
                # Only the refusal of data parallelism: the other jobs run.
                dp[kind] += 1
                rows.append((kind, f"DP     {key} ({cfg}): {jobs} job(s), {len(errors)} with vLLM -dp > 1 (refused in-process; the others check)"))
            else:
                rows.append((kind, f"CHECK  {key} ({cfg}): {' | '.join(p for p in problems if p.startswith('error:'))[:600]}"))
                if kind.startswith("multi-node"):
                    reasons.setdefault(kind, []).append(("check", reason(" | ".join(sorted(set(errors))), cfg)))
    for kind in KINDS:
        print(f"\n== {kind}")
        print("\n".join(r for k, r in rows if k == kind))
    for kind, found in sorted(reasons.items()):
        print(f"\n== {kind}: refused (import) and failed (check), by reason")
        counts = {}
        for stage, why in found:
            counts[(stage, why)] = counts.get((stage, why), 0) + 1
        for (stage, why), n in sorted(counts.items(), key=lambda x: (-x[1], x[0])):
            print(f"{n:4}  {stage}: {why}")
    print()
    for label, n in used.items():
        print(f"checked with {label}: {n} recipe file(s)")
    for kind in KINDS:
        print(f"{kind:14} entries: {total[kind]:3}; imported: {done[kind]:3}; imported and checked: {ok[kind]:3} "
              f"({100.0 * ok[kind] / max(total[kind], 1):.0f}%); checked but for their -dp jobs: {dp[kind]:3} "
              f"(together {100.0 * (ok[kind] + dp[kind]) / max(total[kind], 1):.0f}%)")


def seq(n):
    """InferenceX's seq_len_to_str: 1024 -> 1k."""
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


if __name__ == "__main__":
    main()
