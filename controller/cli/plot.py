"""`specctl plot FILE.png`: the daemon's recent past from its database — the threshold against
the live batch size, the share of batches speculated, the accept length and the throughput."""
from __future__ import annotations

from typing import Any

import click

from ..numtext import plain
from ..paths import present
from .client import DaemonUnreachable
from .common import Ctx, call, fail, given_db_exists
from .figures import PlotError, draw_threshold, plot_path_param, pyplot, save
from .offline import no_database, offline_read
from .options import Bounded, say


def _series(rows: list[dict], t_end: float) -> dict[str, list]:
    """Per bin: x (seconds before the newest data), share speculated, accept length, tok/s."""
    out: dict[str, list] = {"x": [], "share": [], "accept": [], "tok_s": [], "batch": []}
    for r in rows:
        out["x"].append(r["t"] - t_end)
        out["share"].append(100.0 * r["spec_batches"] / r["batches"] if r["batches"] else None)
        out["accept"].append(r["spec_tokens"] / r["spec_requests"] if r["spec_requests"] else None)
        out["tok_s"].append(r["tokens"] / r["busy_s"] if r["busy_s"] > 0 else None)
        out["batch"].append(r["requests"] / r["batches"] if r["batches"] else None)
    return out


def draw(rows: list[dict], steps: list[dict], t_end: float, title: str) -> Any:
    """The figure (four panels, one time axis)."""
    plt = pyplot()
    s = _series(rows, t_end)
    fig, axes = plt.subplots(4, 1, figsize=(8, 7.2), dpi=80, sharex=True,
                             gridspec_kw={"height_ratios": [2, 1, 1, 1]})
    draw_threshold(axes[0], [(st["t"] - t_end, st["threshold"], st["exploratory"]) for st in steps], 0.0,
                   (s["x"], s["batch"]))
    axes[0].set_title(title, fontsize=10)
    panels = [(axes[1], "share", "speculated %", "tab:green"), (axes[2], "accept", "accept length", "tab:purple"),
              (axes[3], "tok_s", "tok/s", "tab:orange")]
    for ax, key, label, color in panels:
        ax.plot(s["x"], [float("nan") if v is None else v for v in s[key]], color=color, lw=1.3)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[1].set_ylim(-5, 105)
    axes[3].set_xlabel("engine seconds before the newest sample")
    fig.tight_layout()
    return fig


@click.command()
@click.argument("path", metavar="FILE.png", callback=plot_path_param)
@click.option("--last", "last_s", metavar="SECONDS", type=Bounded("--last", 10, 1e9, float), default=600.0,
              show_default=True, help="engine seconds up to the newest sample")
@click.option("--bin", "bin_s", metavar="SECONDS", type=Bounded("--bin", 0.01, 86400, float),
              help="seconds per point [default: --last / 150]")
@click.pass_obj
def plot(ctx: Ctx, path: str, last_s: float, bin_s: float | None) -> None:
    """Threshold, share speculated, accept length and tok/s over time, from the database."""
    from state import timeline
    given_db_exists(ctx)
    if not present(ctx.db):         # (plot reads the file alone: the daemon is asked only why there is none)
        try:
            answer = call(ctx, "GET", "/status")
        except DaemonUnreachable as e:
            no_database(ctx, str(e))
        served = (answer.get("daemon") or {}).get("db") if isinstance(answer, dict) else None
        fail(f"no database at {ctx.db}: the daemon on {ctx.socket} keeps {served} (plot it with --db)")

    def read(db) -> tuple | None:       # one opening of the database for all three queries
        t_end = timeline.newest_t(db)
        if t_end is None:
            return None
        start = t_end - last_s
        return (t_end, t_end - max(start, timeline.oldest_t(db)),
                timeline.bins(db, start, t_end + 1e-9, bin_s or last_s / 150),
                timeline.threshold_steps(db, start, t_end + 1e-9))
    got = offline_read(ctx, read)
    if got is None:
        fail(f"nothing recorded in {ctx.db} yet")
    t_end, span_s, rows, steps = got
    span = f"{span_s:.0f} engine seconds" + (" (all recorded)" if span_s < last_s else "")
    from state.items import utf8_escaped      # (a name's byte that is not UTF-8: matplotlib's traceback)
    title = f"{utf8_escaped(ctx.db.name)}: the last {span} ({_count(len(steps), 'threshold step')})"
    try:
        save(draw(rows, steps, t_end, title), path)
    except PlotError as e:
        fail(str(e))
    # (a --bin wider than the span drew one point, said as any other plot: helper-163)
    wide = f"; --bin {plain(bin_s)} is wider than that span: a shorter one draws more points" if (bin_s or 0) > span_s else ""
    say(f"wrote {path}: {_count(len(rows), 'point')}, {_count(len(steps), 'threshold step')} over the last {span}"
        f"{wide}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
