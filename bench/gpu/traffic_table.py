"""Issue 12/13 records from loads.py's JSON lines: the off modes against the no-spec engine of the same
call (bench/results/offpath-traffic.json) and the open-loop rows per mode (bench/results/open-loop.json).

    python3 bench/gpu/traffic_table.py RESULTS.jsonl [MORE.jsonl ...] --command "..." [--model "..."]
Each input file is one device call (ratios only pair rows of the same call). Prints the markdown tables.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
MODE_NAMES = {"ema": "sglang-ema"}      # the simulator's name for the daemon's EMA policy
OFF_MODES = ("synced", "lean", "leanalloc", "fast", "off", "side", "inline", "off-nodraftprefill", "never", "pinned", "kveager", "perbatch", "defer", "resolve", "leanall")   # never: pinned at 0; pinned: at PIN_T


def rows_of(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{") and "tok_s" in line]


def grouped(rows: list[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if "shape" in r and r.get("tok_s") is not None:
            out.setdefault((r["shape"], r["level"], r["label"]), []).append(r)
    return out


def in_order(groups: dict[tuple, list[dict]]) -> list[tuple[tuple, list[dict]]]:
    """The (shape, level, label) groups by shape, then level as a number, then label."""
    return sorted(groups.items(), key=lambda kv: (kv[0][0], float(kv[0][1]), str(kv[0][2])))


def med(rs: list[dict], key: str) -> float | None:
    values = [r[key] for r in rs if r.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


PHASE_SUFFIXES = ("-gcf", "-spin")     # run_pair's gcfreeze / spin phases: every label after them ends so


def nospec_label(label: str) -> str:
    """The no-spec engine's label beside `label` (after run_pair's gcfreeze or spin phase both end in its suffix;
    the no-spec engine's own runs after such a phase are set beside its runs before it: what the phase did to it)."""
    if label.startswith("nospec"):
        return "nospec"
    return "nospec" + next((s for s in PHASE_SUFFIXES if label.endswith(s)), "")


def beside(groups: dict[tuple, list[dict]], key: tuple, paired: bool = True) -> tuple[list[tuple[dict, dict]], list[dict]]:
    """(pairs, base) for the runs groups[key] = (shape, level, label): each paired with the no-spec run of the same
    shape, level and repeat nearest in time, and the no-spec runs to compare with: those paired (a call runs several
    variants against one no-spec engine, each with its own blocks), or all of them when nothing pairs."""
    shape, level, label = key
    base = groups.get((shape, level, nospec_label(label)), [])
    pairs = paired_runs(groups[key], base) if paired and base else []
    if pairs:
        base = list({id(b): b for _, b in pairs}.values())
    return pairs, base


def offpath_rows(groups: dict[tuple, list[dict]], call: str, paired: bool = False) -> list[dict]:
    out = []
    for (shape, level, label), rs in in_order(groups):
        if label not in OFF_MODES or not groups.get((shape, level, nospec_label(label))):
            continue
        pairs, base = beside(groups, (shape, level, label), paired or any(r.get("engines_resident") for r in rs))
        off, nospec = med(rs, "tok_s"), med(base, "tok_s")
        out.append({"shape": shape, "level": level, "mode": label, "off_tok_s": off, "nospec_tok_s": nospec,
                    "ratio": round(off / nospec, 3), "repeats": len(rs), "nospec_repeats": len(base),
                    "off_spread": [min(r["tok_s"] for r in rs), max(r["tok_s"] for r in rs)],
                    "nospec_spread": [min(r["tok_s"] for r in base), max(r["tok_s"] for r in base)], "call": call})
        keys = ["tok_s"]
        if shape == "open":      # bench_serving's latencies too: an off engine must not cost TPOT either
            out[-1].update(off_tpot_ms=med(rs, "tpot_ms"), nospec_tpot_ms=med(base, "tpot_ms"),
                           off_e2e_ms=med(rs, "e2e_ms"), nospec_e2e_ms=med(base, "e2e_ms"))
            keys += ["tpot_ms", "e2e_ms"]
        if pairs:
            out[-1].update(paired_ratios(pairs, keys))
        unsteady = [r["repeat"] for r in rs if not_steady(r)] + [f"nospec {b['repeat']}" for b in base if not_steady(b)]
        if unsteady:
            out[-1]["not_steady"] = unsteady
    return out


