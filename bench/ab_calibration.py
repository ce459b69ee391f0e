"""How often `enginebench ab` calls a change a change (issue 15), and how
often its gate ends PASS, FAIL or INCONCLUSIVE (issue 36).

For each change (an inert one, `base` vs `knob`; a large real one, `base` vs
`omp1`, OMP_NUM_THREADS 2 -> 1; a smaller real one, `base` vs `seqs3`,
--max-num-seqs 3) it runs K `enginebench ab` comparisons with the same short
sweep, after one `ab --aa` of `base` that gives the noise floor (`--noise`).
From each run's ab.json it reads, per point and figure, the new interval
(`ci`: paired t over repeats), the verdict with the noise floor (`verdict`)
and the old method's interval recomputed on the same data (`bootstrap_ci`:
two-level percentile bootstrap), and prints:

1. per change: in how many of the K runs some figure was called a change, by
   each of the three rules (for the inert knob that is the false-positive
   rate; goal <= 1 in 8);
2. per change, point and figure: mean and sd of the delta over the K runs and
   the mean CI half-width of both methods, and detections per method;
3. per change and repeat count R' (--outcomes-at, e.g. 3 and 8): in how many
   runs the gate (--max-regression, 95% CIs) ended PASS, FAIL or
   INCONCLUSIVE, without and with the A/A noise floor. A run keeps every
   repeat (result.json, requests.jsonl), and its first R' ABBA pairs are
   exactly what an R'-repeat `ab` would have run, so each count comes from
   `enginebench compare` on a copy of the run cut to its first R' pairs
   (the A/A cut alike gives the floor): the product's own rule, no second
   implementation. For an inert change FAIL is a false FAIL; for a real
   regression PASS is a false PASS; INCONCLUSIVE is the gate saying it
   cannot tell.

Every run's folder stays under --out. Numbers are as measured on this
machine; the machine is shared, so expect run-to-run noise.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CHANGES = [("inert", "knob"), ("large", "omp1"), ("small", "seqs3")]


def excludes_zero(ci):
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def run(cmd, log):
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    # Exit 1 is a failed gate and 3 an inconclusive one, still a measured
    # comparison; 2 and others are not.
    if p.returncode not in (0, 1, 3):
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}); see {log}")
    return time.time() - t0


def cut(run_dir, pairs, dest):
    """Copies run_dir's result.json and requests.jsonl into dest, keeping the
    first `pairs` ABBA pairs (the first 2 * pairs jobs). Returns the copy's
    result.json, or None when the run has fewer pairs."""
    result = json.loads((run_dir / "result.json").read_text())
    if len(result["jobs"]) < 2 * pairs:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    result["jobs"] = result["jobs"][:2 * pairs]
    (dest / "result.json").write_text(json.dumps(result))
    with open(run_dir / "requests.jsonl") as src, open(dest / "requests.jsonl", "w") as out:
        for line in src:
            if json.loads(line).get("job", 0) < 2 * pairs:
                out.write(line)
    return dest / "result.json"


def gate_at(a, run_dir, candidate, pairs, floor):
    """The gate outcome of run_dir's first `pairs` pairs by `enginebench
    compare` (with the A/A `floor` ab.json, if given), or None when the run
    has fewer pairs."""
    name = f"at{pairs}" + ("-floor" if floor else "")
    result = cut(run_dir, pairs, run_dir / f"at{pairs}")
    if result is None:
        return None
    cmd = [a.bin, "compare", str(result), str(result), "--baseline-label", "base", "--candidate-label", candidate,
           "--max-regression", str(a.max_regression), "-o", str(run_dir / name)]
    if floor:
        cmd += ["--noise", str(floor)]
    run(cmd, run_dir / f"{name}.log")
    return json.loads((run_dir / name / "ab.json").read_text())["gate"]["outcome"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="the enginebench binary (needed unless --report-only)")
    ap.add_argument("--runs", type=int, default=8, help="K: ab runs per change (default 8)")
    ap.add_argument("--repeats", type=int, default=3, help="--repeats of each ab run (default 3)")
    ap.add_argument("--aa-repeats", type=int, help="--repeats of the A/A that gives the noise floor "
                    "(default: --repeats; more repeats give a finer floor)")
    ap.add_argument("--conc", default="1,4")
    ap.add_argument("--isl", default="64")
    ap.add_argument("--osl", default="32")
    ap.add_argument("--num-prompts", default="8")
    ap.add_argument("--changes", default="inert,large,small", help="which of inert,large,small")
    ap.add_argument("--max-regression", type=float, default=0.05,
                    help="the gate's --max-regression for every run and outcome count (default 0.05)")
    ap.add_argument("--outcomes-at", help="repeat counts R' at which to count gate outcomes, e.g. 3,8 "
                    "(default: 3 and --repeats, or --repeats alone when it is 3 or less)")
    ap.add_argument("--out", default="/tmp/ab_calibration", help="run folders go here")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: print the tables from the ab.json files already under --out")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    common = ["--conc", a.conc, "--isl", a.isl, "--osl", a.osl, "--num-prompts", a.num_prompts, "--no-eval",
              "--max-regression", str(a.max_regression)]
    sweep = common + ["--repeats", str(a.repeats)]
    wanted = [c for c in CHANGES if c[0] in a.changes.split(",")]

    aa = out / "aa"
    if a.report_only:
        runs = {name: [json.loads(p.read_text()) for k in range(a.runs)
                       if (p := out / f"{name}-{k}" / "ab.json").is_file()] for name, _ in wanted}
        report(a, [c for c in wanted if runs[c[0]]], runs)
        if a.bin:
            outcomes(a, [c for c in wanted if runs[c[0]]], out)
        else:
            print("\n(gate outcomes need --bin: they come from `enginebench compare` on each run cut to R' pairs)")
        return
    if not a.bin:
        ap.error("--bin is needed to run the comparisons (or pass --report-only)")
    aa_sweep = common + ["--repeats", str(a.aa_repeats or a.repeats)]
    s = run([a.bin, "ab", "--baseline", "base", "--aa", *aa_sweep, "-o", str(aa)], out / "aa.log")
    print(f"A/A noise floor: {aa / 'ab.json'} ({s:.0f} s)", flush=True)
    runs = {}
    for name, variant in wanted:
        for k in range(a.runs):
            d = out / f"{name}-{k}"
            s = run([a.bin, "ab", "--baseline", "base", "--candidate", variant, *sweep,
                     "--noise", str(aa / "ab.json"), "-o", str(d)], out / f"{name}-{k}.log")
            runs.setdefault(name, []).append(json.loads((d / "ab.json").read_text()))
            print(f"{name} {k + 1}/{a.runs}: {s:.0f} s", flush=True)
    report(a, wanted, runs)
    outcomes(a, wanted, out)


def outcomes(a, wanted, out):
    """Prints table 3: gate outcomes per change at each R' of --outcomes-at,
    without and with the A/A floor (the A/A cut to the same R')."""
    ats = [int(x) for x in a.outcomes_at.split(",")] if a.outcomes_at else sorted({min(3, a.repeats), a.repeats})
    print(f"\nGate outcomes (max regression {a.max_regression * 100:g}%, 95% CIs), runs per change: "
          "PASS / FAIL / INCONCLUSIVE, from each run's first R' pairs:\n")
    print("| change | variant | R' | PASS | FAIL | INCONCLUSIVE | + A/A floor: PASS | FAIL | INCONCLUSIVE |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    aa = out / "aa"
    mismatches = 0
    for r in ats:
        floor = None
        if gate_at(a, aa, "base-aa", r, None) is not None:
            floor = aa / f"at{r}" / "ab.json"
        for name, variant in wanted:
            plain, floored = [], []
            for k in range(a.runs):
                d = out / f"{name}-{k}"
                if not (d / "ab.json").is_file():
                    continue
                o = gate_at(a, d, variant, r, None)
                if o is None:
                    continue
                plain.append(o)
                if floor:
                    floored.append(gate_at(a, d, variant, r, floor))
                # The full run with the full A/A is what `ab` itself decided.
                own = json.loads((d / "ab.json").read_text())
                full = len(own["rows"]) and min(min(row["repeats"]) for row in own["rows"]) == r
                aa_full = floor and len(json.loads((aa / "result.json").read_text())["jobs"]) == 2 * r
                if full and aa_full and own["gate"]["outcome"] != floored[-1]:
                    mismatches += 1
            count = lambda v, o: str(v.count(o)) if v else "-"
            print(f"| {name} | `{variant}` | {r} | {count(plain, 'pass')} | {count(plain, 'fail')} | "
                  f"{count(plain, 'inconclusive')} | {count(floored, 'pass')} | {count(floored, 'fail')} | "
                  f"{count(floored, 'inconclusive')} |")
    if mismatches:
        print(f"\nWARNING: {mismatches} run(s) whose `ab` gate differs from `compare` on the same repeats and floor")


def report(a, wanted, runs):
    """Prints both tables from the parsed ab.json of each change's runs."""
    print(f"\nRuns called a change (any point, any figure), K = {a.runs} per change, "
          f"{a.repeats} repeats, conc {a.conc}, ISL/OSL {a.isl}/{a.osl}, {a.num_prompts} prompts:\n")
    print("| change | variant | old: bootstrap CI excludes 0 | new: t CI excludes 0 | new + A/A noise floor |")
    print("|---|---|---:|---:|---:|")
    for name, variant in wanted:
        cmps = runs[name]
        figs = lambda c: [f for r in c["rows"] for f in r["figures"]]
        old = sum(any(excludes_zero(f["bootstrap_ci"]) for f in figs(c)) for c in cmps)
        new = sum(any(excludes_zero(f["ci"]) for f in figs(c)) for c in cmps)
        floor = sum(any(f["verdict"] in ("faster", "slower") for f in figs(c)) for c in cmps)
        print(f"| {name} | `{variant}` | {old}/{len(cmps)} | {new}/{len(cmps)} | {floor}/{len(cmps)} |")

    print("\nPer point and figure over the K runs: delta mean and sd, mean CI half-width, "
          "and how many runs each rule called a change:\n")
    print("| change | conc | figure | delta mean | delta sd | old half-width | new half-width | "
          "old detects | new detects | new + floor | floor |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, _ in wanted:
        cmps = runs[name]
        for ri, row in enumerate(cmps[0]["rows"]):
            for fi, f0 in enumerate(row["figures"]):
                fs = [c["rows"][ri]["figures"][fi] for c in cmps]
                d = [f["delta"] for f in fs]
                hw = lambda key: statistics.mean((f[key][1] - f[key][0]) / 2 for f in fs if f[key])
                print(f"| {name} | {row['conc']} | {f0['metric']} | {statistics.mean(d) * 100:+.1f}% | "
                      f"{(statistics.stdev(d) if len(d) > 1 else 0) * 100:.1f}% | {hw('bootstrap_ci') * 100:.1f}% | "
                      f"{hw('ci') * 100:.1f}% | {sum(excludes_zero(f['bootstrap_ci']) for f in fs)} | "
                      f"{sum(excludes_zero(f['ci']) for f in fs)} | "
                      f"{sum(f['verdict'] in ('faster', 'slower') for f in fs)} | "
                      f"±{(fs[0]['noise_floor'] or 0) * 100:.1f}% |")


if __name__ == "__main__":
    main()
