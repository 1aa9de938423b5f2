"""Does an engine pair's ratio move with the engines' age? Over the calls of one KEEP_ENGINES chain (run_pair.sh: the
same two engine processes, one machine's monotonic clock), per shape and level: each label's tok/s and each label /
no-spec pair against the minutes since the chain's first run, with a least-squares slope per 10 minutes and its 95 %
interval (12-05c: closed 128 read 0.901, 0.930, 0.981 in three calls of one pair, no-spec steady).

    python3 bench/gpu/age_trend.py call1-results.jsonl call2-results.jsonl ... [--shape closed] [--level 128]
    python3 bench/gpu/age_trend.py --within bench/results/h*/call*-results.jsonl --shape closed

--within: each file a call of its own (fresh engines each, any machines): every pair's ratio as its deviation from its
level's mean in that call, against the minutes since the call's first run, pooled over the calls into one slope (does
a fresh pair's ratio rise over a call's first minutes?).

Rows of different machines (monotonic clocks that do not agree with the wall clock) are refused: their minutes would
mean nothing. Engines started again on the same machine are not told apart (the rows carry no engine ids): give it the
calls whose summaries say "engines reused" after the chain's first."""
from __future__ import annotations

import argparse
import math
import statistics
import sys

from scipy import stats

import traffic_table

CLOCK_SLACK_S = 5.0     # wall minus monotonic start differs by more between rows: not one machine's boot


def one_clock(rows: list[dict]) -> None:
    """ValueError unless every row's monotonic start agrees with its wall-clock start (one machine, one boot)."""
    offsets = [r["t_start"] - r["mono_start"] for r in rows]
    if offsets and max(offsets) - min(offsets) > CLOCK_SLACK_S:
        raise ValueError(f"the rows' monotonic clocks differ by {max(offsets) - min(offsets):,.0f} s against the wall "
                         "clock: not one machine's calls (one KEEP_ENGINES chain)")


def slope_per_10min(minutes: list[float], values: list[float]) -> tuple[float, float, float] | None:
    """(slope, low, high) of values per 10 minutes, the interval at 95 %; None with fewer than 3 points or no spread
    in time."""
    if not minutes:
        return None
    mid, mean = statistics.mean(minutes), statistics.mean(values)
    return within_slope([m - mid for m in minutes], [v - mean for v in values], 1)     # (one group: least squares)


def pair_points(groups: dict, key: tuple, t0: float) -> tuple[list[float], list[float]]:
    """(minutes since t0, label / no-spec ratio) of each pair of groups[key] (traffic_table's pairing: the same repeat,
    nearest in time), at the pair's mean start, in time order."""
    pairs = sorted(traffic_table.beside(groups, key)[0], key=lambda p: p[0]["mono_start"])
    return ([((a["mono_start"] + b["mono_start"]) / 2 - t0) / 60 for a, b in pairs],
            [a["tok_s"] / b["tok_s"] for a, b in pairs])


def series(rows: list[dict], shape: str | None, level: float | None) -> list[tuple[tuple, str, list[float], list[float]]]:
    """(shape, level), name, minutes, values: each label's tok/s and each label / no-spec pair's ratio (traffic_table's
    pairing: the same repeat, nearest in time; at the pair's mean start)."""
    t0 = min(r["mono_start"] for r in rows)
    groups = traffic_table.grouped(rows)
    out = []
    for (sh, lv, label), rs in traffic_table.in_order(groups):
        if (shape and sh != shape) or (level is not None and float(lv) != level):
            continue
        rs = sorted(rs, key=lambda r: r["mono_start"])
        out.append(((sh, lv), f"{label} tok/s", [(r["mono_start"] - t0) / 60 for r in rs], [r["tok_s"] for r in rs]))
        if label.startswith("nospec"):
            continue
        out.append(((sh, lv), f"{label} / nospec", *pair_points(groups, (sh, lv, label), t0)))
    return out


