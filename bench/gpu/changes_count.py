"""Threshold changes the daemon made in a window (its `specctl history --json`): one CONST line.

    python3 bench/gpu/changes_count.py HISTORY.json T_START SECONDS [--skip 2]
A history row whose old and new thresholds differ is a change (`exploratory` ones are trials); rows
with both the same (a start re-applying the restored threshold, a trial kept as the decision) are not, nor are an
operator's pins and unpins (counted apart: run_converged.sh's interleaved modes pin and unpin). The second half of
the window is reported apart: decisions once converged.
"""
from __future__ import annotations

import argparse
import json

OPERATOR = ("pinned at", "unpinned by an operator")   # the loop's reasons for an operator's pin / unpin (loop.py)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("history")
    ap.add_argument("t_start", type=float)
    ap.add_argument("seconds", type=float)
    ap.add_argument("--skip", type=float, default=2.0, help="seconds of warm-up at the start left out")
    args = ap.parse_args()
    t0, span = args.t_start + args.skip, args.seconds
    moved = sorted((r for r in json.load(open(args.history)) if t0 <= r["wall"] <= t0 + span and r["old"] != r["new"]),
                   key=lambda r: r["wall"])
    rows = [r for r in moved if not r.get("reason", "").startswith(OPERATOR)]
    operator = len(moved) - len(rows)
    half = [r for r in rows if r["wall"] >= t0 + span / 2]
    trials = sum(1 for r in rows if r.get("exploratory"))
    print(f"CONST threshold changes in {span:.0f} s at constant load: {len(rows)} ({len(rows) * 60 / span:.1f}/min, "
          f"{trials} trials); second half: {len(half)} ({len(half) * 120 / span:.1f}/min): "
          + " ".join(f"{r['old']}->{r['new']}{'*' if r.get('exploratory') else ''}" for r in rows)
          + (f" ({operator} operator pins / unpins not counted)" if operator else ""))


if __name__ == "__main__":
    main()
