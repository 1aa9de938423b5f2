"""Replay a daemon database's samples through the bandit and its guard (virtual time, ticks every 0.5 s from the
first recorded decision): the threshold changes it makes, beside the recorded ones.

    python bench/replay_db.py STATE.db [--pays 0|1] [--params '{"zero_margin": 10}'] [--from S] [--max-batch-size 128]

--pays: what the engine says of its off batches' prefills (ControlLoop prefills_pay_draft; 1: as before 2026-12-03c).
Open loop: the samples were produced under the recorded thresholds, not the replayed ones, so a replay shows what
the decisions make of the same evidence, not what the engine would have done under them.
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.control.loop import ControlLoop  # noqa: E402
from policies import Sample, make_policy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("--pays", type=int, choices=(0, 1), default=1)
    ap.add_argument("--params", default="{}")
    ap.add_argument("--from", dest="since", type=float, default=0.0, help="count changes from S s after the start")
    ap.add_argument("--max-batch-size", type=int, default=128)
    args = ap.parse_args()
    db = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    rows = db.execute("SELECT t, batch_size, steps, tokens, step_s, decode_only FROM samples ORDER BY t").fetchall()
    recorded = db.execute("SELECT t, old, new, exploratory, reason FROM decisions ORDER BY t").fetchall()
    policy = make_policy("bandit", json.loads(args.params), seed=0, max_batch_size=args.max_batch_size)
    loop = ControlLoop(policy, prefills_pay_draft=bool(args.pays))
    t0 = recorded[0][0] if recorded else rows[0][0]
    tick, i, mine = t0, 0, []
    while tick <= rows[-1][0]:
        while i < len(rows) and rows[i][0] <= tick:
            t, bs, steps, tokens, step_s, decode_only = rows[i]
            loop.observe(Sample(t, bs, steps, tokens, step_s, bool(decode_only)))
            i += 1
        got = loop.tick(tick)
        if got.changed:
            mine.append((tick - t0, got.previous, got.threshold, got.exploratory, got.reason))
        tick += 0.5
    theirs = [(t - t0, o, n, bool(e), r) for t, o, n, e, r in recorded if o != n]
    span = (rows[-1][0] - t0 - args.since) / 60.0
    for label, changes in (("recorded", theirs), ("replayed", mine)):
        kept = [c for c in changes if c[0] >= args.since]
        print(f"{label}: {len(kept)} changes from {args.since:g} s ({len(kept) / span:.1f}/min)")
        for t, old, new, trial, reason in kept:
            print(f"  {t:7.1f} {old:3d} -> {new:3d}{'*' if trial else ' '} {reason[:110]}")


if __name__ == "__main__":
    main()
