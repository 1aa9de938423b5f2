"""Two engines' cProfile stats (timeline.py's PREFIX.PID.prof, run_pair.sh's cprofile phase) compared function by
function: is the second engine's excess a uniform slowdown of every function (the process or its host: the same
calls each taking longer) or concentrated in a few (a code path: the lever)?

    python3 bench/gpu/prof_compare.py NOSPEC.prof OFF.prof [--batches 199,141] [--top 12]
    python3 bench/gpu/prof_compare.py NOSPEC.prof OFF.prof --swapped NOSPEC2.prof OFF2.prof

--swapped: a second pair of profiles with the engines' core sets swapped (run_pair.sh's cprofile phase): the two
uniform factors f1 = e x c and f2 = e / c split into the engine's own factor e = sqrt(f1 f2) (it follows B onto either
set: its process) and the cores' c = sqrt(f1 / f2) (B's first set against A's first).

Each side's times are per profiled batch (--batches) or, without it, over A's whole profile with B's scaled to the same
work: by the calls of the reference function (the one called most often in both, e.g. a per-layer kernel launch: the
same count per batch in both engines, whatever their speed).
Functions called about as often per batch in both (within --same, 10 %) and at least --min-calls times give the
per-call own-time ratio B / A; its median is the uniform factor. The excess (B - A own time) then splits into: what
the uniform factor explains, functions only B runs, and the residual of each common function (B - factor x A).
Standard library only (runs on the CPU host over results brought back)."""
from __future__ import annotations

import argparse
import marshal
import math
import re
import statistics
import sys
from pathlib import Path

Key = tuple  # (file, line, name) as pstats keys functions


def load(path: str | Path) -> dict[Key, tuple[int, float]]:
    """{function: (calls, own seconds)} from a cProfile dump (pstats' marshal format: (primitive calls, calls, own,
    cumulative, callers)). A builtin's name carries its address ('<function Event.record at 0x7fd0...>'), which
    differs between processes: dropped, so that both engines' copies meet."""
    try:
        with open(path, "rb") as f:
            raw = marshal.load(f)
    except (OSError, EOFError, ValueError, TypeError) as e:
        raise ValueError(f"{path}: not a cProfile dump ({e})") from None
    out: dict[Key, tuple[int, float]] = {}
    for (file, line, name), value in raw.items():
        key = (file, line, re.sub(r" at 0x[0-9a-f]+>$", ">", name))
        calls, own = out.get(key, (0, 0.0))
        out[key] = (calls + int(value[1]), own + float(value[2]))
    return out


def reference(a: dict, b: dict) -> Key:
    """The common function with the most calls in both: a per-batch count that does not depend on speed."""
    common = [k for k in a if k in b]
    if not common:
        raise ValueError("the two profiles share no function: nothing to compare")
    return max(common, key=lambda k: (min(a[k][0], b[k][0]), k))


def label(key: Key) -> str:
    file, line, name = key
    return name if file == "~" else f"{name} ({Path(file).name}:{line})"


def compare(a: dict, b: dict, per_a: float, per_b: float, same: float = 0.10, min_calls: int = 50) -> dict:
    """per_a / per_b: the units each side is divided by (batches, or reference calls)."""
    ratios = []
    for key in a.keys() & b.keys():
        (ca, ta), (cb, tb) = a[key], b[key]
        if min(ca, cb) < max(min_calls, 1) or ta <= 0:
            continue
        calls_ratio = (cb / per_b) / (ca / per_a)
        if abs(calls_ratio - 1) <= same:
            ratios.append((tb / cb) / (ta / ca))
    if not ratios:
        raise ValueError("no function is called about equally often in both profiles: nothing to compare")
    factor = statistics.median(ratios)
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [factor, factor, factor]
    own_a = sum(t for _, t in a.values()) / per_a
    own_b = sum(t for _, t in b.values()) / per_b
    only_b = {k: t / per_b for k, (_, t) in b.items() if k not in a}
    only_a = {k: t / per_a for k, (_, t) in a.items() if k not in b}
    common_a = sum(t for k, (_, t) in a.items() if k in b) / per_a
    residual = {k: b[k][1] / per_b - factor * a[k][1] / per_a for k in a.keys() & b.keys()}
    return {"functions": len(ratios), "factor": factor, "quartiles": quartiles, "own_a": own_a, "own_b": own_b,
            "uniform": (factor - 1) * common_a, "only_b": only_b, "only_a": only_a, "residual": residual}