def lines(rows: list[dict], shape: str | None = None, level: float | None = None) -> list[str]:
    """The markdown table; a tok/s slope reads in % of that series' mean, a ratio's in ratio points."""
    one_clock(rows)
    out = ["| shape | level | series | points | minutes | first / last value | slope per 10 min [95 %] |",
           "|---|---|---|---|---|---|---|"]
    for (sh, lv), name, minutes, values in series(rows, shape, level):
        if not values:
            continue
        fit = slope_per_10min(minutes, values)
        ratio = name.endswith("/ nospec")
        scale = 1.0 if ratio else 100 / statistics.mean(values)
        shown = "-" if fit is None else (f"{fit[0] * scale:+.3f} [{fit[1] * scale:+.3f}, {fit[2] * scale:+.3f}]" if ratio
                                         else f"{fit[0] * scale:+.1f} % [{fit[1] * scale:+.1f}, {fit[2] * scale:+.1f}]")
        first_last = f"{values[0]:.3f} / {values[-1]:.3f}" if ratio else f"{values[0]:,.0f} / {values[-1]:,.0f}"
        out.append(f"| {sh} | {lv} | {name} | {len(values)} | {minutes[0]:.1f}-{minutes[-1]:.1f} | {first_last} | {shown} |")
    return out


def within_calls(calls: list[list[dict]], shape: str | None = None) -> dict[str, tuple[int, int, tuple | None]]:
    """label -> (pairs, calls, pooled slope per 10 min) of each call's pair ratios as deviations from their level's mean
    in that call, against the minutes since that call's first run (calls apart: no common clock needed)."""
    minutes: dict[str, list[float]] = {}
    deviations: dict[str, list[float]] = {}
    seen: dict[str, int] = {}
    for rows in calls:
        rows = [r for r in rows if not shape or r.get("shape") == shape]
        if not rows:
            continue
        t0, groups = min(r["mono_start"] for r in rows), traffic_table.grouped(rows)
        for key in groups:
            if key[2].startswith("nospec"):
                continue
            at, ratios = pair_points(groups, key, t0)
            if len(ratios) < 2:
                continue
            # both centred on their call-level's means (helper-87: minutes counted from the call's first run put a
            # call's levels at different times, and the spread between them, not inside them, shrank the slope ~4x)
            mean, mid = statistics.mean(ratios), statistics.mean(at)
            minutes.setdefault(key[2], []).extend(m - mid for m in at)
            deviations.setdefault(key[2], []).extend(x - mean for x in ratios)
            seen[key[2]] = seen.get(key[2], 0) + 1
    return {label: (len(deviations[label]), seen[label], within_slope(minutes[label], deviations[label], seen[label]))
            for label in sorted(deviations)}


def within_slope(minutes: list[float], values: list[float], groups: int) -> tuple[float, float, float] | None:
    """(slope, low, high) per 10 minutes of values against minutes, both centred within each of `groups` groups (the
    fixed-effects slope), its 95 % interval on n - groups - 1 degrees of freedom (a fitted mean per group); None
    without a degree of freedom left or no spread in time."""
    n = len(minutes)
    sxx = sum(m * m for m in minutes)
    if n - groups - 1 < 1 or sxx <= 0:
        return None
    slope = sum(m * v for m, v in zip(minutes, values)) / sxx
    rss = sum((v - slope * m) ** 2 for m, v in zip(minutes, values))
    half = stats.t.ppf(0.975, n - groups - 1) * math.sqrt(rss / (n - groups - 1) / sxx)
    return 10 * slope, 10 * (slope - half), 10 * (slope + half)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="loads.py's results.jsonl of each call of the chain")
    ap.add_argument("--shape", help="only this shape (steady, closed, open)")
    ap.add_argument("--level", type=float, help="only this level (clients, batch or req/s)")
    ap.add_argument("--within", action="store_true", help="each file a call of its own: one slope pooled within calls")
    args = ap.parse_args(argv)
    calls = [[r for r in traffic_table.rows_of(path) if "mono_start" in r and "tok_s" in r and "t_start" in r]
             for path in args.results]
    rows = [r for call in calls for r in call]
    if not rows:
        print("age_trend: no runs with a monotonic start in " + ", ".join(args.results), file=sys.stderr)
        return 2
    if args.within:
        for label, (n, k, fit) in within_calls(calls, args.shape).items():
            shown = "-" if fit is None else f"{fit[0]:+.3f} [{fit[1]:+.3f}, {fit[2]:+.3f}]"
            print(f"{label} / nospec within each call: {n} pairs in {k} call-levels, slope per 10 min {shown}")
        return 0
    try:
        print("\n".join(lines(rows, args.shape, args.level)))
    except ValueError as e:
        print(f"age_trend: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
