"""The plugin's per-batch CPU cost, with and without telemetry (a benchmark, not a test).

    python bench/plugin_cost.py [--batches 200000]
Runs the real hooks of a controller.plugin Plugin against stand-in worker/result objects
and a real zmq PULL socket; prints µs per decode batch.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zmq  # noqa: E402

from controller.contract import ENV_ADDRESS  # noqa: E402
from controller.plugin import telemetry  # noqa: E402
from controller.plugin.instance import Plugin  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=200_000)
    args = ap.parse_args()
    d = tempfile.mkdtemp(dir="/tmp")
    addr = f"ipc://{d}/t.ipc"
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(addr)
    plugin = Plugin({ENV_ADDRESS: addr})
    router, tel = plugin.router, plugin.telemetry
    router.checked, router.k, router.threshold = True, 3, 16
    worker = SimpleNamespace(speculative_num_steps=3)
    worker.adaptive_controller = SimpleNamespace(_activate=lambda s: setattr(worker, "speculative_num_steps", s))
    batch = SimpleNamespace(reqs=[None] * 32)
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=40)
    noop = lambda *a, **k: None
    n = args.batches
    t0 = time.perf_counter()
    for i in range(n):
        router.activate_step_by_batch(noop, worker, 8 if i % 64 else 32)
    decide_us = (time.perf_counter() - t0) / n * 1e6
    received, drain_s = 0, 0.0
    t0 = time.perf_counter()
    for i in range(n):
        router.activate_step_by_batch(noop, worker, 8 if i % 64 else 32)
        tel.after_spec_result(None, None, result, batch)
        if i % 1000 == 0:                      # drain like the daemon would (its own process: not counted)
            d0 = time.perf_counter()
            while pull.poll(0):
                pull.recv()
                received += 1
            drain_s += time.perf_counter() - d0
    both_us = (time.perf_counter() - t0 - drain_s) / n * 1e6
    print(f"command: python bench/plugin_cost.py --batches {n}")
    print("| path | µs per decode batch |\n|---|---|")
    print(f"| routing decision only | {decide_us:.2f} |")
    print(f"| routing + telemetry (encode; one zmq NOBLOCK send per {telemetry.BATCH} batches) | {both_us:.2f} |")
    print(f"\nsent {tel.sent}, dropped {tel.dropped} (HWM 10000; drained every 1000 batches)")


if __name__ == "__main__":
    main()
