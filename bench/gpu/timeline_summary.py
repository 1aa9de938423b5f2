"""The scheduler timeline of bench/gpu/timeline.py inside a time window, per batch kind.

    python3 bench/gpu/timeline_summary.py PREFIX --window T0,T1 [--label L] [--json out.jsonl]
    python3 bench/gpu/timeline_summary.py PREFIX --load-row 'LOAD_JSON' --skip 4 --seconds 20 [--json ...]
    python3 bench/gpu/timeline_summary.py FILE.jsonl[.xz] --prefill     (the simulator's prefill cost, per run)
    python3 bench/gpu/timeline_summary.py TIMELINE.jsonl[.xz] --pairs   (each run against nospec's of its repeat)
PREFIX: SPEC_TIMELINE's value (the files PREFIX.PID.jsonl; the one with batch rows is the scheduler's);
T0, T1: time.monotonic() seconds; or the window of one loads.py row (its mono_start + skip .. + seconds:
the arrivals' steady part, without the ramp and the drain). One TIMELINE line: per kind (decode, extend, ...)
the batches, mean batch size and extend tokens, the GPU ms per batch (its forward's span on the forward
stream), the GPU's idle ms before it (> 0: the GPU waited for the CPU, the overlap broken there), the
CPU ms of its launch (run_batch), of its result processing (process_batch_result) and of the scheduling
step that chose it; the window's GPU busy share by kind, and the decode-to-decode interval (what a running
request waits per token: its own step, plus every extend and idle gap in between).
"""
from __future__ import annotations

import argparse
import bisect
import glob
import json
import lzma
import statistics
import sys
from collections import defaultdict

import traffic_table
from jsonl import emit


