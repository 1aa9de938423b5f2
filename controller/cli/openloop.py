"""`specctl simulate --arrival-rate`: the open-loop table and plot (throughput and TPOT vs rate)."""
from __future__ import annotations

from typing import Any

import click

from ..numtext import plain
from .common import fail
from .figures import pyplot
from .options import EXIT_USAGE, number_list

MODES = ("never", "always", "oracle")


def parse_rates(text: str, default: tuple[float, ...]) -> list[float]:
    """'2,12,24' (requests/s), or 'default' for the profile's [load] arrival_rate levels."""
    if text.strip() == "default":
        return list(default)
    rates = number_list(text, float, "--arrival-rate")     # (float() took "1_0", "٣", "+5")
    if any(not 0.001 <= r <= 1e6 for r in rates):      # (its limits as every 'allowed LO .. HI' says them: plain)
        raise click.BadParameter(f"rates must be {plain(0.001)} .. {plain(1e6)} requests/s",
                                 param_hint="--arrival-rate")
    return rates


def _cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render_open_table(result: dict) -> str:
    head = (f"policy {result['policy']} on profile {result['profile']}, open loop (Poisson arrivals)"
            + (f", trace {result['trace']}" if "trace" in result else "") + f", seed {result['seed']}")
    cols = ["rate", "mode", "tok/s", "TPOT mean ms", "TPOT median ms", "E2E median ms", "mean batch", "spec share"]
    rows = []
    for r in result["rows"]:
        for name, m in [(result["policy"], r)] + [(n, r[n]) for n in MODES]:
            rows.append([plain(r['rate']) if name == result["policy"] else "", name, _cell(m["tok_s"], ",.1f"),
                         _cell(m["tpot_ms_mean"], ".2f"), _cell(m["tpot_ms_median"], ".2f"),
                         _cell(m["e2e_ms_median"], ",.0f"), _cell(m["mean_batch_size"], ".1f"),
                         f"{m['spec_share']:.0%}"])
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [head, fmt.format(*cols), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
    for r in result["rows"]:
        lines.append(f"rate {plain(r['rate'])}: {result['policy']} / better of never, always: tok/s "
                     f"{_cell(r['tok_s_vs_best_fixed'], '.3f')}, median TPOT {_cell(r['tpot_vs_best_fixed'], '.3f')} "
                     f"(lower is better); threshold {r['final_threshold']}")
    return "\n".join(lines)


def plot_open(series: dict[str, list[tuple[float, float, float]]], title: str) -> Any:
    """series: mode -> [(rate, tok/s, median TPOT ms)], drawn as two panels against the rate (figures.save writes it)."""
    fig, (a, b) = pyplot().subplots(1, 2, figsize=(9, 3.6), dpi=80)
    for mode, points in series.items():
        points = sorted(points)
        style = "k--" if mode == "oracle" else "-"
        a.plot([p[0] for p in points], [p[1] for p in points], style, marker=".", label=mode)
        b.plot([p[0] for p in points], [p[2] for p in points], style, marker=".", label=mode)
    a.set_ylabel("output tok/s")
    b.set_ylabel("median TPOT, ms")
    for ax in (a, b):
        ax.set_xlabel("arrival rate, requests/s")
        ax.grid(alpha=0.3)
    b.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def series_of(result: dict) -> dict[str, list[tuple[float, float, float]]]:
    out: dict[str, list[tuple[float, float, float]]] = {}
    for r in result["rows"]:
        for name, m in [(result["policy"], r)] + [(n, r[n]) for n in MODES]:
            out.setdefault(name, []).append((r["rate"], m["tok_s"], m["tpot_ms_median"] or 0.0))
    return out


MAX_FINITE_REQUESTS = 100_000            # one finite run's requests are drawn at once, as bench_serving does


def simulate_finite(profile_name: str | None, policy_name: str, params: tuple[str, ...], arrival_rate: str | None,
                    closed: str | None, finite: bool, seconds: float, seed: int, repeats: int, tick: float,
                    as_json: bool, plot_path: str | None) -> None:
    """`specctl simulate --finite`: bench_serving's finite runs per rate (controller.sim.finite)."""
    import json

    from policies import PolicyError, parse_kv

    from ..sim.finite import evaluate_finite
    from ..sim.profile import ProfileError, load_profile
    if not finite:
        fail("--repeats needs --finite", EXIT_USAGE)
    if closed or not arrival_rate:
        fail("--finite needs --arrival-rate (and no --concurrency or --trace)", EXIT_USAGE)
    if plot_path:
        fail("--plot is not drawn for --finite runs", EXIT_USAGE)
    try:
        profile = load_profile(profile_name or "seed")
        rates = parse_rates(arrival_rate, profile.open_loop_rates())
        if any(rate * seconds < 1 for rate in rates):
            fail(f"--finite: rate x --seconds must give at least one request (rate {plain(min(rates))} x {plain(seconds)} s)",
                 EXIT_USAGE)
        if max(rates) * seconds > MAX_FINITE_REQUESTS:
            fail(f"--finite: rate x --seconds asks for {max(rates) * seconds:,.0f} requests in one run (at most "
                 f"{MAX_FINITE_REQUESTS:,})", EXIT_USAGE)
        if seed + repeats - 1 > 2**32 - 1:
            fail(f"--finite: seeds {seed} .. {seed + repeats - 1} pass 2**32 - 1 (bench_serving's seed range)",
                 EXIT_USAGE)
        result = evaluate_finite(profile, rates, seconds, policy_name, parse_kv(params),
                                 seeds=range(seed, seed + repeats), tick_s=tick)
    except (PolicyError, ProfileError) as e:
        fail(str(e), EXIT_USAGE)
    click.echo(json.dumps(result, indent=2) if as_json else render_finite_table(result))


def render_finite_table(result: dict) -> str:
    cols = ["rate", "requests", "mode", "tok/s", "TPOT median ms", "E2E median ms", "duration s"]
    rows = [[plain(r['rate']), str(r["requests"]), name if name != "policy" else result["policy"],
             _cell(m["tok_s"], ",.1f"), _cell(m["tpot_ms_median"], ".2f"), _cell(m["e2e_ms_median"], ",.0f"),
             _cell(m["duration_s"], ".2f")] for r in result["rows"] for name, m in r["modes"].items()]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    head = (f"policy {result['policy']} on profile {result['profile']}, finite runs as sglang.bench_serving "
            f"({plain(result['seconds'])} s of arrivals, drained), seeds {result['seeds'][0]}..{result['seeds'][-1]} "
            "(medians over seeds)")
    return "\n".join([head, fmt.format(*cols), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows])
