"""Each label against the no-spec engine at equal host speed: a fit over many runs instead of one ratio per pair.

    python3 bench/gpu/host_adjusted.py TIMELINE.jsonl[.xz] [MORE ...]      (run_pair's timeline.jsonl, any calls)

Why: on the lent H200 a run's tok/s moves with how fast the host's CPU ran that run's prefills (they launch slower
than the GPU runs them): the target-runner CPU of an extend took 8-16 ms for the same work in either engine, one
10-20 s window at a time (bench/results/h200-2026-12-04g §3), so a pair's ratio carries +-5-15 % of host noise. That
CPU is the same code in both engines (the target model's forward), so it measures the host, not the engine. Per
shape and level, over every run of a label and of the no-spec engine in the files given:

    log(tok/s) = call + effect * [run is the label's] + elasticity * log(extend runner CPU ms)

(least squares; `call` a level per file, so calls on different hosts are not compared directly). exp(effect) is
the label's tok/s over no-spec's at equal host speed, with a 95 % interval (Student t). From MIN_CLUSTERS calls on,
effect and interval come from a second stage over the calls themselves (call_gaps: each call's label-over-base gap at
the pooled elasticity, one row a call, classical on G - p degrees of freedom): a call is one draw of its host, and
12-04i's review found the run-level fit clustered by call ~2x too narrow where one call stood alone for a start
order; below that the runs of a call count as independent, which they are not quite.

Start order: where the files hold calls that started the engines both ways round (run_pair's B_FIRST=1 marks its rows
b_first), a term `+ slot x [run's engine started second]` joins the model (12-04i: the engine started second ran every
CPU op ~1.15x slower whichever code it ran), so the label's effect is the engine's alone; the last column says what
starting second cost. From one order it is the label's own column, and the pairs read both together. Where the files
hold an A/A (TWIN=1 calls: label twin, an engine without speculation where the daemon's stands), a second table gives
each label over it (over_aa), with and without the covariate.

Caveats (12-04g's review): the extends' runner CPU is not quite the same code in both engines (the speculative
engine's prefill forward captures hidden states), which the next column shows; another CPU taken as the host's (the
decodes' runner CPU) moved closed 128 from 0.965 to 0.942; read the effect as a size, not a verdict to 0.01. The same
fit without the covariate is printed beside it: what the pairs alone support; and the label's own prefill CPU over
the base's (the same fit for log CPU): where that is not ~1, part of the covariate is the engine's and the adjusted
ratio is optimistic by about elasticity x its log. Runs without extends (steady decode) have no covariate: only the
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
                        "second": second, "pool_tokens": t.get("pool_tokens"), **{m: t.get(m) for m in METRICS},
                        "cpu_ms": {h: k.get("runner_cpu_ms") if k.get("n", 0) > 0 else None for h, k in kinds.items()}})
    return out


def fit(runs: list[dict], label: str, covariate: str | None, base: str | None = None,
        metric: str = "tok_s") -> dict | None:
    """The model above for `label` against `base` (default: its no-spec engine, traffic_table.nospec_label) over
    `runs` (one shape and level), with the target-runner CPU of the batch kind `covariate` names (HOSTS) as the
    host's speed, or none; None when the runs leave fewer than MIN_FREE degrees of freedom."""
    base = base or nospec_label(label)
    rows, calls = paired_rows(runs, label, base, metric, covariate)
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
    out = {"runs": sum(r["label"] == label for r in rows), "base_runs": sum(r["label"] == base for r in rows),
           "calls": len(calls), "second_start": None}
    elasticity = 0.0
    if covariate:
        beta, cov, _ = _ols(x, y, groups)
        k = len(columns) - 1                                # the covariate's column
        elasticity = beta[k]
        out["elasticity"], out["elasticity_se"] = beta[k], math.sqrt(max(cov[k, k], 0.0))  # (exact fit: rounding)
    by_call = len(calls) >= MIN_CLUSTERS
    shifts = [0.0, 0.0]     # each stage-two column's move per unit of elasticity error (by_call with a covariate)
    if by_call:     # the effect (and the start order) from the calls' own gaps: see call_gaps
        gx, gy = _gap_design({label: call_gaps(rows, label, base, metric, covariate, elasticity)}, both_orders)
        if covariate:
            shifts = list(_ols(*_gap_design({label: call_gaps(rows, label, base, None, covariate, -1.0)},
                                            both_orders))[0])
        out.update(_widened(_effect(gx, gy, 0), shifts[0], out.get("elasticity_se", 0.0)))
    else:
        out.update(_effect(x, y, i, groups))
    if both_orders:
        slot = _widened(_effect(gx, gy, 1), shifts[1], out.get("elasticity_se", 0.0)) if by_call \
            else _effect(x, y, i + 1, groups)
        out["second_start"], out["second_low"], out["second_high"] = slot["ratio"], slot["low"], slot["high"]
    if covariate:
        # the label's own CPU there over the base's, same calls: near 1 if the covariate is the host's alone; where
        # not, that share of the effect is the engine's and the adjusted ratio is optimistic by elasticity x its log
        cpu = _effect(*_gap_design({label: call_gaps(rows, label, base, None, covariate, -1.0)}, both_orders), 0) \
            if by_call else _effect(x[:, :-1], x[:, -1], i, groups)
        out["cpu_ratio"], out["cpu_low"], out["cpu_high"] = cpu["ratio"], cpu["low"], cpu["high"]
    return out


