"""What specctl's two plots share (`specctl plot` from the database, `specctl simulate --plot`):
matplotlib without a display, the threshold-over-time panel, and writing the file with a
one-line error. matplotlib is imported here only, when a plot is asked for."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any, Sequence

from ..outfile import directory_name, planted_link, replace_whole

THRESHOLD = "tab:blue"
LIVE = "0.45"


class PlotError(Exception):
    """The figure could not be written; the message is one line."""


def pyplot() -> Any:
    import logging
    logging.getLogger("matplotlib").setLevel(logging.ERROR)     # (its "Bad value in file 'matplotlibrc'": not ours)
    import matplotlib
    # matplotlib's own style, not a matplotlibrc found in the working directory or $MPLCONFIGDIR: text.usetex there ran
    # latex (RuntimeError where there is none, a traceback after the work was done)
    matplotlib.rcdefaults()
    matplotlib.use("Agg")
    # every text drawn is a name given (a database's file name, a profile's, a trace's, a segment's label), never
    # mathtext: '$\\foo{$' in one was matplotlib's ValueError, a traceback, with the work done
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt
    return plt


def check_path(path: str | Path) -> Path:
    """Refuse a path the figure cannot be written to, before any work is done."""
    if not str(path).strip():          # (Path('') is '.': "cannot write plot .: give a .png ..." was the line)
        raise PlotError(f"cannot write plot {str(path)!r}: give a file name")
    if why := directory_name(path) or planted_link(path):
        raise PlotError(f"cannot write plot {path}: {why}")
    path = Path(path)
    try:
        if not path.parent.is_dir():
            raise PlotError(f"cannot write plot {path}: directory {path.parent} does not exist")
    except OSError as e:           # a name too long for the file system (is_dir raised it: a traceback)
        raise PlotError(f"cannot write plot {path}: {e.strerror or e}") from None
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise PlotError(f"cannot write plot {path}: give a .png, .svg or .pdf file name")
    try:
        st = os.stat(path)             # (through a link: the file it names is replaced)
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:      # (was found by the rename, after all the work: exit 1)
            raise PlotError(f"cannot write plot {path}: {e.strerror}") from None
        return path                    # none yet (or nothing to stat: the write says why)
    if not stat.S_ISREG(st.st_mode):
        # a directory, a FIFO or a device: refused (or a FIFO "not seekable") only after all the work was done
        raise PlotError(f"cannot write plot {path}: not a regular file, which the plot would replace")
    return path


def plot_path_param(ctx: Any, param: Any, value: str | None) -> str | None:
    """click callback for a plot's output path: a path that cannot be written is a bad argument
    (exit 2), refused before anything is read or simulated."""
    if value is not None:
        import click
        try:
            check_path(value)
        except PlotError as e:
            raise click.UsageError(str(e), ctx) from None
    return value


def save(fig: Any, path: str | Path) -> None:
    """The figure written whole or not at all: into a temporary file beside it, renamed over the path once complete
    (written in place, a full disk left a truncated file, an earlier plot at that path lost)."""
    path = Path(path)
    try:
        check_path(path)
        replace_whole(path, lambda partial: fig.savefig(partial, format=path.suffix.lower()[1:]))
    except PlotError:
        raise
    except Exception as e:
        # matplotlib's PDF writer, cleaning up after a failed write, raised AttributeError ('Stream' object has no
        # attribute 'pos') over the OSError: the OSError is what happened
        cause = e
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__context__
        if cause is None:
            raise
        raise PlotError(f"cannot write plot {path}: {cause.strerror or cause}") from None
    finally:
        pyplot().close(fig)


def draw_threshold(ax: Any, steps: Sequence[tuple[float, int, bool]], end: float,
                   live: tuple[Sequence[float], Sequence[float]] | None = None) -> None:
    """The applied threshold as steps (trials thin, the best-known threshold thick) and, for
    reference, the live batch size: a batch speculates iff it lies on or under the line."""
    if live is not None:
        ax.plot(live[0], live[1], color=LIVE, lw=1.2, label="batch size (mean)")
    if steps:
        ts = [t for t, _, _ in steps] + [end]
        applied = [v for _, v, _ in steps]
        ax.step(ts, applied + applied[-1:], where="post", color=THRESHOLD, lw=0.7, alpha=0.6,
                label="threshold (with trials)")
        best, held = [], None
        for _, v, trial in steps:
            held = held if trial and held is not None else v
            best.append(held)
        ax.step(ts, best + best[-1:], where="post", color=THRESHOLD, lw=2.2, label="threshold (best known)")
    ax.set_ylabel("batch size")
    ax.set_ylim(0, max(ax.get_ylim()[1], 1.0) * 1.3)     # room for the legend above the lines
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=3)
