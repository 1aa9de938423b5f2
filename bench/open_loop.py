"""Open-loop load (Poisson arrivals) in the simulator: never, always, static 5, SGLang's EMA, bandit.

    python bench/open_loop.py [--profiles seed,crossover-a,crossover-b,h200-2b6] [--rates 2,12,24]
                              [--seconds 60] [--seeds 0] [--out bench/results]

Per profile, the rates run in ascending order in one continuous run per mode (as the GPU sweep
runs them in one engine start), --seconds each; each mode sees the same requests (common random
numbers). Writes open-loop.json ({"rows": [{"where": "sim", "profile", "rate", "mode", "tok_s",
"tpot_ms", "e2e_ms", ...}], "command"}; rows with another "where", e.g. the H200's, are kept) and
open-loop.png (throughput and median TPOT against the rate, per mode; H200 rows dashed), and
prints a markdown table with the bandit's ratio to the better of never and always.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.sim.evaluate import StaticRunner, policy_runner, run_segments  # noqa: E402
from controller.sim.openeval import rate_segments, summary  # noqa: E402
from controller.sim.profile import load_profile  # noqa: E402

MODES = ("never", "always", "static5", "sglang-ema", "bandit")
STYLE = {"never": ("C0", "o", 1.2), "always": ("C1", "s", 1.2), "static5": ("C2", "^", 1.0),
         "sglang-ema": ("C3", "x", 1.0), "bandit": ("k", "*", 2.0)}
PROFILES = ("seed", "crossover-a", "crossover-b", "h200-2b6")


def runner(mode: str, profile, seed: int, params: dict):
    if mode in ("never", "always", "static5"):
        t = {"never": 0, "always": profile.max_batch_size, "static5": 5}[mode]
        return lambda core: StaticRunner(t)
    return policy_runner(mode, params if mode == "bandit" else None, profile, seed)


def measure(name: str, rates: list[float] | None, seconds: float, seeds: list[int], params: dict) -> list[dict]:
    """Rows for one profile: every mode at every rate, each metric the mean over the seeds."""
    profile = load_profile(name)
    rates = rates or list(profile.open_loop_rates())
    rows = []
    for mode in MODES:
        per_seed = [[summary(r) for r in run_segments(profile, rate_segments(rates, seconds),
                                                       runner(mode, profile, s, params), s)] for s in seeds]
        for i, rate in enumerate(rates):
            got = [run[i] for run in per_seed]
            mean = lambda key: round(statistics.fmean(g[key] for g in got), 3)   # noqa: E731
            rows.append({"where": "sim", "profile": profile.name, "rate": rate, "mode": mode,
                         "tok_s": mean("tok_s"), "tpot_ms": mean("tpot_ms_median"), "e2e_ms": mean("e2e_ms_median"),
                         "tpot_ms_mean": mean("tpot_ms_mean"), "ttft_ms": mean("ttft_ms_median"),
                         "mean_batch_size": mean("mean_batch_size"), "spec_share": mean("spec_share"),
                         "seeds": len(seeds), "seconds": seconds})
    return rows


def table(rows: list[dict], profile: str) -> list[str]:
    mine = [r for r in rows if r["where"] == "sim" and r["profile"] == profile]
    rates = sorted({r["rate"] for r in mine})
    cell = {(r["rate"], r["mode"]): r for r in mine}
    out = [f"### `{profile}`", "", "| rate (req/s) | " + " | ".join(MODES) + " | bandit / better of never, always |",
           "|---|" + "---|" * (len(MODES) + 1)]
    for rate in rates:
        cells = [f"{cell[rate, m]['tok_s']:,.0f}, {cell[rate, m]['tpot_ms']:.2f} ms, {cell[rate, m]['e2e_ms']:,.0f} ms"
                 for m in MODES]
        fixed = [cell[rate, "never"], cell[rate, "always"]]
        b = cell[rate, "bandit"]
        ratio = (f"tok/s {b['tok_s'] / max(f['tok_s'] for f in fixed):.3f}, "
                 f"TPOT {b['tpot_ms'] / min(f['tpot_ms'] for f in fixed):.3f}")
        out.append(f"| {rate:g} | " + " | ".join(cells) + f" | {ratio} |")
    return out + [""]


def calibration(rows: list[dict], profile: str) -> list[str]:
    """Simulated over measured, per rate and mode, where the H200 rows have the same rate and mode."""
    h200 = {(r["rate"], r["mode"]): r for r in rows if r["where"] == "h200" and r.get("profile", profile) == profile}
    sim = [r for r in rows if r["where"] == "sim" and r["profile"] == profile and (r["rate"], r["mode"]) in h200]
    if not sim:
        return []
    out = [f"Simulator / H200 for `{profile}` (issue 13 asks for 0.90 .. 1.10):", "",
           "| rate | mode | tok/s | median TPOT | median E2E |", "|---|---|---|---|---|"]
    for r in sorted(sim, key=lambda r: (r["rate"], MODES.index(r["mode"]))):
        m = h200[r["rate"], r["mode"]]
        out.append(f"| {r['rate']:g} | {r['mode']} | {r['tok_s'] / m['tok_s']:.3f} | {r['tpot_ms'] / m['tpot_ms']:.3f} | "
                   f"{r['e2e_ms'] / m['e2e_ms']:.3f} |")
    return out + [""]


def plot(rows: list[dict], profiles: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(profiles), 2, figsize=(9, 2.6 * len(profiles)), dpi=70, squeeze=False)
    for (a, b), name in zip(axes, profiles):
        for where, line in (("sim", "-"), ("h200", "-.")):
            for mode in MODES:
                pts = sorted((r["rate"], r["tok_s"], r["tpot_ms"]) for r in rows
                             if r["where"] == where and r.get("profile", name) == name and r["mode"] == mode)
                if pts:
                    color, marker, width = STYLE[mode]
                    kw = dict(color=color, marker=marker, lw=width, ls=line, ms=5, alpha=0.8,
                              label=mode if where == "sim" else f"{mode} (H200)")
                    a.plot([p[0] for p in pts], [p[1] for p in pts], **kw)
                    b.plot([p[0] for p in pts], [p[2] for p in pts], **kw)
        a.set_ylabel(f"{name}\noutput tok/s", fontsize=8)
        b.set_ylabel("median TPOT, ms", fontsize=8)
        for ax in (a, b):
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
    axes[0][1].legend(fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("arrival rate, requests/s", fontsize=8)
    fig.suptitle("open loop (Poisson arrivals), simulator", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", default=",".join(PROFILES), help="names or .toml paths")
    ap.add_argument("--rates", help="requests/s for every profile (default: each profile's arrival_rate)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--param", action="append", default=[], metavar="K=V", help="bandit parameter")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    profiles = [p for p in args.profiles.split(",") if p]
    rates = [float(x) for x in args.rates.split(",")] if args.rates else None
    seeds = [int(s) for s in args.seeds.split(",")]
    params = dict(kv.split("=", 1) for kv in args.param)
    out = Path(args.out)
    if not out.is_dir():                  # before minutes of simulation, not after them
        ap.error(f"--out {out}: not a directory")
    path = out / "open-loop.json"
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    names = [load_profile(p).name for p in profiles]
    rows = [r for r in old if r["where"] != "sim" or r.get("profile") not in names]
    for p in profiles:
        rows += measure(p, rates, args.seconds, seeds, params)
    command = "python bench/open_loop.py " + " ".join(sys.argv[1:])
    path.write_text(json.dumps({"rows": rows, "command": command.strip()}, indent=1))
    shown = sorted({r.get("profile", "") for r in rows if r["where"] == "sim"}, key=lambda n: (n not in names, n))
    plot(rows, shown, out / "open-loop.png")
    print(f"Command: `{command.strip()}`\n")
    print("Each cell: output tok/s, median TPOT, median E2E (simulator, virtual time).\n")
    for name in shown:
        print("\n".join(table(rows, name) + calibration(rows, name)))


if __name__ == "__main__":
    main()