def rows_of(path: str) -> list[list]:
    """A JSON-lines file's rows (.xz too); from a run_pair summary (*summary.txt) its TIMELINE lines' rows, which
    stand in for a timeline.jsonl that did not come back."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        if path.endswith("summary.txt"):
            return [_timeline_line(path, n, line) for n, line in enumerate(f, 1) if line.startswith("TIMELINE {")]
        return [json.loads(line) for line in f if line.strip()]


def _timeline_line(path: str, n: int, line: str) -> dict:
    try:
        return json.loads(line[len("TIMELINE "):])
    except json.JSONDecodeError:
        raise ValueError(f"{path}:{n}: the TIMELINE line is cut short (summaries before 12-04i cut them at 800 "
                         "characters): use the call's timeline.jsonl") from None


def read(prefix: str) -> list[list]:
    best: list[list] = []
    for path in [prefix] if prefix.endswith((".jsonl", ".xz")) else glob.glob(f"{prefix}.*.jsonl"):
        rows = rows_of(path)
        if sum(r[0] == "B" for r in rows) > sum(r[0] == "B" for r in best):
            best = rows
    return best


IDLE_CAP_MS = 50.0    # a gap longer than this before a batch is an engine waiting for arrivals, not a cost of the last


def span_gap(row: list, prev: list | None) -> tuple[float, float]:
    """A batch's GPU span and the gap since the previous batch's end (ms): the exact fields of newer rows,
    else the difference of the coarse axis."""
    if len(row) >= 10:
        return row[8], max(0.0, row[9])
    return row[7] - row[6], max(0.0, row[6] - prev[7]) if prev is not None else 0.0


def summarise(rows: list[list], t0_ns: int, t1_ns: int) -> dict:
    batches = sorted((r for r in rows if r[0] == "B" and t0_ns <= r[4] <= t1_ns), key=lambda r: r[6])
    if len(batches) < 2:
        return {"error": f"{len(batches)} batches in the window"}
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    # decodes by the batch before them: after an extend (a launch-bound prefill) the GPU has drained, so the decode's
    # launch CPU before its forward shows as idle and span (12-04f); after a decode it hides behind that forward
    after: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    pretarget = pre_target_ms(rows, batches)
    transitions: dict[str, int] = defaultdict(int)
    prev = None
    for b in batches:
        k, bs, ext, c0, c1 = b[1:6]
        span, gap = span_gap(b, prev)
        pt = pretarget.get(id(b))
        if k == "decode" and prev is not None and gap <= IDLE_CAP_MS:     # (longer: an engine waiting for arrivals)
            a = after[prev[1]]
            a["gpu"].append(span)
            a["gap"].append(gap)
            a["launch"].append((c1 - c0) / 1e6)
            if pt is not None:
                a["pretarget"].append(pt)
        if pt is not None:
            per[k]["pretarget"].append(pt)
        if prev is not None:        # how often a prefill follows a prefill (promptkv holds several for that)
            transitions[f"{prev[1]}>{k}"] += 1
        p = per[k]
        p["bs"].append(bs)
        p["ext"].append(ext)
        p["gpu"].append(span)
        p["gap"].append(gap if prev is not None else 0.0)
        p["launch"].append((c1 - c0) / 1e6)
        if len(b) >= 11:                    # newer rows: the launch's own CPU time
            p["launch_oncpu"].append(b[10] / 1e6)
        prev = b
    for tag, name in (("P", "process"), ("N", "schedule")):
        for r in rows:
            if r[0] == tag and t0_ns <= r[2] <= t1_ns:
                per[r[1]][name].append((r[3] - r[2]) / 1e6)
    for tag, name in (("T", "target"), ("F", "runner")):   # inside the launch: summed per batch (its 5th field)
        sums: dict[tuple[str, int], float] = defaultdict(float)
        oncpu: dict[tuple[str, int], float] = defaultdict(float)
        for r in rows:
            if r[0] == tag and t0_ns <= r[2] <= t1_ns:
                sums[(r[1], r[4])] += (r[3] - r[2]) / 1e6
                if len(r) >= 6:
                    oncpu[(r[1], r[4])] += r[5] / 1e6
        for key, ms in sums.items():
            per[key[0]][name].append(ms)
            if key in oncpu:
                per[key[0]][name + "_oncpu"].append(oncpu[key])
    gc_ms: dict[str, float] = defaultdict(float)           # collections inside each kind's launches, and outside
    for r in rows:
        if r[0] == "C" and t0_ns <= r[3] <= t1_ns:
            gc_ms[r[1]] += (r[4] - r[3]) / 1e6
    recv = [(r[3] - r[2]) / 1e6 for r in rows if r[0] == "R" and t0_ns <= r[2] <= t1_ns]
    # the allocator's counters: the change between the last reading before the window's end and the first in it
    mem = [r for r in rows if r[0] == "M" and len(r) == 5 and t0_ns <= r[1] <= t1_ns]
    allocator = dict(zip(("alloc_retries", "device_allocs", "device_frees"),
                         (b - a for a, b in zip(mem[0][2:], mem[-1][2:])))) if len(mem) >= 2 else None
    window = batches[-1][7] - batches[0][6]
    mean = lambda xs: round(statistics.mean(xs), 3) if xs else None
    kinds = {}
    for k, p in sorted(per.items()):
        if not p["gpu"]:
            continue
        kinds[k] = {"n": len(p["gpu"]), "bs": mean(p["bs"]), "extend_tokens": mean(p["ext"]),
                    "gpu_ms": mean(p["gpu"]), "gpu_ms_p90": round(sorted(p["gpu"])[int(0.9 * (len(p["gpu"]) - 1))], 3),
                    "idle_before_ms": mean(p["gap"]), "launch_cpu_ms": mean(p["launch"]),
                    "process_cpu_ms": mean(p.get("process", [])), "schedule_cpu_ms": mean(p.get("schedule", [])),
                    # inside the launch, per batch that made them: the target worker's forward(s), the runner's
                    "target_cpu_ms": mean(p.get("target", [])), "runner_cpu_ms": mean(p.get("runner", [])),
                    # the launch's CPU before its target forward began (what a drained GPU waits for first)
                    "pretarget_cpu_ms": mean(p.get("pretarget", [])),
                    # of those wall times, the scheduler thread's own CPU (the rest: off the CPU, waiting)
                    "launch_oncpu_ms": mean(p.get("launch_oncpu", [])), "runner_oncpu_ms": mean(p.get("runner_oncpu", [])),
                    "gc_ms": round(gc_ms.get(k, 0.0) / len(p["gpu"]), 3),    # garbage collection per launch
                    "gpu_share": round(sum(p["gpu"]) / window, 4), "idle_share": round(sum(p["gap"]) / window, 4)}
    decode_after = {k: {"n": len(a["gpu"]), "gpu_ms": mean(a["gpu"]), "idle_before_ms": mean(a["gap"]),
                        "launch_cpu_ms": mean(a["launch"]), "pretarget_cpu_ms": mean(a.get("pretarget", []))}
                    for k, a in sorted(after.items())}
    dec = [b[7] for b in batches if b[1] == "decode"]
    intervals = [b - a for a, b in zip(dec, dec[1:])]
    return {"window_ms": round(window, 1), "batches": len(batches), "kinds": kinds, "decode_after": decode_after,
            "transitions": dict(sorted(transitions.items())),
            "decode_interval_ms_median": round(statistics.median(intervals), 3) if intervals else None,
            "decode_interval_ms_mean": mean(intervals), "recv_cpu_ms_total": round(sum(recv), 1),
            "gc_ms_total": round(sum(gc_ms.values()), 1), "allocator": allocator}


def pre_target_ms(rows: list[list], batches: list[list]) -> dict[int, float]:
    """For each batch row (by id) whose launch holds a target-worker span ("T"): the CPU from the launch's start to
    that span's start (ms): SGLang's relay and the plugin's work before the target forward is queued."""
    launches = sorted(((b[4], b[5], b[1], id(b)) for b in batches), key=lambda x: x[0])
    starts = [x[0] for x in launches]
    out: dict[int, float] = {}
    for r in rows:
        if r[0] != "T":
            continue
        i = bisect.bisect_right(starts, r[2]) - 1      # the latest launch started at or before this span
        if i >= 0 and launches[i][1] >= r[2] and launches[i][2] == r[1] and launches[i][3] not in out:
            out[launches[i][3]] = (r[2] - launches[i][0]) / 1e6
    return out


