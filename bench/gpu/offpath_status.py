"""Where issue 12 stands: off / no-spec per load shape and level over every H200 call in
bench/results/offpath-traffic.json that measured the product's default off path the current way (both engines
resident, pinned to their own cores and swapped, the idle one asleep; off_path kv, SGLang's breakable prefill
graphs), one ratio per call (its pairs pooled by traffic_table.py), against the issue's 0.97.

    python3 bench/gpu/offpath_status.py [--json bench/results/offpath-traffic.json] [--bar 0.97]
Standard library only. Prints a markdown table (bench/results/offpath-status.md keeps one).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

RECORD = Path(__file__).resolve().parents[2] / "bench" / "results" / "offpath-traffic.json"
SHAPES = ("steady", "closed", "open")


def current(row: dict) -> bool:
    """A row of the product's default off path measured the current way (12-04e on)."""
    return (row.get("mode") == "off" and row.get("off_path") == "kv" and row.get("prefill_graph") == "breakable"
            and bool(row.get("pinned_cpus")) and bool(row.get("sleep_on_idle")) and row.get("ratio") is not None
            and not row.get("plain_off"))      # (PLAIN=1: off batches as SGLang's plain ones, a start-time switch)


def status(rows: list[dict], bar: float = 0.97) -> list[dict]:
    """Per (shape, level): the calls' ratios in call order, their median, range, how many reach the bar, the latest."""
    per: dict[tuple[str, float], list[tuple[str, float]]] = {}
    for row in filter(current, rows):
        per.setdefault((row["shape"], float(row["level"])), []).append((row["call"], float(row["ratio"])))
    out = []
    for (shape, level), calls in sorted(per.items(), key=lambda kv: (SHAPES.index(kv[0][0]), kv[0][1])):
        calls.sort()                      # call names sort by date and letter
        ratios = [r for _, r in calls]
        out.append({"shape": shape, "level": level, "calls": len(calls), "median": statistics.median(ratios),
                    "low": min(ratios), "high": max(ratios), "at_bar": sum(r >= bar for r in ratios),
                    "latest": ratios[-1], "latest_call": calls[-1][0].split("/")[0]})
    return out


def table(lines: list[dict], bar: float) -> str:
    unit = {"steady": "batch", "closed": "clients", "open": "req/s"}
    out = [f"| shape | level | calls | median off / no-spec | range | calls >= {bar} | latest (call) |",
           "|---|---|---|---|---|---|---|"]
    for s in lines:
        out.append(f"| {s['shape']} | {s['level']:g} {unit[s['shape']]} | {s['calls']} | {s['median']:.3f} | "
                   f"{s['low']:.3f}-{s['high']:.3f} | {s['at_bar']} of {s['calls']} | {s['latest']:.3f} "
                   f"({s['latest_call']}) |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=str(RECORD))
    ap.add_argument("--bar", type=float, default=0.97)
    args = ap.parse_args(argv)
    rows = json.loads(Path(args.json).read_text())["rows"]
    print(table(status(rows, args.bar), args.bar))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