def report(result: dict, unit: str, top: int = 12) -> str:
    r = result
    excess = r["own_b"] - r["own_a"]
    only_b, only_a = sum(r["only_b"].values()), sum(r["only_a"].values())
    rest = excess - r["uniform"] - only_b + only_a
    q1, _, q3 = r["quartiles"]
    uniform_share = r["uniform"] / excess if excess else 0.0

    def share(x: float) -> str:
        return f"{x * 1e3:+.3f} ms ({x / excess:+.0%})" if excess else f"{x * 1e3:+.3f} ms"
    lines = [f"own time per {unit}: A {r['own_a'] * 1e3:.3f} ms, B {r['own_b'] * 1e3:.3f} ms, excess "
             f"{excess * 1e3:+.3f} ms",
             f"per-call ratio B / A over {r['functions']} functions called equally often: median {r['factor']:.3f} "
             f"(quartiles {q1:.3f} - {q3:.3f})",
             f"excess = uniform {share(r['uniform'])} + only in B {share(only_b)} - only in A {share(only_a)} + "
             f"concentrated {share(rest)}",
             f"verdict: {verdict(r['factor'], q1, q3, excess / r['own_a'] if r['own_a'] else 0.0, uniform_share)}",
             f"largest residuals (B - {r['factor']:.2f} x A, ms per {unit}):"]
    for key, t in sorted(r["residual"].items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {t * 1e3:+8.3f}  {label(key)}")
    lines.append(f"only in B (ms per {unit}):")
    for key, t in sorted(r["only_b"].items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {t * 1e3:+8.3f}  {label(key)}")
    return "\n".join(lines)


def verdict(factor: float, q1: float, q3: float, excess_share: float, uniform_share: float) -> str:
    """excess_share: B's excess (or saving, < 0) over A's own time; uniform_share: the part of it the median factor
    explains. Uniform when most functions share one factor (both quartiles on its side of 1) and it explains most of
    the difference; either way round (12-03g's no-spec engine was the slower one)."""
    if abs(excess_share) < 0.02:
        return "none: B's own time is within 2 % of A's"
    slower = factor > 1.05 and q1 > 1.0
    faster = factor < 0.95 and q3 < 1.0
    if (slower or faster) and uniform_share >= 0.5:
        return (f"uniform: the same calls take ~{factor:.2f}x as long in B ({'slower' if slower else 'faster'}: the "
                f"process or its host, not a code path); it explains {uniform_share:.0%} of the difference")
    return "concentrated: no common factor explains the difference; the residuals below and B's own functions carry it"


def split_swapped(f1: float, f2: float) -> tuple[float, float, str]:
    """(engine factor, cores factor, which carries more) from the uniform factors of two pairs whose core sets were
    swapped between them."""
    engine, cores = (f1 * f2) ** 0.5, (f1 / f2) ** 0.5
    # which way, too: "the process" alone read as "the off engine is slow" where it was the faster (12-05d call 2)
    which = (f"the process (it follows B onto either core set: B the {'slower' if engine > 1 else 'faster'})"
             if abs(math.log(engine)) >= abs(math.log(cores)) else
             f"the cores (it stays with the core set, whichever engine runs there: B's first set the "
             f"{'slower' if cores > 1 else 'faster'})")
    return engine, cores, which


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="the baseline's stats (no-spec)")
    ap.add_argument("b", help="the compared engine's stats (off)")
    ap.add_argument("--batches", help="A,B: profiled batches in each (else per call of the reference function)")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--same", type=float, default=0.10, help="calls per unit within this share count as equal")
    ap.add_argument("--min-calls", type=int, default=50)
    ap.add_argument("--swapped", nargs=2, metavar=("A2", "B2"), help="the same engines' profiles, core sets swapped")
    args = ap.parse_args(argv)
    try:
        if args.swapped:
            return _swapped(args, [load(x) for x in (args.a, args.b, *args.swapped)])
        return _main(args, load(args.a), load(args.b))
    except ValueError as e:
        print(f"prof_compare: {e}", file=sys.stderr)
        return 2


def to_a_work(a: dict, b: dict) -> tuple[Key, float]:
    """The reference function and B's units per A's profile (its calls in B over its calls in A)."""
    ref = reference(a, b)
    return ref, b[ref][0] / a[ref][0]


def _main(args: argparse.Namespace, a: dict, b: dict) -> int:
    if args.batches:
        per_a, per_b = (float(x) for x in args.batches.split(","))
        unit = "batch"
    else:
        ref, per_b = to_a_work(a, b)
        per_a, unit = 1.0, "A's profile"
        print(f"B scaled to A's work by the calls of {label(ref)}: {a[ref][0]} in A, {b[ref][0]} in B")
    print(report(compare(a, b, per_a, per_b, args.same, args.min_calls), unit, args.top))
    return 0


def _swapped(args: argparse.Namespace, profiles: list[dict]) -> int:
    factors = []
    for a, b in (profiles[:2], profiles[2:]):
        factors.append(compare(a, b, 1.0, to_a_work(a, b)[1], args.same, args.min_calls)["factor"])
    engine, cores, which = split_swapped(*factors)
    print(f"swapped: B / A uniform factor {factors[0]:.3f} on the first core sets, {factors[1]:.3f} swapped: the "
          f"engine's own {engine:.3f}, the cores' {cores:.3f}: mostly {which}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
