"""Per-thread CPU time and context switches of a process tree, read from /proc
(issue 46: which threads run while vLLM steps, under enginebench and under
the pure-Python loop, and how often the engine's own threads lose their core).

A `Sampler` walks the tree under one pid (the benchmark's child and all its
descendants: enginebench's orchestrator and its worker, or pyloop) every
`period_s` and keeps each thread's counters with the time of the walk, on
time.monotonic (CLOCK_MONOTONIC, the clock of bench/probe's step records).
`summarize` takes the counters' change over a window (a point's measured
steps): per thread, CPU time (utime + stime, proc(5) fields 14 and 15, in
clock ticks), minor page faults (field 10: a page the process touched for
the first time since the kernel gave it, or since the allocator gave it
back; each costs the thread that touches it a kernel entry and a zeroed
page), voluntary context switches (the thread waited: I/O, a lock,
the GIL, a sleep) and involuntary ones (the scheduler took its core away
for another runnable thread: with OMP_NUM_THREADS = the cores, every one of
these on an engine thread stalls OpenMP's team at its next barrier).
Threads are named `engine:<name>` in the engine's process (`engine:main` its
main thread, which steps vLLM) and `<process>:<name>` elsewhere.
"""

import os
import threading
import time

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _children_by_parent():
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def _tree(root):
    kids = _children_by_parent()
    out = [root]
    i = 0
    while i < len(out):
        out += kids.get(out[i], [])
        i += 1
    return out


def _read_thread(pid, tid):
    """(thread name, CPU ticks, voluntary, involuntary switches, minor faults)."""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        stat = f.read()
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat.rsplit(")", 1)[1].split()  # fields[0] is proc(5)'s field 3
    ticks = int(fields[11]) + int(fields[12])
    minflt = int(fields[7])
    vol = invol = 0
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                invol = int(line.split()[1])
    return name, ticks, vol, invol, minflt


def snapshot(root):
    """{(pid, tid): (process name, thread name, ticks, vol, invol, minflt)} of the tree."""
    snap = {}
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/comm") as f:
                pname = f.read().strip()
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                snap[(pid, tid)] = (pname, *_read_thread(pid, tid))
            except (OSError, ValueError, IndexError):
                continue  # the thread ended between the listing and the read
    return snap


class Sampler:
    """Snapshots of `root`'s tree every `period_s` on a thread of its own
    (each walk costs ~1 ms of this process's CPU; the same for every loop)."""

    def __init__(self, root, period_s=0.25):
        self.root = root
        self.period_s = period_s
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread-sampler", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.samples

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), snapshot(self.root)))
            self._stop.wait(self.period_s)


def summarize(samples, window, engine_pid):
    """Each thread's change over `window` = (start, end) on time.monotonic,
    from the first snapshot at or after start to the last at or before end:
    {"window_s", "threads": {label: {"cpu_s", "vol", "invol", "minflt"}}} (threads of
    one name in one process summed, "n" of them), None without two
    snapshots inside the window (a window shorter than the period)."""
    start, end = window
    inside = [(t, s) for t, s in samples if start <= t <= end]
    if len(inside) < 2:
        return None
    (ta, a), (tb, b) = inside[0], inside[-1]
    threads = {}
    for key, (pname, name, ticks, vol, invol, minflt) in b.items():
        before = a.get(key)
        if before is None:
            continue  # started inside the window: left out (its start is unknown)
        pid, tid = key
        if pid == engine_pid:
            label = "engine:main" if tid == pid else f"engine:{name}"
        else:
            label = f"{pname}:{name}"
        t = threads.setdefault(label, {"cpu_s": 0.0, "vol": 0, "invol": 0, "minflt": 0, "n": 0})
        t["cpu_s"] += (ticks - before[2]) * TICK_S
        t["vol"] += vol - before[3]
        t["invol"] += invol - before[4]
        t["minflt"] += minflt - before[5]
        t["n"] += 1
    return {"window_s": tb - ta, "threads": threads}