def runs_of(rows: list[list], gap_ms: float = 1000.0) -> list[list[list]]:
    """Batch rows in GPU order, cut where the GPU was idle for more than gap_ms (between two loads)."""
    batches = sorted((r for r in rows if r[0] == "B"), key=lambda r: r[6])
    runs: list[list[list]] = [[]]
    for prev, b in zip([None] + batches, batches):
        if prev is not None and b[6] - prev[7] > gap_ms:
            runs.append([])
        runs[-1].append(b)
    return [r for r in runs if r]


def prefill_cost(run: list[list], min_extends: int = 100, idle_cap_ms: float = IDLE_CAP_MS) -> dict | None:
    """What an extend batch costs the running decodes: its GPU span as a line in its prompt tokens (least
    squares: a + b tokens), plus the GPU idle before it and before the decode that follows and that decode's
    extra GPU time over the others. Gaps over idle_cap_ms are an engine waiting for arrivals, not a cost of
    the extend: those extends are left out. Gives the simulator's prefill_s (a + the idle and the extra, per
    event) and prefill_s_per_token (b)."""
    ext, after, other = [], [], []
    for prev, b in zip(run, run[1:]):
        gpu, idle = span_gap(b, prev)
        if b[1] == "extend" and idle <= idle_cap_ms:
            ext.append((idle, gpu, b[3], b[2]))
        elif b[1] == "decode" and idle <= idle_cap_ms:
            (after if prev[1] == "extend" else other).append((idle, gpu))
    if len(ext) < min_extends or not after or not other:      # light loads (and cut runs) say little
        return None
    mean = lambda xs, i: statistics.mean(x[i] for x in xs)
    tokens = [x[2] for x in ext]
    if len(set(tokens)) > 1:
        slope, intercept = statistics.linear_regression(tokens, [x[1] for x in ext])
    else:                                   # one prompt length: no slope to read
        slope, intercept = 0.0, mean(ext, 1)
    per_event = intercept + mean(ext, 0) + mean(after, 0) + mean(after, 1) - mean(other, 1)
    return {"extends": len(ext), "seconds": round((run[-1][7] - run[0][6]) / 1e3, 1),
            "requests_per_extend": round(mean(ext, 3), 3), "tokens_per_extend": round(mean(ext, 2), 1),
            "extend_gpu_ms": round(mean(ext, 1), 3), "extend_gpu_ms_fit": [round(intercept, 3), round(slope, 5)],
            "idle_before_extend_ms": round(mean(ext, 0), 3), "next_decode_idle_ms": round(mean(after, 0), 3),
            "next_decode_gpu_ms": round(mean(after, 1), 3), "other_decode_gpu_ms": round(mean(other, 1), 3),
            "prefill_s": round(per_event / 1e3, 5), "prefill_s_per_token": round(slope / 1e3, 8)}


