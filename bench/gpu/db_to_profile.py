"""Turn a daemon database's decode samples into a simulator profile (measured step-time curves).

    python3 bench/gpu/db_to_profile.py STATE_DB OUT.toml --name h200-2b6 [--source "..."]
        [--prompt-len-range 102,512 --output-len-range 77,384 --arrival-rate 2,12,24]
Per batch size and mode, the median step seconds of decode-only samples; batch sizes seen in
both modes become the table's points (at least two needed), and, when the engine's cap lies past
them, one point at the cap: each mode's straight line through its own medians over the upper
half of the batch sizes it ran (speculative batches often grow past the largest off batch). The accept length is the measured
mean over speculative batches; K is the largest step count seen.
Prefill cost, from prefill events: a run of intervals flagged as holding a prefill together with
the interval just before it. Under SGLang's overlap scheduler most of an extend batch's time lands
in that earlier interval (flagged decode-only: the decode result is read only after the extend
batch was launched, which waits for it), the flagged one holds little more than a decode step.
An event's time beyond the decode-only medians of its batch sizes and modes (interpolated between
table points) is what its extend batches added; n (requests admitted) is the batch growth over
the event (at least 1). Fitted as prefill_s + prefill_s_per_request x n by least squares, then
again without the events whose residual is far above the fit (an idle gap before a request
arrived also lands in a flagged interval), until none is left out. --max-batch-size: the engine's
max_running_requests (default: the largest batch seen). The [load] keys describe the traffic to
replay (sglang.bench_serving --random-input-len/--random-output-len/--random-range-ratio).
"""
from __future__ import annotations

import argparse
import bisect
import json
import sqlite3
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from controller.sim.profile import load_profile  # noqa: E402


def measure(db_path: str, min_samples: int = 5) -> dict:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = db.execute("SELECT batch_size, steps > 0, step_s FROM samples WHERE decode_only = 1 AND step_s > 0").fetchall()
    by: dict[tuple[int, bool], list[float]] = {}
    for bs, spec, step in rows:
        by.setdefault((bs, bool(spec)), []).append(step)
    both = sorted(bs for (bs, spec), v in by.items()
                  if spec and len(v) >= min_samples and len(by.get((bs, False), [])) >= min_samples)
    k, accept = db.execute("SELECT max(steps), sum(tokens) * 1.0 / sum(batch_size) FROM samples "
                           "WHERE steps > 0 AND decode_only = 1").fetchone()
    own = {spec: {bs: statistics.median(v) for (bs, m), v in by.items() if m == spec and len(v) >= min_samples}
           for spec in (False, True)}
    return {"batch_size": both,
            "off": [statistics.median(by[(b, False)]) for b in both],
            "spec": [statistics.median(by[(b, True)]) for b in both],
            "spec_steps": k, "accept": accept, "samples": len(rows), "own": own,
            "largest_batch": db.execute("SELECT max(batch_size) FROM samples").fetchone()[0]}


def line_at(points: dict[int, float], bs: int) -> float | None:
    """A mode's step time at bs: its median there, or past its largest measured batch size, that
    median plus the slope (>= 0) of a least-squares line through its medians over the upper half of
    the batch sizes it ran; None with fewer than two such points."""
    import numpy as np
    if bs in points:
        return points[bs]
    top = max(points, default=0)
    xs = [b for b in points if b >= top / 2]
    if len(xs) < 2 or bs < top:
        return None
    slope = float(np.polyfit(xs, [points[b] for b in xs], 1)[0])
    return points[top] + max(slope, 0.0) * (bs - top)


def extend_to(m: dict, max_bs: int) -> None:
    """Past the last batch size seen in both modes: the batch sizes where one mode ran enough (the
    other from its line) and one point at the engine's cap, so that the simulator does not
    extrapolate from the last two (noisy) medians."""
    if not m["batch_size"]:
        return
    last = m["batch_size"][-1]
    extra = sorted({b for mode in m["own"].values() for b in mode if last < b <= max_bs} | {max_bs} - {last})
    for bs in extra:
        off, spec = line_at(m["own"][False], bs), line_at(m["own"][True], bs)
        if off is not None and spec is not None:
            m["batch_size"].append(bs)
            m["off"].append(off)
            m["spec"].append(spec)
            m["extended"] = m.get("extended", 0) + 1


