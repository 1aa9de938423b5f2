"""Policy cost: microseconds per observed sample and per decision (a benchmark, not a test).

    python bench/policy_cost.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.sim.core import SimCore  # noqa: E402
from controller.sim.profile import load_profile  # noqa: E402
from policies import Snapshot, make_policy  # noqa: E402


def main() -> None:
    prof = load_profile("crossover-b")
    core = SimCore(prof, 0)
    samples = []
    for c in (1, 8, 32, 64, 128):
        core.set_load(c)
        for i in range(4000):
            samples.append(core.step(i % 3 == 0))
    print(f"command: python bench/policy_cost.py   ({len(samples)} samples, max batch size 256)")
    print(f"{'policy':<12} {'us/sample':>10} {'us/decision':>12}")
    for name in ("fixed", "sglang-ema", "ucb", "thompson", "model"):
        pol = make_policy(name, seed=0)
        t0 = time.perf_counter()
        for s in samples:
            pol.observe(s)
        per_sample = (time.perf_counter() - t0) / len(samples) * 1e6
        now = samples[-1].t
        n = 2000
        t0 = time.perf_counter()
        for i in range(n):
            pol.decide(Snapshot(now + i * 0.5, 8, 256))
        per_decision = (time.perf_counter() - t0) / n * 1e6
        print(f"{name:<12} {per_sample:>10.2f} {per_decision:>12.1f}")


if __name__ == "__main__":
    main()
