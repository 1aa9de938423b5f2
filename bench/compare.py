"""All policies x all shipped profiles and traces, against the oracle.

    python bench/compare.py [--seconds 60] [--seed 0] [--seeds 0,1,2,3,4] [--out bench/results]

Writes compare.md (tables + the command), compare.json and one PNG per profile.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.sim.evaluate import evaluate, sweep_segments  # noqa: E402
from controller.sim.profile import load_profile, load_trace  # noqa: E402

POLICIES = [("always", {}), ("never", {}), ("fixed", {"threshold": 5}), ("sglang-ema", {}), ("ucb", {}),
            ("thompson", {}), ("model", {})]
PROFILES = ["seed", "crossover-a", "crossover-b", "h200-2b6"]
TRACES = ["load-steps", "coding-to-chat", "mixed-shift"]


def label(name: str, params: dict) -> str:
    return name + ("(" + ",".join(f"{k}={v}" for k, v in params.items()) + ")" if params else "")


def one(job):
    kind, target, name, params, seconds, seed = job
    if kind == "profile":
        prof = load_profile(target)
        return job, evaluate(prof, sweep_segments(prof.concurrency, seconds), name, params, seed=seed)
    trace = load_trace(target)
    prof = load_profile(trace.profile)
    return job, evaluate(prof, trace.segments, name, params, seed=seed, with_static=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2,3,4", help="seeds for the bandit robustness table")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [("profile", p, n, prm, args.seconds, args.seed) for p in PROFILES for n, prm in POLICIES]
    jobs += [("trace", t, n, prm, args.seconds, args.seed) for t in TRACES for n, prm in POLICIES]
    t0 = time.time()
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(one, jobs))
    cmd = "python bench/compare.py " + " ".join(sys.argv[1:])
    lines = ["# Policy comparison against the oracle", "",
             f"Command: `{cmd.strip()}` (virtual time, seed {args.seed}, {args.seconds:g} s per level; "
             f"{time.time() - t0:.0f} s wall on 2 CPU cores).", "",
             "Ratio = policy throughput / oracle throughput (oracle: per batch size the better mode).", ""]
    for p in PROFILES:
        rows = [(j, r) for j, r in results if j[0] == "profile" and j[1] == p]
        levels = [row["concurrency"] for row in rows[0][1]["rows"]]
        lines += [f"## Profile `{p}`", "", "| policy | " + " | ".join(f"C={c}" for c in levels) + " | overall | lowest |",
                  "|---|" + "---|" * (len(levels) + 2)]
        for j, r in rows:
            lines.append(f"| {label(j[2], j[3])} | " + " | ".join(f"{row['ratio']:.3f}" for row in r["rows"])
                         + f" | {r['overall']['ratio']:.3f} | {r['overall']['min_ratio']:.3f} |")
        lines.append("")
        plot_profile(p, rows, out / f"compare-{p}.png")
    for t in TRACES:
        rows = [(j, r) for j, r in results if j[0] == "trace" and j[1] == t]
        segs = [row["segment"] for row in rows[0][1]["rows"]]
        static = rows[0][1]["best_static"]
        lines += [f"## Trace `{t}` (profile `{rows[0][1]['profile']}`)", "",
                  f"Best static threshold in hindsight: {static['threshold']} (ratio {static['ratio']:.3f}).", "",
                  "| policy | " + " | ".join(segs) + " | overall | re-converge s (per segment) |",
                  "|---|" + "---|" * (len(segs) + 2)]
        for j, r in rows:
            rc = ", ".join("never" if row["reconverge_s"] is None else f"{row['reconverge_s']:.1f}" for row in r["rows"])
            lines.append(f"| {label(j[2], j[3])} | " + " | ".join(f"{row['ratio']:.3f}" for row in r["rows"])
                         + f" | {r['overall']['ratio']:.3f} | {rc} |")
        lines.append("")
    lines += seed_robustness(args)
    (out / "compare.md").write_text("\n".join(lines))
    (out / "compare.json").write_text(json.dumps([{"kind": j[0], "target": j[1], "policy": label(j[2], j[3]),
                                                   "result": r} for j, r in results], indent=1))
    print("\n".join(lines))


def seed_robustness(args) -> list[str]:
    """bandit across seeds: the lowest level ratio per profile, the whole-trace ratio per trace."""
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    jobs = [("profile", p, "bandit", {}, args.seconds, s) for s in seeds for p in PROFILES]
    jobs += [("trace", t, "bandit", {}, args.seconds, s) for s in seeds for t in TRACES]
    with ProcessPoolExecutor(args.workers) as pool:
        results = list(pool.map(one, jobs))
    cols = PROFILES + TRACES
    lines = ["## bandit across seeds", "",
             "Profiles: lowest per-level ratio; traces: whole-trace ratio (best static in brackets); "
             "last column: slowest re-convergence on the traces.", "",
             "| seed | " + " | ".join(cols) + " | re-converge max s |", "|---|" + "---|" * (len(cols) + 1)]
    for s in seeds:
        cells, worst = [], 0.0
        for c in cols:
            j, r = next((j, r) for j, r in results if j[1] == c and j[5] == s)
            if j[0] == "profile":
                cells.append(f"{r['overall']['min_ratio']:.3f}")
            else:
                cells.append(f"{r['overall']['ratio']:.3f} ({r['best_static']['ratio']:.3f})")
                worst = max([worst] + [x["reconverge_s"] or 0.0 for x in r["rows"]])
        lines.append(f"| {s} | " + " | ".join(cells) + f" | {worst:.1f} |")
    return lines + [""]


def plot_profile(name: str, rows, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4), dpi=80)
    first = rows[0][1]["rows"]
    ax.plot([r["concurrency"] for r in first], [r["oracle_tok_s"] for r in first], "k--", lw=2, label="oracle")
    for j, r in rows:
        ax.plot([x["concurrency"] for x in r["rows"]], [x["throughput_tok_s"] for x in r["rows"]], marker=".",
                label=label(j[2], j[3]))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s")
    ax.set_title(f"profile {name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    main()
