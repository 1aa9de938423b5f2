"""Bench-only: how fast this process's interpreter runs, and what in the process could slow it (issue 12).

12-03g call 1: the same pure-Python loop took 865-892 us in the speculative engine's idle scheduler and 503-568 us
in the no-spec engine's (fastest of five, six looks each), with about the same number of live objects (868k vs
858k). The variants below separate the suspects: garbage collection (the loop with gc disabled), a frame-evaluation
hook such as Dynamo's (every function call and generator resume pays it: `calls` slows, `loop` does not), and
another thread holding the GIL (every variant slows alike; the thread's CPU shows in the report). Imported by
timeline.py (copied beside it into /tmp/site by common.sh's timeline_plugin).
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time

from proccpu import PROCESSOR, STIME, UTIME, stat_fields   # beside this file (common.sh copies both)


def _allocating() -> None:
    rows = [{"k": i, "v": [i, i + 1]} for i in range(2000)]
    sum(r["v"][1] - r["k"] for r in rows)


def _loop() -> None:
    total = 0
    for i in range(20000):
        total += i & 7


def _leaf(i: int) -> int:
    return i + 1


def _calls() -> None:
    for i in range(5000):
        _leaf(i)


def _timed(body, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        body()
        best = min(best, (time.perf_counter_ns() - t0) / 1e3)
    return round(best, 1)


def calibrate(rounds: int = 5) -> dict:
    """The CPU the thread ran on before and after (`cpu`, `cpu_after`) and microseconds (fastest of rounds) per variant: `alloc` (small dicts and lists, a generator: the first
    reading, 12-03f on), `alloc_nogc` (the same with collection off), `loop` (arithmetic, no calls, no
    allocation), `calls` (5,000 calls of a one-line function) and, where a frame-evaluation hook is installed,
    `calls_nohook` (the same with it removed for the timing, then put back)."""
    out = {"cpu": current_cpu(), "alloc": _timed(_allocating, rounds)}
    enabled = gc.isenabled()
    gc.disable()
    try:
        out["alloc_nogc"] = _timed(_allocating, rounds)
    finally:
        if enabled:
            gc.enable()
    out["loop"] = _timed(_loop, rounds)
    out["calls"] = _timed(_calls, rounds)
    hook = _eval_frame_hook()
    if hook not in ("None",) and not hook.startswith("unknown"):    # a hook installed: the calls without it
        from torch._C._dynamo.eval_frame import set_eval_frame
        previous = set_eval_frame(None)
        try:
            out["calls_nohook"] = _timed(_calls, rounds)
        finally:
            set_eval_frame(previous)
    out["cpu_after"] = current_cpu()       # a move between CPUs during the look shows as two numbers
    return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def current_cpu() -> int:
    """The CPU this thread last ran on (-1 where /proc does not say)."""
    st = stat_fields("/proc/thread-self/stat")
    return int(st[1][PROCESSOR]) if st else -1


def _threads() -> list:
    """[name, CPU ticks (user + system), the CPU it last ran on] per thread of this process, busiest first."""
    out = []
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else []:
        st = stat_fields(f"/proc/self/task/{tid}/stat")
        if st:                                  # a thread that ended meanwhile has none
            name, fields = st
            out.append([name, int(fields[UTIME]) + int(fields[STIME]), int(fields[PROCESSOR])])
    return sorted(out, key=lambda t: -t[1])


def _eval_frame_hook() -> str:
    """The frame-evaluation callback Dynamo has installed in this thread, as text ("None": none)."""
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
        return repr(get_eval_frame_callback())[:80]
    except Exception as e:   # no torch, or a torch without the getter
        return f"unknown ({type(e).__name__})"


def report() -> dict:
    """What in this process could make its Python slower than another's."""
    status = {k: v.strip() for k, _, v in (line.partition(":") for line in _read("/proc/self/status").splitlines())}
    monitoring = getattr(sys, "monitoring", None)
    tools = [i for i in range(6) if monitoring is not None and monitoring.get_tool(i) is not None]
    try:
        import tracemalloc
        tracing = tracemalloc.is_tracing()
    except Exception:
        tracing = None
    return {"threads": _threads(), "affinity": len(os.sched_getaffinity(0)), "cpus": status.get("Cpus_allowed_list"),
            "nice": os.nice(0), "rss_kb": status.get("VmRSS"), "gc": [gc.isenabled(), gc.get_threshold(), gc.get_count(),
            gc.get_freeze_count()], "trace": sys.gettrace() is not None, "profile": sys.getprofile() is not None,
            "monitoring_tools": tools, "tracemalloc": tracing, "eval_frame": _eval_frame_hook(),
            "switch_interval": sys.getswitchinterval(), "flags": str(sys.flags)[:200], "version": sys.version[:40],
            "python_env": {k: v[:80] for k, v in os.environ.items() if k.startswith("PYTHON")},
            "ctx_switches": [status.get("voluntary_ctxt_switches"), status.get("nonvoluntary_ctxt_switches")]}


def looks(lines: list[str]) -> str:
    """run_pair's calibrate line: every look's value per variant ("alloc 503.4,540.1 loop ..."), from the engine's
    "CALIBRATE pid P us-of-alloc us {variants}" lines (a variant a look lacks: "-")."""
    rows = [json.loads(line.split(" us ", 1)[1]) for line in lines if " us {" in line]
    keys = dict.fromkeys(k for r in rows for k in r)
    return " ".join(f"{k} " + ",".join(str(r.get(k, "-")) for r in rows) for k in keys) if rows else "none"


if __name__ == "__main__":      # run_pair.sh: CALIBRATE lines on stdin, their summary out
    print(looks(sys.stdin.read().splitlines()))
