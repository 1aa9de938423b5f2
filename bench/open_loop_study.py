"""The figures behind issue 13's decisions (bench/results/open-loop-sim.md).

    python bench/open_loop_study.py prefill   [--seeds 0,1,2,3,4,5]
    python bench/open_loop_study.py decisions [--seconds 600 --warm 120]
    python bench/open_loop_study.py thresholds --profile P [--thresholds 1,2,3,5,8,11,14,20] [--seeds 0,...,11]

thresholds: at the middle rate, the bandit, the per-batch-size oracle and static thresholds, each as
middle_ratio reports the bandit (over the better of never and always): can any threshold meet 3 %?

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
    OracleRunner,
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


def middle_ratios(name: str, makers: dict, seed: int) -> dict[str, tuple[float, float]]:
    """name -> (tok/s, median TPOT) at the middle rate over the better of never and always, for each runner
    maker (rates in ascending order, 60 s each, one continuous run per maker)."""
    prof = load_profile(name)
    segs = rate_segments(prof.open_loop_rates(), 60)
    makers = {"never": lambda c: StaticRunner(0), "always": lambda c: StaticRunner(prof.max_batch_size), **makers}
    got = {m: summary(run_segments(prof, segs, mk, seed)[1]) for m, mk in makers.items()}
    fixed = (got["never"], got["always"])
    tok_s, tpot = max(f["tok_s"] for f in fixed), min(f["tpot_ms_median"] for f in fixed)
    return {m: (g["tok_s"] / tok_s, g["tpot_ms_median"] / tpot) for m, g in got.items()}


def middle_ratio(name: str, params: dict, seed: int) -> tuple[float, float]:
    """(tok/s, median TPOT) of the bandit at the middle rate over the better fixed mode."""
    prof = load_profile(name)
    return middle_ratios(name, {"bandit": policy_runner("bandit", params, prof, seed)}, seed)["bandit"]


def thresholds(name: str, fixed: list[int], seeds: list[int]) -> list[str]:
    prof = load_profile(name)
    rows: dict[str, list[tuple[float, float]]] = {}
    for s in seeds:
        makers = {"bandit": policy_runner("bandit", {}, prof, s), "oracle": lambda c: OracleRunner(prof, c),
                  **{f"static {t}": (lambda c, t=t: StaticRunner(t)) for t in fixed}}
        for m, r in middle_ratios(name, makers, s).items():
            rows.setdefault(m, []).append(r)
    lines = [f"{prof.name}, middle rate, seeds {seeds[0]}-{seeds[-1]} (over the better of never and always):", "",
             "| runner | TPOT mean | TPOT worst | tok/s mean | tok/s worst |", "|---|---|---|---|---|"]
    for m, r in rows.items():
        tpot, tok = [x[1] for x in r], [x[0] for x in r]
        lines.append(f"| {m} | {statistics.fmean(tpot):.3f} | {max(tpot):.3f} | {statistics.fmean(tok):.3f} | {min(tok):.3f} |")
    return lines


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
    ap.add_argument("what", choices=["prefill", "decisions", "thresholds"])
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--warm", type=float, default=120.0)
    ap.add_argument("--profile", default="bench/results/h200-2026-12-01c/h200-7b-open-tl2.toml")
    ap.add_argument("--thresholds", default="1,2,3,5,8,11,14,20")
    args = ap.parse_args()
    print(f"Command: `python bench/open_loop_study.py {' '.join(sys.argv[1:])}`\n")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.what == "thresholds":
        lines = thresholds(args.profile, [int(t) for t in args.thresholds.split(",")], seeds)
    else:
        lines = prefill(seeds) if args.what == "prefill" else decisions(args.seconds, args.warm)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