def base_step(medians: dict[tuple[int, bool], float], bs: int, spec: bool) -> float | None:
    """The decode-only median step at a batch size, interpolated (and held flat) between table points."""
    import numpy as np
    xs = sorted(b for b, m in medians if m == spec)
    if not xs:
        return None
    return medians.get((bs, spec)) or float(np.interp(bs, xs, [medians[(b, spec)] for b in xs]))


def prefill_events(rows: list[tuple[int, bool, float, bool]], medians: dict[tuple[int, bool], float]
                   ) -> list[tuple[int, float, int]]:
    """(n admitted, seconds added, index of its first flagged row) per prefill event; rows are
    (batch_size, speculative, step_s, decode_only) in time order."""
    events = []
    i = 1
    while i < len(rows):
        if rows[i][3] or not rows[i - 1][3]:
            i += 1
            continue
        j = i
        while j + 1 < len(rows) and not rows[j + 1][3]:
            j += 1
        bases = [base_step(medians, bs, spec) for bs, spec, _, _ in rows[i - 1:j + 1]]
        if None not in bases:
            extra = sum(r[2] for r in rows[i - 1:j + 1]) - sum(bases)
            events.append((max(rows[j][0] - rows[i - 1][0], 1), extra, i))
        i = j + 1
    return events


def fit_prefill(db_path: str, medians: dict[tuple[int, bool], float], max_extra_s: float = 1.0) -> dict:
    """prefill_s + prefill_s_per_request x n from the prefill events, far outliers (idle gaps) left out."""
    import numpy as np
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = [(bs, bool(spec), step, bool(do)) for bs, spec, step, do in
            db.execute("SELECT batch_size, steps > 0, step_s, decode_only FROM samples WHERE step_s > 0 ORDER BY t")]
    events = [(n, e) for n, e, _ in prefill_events(rows, medians) if 0 <= e <= max_extra_s]
    if len(events) < 10:
        return {"intervals": len(events)}
    xs = np.array([n for n, _ in events], dtype=float)
    ys = np.array([e for _, e in events])
    keep = np.ones(len(xs), dtype=bool)
    for _ in range(20):
        design = np.stack([np.ones(int(keep.sum())), xs[keep]], axis=1)
        (a, b), *_ = np.linalg.lstsq(design, ys[keep], rcond=None)
        if b < 0 or len(set(xs[keep])) < 2:   # no visible per-request part: all of it per extend batch
            a, b = float(np.median(ys[keep])), 0.0
        resid = ys - (a + b * xs)
        scale = 1.4826 * float(np.median(np.abs(resid[keep])))
        new = resid <= 4 * max(scale, 1e-4)
        if (new == keep).all():
            break
        keep = new
    return {"intervals": int(keep.sum()), "left_out": int((~keep).sum()), "prefill_s": max(float(a), 0.0),
            "prefill_s_per_request": float(b), "mean_extra_s": float(np.mean(ys[keep]))}


