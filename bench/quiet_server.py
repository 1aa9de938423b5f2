"""A quiet server: Poisson arrivals so sparse that the engine idles between requests and sends no samples for
longer than the guard's fallback_after_s (bench/results/quiet-server.md).

    python bench/quiet_server.py [--rates 0.02,0.05,0.1,0.3] [--seeds 0,1,2] [--seconds 1200]

Per profile and rate: the share of decode batches speculated and the median TPOT, for always-on and for the
bandit with the guard's fallback holding the learned threshold (the default) and applying 0 (the old default).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.control.guard_config import GuardConfig  # noqa: E402
from controller.sim.evaluate import StaticRunner, policy_runner, run_segments  # noqa: E402
from controller.sim.openeval import latency_figures, rate_segments  # noqa: E402
from controller.sim.profile import load_profile  # noqa: E402


def row(profile: str, rate: float, seeds: list[int], seconds: float) -> str:
    prof = load_profile(profile)
    makers = {"always": lambda s: (lambda core: StaticRunner(prof.max_batch_size)),
              "bandit, hold": lambda s: policy_runner("bandit", {}, prof, s),
              "bandit, fallback 0": lambda s: policy_runner("bandit", {}, prof, s, GuardConfig(fallback_threshold=0))}
    cells = []
    for make in makers.values():
        runs = [run_segments(prof, rate_segments((rate,), seconds), make(s), s)[0] for s in seeds]
        share = statistics.fmean(r.spec_batches / r.batches for r in runs)
        tpot = statistics.fmean(latency_figures(r.latencies)["tpot_ms_median"] for r in runs)
        cells.append(f"{share:.0%}, {tpot:.3f}")
    return f"| {profile} | {rate:g} | " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default="h200-2b6,crossover-a,bench/results/h200-2026-12-01b/h200-7b-open.toml")
    ap.add_argument("--rates", default="0.02,0.05,0.1,0.3")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--seconds", type=float, default=1200.0)
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    print(f"seeds {a.seeds}, {a.seconds:g} virtual s per run; cells: batches speculated, median TPOT ms (seed mean)\n")
    print("| profile | req/s | always | bandit, hold (default) | bandit, fallback 0 (old default) |")
    print("|---|---|---|---|---|")
    for p in a.profiles.split(","):
        for r in a.rates.split(","):
            print(row(p, float(r), seeds, a.seconds), flush=True)


if __name__ == "__main__":
    main()
