"""How many GPU repeats a TPOT comparison needs: the spread of bench_serving's median TPOT across seeds,
in the simulator (each seed a different set of requests and arrival times; the engine's own run-to-run
chaos comes on top, see bench/results/h200-2026-12-01c/README.md).

    python bench/tpot_noise.py [--profile FILE] [--rates 12,24] [--seconds 6,12,60] [--seeds 12]
Per arrival time, rate and mode: the mean median TPOT, its coefficient of variation across seeds, and the
runs per mode that a two-sample comparison needs to tell a 3 % difference (two-sided 5 % level, 80 % power:
2 ((1.96 + 0.84) CV / 0.03)^2, at least 2).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.sim.finite import evaluate_finite  # noqa: E402
from controller.sim.profile import load_profile  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="bench/results/h200-2026-12-01c/h200-7b-open-tl.toml")
    ap.add_argument("--rates", default="12,24")
    ap.add_argument("--seconds", default="6,12,60")
    ap.add_argument("--seeds", type=int, default=12)
    args = ap.parse_args()
    prof = load_profile(args.profile)
    rates = [float(r) for r in args.rates.split(",")]
    print(f"Profile {prof.name}, seeds 0-{args.seeds - 1}: `python bench/tpot_noise.py --profile {args.profile} "
          f"--rates {args.rates} --seconds {args.seconds} --seeds {args.seeds}`\n")
    print("| arrivals s | rate | mode | median TPOT ms (mean over seeds) | CV across seeds | runs per mode for 3 % "
          "(5 % level, 80 % power) |")
    print("|---|---|---|---|---|---|")
    for secs in (float(s) for s in args.seconds.split(",")):
        result = evaluate_finite(prof, rates, secs, seeds=range(args.seeds),
                                 thresholds={"never": 0, "always": prof.max_batch_size})
        for row in result["rows"]:
            for mode, cell in row["modes"].items():
                t = [r["tpot_ms_median"] for r in cell["runs"]]
                mean = statistics.mean(t)
                cv = statistics.stdev(t) / mean
                runs = max(2, math.ceil(2 * ((1.96 + 0.84) * cv / 0.03) ** 2))
                print(f"| {secs:g} | {row['rate']:g} | {mode} | {mean:.2f} | {cv:.3f} | {runs} |")


if __name__ == "__main__":
    main()
