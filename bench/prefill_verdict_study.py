"""The zero verdict (policies.prefill_cost) on engines whose off batches' prefills skip the draft's pass (off path kv):
with it (the engine's word ignored: before 2026-12-03c) and without (the engine says so: ControlLoop
prefills_pay_draft). Simulator, virtual time.

    python bench/prefill_verdict_study.py [--seeds 0,1,2,3] [--seconds 240 --warm 60]

Per profile: the bandit at the middle rate over the better of never and always (tok/s, median TPOT; seeds mean and
worst), and applied threshold changes per minute after the warm-up at a closed loop of 24 clients and at the
middle rate (seeds mean).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import controller.sim.evaluate as ev  # noqa: E402
from controller.sim.openeval import rate_segments  # noqa: E402
from controller.sim.profile import Segment, load_profile  # noqa: E402
from open_loop_study import middle_ratio  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROFILES = (str(ROOT / "bench/results/h200-2026-12-01c/h200-7b-open-tl2-kv.toml"), "h200-2b6", "crossover-a", "crossover-b",
            "seed")


class Ignoring(ev.ControlLoop):
    """The loop as before: the engine's word on its prefills not passed on (Snapshot default True)."""

    def __init__(self, *a, prefills_pay_draft: bool = True, **k):
        super().__init__(*a, prefills_pay_draft=True, **k)


def figures(name: str, seeds: list[int], seconds: float, warm: float) -> dict[str, float]:
    prof = load_profile(name)
    mid = prof.open_loop_rates()[len(prof.open_loop_rates()) // 2]
    ratios = [middle_ratio(name, {}, s) for s in seeds]
    loads = {"C=24": [Segment(seconds, 24)], f"{mid:g}/s": rate_segments([mid], seconds)}
    out = {"tok_s": statistics.fmean(r[0] for r in ratios), "tok_s_worst": min(r[0] for r in ratios),
           "tpot": statistics.fmean(r[1] for r in ratios), "tpot_worst": max(r[1] for r in ratios)}
    for label, segs in loads.items():
        out[label] = statistics.fmean(ev.changes_per_min(prof, segs, "bandit", {}, s, None, warm) for s in seeds)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--seconds", type=float, default=240.0)
    ap.add_argument("--warm", type=float, default=60.0)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"seeds {seeds}; middle rate: bandit / better fixed mode (mean, worst); changes/min after {args.warm:g} s of "
          f"{args.seconds:g} s (mean)\n")
    print("| profile | verdict | tok/s | median TPOT | changes/min C=24 | changes/min middle rate |\n|---|---|---|---|---|---|")
    for name in PROFILES:
        for label, patch in (("applied (before)", mock.patch.object(ev, "ControlLoop", Ignoring)),
                             ("engine's word (after)", mock.patch.object(ev, "ControlLoop", ev.ControlLoop))):
            with patch:
                f = figures(name, seeds, args.seconds, args.warm)
            mid = [k for k in f if k.endswith("/s")][0]
            print(f"| {Path(name).stem} | {label} | {f['tok_s']:.3f} ({f['tok_s_worst']:.3f}) | {f['tpot']:.3f} "
                  f"({f['tpot_worst']:.3f}) | {f['C=24']:.2f} | {f[mid]:.2f} ({mid}) |", flush=True)


if __name__ == "__main__":
    main()