STEADY_SPREAD = 0.05     # a steady run whose requests ended further apart than this share of its wall


def not_steady(row: dict) -> bool:
    """A steady-decode run whose C requests did not decode together (loads.steady's end_spread_ms)."""
    return (row.get("shape") == "steady" and bool(row.get("wall_ms"))
            and (row.get("end_spread_ms") or 0.0) > STEADY_SPREAD * row["wall_ms"])


def paired_runs(rs: list[dict], base: list[dict]) -> list[tuple[dict, dict]]:
    """Runs of both engines with the same repeat (the same seed: the same requests and arrival times),
    made alternately while both engines were resident (loads.py --engines). A call that ran a phase twice
    (or several variants against the one no-spec engine) has a no-spec run per repeat in each block: a run
    pairs with the nearest in time."""
    def start(r: dict) -> float:
        return r.get("t_start") or 0.0
    return [(r, min(same, key=lambda b: abs(start(b) - start(r)))) for r in rs
            if (same := [b for b in base if b["repeat"] == r["repeat"]])]


def median_interval(values: list[float], confidence: float = 0.9) -> tuple[float, float, float, float]:
    """(median, low, high, coverage) of per-pair ratios: the narrowest interval between order statistics
    [x(k), x(n+1-k)] that holds the true median with probability >= confidence whatever the ratios' distribution
    (binomial, no resampling: a slow-host run moves it by one rank, not by its size); with too few values for that,
    the whole range and the coverage it has (2 pairs: 50 %, 4: 87.5 %, 5: 93.8 %)."""
    if not values:
        raise ValueError("no values")
    x, n = sorted(values), len(values)
    def coverage(k: int) -> float:          # P(x(k) <= median < x(n+1-k)) for n independent draws
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return statistics.median(x), x[k - 1], x[n - k], coverage(k)


def paired_ratios(pairs: list[tuple[dict, dict]], keys: list[str]) -> dict:
    """off / no-spec per pair."""
    out = {"paired": len(pairs)}
    for key in keys:
        ratios = [round(a[key] / b[key], 3) for a, b in pairs if a.get(key) and b.get(key)]
        out[f"pair_ratios_{key}"] = ratios
    return out


def open_rows(groups: dict[tuple, list[dict]], call: str) -> list[dict]:
    return [{"where": "h200", "rate": level, "mode": MODE_NAMES.get(label, label), "tok_s": med(rs, "tok_s"), "tpot_ms": med(rs, "tpot_ms"),
             "e2e_ms": med(rs, "e2e_ms"), "repeats": len(rs), "call": call}
            for (shape, level, label), rs in sorted(groups.items()) if shape == "open"]


