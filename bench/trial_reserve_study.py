"""The guard's trial reserve (GuardConfig.trial_reserve, 2026-12-03d): a charged trial leaves one token of the change
budget for the exploit move it calls for. Simulator, virtual time; run it once on the code before and once after.

    python bench/trial_reserve_study.py middle  [--seeds 0-7]     (~1 min)
    python bench/trial_reserve_study.py changes [--seeds 0-3]     (~8 min on one core)

middle: the bandit at each profile's middle rate over the better of never and always (tok/s, median TPOT), per seed.
changes: applied threshold changes per minute after 60 s of 240 s at closed 24, closed 128 and the middle rate.
Results: bench/results/trial-reserve.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import controller.sim.evaluate as ev  # noqa: E402
from controller.sim.openeval import rate_segments  # noqa: E402
from controller.sim.profile import Segment, load_profile  # noqa: E402
from open_loop_study import middle_ratio  # noqa: E402

MEASURED = Path(__file__).resolve().parent / "results/h200-2026-12-01c"
PROFILES = ["crossover-a", "crossover-b", "h200-2b6", "seed"] + [
    str(MEASURED / f"{n}.toml") for n in ("h200-7b-open-tl", "h200-7b-open-tl2", "h200-7b-open-tl2-kv")]


def seeds_arg(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi) + 1)) if hi else [int(s) for s in text.split(",")]


def short(profile: str) -> str:
    return Path(profile).stem


def middle(seeds: list[int]) -> None:
    print("| profile | tok/s mean (worst) | median TPOT mean (worst) | TPOT per seed |\n|---|---|---|---|")
    for p in PROFILES:
        rs = [middle_ratio(p, {}, s) for s in seeds]
        tok, tpot = [r[0] for r in rs], [r[1] for r in rs]
        print(f"| {short(p)} | {statistics.fmean(tok):.3f} ({min(tok):.3f}) | {statistics.fmean(tpot):.3f} "
              f"({max(tpot):.3f}) | {' '.join(f'{x:.3f}' for x in tpot)} |", flush=True)


def changes(seeds: list[int]) -> None:
    print("| profile | C=24 | C=128 | middle rate |\n|---|---|---|---|")
    for p in PROFILES:
        prof = load_profile(p)
        rates = prof.open_loop_rates()
        mid = rates[len(rates) // 2]
        loads = [[Segment(240, 24)], [Segment(240, 128)], rate_segments([mid], 240)]
        cells = [statistics.fmean(ev.changes_per_min(prof, segs, "bandit", {}, s, None, 60) for s in seeds)
                 for segs in loads]
        print(f"| {short(p)} | {cells[0]:.2f} | {cells[1]:.2f} | {cells[2]:.2f} ({mid:g}/s) |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("middle", "changes"))
    ap.add_argument("--seeds")
    args = ap.parse_args()
    if args.what == "middle":
        middle(seeds_arg(args.seeds or "0-7"))
    else:
        changes(seeds_arg(args.seeds or "0-3"))


if __name__ == "__main__":
    main()
