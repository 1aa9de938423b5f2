"""Steady runs whose time went outside the engine: the client's wall against the scheduler's own window.

    python3 bench/gpu/frontend.py RESULTS.jsonl TIMELINE.jsonl[.xz] [--margin-ms 100]

A steady run sends its C prompts at once and waits for the last token; the engine's timeline window (first to last
batch of the run) is what the engine spent. The rest (tokenizing, HTTP, detokenizing) is a few tens of ms and the same
in every run of a level; a run whose rest is `--margin-ms` above the level's median lost that time in the front end,
not in its steps (12-06d's no-spec pair 1.285, 12-06e's off pair 0.812: engine windows as the other runs'). The table
says which pairs to read that way; it removes nothing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

from timeline_summary import rows_of

KEY = ("label", "shape", "level", "repeat")


def outside(results: list[dict], timeline: list[dict]) -> list[dict]:
    """Per steady run found in both files (matched by label, shape, level, repeat and start time): its client wall,
    its engine window and the difference, and `stall` where that difference exceeds the level's median by
    `margin_ms` (set by `flag`)."""
    windows = {(tuple(r.get(k) for k in KEY), round(r.get("t_start") or 0, 1)): r.get("window_ms")
               for r in timeline if r.get("shape") == "steady"}
    out = []
    for r in results:
        if r.get("shape") != "steady" or r.get("wall_ms") is None:
            continue
        window = windows.get((tuple(r.get(k) for k in KEY), round(r.get("t_start") or 0, 1)))
        if window is not None:
            out.append({**{k: r.get(k) for k in KEY}, "wall_ms": r["wall_ms"], "window_ms": window,
                        "outside_ms": round(r["wall_ms"] - window, 1)})
    return out


def flag(runs: list[dict], margin_ms: float) -> list[dict]:
    """Each run with `stall`: its outside time above its level's median (over both engines' runs) by margin_ms."""
    by_level: dict = {}
    for r in runs:
        by_level.setdefault(r["level"], []).append(r["outside_ms"])
    return [{**r, "stall": r["outside_ms"] > statistics.median(by_level[r["level"]]) + margin_ms} for r in runs]


def table(runs: list[dict]) -> list[str]:
    """Markdown: only the flagged runs (none: one line saying so)."""
    stalls = [r for r in runs if r["stall"]]
    if not stalls:
        return [f"front end: no steady run lost time outside its engine ({len(runs)} runs)"]
    lines = ["| steady level | label | repeat | client wall ms | engine window ms | outside the engine ms |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['level']} | {r['label']} | {r['repeat']} | {r['wall_ms']:,.0f} | {r['window_ms']:,.0f} "
              f"| {r['outside_ms']:,.0f} |" for r in stalls]
    return lines + [f"front end: {len(stalls)} of {len(runs)} steady runs lost time outside their engine (above): "
                    "read their pairs as the front end's, not the off path's"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("timeline")
    ap.add_argument("--margin-ms", type=float, default=100.0)
    args = ap.parse_args()
    with open(args.results) as f:
        results = [json.loads(line) for line in f if line.strip()]
    runs = outside(results, [r for r in rows_of(args.timeline) if isinstance(r, dict)])
    if runs:
        print("\n".join(table(flag(runs, args.margin_ms))))


if __name__ == "__main__":
    try:
        main()
    except (OSError, ValueError) as e:
        sys.exit(f"frontend.py: {e}")
