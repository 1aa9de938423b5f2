"""Rank the daemon's modes from interleaved sweeps (sweep.py --modes): mean tok/s per mode and level,
and the daemon's (bandit's) ratio to the best of the others at each level.

    python3 bench/gpu/rank.py results.jsonl [more.jsonl ...] [--modes never,always,static5,bandit] [--daemon bandit]
Prints a markdown table; every input row is one level of one mode (rows without a throughput are skipped).
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict


def table(rows: list[dict], modes: list[str], daemon: str) -> str:
    runs: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in rows:
        if r.get("label") in modes and r.get("output_tok_s"):
            runs[(r["label"], r["concurrency"])].append(r["output_tok_s"])
    levels = sorted({c for _, c in runs})
    head = "| concurrency | " + " | ".join(modes) + f" | {daemon} / best other |"
    lines = [head, "|" + "---|" * (len(modes) + 2)]
    for c in levels:
        mean = {m: statistics.mean(runs[(m, c)]) for m in modes if runs.get((m, c))}
        others = [v for m, v in mean.items() if m != daemon]
        ratio = f"{mean[daemon] / max(others):.2f}" if daemon in mean and others else "-"
        cells = [f"{mean[m]:,.0f} (n={len(runs[(m, c)])})" if m in mean else "-" for m in modes]
        lines.append(f"| {c} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--modes", default="never,always,static5,bandit")
    ap.add_argument("--daemon", default="bandit")
    args = ap.parse_args()
    rows = [json.loads(line) for f in args.files for line in open(f) if line.strip()]
    print(table(rows, args.modes.split(","), args.daemon))


if __name__ == "__main__":
    main()
