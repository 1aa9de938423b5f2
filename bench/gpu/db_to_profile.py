"""Turn a daemon database's decode samples into a simulator profile (measured step-time curves).

    python3 bench/gpu/db_to_profile.py STATE_DB OUT.toml --name h200-2b6 [--source "..."]
        [--prompt-len-range 102,512 --output-len-range 77,384 --arrival-rate 2,12,24]
Per batch size and mode, the median step seconds of decode-only samples; batch sizes seen in
both modes become the table's points (at least two needed). The accept length is the measured
mean over speculative batches; K is the largest step count seen.
Prefill cost: every interval that held a prefill, minus the decode-only median of its batch size
and mode, is the time the extend batch added; fitted as prefill_s + prefill_s_per_request x n,
where n (requests admitted) is read from the batch growing (this batch minus the one before, at
least 1). Intervals with an idle gap (> 1 s extra) are left out. The [load] keys describe the
traffic to replay (sglang.bench_serving --random-input-len/--random-output-len/--random-range-ratio).
"""
from __future__ import annotations

import argparse
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
    return {"batch_size": both,
            "off": [statistics.median(by[(b, False)]) for b in both],
            "spec": [statistics.median(by[(b, True)]) for b in both],
            "spec_steps": k, "accept": accept, "samples": len(rows)}


def fit_prefill(db_path: str, medians: dict[tuple[int, bool], float]) -> dict:
    """prefill_s + prefill_s_per_request x n from the intervals that held a prefill."""
    import numpy as np
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    rows = db.execute("SELECT batch_size, steps > 0, step_s, decode_only FROM samples WHERE step_s > 0 ORDER BY t")
    xs, ys, prev = [], [], None
    for bs, spec, step, decode_only in rows:
        base = medians.get((bs, bool(spec)))
        if not decode_only and prev is not None and base is not None and 0 <= step - base <= 1.0:
            xs.append(max(bs - prev, 1))
            ys.append(step - base)
        prev = bs
    if len(xs) < 10:
        return {"intervals": len(xs)}
    design = np.stack([np.ones(len(xs)), np.array(xs, dtype=float)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, np.array(ys), rcond=None)
    if b < 0 or len(set(xs)) < 2:   # no visible per-request part: all of it per extend batch
        a, b = float(np.mean(ys)), 0.0
    return {"intervals": len(xs), "prefill_s": max(float(a), 0.0), "prefill_s_per_request": float(b),
            "mean_extra_s": float(np.mean(ys))}


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
    ap.add_argument("--prompt-len-range", help="LOW,HIGH prompt tokens of the traffic to replay")
    ap.add_argument("--output-len-range", help="LOW,HIGH output tokens")
    ap.add_argument("--arrival-rate", help="open-loop rates (requests/s) for specctl simulate --arrival-rate default")
    args = ap.parse_args()
    m = measure(args.db, args.min_samples)
    medians = {(b, spec): v for spec, key in ((False, "off"), (True, "spec")) for b, v in zip(m["batch_size"], m[key])}
    pre = fit_prefill(args.db, medians)
    prefill = (f"prefill_s = {pre['prefill_s']:.6g}               # fitted from {pre['intervals']} intervals "
               f"that held a prefill (mean extra {pre['mean_extra_s'] * 1000:.3g} ms)\n"
               f"prefill_s_per_request = {pre['prefill_s_per_request']:.6g}\n") if "prefill_s" in pre else ""
    if len(m["batch_size"]) < 2 or not m["spec_steps"]:
        raise SystemExit(f"db_to_profile: need >= 2 batch sizes seen in both modes, got {m['batch_size']}")
    fmt = lambda xs: ", ".join(f"{x:.6g}" for x in xs)
    text = f'''# Measured: {m["samples"]} decode samples; median step seconds per batch size and mode.
name = "{args.name}"
description = "measured step-time curves ({args.source})"
source = "{args.source}"
max_batch_size = {max(m["batch_size"])}
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
