"""The figures behind issue 13's decisions (bench/results/open-loop-sim.md).

    python bench/open_loop_study.py prefill   [--seeds 0,1,2,3,4,5]
    python bench/open_loop_study.py decisions [--seconds 600 --warm 120]

prefill: the bandit with prefill intervals dropped / used as measured / corrected, at each
profile's middle rate (rates in ascending order, 60 s each): median TPOT and tok/s over the
better of never and always; and in a closed loop at high concurrency against the oracle.
decisions: applied threshold changes per minute at constant load after a warm-up, closed loop
(C clients) and open loop (each profile's rates), before (the guard's coalescing, hysteresis and
change budget off, the bandit's old defaults) and after (defaults); and re-convergence on the traces.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.control.guard_config import GuardConfig  # noqa: E402
from controller.sim.evaluate import (  # noqa: E402
    StaticRunner,
    changes_per_min,
    evaluate,
    policy_runner,
    run_segments,
)
from controller.sim.openeval import rate_segments, summary  # noqa: E402
from controller.sim.profile import Segment, load_profile, load_trace  # noqa: E402

PROFILES = ("seed", "crossover-a", "crossover-b", "h200-2b6")
TRACES = ("load-steps", "coding-to-chat", "mixed-shift")
BEFORE = ({"half_life_s": 20.0, "dominance": 0.1, "indifference": 0.0, "prefill": 0},
          GuardConfig(coalesce_window_s=0, min_gain=0, changes_per_min=0))
AFTER = ({}, GuardConfig())


def middle_ratio(name: str, params: dict, seed: int) -> tuple[float, float]:
    """(tok/s, median TPOT) of the bandit at the middle rate over the better fixed mode."""
    prof = load_profile(name)
    segs = rate_segments(prof.open_loop_rates(), 60)
    got = {m: summary(run_segments(prof, segs, mk, seed)[1]) for m, mk in (
        ("bandit", policy_runner("bandit", params, prof, seed)), ("never", lambda c: StaticRunner(0)),
        ("always", lambda c: StaticRunner(prof.max_batch_size)))}
    fixed = (got["never"], got["always"])
    return (got["bandit"]["tok_s"] / max(f["tok_s"] for f in fixed),
            got["bandit"]["tpot_ms_median"] / min(f["tpot_ms_median"] for f in fixed))


def prefill(seeds: list[int]) -> list[str]:
    lines = ["| profile | prefill=0 (drop) | prefill=1 (as measured) | prefill=2 (corrected) |", "|---|---|---|---|"]
    for name in PROFILES:
        cells = []
        for mode in (0, 1, 2):
            ratios = [middle_ratio(name, {"prefill": mode}, s) for s in seeds]
            tpot = [r[1] for r in ratios]
            cells.append(f"TPOT {statistics.fmean(tpot):.3f} (worst {max(tpot):.3f}), "
                         f"tok/s >= {min(r[0] for r in ratios):.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Closed loop at high load (ratio to the oracle, 60 s, mean over the seeds):", "",
              "| profile, C | prefill=0 | prefill=1 | prefill=2 |", "|---|---|---|---|"]
    for name, c in (("crossover-a", 128), ("crossover-b", 256), ("h200-2b6", 128), ("seed", 256)):
        prof = load_profile(name)
        cells = [statistics.fmean(evaluate(prof, [Segment(60, c)], "bandit", {"prefill": m}, seed=s)["rows"][0]["ratio"]
                                  for s in seeds) for m in (0, 1, 2)]
        lines.append(f"| {name}, {c} | " + " | ".join(f"{x:.3f}" for x in cells) + " |")
    return lines


def decisions(seconds: float, warm: float) -> list[str]:
    lines = ["| profile | load | mechanisms off /min | defaults /min |", "|---|---|---|---|"]
    for name in PROFILES:
        prof = load_profile(name)
        loads = [(f"C={c}", Segment(seconds, c)) for c in (8, 24, 64)]
        loads += [(f"rate {r:g}/s", Segment(seconds, 0, None, "", r)) for r in prof.open_loop_rates()]
        for label, seg in loads:
            b, a = (changes_per_min(prof, [seg], "bandit", cfg[0], 0, cfg[1], warm) for cfg in (BEFORE, AFTER))
            lines.append(f"| {name} | {label} | {b:.1f} | {a:.1f} |")
    lines += ["", "| trace | mechanisms off: ratio, re-converge s (max over segments) | defaults |", "|---|---|---|"]
    for t in TRACES:
        trace = load_trace(t)
        prof = load_profile(trace.profile)
        cells = []
        for params, guard in (BEFORE, AFTER):
            r = evaluate(prof, trace.segments, "bandit", params, seed=0, guard=guard)
            rc = [x["reconverge_s"] for x in r["rows"]]
            worst = "never" if None in rc else f"{max(rc):.1f}"
            cells.append(f"{r['overall']['ratio']:.3f}, {worst}")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["prefill", "decisions"])
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--warm", type=float, default=120.0)
    args = ap.parse_args()
    print(f"Command: `python bench/open_loop_study.py {' '.join(sys.argv[1:])}`\n")
    lines = prefill([int(s) for s in args.seeds.split(",")]) if args.what == "prefill" \
        else decisions(args.seconds, args.warm)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