def label_groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    """The runs with batch kinds and a level, by (shape, level, label)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "kinds" in r and r.get("level") is not None:
            groups.setdefault((r.get("shape") or "-", r["level"], r.get("label")), []).append(r)
    return groups


def pair_lines(rows: list[dict]) -> list[str]:
    """Markdown rows: each label's runs against the nospec runs of the same shape, level and repeat (the same seed;
    the nearest in time where a call ran a shape twice: traffic_table.beside), per pair: the median
    decode-to-decode interval's ratio (what a token costs a running request: the systematic part, steadier than
    tok/s, which the extends' launch speed moves run to run), the decode GPU span's difference, that of a decode
    right after an extend (span + idle before it) and both engines' extend launch CPU (the model runner's); '-' where
    a run lacks the figure."""
    groups = label_groups(rows)

    def kind(r: dict, name: str, key: str) -> float | None:
        return r["kinds"].get(name, {}).get(key)

    def ratio(a: dict, b: dict) -> str:
        x, y = a.get("decode_interval_ms_median"), b.get("decode_interval_ms_median")
        return f"{x / y:.3f}" if x and y else "-"

    def diff_us(x: float | None, y: float | None) -> str:
        return "-" if x is None or y is None else f"{(x - y) * 1e3:+.0f}"

    def gpu(a: dict, b: dict) -> str:
        return diff_us(kind(a, "decode", "gpu_ms"), kind(b, "decode", "gpu_ms"))

    def after_extend(a: dict, b: dict) -> str:
        def cost(r: dict) -> float | None:
            d = r.get("decode_after", {}).get("extend")
            return None if not d or d["gpu_ms"] is None else d["gpu_ms"] + d["idle_before_ms"]
        return diff_us(cost(a), cost(b))

    def ext(a: dict, b: dict) -> str:
        return " / ".join("-" if v is None else f"{v}" for v in (kind(a, "extend", "runner_cpu_ms"),
                                                                  kind(b, "extend", "runner_cpu_ms")))
    out = []
    for key, _ in traffic_table.in_order(groups):
        shape, level, label = key
        if str(label).startswith("nospec"):
            continue
        pairs, _ = traffic_table.beside(groups, key)
        if pairs:
            out.append(f"| {shape} | {level} | {label} | {', '.join(ratio(a, b) for a, b in pairs)} "
                       f"| {', '.join(gpu(a, b) for a, b in pairs)} | {', '.join(after_extend(a, b) for a, b in pairs)} "
                       f"| {'; '.join(ext(a, b) for a, b in pairs)} |")
    return out


DECODE_CPU = ("pretarget_cpu_ms", "launch_cpu_ms", "process_cpu_ms", "gpu_ms", "idle_before_ms")


def decode_cost_lines(rows: list[dict]) -> list[str]:
    """Markdown rows: per shape, level and label, the median over its runs of what a decode batch costs (DECODE_CPU:
    the launch CPU before the target's forward, all of the launch, the result processing, the GPU span, the idle
    before it), '-' where no run has the figure."""
    out = []
    for (shape, level, label), runs in traffic_table.in_order(label_groups(rows)):
        ds = [r["kinds"]["decode"] for r in runs if r["kinds"].get("decode")]
        if not ds:
            continue
        cells = []
        for key in DECODE_CPU:
            values = [d[key] for d in ds if d.get(key) is not None]
            cells.append(f"{statistics.median(values):.3f}" if values else "-")
        out.append(f"| {shape} | {level} | {label} | {len(ds)} | {' | '.join(cells)} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--window", help="T0,T1 in time.monotonic() seconds")
    ap.add_argument("--load-row", help="one loads.py JSON row: its window")
    ap.add_argument("--skip", type=float, default=4.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--prefill", action="store_true", help="per run: what an extend batch costs (profile keys)")
    ap.add_argument("--pairs", action="store_true", help="PREFIX is a timeline.jsonl: each run against nospec's")
    ap.add_argument("--decode-cost", action="store_true",
                    help="PREFIX is a timeline.jsonl: per label, the median decode batch's CPU and GPU (DECODE_CPU)")
    ap.add_argument("--label", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.pairs:
        lines = pair_lines([r for r in rows_of(args.prefix) if isinstance(r, dict)])
        if lines:
            print("| shape | level | label / nospec | decode interval ratio per pair | decode GPU us per step, difference "
                  "| a decode after an extend: span + idle us, difference | extend runner CPU ms (label / nospec) |\n"
                  "|---|---|---|---|---|---|---|")
            print("\n".join(lines))
        return
    if args.decode_cost:
        lines = decode_cost_lines([r for r in rows_of(args.prefix) if isinstance(r, dict)])
        if lines:
            print("| shape | level | label | runs | " + " | ".join(k.replace("_ms", " ms") for k in DECODE_CPU)
                  + " |\n|---|---|---|---|" + "---|" * len(DECODE_CPU))
            print("\n".join(lines))
        return
    if args.prefill:
        costs = [c for c in map(prefill_cost, runs_of(read(args.prefix))) if c]
        for c in costs:
            emit("PREFILL", c, args.json)
        if costs:
            emit("PREFILL", {"runs": len(costs), "prefill_s": round(statistics.mean(c["prefill_s"] for c in costs), 4),
                             "prefill_s_per_token": round(statistics.mean(c["prefill_s_per_token"] for c in costs), 7)},
                 args.json)
        return
    label, extra = args.label, {}
    if args.load_row:
        row = json.loads(args.load_row)
        t0, t1 = row["mono_start"] + args.skip, row["mono_start"] + args.seconds
        label = label or row["label"]
        extra = {"shape": row.get("shape"), "level": row.get("level"), "repeat": row.get("repeat"),
                 "t_start": row.get("t_start"), "tok_s": row.get("tok_s"), "tpot_ms": row.get("tpot_ms"),
                 **({"b_first": True} if row.get("b_first") else {}),
                 **({"pool_tokens": row["pool_tokens"]} if row.get("pool_tokens") else {})}
    else:
        t0, t1 = map(float, args.window.split(","))
    out = summarise(read(args.prefix), int(t0 * 1e9), int(t1 * 1e9))
    emit("TIMELINE", {"label": label, **extra, **out}, args.json)


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:     # rows_of: a summary whose TIMELINE lines were cut short
        sys.exit(f"timeline_summary.py: {e}")
