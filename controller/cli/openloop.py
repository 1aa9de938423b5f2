"""`specctl simulate --arrival-rate`: the open-loop table and plot (throughput and TPOT vs rate)."""
from __future__ import annotations

import click

MODES = ("never", "always", "oracle")


def parse_rates(text: str, default: tuple[float, ...]) -> list[float]:
    """'2,12,24' (requests/s), or 'default' for the profile's [load] arrival_rate levels."""
    if text.strip() == "default":
        return list(default)
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers", param_hint="--arrival-rate")
    if not rates or any(not 0.001 <= r <= 1e6 for r in rates):
        raise click.BadParameter("rates must be 0.001 .. 1e6 requests/s", param_hint="--arrival-rate")
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
            rows.append([f"{r['rate']:g}" if name == result["policy"] else "", name, _cell(m["tok_s"], ",.1f"),
                         _cell(m["tpot_ms_mean"], ".2f"), _cell(m["tpot_ms_median"], ".2f"),
                         _cell(m["e2e_ms_median"], ",.0f"), _cell(m["mean_batch_size"], ".1f"),
                         f"{m['spec_share']:.0%}"])
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [head, fmt.format(*cols), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
    for r in result["rows"]:
        lines.append(f"rate {r['rate']:g}: {result['policy']} / better of never, always: tok/s "
                     f"{_cell(r['tok_s_vs_best_fixed'], '.3f')}, median TPOT {_cell(r['tpot_vs_best_fixed'], '.3f')} "
                     f"(lower is better); threshold {r['final_threshold']}")
    return "\n".join(lines)


def plot_open(series: dict[str, list[tuple[float, float, float]]], path: str, title: str) -> None:
    """series: mode -> [(rate, tok/s, median TPOT ms)], drawn as two panels against the rate."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=80)
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
    fig.savefig(path)
    plt.close(fig)


def series_of(result: dict) -> dict[str, list[tuple[float, float, float]]]:
    out: dict[str, list[tuple[float, float, float]]] = {}
    for r in result["rows"]:
        for name, m in [(result["policy"], r)] + [(n, r[n]) for n in MODES]:
            out.setdefault(name, []).append((r["rate"], m["tok_s"], m["tpot_ms_median"] or 0.0))
    return out
