"""Extend batches back to back: the no-spec engine's timeline next to the simulator replaying its runs.

    python bench/prefill_chains.py [--timeline bench/results/h200-2026-12-01c/call1-timeline-nospec-batches.jsonl.xz]
        [--results bench/results/h200-2026-12-01c/call1-results.jsonl] [--profile PROFILE.toml]
Per open-loop run of the timeline (its batch rows cut where the GPU idled > 1 s; the runs in the order of the
results file's nospec rows): extend batches, requests per extend, extends per gap between two decodes and the
share of extends that ran right after another one; then the same for the simulator replaying the run's
requests (controller.sim.finite, threshold 0) with the profile's chained_extends off and on.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

from controller.sim.finite import bench_serving_requests  # noqa: E402
from controller.sim.openloop import OpenLoopCore  # noqa: E402
from controller.sim.profile import load_profile  # noqa: E402
from timeline_summary import read, runs_of  # noqa: E402

DIR = "bench/results/h200-2026-12-01c"


def chain_figures(kinds: list[str], requests: list[int]) -> dict:
    """kinds: 'extend' / 'decode' in time order; requests: per extend batch."""
    gaps, run = [], 0
    for k in kinds + ["decode"]:
        if k == "extend":
            run += 1
        elif run:
            gaps.append(run)
            run = 0
    n = sum(gaps)
    return {"extends": n, "requests_per_extend": round(sum(requests) / n, 3) if n else None,
            "extends_per_gap": round(n / len(gaps), 2) if gaps else None,
            "back_to_back": round(sum(g - 1 for g in gaps) / n, 2) if n else None}


def simulated(profile, rate: float, n: int, seed: int) -> dict:
    reqs, _ = bench_serving_requests(rate, n, seed, profile.prompt_len_range, profile.output_len_range)
    core = OpenLoopCore(profile, seed, requests=reqs, threshold=0)
    kinds, sizes, seen = [], [], 0
    original = core._prefill

    def prefill(taken, tokens):
        sizes.append(len(taken))
        original(taken, tokens)
    core._prefill = prefill
    kinds += ["extend"] * core.extend_batches
    sizes += [1] * core.extend_batches               # the first admission ran before the hook
    seen = core.extend_batches
    while not core.drained:
        core.step(False)
        kinds += ["decode"] + ["extend"] * (core.extend_batches - seen)
        seen = core.extend_batches
    return chain_figures(kinds, sizes)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeline", default=f"{DIR}/call1-timeline-nospec-batches.jsonl.xz")
    ap.add_argument("--results", default=f"{DIR}/call1-results.jsonl")
    ap.add_argument("--profile", default=f"{DIR}/h200-7b-open-tl2.toml")
    args = ap.parse_args()
    rows = [json.loads(x) for x in open(args.results) if x.startswith("{")]
    rows = [r for r in rows if r.get("label") == "nospec" and r.get("shape") == "open"]
    runs = [r for r in runs_of(read(args.timeline)) if sum(b[1] == "extend" for b in r) >= 100]
    prof = load_profile(args.profile)
    for row, run in zip(rows, runs):
        rate, rep = float(row["level"]), int(row["repeat"])
        measured = chain_figures([b[1] for b in run], [b[2] for b in run if b[1] == "extend"])
        n = int(row.get("completed") or 0)
        out = {"rate": rate, "repeat": rep, "measured": measured}
        for chained in (False, True):
            p = dataclasses.replace(prof, chained_extends=chained)
            out["sim chained" if chained else "sim one per interval"] = simulated(p, rate, n, 100 * rep + int(rate))
        print(json.dumps(out))


if __name__ == "__main__":
    main()