def paired_rows(runs: list[dict], label: str, base: str, metric: str, covariate: str | None) -> tuple[list[dict], list]:
    """The label's and the base's runs with a metric (and the covariate's CPU), in the calls that hold both; those
    calls, sorted."""
    rows = [r for r in runs if r["label"] in (label, base) and r[metric] and r[metric] > 0
            and (not covariate or r["cpu_ms"][covariate])]
    calls = sorted({r["call"] for r in rows if r["label"] == label} & {r["call"] for r in rows if r["label"] == base})
    return [r for r in rows if r["call"] in calls], calls


def call_gaps(rows: list[dict], label: str, base: str, metric: str | None, covariate: str | None,
              elasticity: float) -> list[tuple[float, float]]:
    """Per call holding both: (the label's mean log metric over the base's, at equal host speed: each run's log
    metric less elasticity x its log CPU; +1 if the label's engine started second there, else -1). metric None: the
    log CPU alone (elasticity -1 then reads it). From MIN_CLUSTERS calls on the effect is fitted on these, one row a
    call, classical least squares on G - p degrees of freedom: a call's gap is one draw of the host and the engine,
    and an order run in one call only borrows the spread of the others' (12-04i's review: clustering the run-level fit
    by call read 9 calls of one order and 1 of the other ~2x too narrow)."""
    def level(r: dict) -> float:
        y = math.log(r[metric]) if metric else 0.0
        return y - (elasticity * math.log(r["cpu_ms"][covariate]) if covariate else 0.0)
    out = []
    for c in sorted({r["call"] for r in rows}):
        mine = [level(r) for r in rows if r["call"] == c and r["label"] == label]
        theirs = [level(r) for r in rows if r["call"] == c and r["label"] == base]
        second = next(r["second"] for r in rows if r["call"] == c and r["label"] == label)
        out.append((sum(mine) / len(mine) - sum(theirs) / len(theirs), 1.0 if second else -1.0))
    return out


def _gap_design(gaps: dict[str, list[tuple[float, float]]], both_orders: bool) -> tuple[np.ndarray, np.ndarray]:
    """Stage two's design over the calls' gaps: a column per label (its effect), then the shared start-order column
    (+-1: half the gap between the orders; the second start's log cost)."""
    labels = list(gaps)
    rows = [([1.0 if lab == other else 0.0 for other in labels] + ([z] if both_orders else []), d)
            for lab in labels for d, z in gaps[lab]]
    return np.array([r for r, _ in rows], dtype=float), np.array([d for _, d in rows], dtype=float)


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
    if n <= k:                          # exactly determined: no variance to estimate
        return beta, np.full((k, k), np.nan), 0
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


def _widened(slot: dict, shift: float, elasticity_se: float) -> dict:
    """A stage-two effect with the elasticity's own error added (delta method): every call's gap moves by its log CPU
    gap times that error, all the same way, so the gaps' spread cannot show it (helper-87: the six H100 calls' 0.974
    [0.970-0.978] was [0.967-0.981]); shift: the column's fit over the calls' log CPU gaps."""
    if slot["se"] is None or not elasticity_se:
        return slot
    se = math.sqrt(slot["se"] ** 2 + (shift * elasticity_se) ** 2)
    half, log_ratio = t975(slot["free"]) * se, math.log(slot["ratio"])
    return {**slot, "se": se, "low": math.exp(log_ratio - half), "high": math.exp(log_ratio + half)}


def _effect(x: np.ndarray, y: np.ndarray, i: int, groups: list | None = None) -> dict:
    """exp of column i's coefficient with its 95 % interval (Student t; clustered by call where _ols does), and
    the log's standard error with its degrees of freedom. No interval (None) where there is no degree of freedom
    left, or where clustering leaves the column no variance (identified by one call alone: its cluster's residuals
    are zero, which is not certainty)."""
    beta, cov, free = _ols(x, y, groups)
    out = {"ratio": math.exp(beta[i]), "low": None, "high": None, "se": None, "free": free}
    if free < 1 or not cov[i, i] >= 0 or (groups and cov[i, i] <= 1e-9 * _ols(x, y)[1][i, i]):
        return out
    se = math.sqrt(cov[i, i])
    half = t975(free) * se
    return {**out, "low": math.exp(beta[i] - half), "high": math.exp(beta[i] + half), "se": se}


