"""Summarise a torch-profiler chrome trace (SGLang's /start_profile) where it is made: GPU busy share and
idle gaps over the window, kernel time by name, profiler ranges, graph launches and CPU ops.

    python3 bench/gpu/trace_summary.py DIR_OR_FILE [--top 18] [--json out.json]
The raw traces are tens of MB: only this summary comes back from the GPU machine.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
from collections import defaultdict

from jsonl import emit

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path: str) -> list[dict]:
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "**", "*.trace.json*"), recursive=True))
        path = files[0]                       # TP rank 0's, or the only one
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def busy_union(intervals: list[tuple[float, float]]) -> tuple[float, list[float]]:
    """Total covered time and the gaps between covered stretches (microseconds)."""
    total, gaps, end = 0.0, [], None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                gaps.append(s - end)
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total, gaps


def short(name: str) -> str:
    name = name.split("(")[0].split("<")[0]
    return name[:70]


def summarise(events: list[dict], top: int) -> dict:
    gpu = [e for e in events if e.get("cat") in GPU_CATS and "dur" in e]
    if not gpu:
        return {"error": "no GPU events in the trace"}
    intervals = [(e["ts"], e["ts"] + e["dur"]) for e in gpu]
    t0, t1 = min(s for s, _ in intervals), max(e for _, e in intervals)
    busy, gaps = busy_union(intervals)
    by_kernel: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in gpu:
        k = by_kernel[short(e["name"])]
        k[0] += 1
        k[1] += e["dur"]
    ranges: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    runtime: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    cpu_ops: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in events:
        cat = e.get("cat")
        table = {"user_annotation": ranges, "cuda_runtime": runtime, "cpu_op": cpu_ops}.get(cat)
        if table is not None and "dur" in e:
            row = table[short(e["name"])]
            row[0] += 1
            row[1] += e["dur"]
    rank = lambda d: [(k, int(v[0]), round(v[1] / 1e3, 2)) for k, v in sorted(d.items(), key=lambda kv: -kv[1][1])[:top]]
    big = [g for g in gaps if g > 20]
    return {
        "window_ms": round((t1 - t0) / 1e3, 2), "gpu_busy_ms": round(busy / 1e3, 2),
        "gpu_busy_share": round(busy / (t1 - t0), 4), "gaps_over_20us": len(big),
        "gap_ms_over_20us": round(sum(big) / 1e3, 2), "largest_gaps_us": sorted(big)[-5:],
        "kernels_top (name, count, ms)": rank(by_kernel), "ranges (name, count, ms)": rank(ranges),
        "runtime_top (name, count, ms)": rank(runtime)[:8], "cpu_ops_top (name, count, ms)": rank(cpu_ops)[:10],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=18)
    ap.add_argument("--label", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    out = {"label": args.label, **summarise(load(args.trace), args.top)}
    emit("TRACE", out, args.json)


if __name__ == "__main__":
    main()