def prefill_by_threshold(db_path: str, medians: dict[tuple[int, bool], float], max_extra_s: float = 0.2) -> dict:
    """The prefill events split by the threshold in force (the decisions table): at 0 the plugin skips the
    draft's pass over a prompt (lean prefill), above it every prefill runs the draft too."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    samples = db.execute("SELECT t, batch_size, steps > 0, step_s, decode_only FROM samples WHERE step_s > 0 "
                         "ORDER BY t").fetchall()
    decisions = db.execute("SELECT t, new FROM decisions ORDER BY t").fetchall()
    times = [t for t, _ in decisions]
    rows = [(bs, bool(spec), step, bool(do)) for _, bs, spec, step, do in samples]
    split: dict[str, list[tuple[int, float]]] = {"threshold 0": [], "threshold > 0": []}
    for n, extra, i in prefill_events(rows, medians):
        k = bisect.bisect_right(times, samples[i][0]) - 1
        if 0 <= extra <= max_extra_s:
            split["threshold > 0" if k >= 0 and decisions[k][1] > 0 else "threshold 0"].append((n, extra))
    out = {}
    for name, events in split.items():
        one = [e for n, e in events if n == 1]
        out[name] = {"events": len(events), "median_extra_ms": round(statistics.median(e for _, e in events) * 1e3, 2)
                     if events else None, "one_request_events": len(one),
                     "one_request_median_ms": round(statistics.median(one) * 1e3, 2) if one else None}
    return out


def load_section(args) -> str:
    lines = []
    for key, value, kind in (("prompt_len_range", args.prompt_len_range, int),
                             ("output_len_range", args.output_len_range, int),
                             ("arrival_rate", args.arrival_rate, float)):
        if value:
            lines.append(f"{key} = [{', '.join(str(kind(v)) for v in value.split(','))}]")
    return ("\n[load]\n" + "\n".join(lines) + "\n") if lines else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("out")
    ap.add_argument("--name", required=True)
    ap.add_argument("--source", default="measured by spec-controller's telemetry")
    ap.add_argument("--min-samples", type=int, default=5)
    ap.add_argument("--max-batch-size", type=int, help="the engine's max_running_requests (default: largest batch seen)")
    ap.add_argument("--prompt-len-range", help="LOW,HIGH prompt tokens of the traffic to replay")
    ap.add_argument("--output-len-range", help="LOW,HIGH output tokens")
    ap.add_argument("--prefill-by-threshold", action="store_true",
                    help="print the prefill events' cost at threshold 0 and above it (lean prefill or not), then stop")
    ap.add_argument("--arrival-rate", help="open-loop rates (requests/s) for specctl simulate --arrival-rate default")
    args = ap.parse_args()
    m = measure(args.db, args.min_samples)
    medians = {(b, spec): v for spec, key in ((False, "off"), (True, "spec")) for b, v in zip(m["batch_size"], m[key])}
    if args.prefill_by_threshold:
        print(json.dumps(prefill_by_threshold(args.db, medians)))
        return
    pre = fit_prefill(args.db, medians)
    if len(m["batch_size"]) < 2 or not m["spec_steps"]:       # before extend_to adds its own point
        raise SystemExit(f"db_to_profile: need >= 2 batch sizes seen in both modes, got {m['batch_size']}")
    max_bs = args.max_batch_size or m["largest_batch"]
    if max_bs < m["batch_size"][-1]:
        raise SystemExit(f"db_to_profile: --max-batch-size {max_bs} is below the largest batch run in both modes "
                         f"({m['batch_size'][-1]})")
    extend_to(m, max_bs)
    prefill = (f"prefill_s = {pre['prefill_s']:.6g}               # fitted from {pre['intervals']} "
               f"prefill events ({pre['left_out']} idle-gap outliers left out; mean extra "
               f"{pre['mean_extra_s'] * 1000:.3g} ms)\n"
               f"prefill_s_per_request = {pre['prefill_s_per_request']:.6g}\n") if "prefill_s" in pre else ""
    fmt = lambda xs: ", ".join(f"{x:.6g}" for x in xs)
    ext = (f"\n# The last {m['extended']} points (past the largest batch run in both modes, up to the cap) hold "
           "one mode's medians and the other's line." if m.get("extended") else "")
    text = f'''# Measured: {m["samples"]} decode samples; median step seconds per batch size and mode.{ext}
name = "{args.name}"
description = "measured step-time curves ({args.source})"
source = "{args.source}"
max_batch_size = {max_bs}
spec_steps = {m["spec_steps"]}
{prefill}
[step_time]
batch_size = [{", ".join(map(str, m["batch_size"]))}]
off  = [{fmt(m["off"])}]
spec = [{fmt(m["spec"])}]

[acceptance]
mean_accept_length = {min(m["accept"], m["spec_steps"] + 1):.4f}
spread = 0.1
{load_section(args)}'''
    Path(args.out).write_text(text)
    load_profile(args.out)            # the result must pass the profile schema
    print(f"wrote {args.out}: {len(m['batch_size'])} batch sizes, K={m['spec_steps']}, accept {m['accept']:.3f}")


if __name__ == "__main__":
    main()