def over_aa(runs: list[dict], label: str, covariate: str | None, metric: str = "tok_s") -> dict | None:
    """The label's effect over the A/A's (AA_LABEL's runs, separate calls, both against no-spec): what the engine
    costs over an engine without speculation in the same place (started second, on the daemon's port). One stage-two
    fit over both labels' calls (call_gaps, each at its own pooled elasticity): a column per label and, where the
    calls hold both start orders, one start-order column shared by the two, so that an A/A of one order still reads
    against a label fitted over both; classical on G - p degrees of freedom (the A/A's few calls borrow the label's
    call-to-call spread). None without both; no interval without a degree of freedom left."""
    base = nospec_label(label)
    fits = {lab: fit(runs, lab, covariate, base, metric) for lab in (label, AA_LABEL)}
    if any(f is None for f in fits.values()):
        return None
    gaps = {}
    for lab, f in fits.items():
        gaps[lab] = call_gaps(paired_rows(runs, lab, base, metric, covariate)[0], lab, base, metric, covariate,
                              f.get("elasticity", 0.0) if covariate else 0.0)
    zs = [z for lab in gaps for _, z in gaps[lab]]
    labels_only = _gap_design(gaps, False)[0]
    x, y = _gap_design(gaps, not _collinear(labels_only.T.tolist(), zs))
    contrast = np.zeros(x.shape[1])
    contrast[0], contrast[1] = 1.0, -1.0
    beta, cov, free = _ols(x, y)
    log = float(contrast @ beta)
    out = {"ratio": math.exp(log), "low": None, "high": None}
    var = float(contrast @ cov @ contrast)
    if free >= 1 and var >= 0:
        half = t975(free) * math.sqrt(var)
        out.update(low=math.exp(log - half), high=math.exp(log + half))
    return out


def table(runs: list[dict], base: str | None = None, host: str = "prefill", metric: str = "tok_s") -> list[str]:
    """Markdown rows per (shape, level, label other than the base: a no-spec one unless `base` names a label):
    adjusted (the `host` batches' runner CPU as the host's speed) and unadjusted fits of `metric`."""
    name = base or "nospec"
    lines = [f"| shape | level | label / {name} | runs (label / {name}, calls) | {metric} at equal host speed [95 %, over the "
             f"calls' gaps from 3 calls] | {metric} vs the {host}s' runner CPU (elasticity) | its {host} CPU / the base's [95 %] "
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
        cpu = "-" if adjusted is None else interval(
            {"ratio": adjusted["cpu_ratio"], "low": adjusted["cpu_low"], "high": adjusted["cpu_high"]})
        slot = "-" if plain["second_start"] is None else interval(
            {"ratio": plain["second_start"], "low": plain["second_low"], "high": plain["second_high"]})
        lines.append(f"| {shape} | {level:g} | {label} | {plain['runs']} / {plain['base_runs']}, {plain['calls']} "
                     f"| {interval(adjusted)} | {slope} | {cpu} | {interval(plain)} | {slot} |")
    return lines + aa_lines(runs, fits, host, metric) if base is None else lines


def interval(f: dict | None) -> str:
    """A fit's ratio and 95 % interval; '-' for none, the ratio alone where there is no interval."""
    if f is None:
        return "-"
    return f"{f['ratio']:.3f}" + ("" if f.get("low") is None else f" [{f['low']:.3f}-{f['high']:.3f}]")


def aa_lines(runs: list[dict], fits: dict[tuple, tuple[dict, dict | None]], host: str, metric: str) -> list[str]:
    """Where the files hold an A/A (AA_LABEL's runs): each other label over it at the same shape and level, with
    and without the covariate (over_aa); none without one."""
    keys = [key for key in fits if key[2] != AA_LABEL and (key[0], key[1], AA_LABEL) in fits]
    if not keys:
        return []
    lines = ["", f"| shape | level | label / {AA_LABEL} (the A/A's engine without speculation in its place) | {metric} "
             "at equal host speed [95 %] | without the covariate [95 %] |", "|---|---|---|---|---|"]
    for shape, level, label in keys:
        here = [r for r in runs if r["shape"] == shape and r["level"] == level]
        lines.append(f"| {shape} | {level:g} | {label} | {interval(over_aa(here, label, host, metric))} "
                     f"| {interval(over_aa(here, label, None, metric))} |")
    return lines


def pools_note(runs: list[dict]) -> list[str]:
    """A line when the calls ran with different KV pools: before 12-06 the engine started second had the larger one,
    which the start-order term then carries too (docs/sglang.md)."""
    pools: dict[str, set] = {}
    for r in runs:
        pools.setdefault(r["call"], set()).add(r.get("pool_tokens"))
    kinds = sorted({p for ps in pools.values() for p in ps}, key=lambda p: (p is not None, p or 0))
    if len(kinds) < 2:
        return []
    said = [f"{'as sized' if p is None else f'{p:,} tokens'} ({sum(p in ps for ps in pools.values())} calls)"
            for p in kinds]
    return [f"note: the calls' KV pools differ: {', '.join(said)}; pass one kind of call to read them apart", ""]


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
    print("\n".join(pools_note(runs) + table(runs, args.base, args.host, args.metric)))


if __name__ == "__main__":
    main()
