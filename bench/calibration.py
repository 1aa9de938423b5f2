"""How close the `seed` profile lands on the seed measurements (virtual time, prefill included).

    python bench/calibration.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.sim.evaluate import StaticRunner, run_segments, sweep_segments  # noqa: E402
from controller.sim.profile import load_profile  # noqa: E402

SEED = {(1, False): 92.7, (128, False): 773.0, (1, True): 80.9, (128, True): 354.0}


def main() -> None:
    prof = load_profile("seed")
    print("command: python bench/calibration.py   (120 virtual s per level, seed 1)\n")
    print("| mode | concurrency | seed table tok/s | simulator tok/s | error |\n|---|---|---|---|---|")
    for spec in (False, True):
        res = run_segments(prof, sweep_segments([1, 128], 120), lambda core: StaticRunner(256 if spec else 0), seed=1)
        for r in res:
            want = SEED[(r.concurrency, spec)]
            print(f"| {'EAGLE-3' if spec else 'plain'} | {r.concurrency} | {want:.1f} | {r.throughput:.1f} | "
                  f"{(r.throughput - want) / want:+.1%} |")


if __name__ == "__main__":
    main()