def plot(rows: list[dict], path: str) -> None:
    """Output tok/s and median TPOT against the rate, per mode, for calls that ran more than one rate."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    calls = [c for c in dict.fromkeys(r["call"] for r in rows) if len({r["rate"] for r in rows if r["call"] == c}) > 1]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=80)
    for call in calls:
        for mode in dict.fromkeys(r["mode"] for r in rows if r["call"] == call):
            pts = sorted((r["rate"], r["tok_s"], r["tpot_ms"]) for r in rows if r["call"] == call and r["mode"] == mode)
            kw = dict(marker="o", ms=4, lw=2.2 if mode == "bandit" else 1.1, ls="--" if mode == "nospec" else "-",
                      label=mode if len(calls) == 1 else f"{mode} ({call})")
            a.plot([p[0] for p in pts], [p[1] for p in pts], **kw)
            b.plot([p[0] for p in pts], [p[2] for p in pts], **kw)
    a.set_ylabel("output tok/s"); b.set_ylabel("median TPOT, ms")
    for ax in (a, b):
        ax.set_xlabel("arrival rate, requests/s (Poisson)"); ax.grid(alpha=0.3)
    b.legend(fontsize=7)
    fig.suptitle("H200, sglang.bench_serving --request-rate R", fontsize=9)
    fig.tight_layout(); fig.savefig(path); plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--command", required=True)
    ap.add_argument("--paired", default="", help="FILE,FILE: calls measured with both engines resident "
                    "(loads.py --engines; rows of newer calls say so themselves)")
    ap.add_argument("--offpath-only", action="store_true", help="write offpath-traffic.json only (open-loop.json kept)")
    ap.add_argument("--plot", metavar="FILE.png", help="also draw the open-loop rows (tok/s, TPOT vs rate)")
    ap.add_argument("--model", default="synthetic 7.2B Llama (hidden 4096, 32 layers, crafted clear-margin weights) "
                                        "+ EAGLE3 head, K=3, one H200")
    ap.add_argument("--field", action="append", default=[], metavar="FILE=KEY:VALUE",
                    help="recorded in every row of that call, e.g. off_path:kv or prefill_graph:breakable")
    args = ap.parse_args()
    fields: dict[str, dict[str, str]] = {}
    for item in args.field:
        name, _, kv = item.rpartition("=")
        key, _, value = kv.partition(":")
        fields.setdefault(name, {})[key] = value
    off, opened = [], []
    for f in args.files:
        g = grouped(rows_of(f))
        path = Path(f).resolve()
        call = str(path.relative_to(RESULTS)) if path.is_relative_to(RESULTS) else f"{path.parent.name}/{path.name}"
        rows = offpath_rows(g, call, f in args.paired.split(","))
        # a row labelled "fast" is the fast off path whatever the call's daemon default (run_pair.sh closedfast)
        rows = [{**r, **fields.get(f, {}), **({"off_path": "fast"} if r["mode"] == "fast" else {})} for r in rows]
        off += rows
        opened += open_rows(g, call)
    (RESULTS / "offpath-traffic.json").write_text(json.dumps(
        {"rows": off, "sglang": "0.5.17", "model": args.model, "command": args.command}, indent=1) + "\n")
    if args.offpath_only:
        opened = []
    existing = RESULTS / "open-loop.json"
    keep = [r for r in json.loads(existing.read_text())["rows"] if r.get("where") != "h200"] if existing.exists() else []
    if not args.offpath_only:
        existing.write_text(json.dumps({"rows": keep + opened, "command": args.command}, indent=1) + "\n")
    if args.plot:
        plot(opened, args.plot)
    print("| shape | level | off mode | off tok/s (spread) | no-spec tok/s (spread) | ratio | repeats | call |")
    print("|---|---|---|---|---|---|---|---|")
    for r in off:
        print(f"| {r['shape']} | {r['level']} | {r['mode']} | {r['off_tok_s']:,.0f} ({r['off_spread'][0]:,.0f}-"
              f"{r['off_spread'][1]:,.0f}) | {r['nospec_tok_s']:,.0f} ({r['nospec_spread'][0]:,.0f}-"
              f"{r['nospec_spread'][1]:,.0f}) | {r['ratio']:.3f} | {r['repeats']} | {r['call']} |"
              + (f" TPOT {r['off_tpot_ms']} vs {r['nospec_tpot_ms']} ms" if "off_tpot_ms" in r else "")
              + (f" pairs {r['pair_ratios_tok_s']}" if "paired" in r else "")
              + (f" TPOT pairs {r['pair_ratios_tpot_ms']}" if r.get("pair_ratios_tpot_ms") else ""))
    print("\n| rate req/s | mode | output tok/s | median TPOT ms | median E2E ms | repeats |\n|---|---|---|---|---|---|")
    for r in opened:
        print(f"| {r['rate']:g} | {r['mode']} | {r['tok_s']:,.0f} | {r['tpot_ms']} | {r['e2e_ms']:,.0f} | {r['repeats']} |")


if __name__ == "__main__":
    main()
