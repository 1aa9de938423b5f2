"""Re-convergence after each load shift of a trace, per pass and seed (issue 13 item 4: <= 20 s).

    python bench/reconverge.py --trace mixed-shift --passes 3 --policies bandit,model --seeds 0-4
    python bench/reconverge.py --passes 1 --seeds 0-19            (every shipped trace, one pass)

A trace is replayed `passes` times back to back (the daemon loops its trace: later passes find stale
estimates); for every pass the slowest segment's re-convergence (engine seconds, `evaluate`'s
reconverge_s; "never": not within the segment) is printed, as a markdown table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.sim.evaluate import evaluate  # noqa: E402
from controller.sim.profile import load_profile, load_trace  # noqa: E402

TRACES = ("load-steps", "coding-to-chat", "mixed-shift")


def seeds_of(text: str) -> list[int]:
    """'0-4' or '0,3,7'."""
    if "-" in text:
        lo, hi = (int(x) for x in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(x) for x in text.split(",")]


def slowest_per_pass(trace: str, policy: str, seed: int, passes: int) -> list[float | None]:
    tr = load_trace(trace)
    rows = evaluate(load_profile(tr.profile), list(tr.segments) * passes, policy, seed=seed)["rows"]
    n = len(tr.segments)
    out = []
    for p in range(passes):
        rc = [r["reconverge_s"] for r in rows[p * n:(p + 1) * n]]
        out.append(None if None in rc else max(rc))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", choices=TRACES, action="append", help="default: every shipped trace")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--policies", default="bandit")
    ap.add_argument("--seeds", default="0-4")
    args = ap.parse_args(argv)
    if args.passes < 1:
        ap.error("--passes must be >= 1")
    fmt = lambda s: "never" if s is None else f"{s:.1f}"
    print(f"Command: `python bench/reconverge.py {' '.join(sys.argv[1:] if argv is None else argv)}`\n")
    print("| trace | policy | seed | " + " | ".join(f"pass {p + 1} (s)" for p in range(args.passes)) + " |")
    print("|---|---|---|" + "---|" * args.passes)
    for trace in args.trace or TRACES:
        for policy in args.policies.split(","):
            for seed in seeds_of(args.seeds):
                cells = slowest_per_pass(trace, policy, seed, args.passes)
                print(f"| {trace} | {policy} | {seed} | " + " | ".join(map(fmt, cells)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
