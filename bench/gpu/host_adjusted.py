"""Each label against the no-spec engine at equal host speed: a fit over many runs instead of one ratio per pair.

    python3 bench/gpu/host_adjusted.py TIMELINE.jsonl[.xz] [MORE ...]      (run_pair's timeline.jsonl, any calls)

Why: on the lent H200 a run's tok/s moves with how fast the host's CPU ran that run's prefills (they launch slower
than the GPU runs them): the target-runner CPU of an extend took 8-16 ms for the same work in either engine, one
10-20 s window at a time (bench/results/h200-2026-12-04g §3), so a pair's ratio carries +-5-15 % of host noise. That
CPU is the same code in both engines (the target model's forward), so it measures the host, not the engine. Per
shape and level, over every run of a label and of the no-spec engine in the files given:

    log(tok/s) = call + effect * [run is the label's] + elasticity * log(extend runner CPU ms)

(least squares; `call` a level per file, so calls on different hosts are not compared directly). Where the files
hold calls that started the engines both ways round (run_pair's B_FIRST=1 marks its rows b_first), a term
`+ slot x [run's engine started second]` joins the model: 12-04i found the engine started second ~1.15x slower in every
CPU op whichever code it runs, so the label's effect is then the engine's alone, and the last column says what the
start order itself cost (from one order it is the label's own column, and the pairs read both together). Where the
files hold an A/A (TWIN=1 calls: label twin, an engine without speculation where the daemon's stands), a second
table gives each label over it: the engine's cost over an engine without speculation in the same place, both fits. exp(effect) is
the label's tok/s over no-spec's at equal host speed, with a 95 % interval (Student t; from 3 calls on, clustered by
call). Caveats (12-04g's review): the extends' runner CPU is not quite the same code in both engines (the speculative
engine's prefill forward captures hidden states), which the next column shows; another CPU taken as the host's (the
decodes' runner CPU) moved closed 128 from 0.965 to 0.942; read the effect as a size, not a verdict to 0.01. The same fit without the
covariate is printed beside it: what the pairs alone support; and the label's own prefill CPU over the base's (the
same fit for log CPU): where that is not ~1, part of the covariate is the engine's and the adjusted ratio is
optimistic by about elasticity x its log. Runs without extends (steady decode) have no covariate: only the
unadjusted fit there.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timeline_summary import rows_of  # noqa: E402
from traffic_table import nospec_label  # noqa: E402

MIN_FREE = 2        # residual degrees of freedom a fit needs before it says anything
AA_LABEL = "twin"   # run_pair's TWIN=1: a second engine without speculation in the daemon's place (the A/A)
# Student t's 97.5 % point for 1-30 degrees of freedom (run_pair prints this table on the GPU host, whose image may
# lack scipy; tests/test_host_adjusted.py checks it against scipy)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(free: int) -> float:
    """Student t's 97.5 % point (scipy's where it is installed)."""
    try:
        from scipy import stats
    except ImportError:
        return T975[free - 1] if free <= len(T975) else 1.96 + 2.4 / free
    return float(stats.t.ppf(0.975, free))


HOSTS = ("prefill", "decode")      # whose target-runner CPU stands for the host's speed (--host)
METRICS = ("tok_s", "tpot_ms")     # what is fitted (--metric; TPOT: the open loop's median, bench_serving's)


def runs_of(paths: list[str]) -> list[dict]:
    """One dict per TIMELINE row: call (its file), label, shape, level, each of METRICS (None where the row has none),
    and per batch kind in HOSTS its mean target-runner CPU (ms; None without such batches)."""
    out = []
    for path in paths:
        for t in rows_of(path):
            kinds = {host: t.get("kinds", {}).get(kind) or {} for host, kind in zip(HOSTS, ("extend", "decode"))}
            # (rows before 12-04c carry no shape: an open-loop run is the one with a TPOT)
            shape = t.get("shape") or ("open" if t.get("tpot_ms") is not None else "closed")
            # the engine started second (12-04i: its every CPU op ~1.15x slower, speculation or not): the one beside
            # no-spec, unless the call started that one first (run_pair's B_FIRST=1, the row's b_first)
            second = t["label"].startswith("nospec") == bool(t.get("b_first"))
            out.append({"call": path, "label": t["label"], "shape": shape, "level": float(t["level"]),
                        "second": second, **{m: t.get(m) for m in METRICS},
                        "cpu_ms": {h: k.get("runner_cpu_ms") if k.get("n", 0) > 0 else None for h, k in kinds.items()}})
    return out


def fit(runs: list[dict], label: str, covariate: str | None, base: str | None = None,
        metric: str = "tok_s") -> dict | None:
    """The model above for `label` against `base` (default: its no-spec engine, traffic_table.nospec_label) over
    `runs` (one shape and level), with the target-runner CPU of the batch kind `covariate` names (HOSTS) as the
    host's speed, or none; None when the runs leave fewer than MIN_FREE degrees of freedom."""
    base = base or nospec_label(label)
    rows = [r for r in runs if r["label"] in (label, base) and r[metric] and r[metric] > 0
            and (not covariate or r["cpu_ms"][covariate])]
    calls = sorted({r["call"] for r in rows if r["label"] == label} & {r["call"] for r in rows if r["label"] == base})
    rows = [r for r in rows if r["call"] in calls]
    columns = [[1.0 if r["call"] == c else 0.0 for r in rows] for c in calls]
    columns.append([1.0 if r["label"] == label else 0.0 for r in rows])
    # the start order's own term where the calls started the engines both ways round (else it is the label's column
    # within every call): the label's effect is then the engine's alone, with or without the host's CPU
    second = [1.0 if r["second"] else 0.0 for r in rows]
    both_orders = not _collinear(columns, second)
    if both_orders:
        columns.append(second)
    if covariate:
        columns.append([math.log(r["cpu_ms"][covariate]) for r in rows])
    x, y = np.array(columns, dtype=float).T.reshape(len(rows), len(columns)), np.log([r[metric] for r in rows])
    if not calls or len(rows) - len(columns) < MIN_FREE or np.linalg.matrix_rank(x) < len(columns):
        return None
    i, groups = len(calls), [r["call"] for r in rows]      # the label's column; the runs' calls
    out = {**_effect(x, y, i, groups), "runs": sum(r["label"] == label for r in rows),
           "base_runs": sum(r["label"] == base for r in rows), "calls": len(calls), "second_start": None}
    if both_orders:
        slot = _effect(x, y, i + 1, groups)
        out["second_start"], out["second_low"], out["second_high"] = slot["ratio"], slot["low"], slot["high"]
    if covariate:
        beta, cov, _ = _ols(x, y, groups)
        k = len(columns) - 1                                # the covariate's column
        out["elasticity"], out["elasticity_se"] = beta[k], math.sqrt(cov[k, k])
        # the label's own CPU there over the base's, same calls: near 1 if the covariate is the host's alone; where
        # not, that share of the effect is the engine's and the adjusted ratio is optimistic by elasticity x its log
        cpu = _effect(x[:, :-1], x[:, -1], i, groups)
        out["cpu_ratio"], out["cpu_low"], out["cpu_high"] = cpu["ratio"], cpu["low"], cpu["high"]
    return out


