"""The figure of `specctl simulate --plot`: tok/s of the policy against the oracle and the
never/always baselines, each one's ratio to the oracle, and the policy's threshold over time
with the segment (or load level) boundaries."""
from __future__ import annotations

from typing import Any

from .figures import draw_threshold, pyplot

LINES = [  # key, label, style: the oracle is drawn last and hollow, so no line hides it
    ("never_tok_s", "never speculate", {"color": "0.55", "ls": ":", "marker": "v", "ms": 4}),
    ("always_tok_s", "always speculate", {"color": "0.55", "ls": "-.", "marker": "^", "ms": 4}),
    ("throughput_tok_s", "policy", {"color": "tab:blue", "lw": 2.0, "marker": "s", "ms": 4}),
    ("oracle_tok_s", "oracle (upper envelope)", {"color": "black", "ls": "--", "lw": 1.2, "marker": "o", "ms": 7,
                                                 "mfc": "none", "zorder": 5}),
]


def _x(result: dict, trace: bool) -> list:
    return list(range(len(result["rows"]))) if trace else [r["concurrency"] for r in result["rows"]]


def _levels(ax: Any, result: dict, trace: bool) -> None:
    rows = result["rows"]
    if trace:
        ax.set_xticks(_x(result, trace), [r["segment"] for r in rows], rotation=15, fontsize=7)
    else:
        ax.set_xscale("log", base=2)
        ax.set_xticks(_x(result, trace), [str(c) for c in _x(result, trace)], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("concurrency (clients)", fontsize=8)


def _throughput(ax: Any, result: dict, trace: bool) -> None:
    x = _x(result, trace)
    for key, label, style in LINES:
        name = f"policy {result['policy']}" if key == "throughput_tok_s" else label
        ax.plot(x, [r[key] for r in result["rows"]], label=name, **style)
    ax.set_ylabel("output tok/s")
    ax.legend(fontsize=7, ncol=2, loc="best")
    _levels(ax, result, trace)


def _ratios(ax: Any, result: dict, trace: bool) -> None:
    x, rows = _x(result, trace), result["rows"]
    lowest = 1.0
    for key, _, style in LINES[:3]:
        ratios = [r[key] / r["oracle_tok_s"] if r["oracle_tok_s"] else float("nan") for r in rows]
        lowest = min(lowest, *ratios)
        ax.plot(x, ratios, **style)
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_ylim(lowest - 0.04 * (1.02 - lowest), 1.02)
    ax.set_ylabel("ratio to oracle")
    ax.set_title(f"ratio to the oracle: policy lowest {result['overall']['min_ratio']:.3f}, overall "
                 f"{result['overall']['ratio']:.3f}", fontsize=8)
    _levels(ax, result, trace)


def _over_time(ax: Any, result: dict, timeline: dict) -> None:
    rows, starts = result["rows"], timeline["segment_starts"]
    end = starts[-1] + rows[-1]["seconds"]
    live = ([t for s in starts for t in (s, s)][1:] + [end], [v for r in rows for v in (r["concurrency"],) * 2])
    draw_threshold(ax, [tuple(t) for t in timeline["ticks"]], end, live)
    for s in starts[1:]:
        ax.axvline(s, color="0.6", lw=0.8, ls="--")
    ax.set_xlim(0, end)
    top = ax.secondary_xaxis("top")           # segment names above the panel, one per segment
    top.set_xticks([s + r["seconds"] / 2 for s, r in zip(starts, rows)], [r["segment"] for r in rows], fontsize=6)
    top.tick_params(length=0)
    ax.set_xlabel("virtual seconds", fontsize=8)


def draw(result: dict, timeline: dict, trace: bool) -> Any:
    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(8, 8.4), dpi=80, gridspec_kw={"height_ratios": [3, 2, 2.4]})
    _throughput(axes[0], result, trace)
    _ratios(axes[1], result, trace)
    _over_time(axes[2], result, timeline)
    what = f"trace {result['trace']}" if trace else "load levels"
    axes[0].set_title(f"{result['policy']} on {result['profile']}, {what} (seed {result['seed']})", fontsize=10)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout(h_pad=1.5)
    return fig