def _collinear(columns: list[list[float]], extra: list[float]) -> bool:
    """Does `extra` add nothing to the span of `columns` (so that a fit with it would be singular)?"""
    x = np.array(columns, dtype=float).T
    return np.linalg.matrix_rank(np.column_stack([x, extra])) <= np.linalg.matrix_rank(x)


MIN_CLUSTERS = 3    # calls from which the covariance is clustered by call


def _ols(x: np.ndarray, y: np.ndarray, groups: list | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Least squares: coefficients, their covariance and its degrees of freedom. With MIN_CLUSTERS calls or more in
    `groups`, the covariance is clustered by call (CR1; runs of one call share its host and are not independent,
    12-04g's review found the plain one ~1.7x too narrow) on G - 1 degrees of freedom; else the classical one."""
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    n, k = x.shape
    resid = y - x @ beta
    bread = np.linalg.inv(x.T @ x)
    names = sorted(set(groups or ()))
    if len(names) < MIN_CLUSTERS:
        return beta, (resid @ resid / (n - k)) * bread, n - k
    meat = np.zeros((k, k))
    for g in names:
        rows = [j for j, name in enumerate(groups) if name == g]
        s = x[rows].T @ resid[rows]
        meat += np.outer(s, s)
    scale = len(names) / (len(names) - 1) * (n - 1) / (n - k)
    return beta, scale * bread @ meat @ bread, len(names) - 1


def _effect(x: np.ndarray, y: np.ndarray, i: int, groups: list | None = None) -> dict:
    """exp of column i's coefficient with its 95 % interval (Student t; clustered by call where _ols does), and
    the log's standard error with its degrees of freedom (over_aa combines two)."""
    beta, cov, free = _ols(x, y, groups)
    se = math.sqrt(max(cov[i, i], 0.0))
    half = t975(free) * se
    return {"ratio": math.exp(beta[i]), "low": math.exp(beta[i] - half), "high": math.exp(beta[i] + half),
            "se": se, "free": free}


def over_aa(label_fit: dict | None, aa_fit: dict | None) -> dict | None:
    """The label's effect over the A/A's (both against no-spec, from separate calls): what the engine costs over an
    engine without speculation in the same place (started second, on the daemon's port). Independent calls: the
    logs' variances add; Student t on the smaller of the two degrees of freedom."""
    if label_fit is None or aa_fit is None:
        return None
    log = math.log(label_fit["ratio"]) - math.log(aa_fit["ratio"])
    half = t975(min(label_fit["free"], aa_fit["free"])) * math.hypot(label_fit["se"], aa_fit["se"])
    return {"ratio": math.exp(log), "low": math.exp(log - half), "high": math.exp(log + half)}


def table(runs: list[dict], base: str | None = None, host: str = "prefill", metric: str = "tok_s") -> list[str]:
    """Markdown rows per (shape, level, label other than the base: a no-spec one unless `base` names a label):
    adjusted (the `host` batches' runner CPU as the host's speed) and unadjusted fits of `metric`."""
    name = base or "nospec"
    lines = [f"| shape | level | label / {name} | runs (label / {name}, calls) | {metric} at equal host speed [95 %, by call "
             f"from 3 calls] | {metric} vs the {host}s' runner CPU (elasticity) | its {host} CPU / the base's [95 %] "
             "| without the covariate [95 %] | the engine started second, without the covariate [95 %] |",
             "|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["shape"], r["level"], r["label"]) for r in runs
                   if r["label"] != base and not (base is None and r["label"].startswith("nospec"))})
    fits: dict[tuple, tuple[dict, dict | None]] = {}
    for shape, level, label in keys:
        here = [r for r in runs if r["shape"] == shape and r["level"] == level]
        plain, adjusted = fit(here, label, None, base, metric), fit(here, label, host, base, metric)
        if plain is None:
            continue
        fits[(shape, level, label)] = plain, adjusted
        slope = "-" if adjusted is None else f"{adjusted['elasticity']:.2f} +- {adjusted['elasticity_se']:.2f}"
        cpu = "-" if adjusted is None else f"{adjusted['cpu_ratio']:.3f} [{adjusted['cpu_low']:.3f}-{adjusted['cpu_high']:.3f}]"
        slot = "-" if plain["second_start"] is None else \
            f"{plain['second_start']:.3f} [{plain['second_low']:.3f}-{plain['second_high']:.3f}]"
        lines.append(f"| {shape} | {level:g} | {label} | {plain['runs']} / {plain['base_runs']}, {plain['calls']} "
                     f"| {interval(adjusted)} | {slope} | {cpu} | {interval(plain)} | {slot} |")
    return lines + aa_lines(fits, metric) if base is None else lines


def interval(f: dict | None) -> str:
    return "-" if f is None else f"{f['ratio']:.3f} [{f['low']:.3f}-{f['high']:.3f}]"


def aa_lines(fits: dict[tuple, tuple[dict, dict | None]], metric: str) -> list[str]:
    """Where the files hold an A/A (AA_LABEL's runs): each other label over it at the same shape and level, both
    fits (over_aa); none without one."""
    rows = [(key, fits[key], fits[(key[0], key[1], AA_LABEL)]) for key in fits
            if key[2] != AA_LABEL and (key[0], key[1], AA_LABEL) in fits]
    if not rows:
        return []
    lines = ["", f"| shape | level | label / {AA_LABEL} (the A/A's engine without speculation in its place) | {metric} "
             "at equal host speed [95 %] | without the covariate [95 %] |", "|---|---|---|---|---|"]
    for (shape, level, label), (plain, adjusted), (aa_plain, aa_adjusted) in rows:
        lines.append(f"| {shape} | {level:g} | {label} | {interval(over_aa(adjusted, aa_adjusted))} "
                     f"| {interval(over_aa(plain, aa_plain))} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timelines", nargs="+", help="run_pair's timeline.jsonl files (.xz too), one per call")
    ap.add_argument("--base", help="compare against this label instead of the no-spec engine (e.g. fast: what the "
                    "draft-KV writes cost); the no-spec runs then count as a label too")
    ap.add_argument("--host", choices=HOSTS, default="prefill", help="whose target-runner CPU stands for the host's "
                    "speed: the prefills' (default) or the decodes' (12-04g's review: the two bracket the estimate)")
    ap.add_argument("--metric", choices=METRICS, default="tok_s", help="what to fit: throughput (default) or the open "
                    "loop's median TPOT (a ratio above 1 is slower)")
    args = ap.parse_args()
    missing = [p for p in args.timelines if not Path(p).is_file()]
    if missing:
        sys.exit(f"host_adjusted.py: no such file: {missing[0]}")
    try:
        runs = runs_of(args.timelines)
    except ValueError as e:         # a summary whose TIMELINE lines were cut short
        sys.exit(f"host_adjusted.py: {e}")
    print("\n".join(table(runs, args.base, args.host, args.metric)))


if __name__ == "__main__":
    main()
