"""The store read as time series (`specctl plot`): per time bin, what ran and how fast; and the
threshold's steps. Raw samples where retention kept them, the rollup's aggregates before that."""
from __future__ import annotations

from typing import Any

import sqlite_utils

from .queries import SOUND_SAMPLE, number

# Per bin: batches, speculative batches, tokens, busy seconds, tokens and requests of the
# speculative batches (accept length = spec_tokens / spec_requests) and requests (batch sizes).
_SAMPLES = (
    "SELECT CAST((t - :start) / :bin AS INTEGER) AS k, count(*), sum(steps > 0), sum(tokens), sum(step_s), "
    "sum(CASE WHEN steps > 0 THEN tokens ELSE 0 END), sum(CASE WHEN steps > 0 THEN batch_size ELSE 0 END), "
    f"sum(batch_size) FROM samples WHERE t >= :start AND t < :end AND {SOUND_SAMPLE} GROUP BY k")
_AGGREGATES = (
    "SELECT CAST((window_start - :start) / :bin AS INTEGER) AS k, sum(batches), "
    "sum(CASE WHEN mode = 'spec' THEN batches ELSE 0 END), sum(tokens), sum(busy_s), "
    "sum(CASE WHEN mode = 'spec' THEN tokens ELSE 0 END), "
    "sum(CASE WHEN mode = 'spec' THEN batches * mean_batch_size ELSE 0 END), sum(batches * mean_batch_size) "
    "FROM aggregates WHERE window_start >= :start AND window_start < :end GROUP BY k")
COLUMNS = ("batches", "spec_batches", "tokens", "busy_s", "spec_tokens", "spec_requests", "requests")


def newest_t(db: sqlite_utils.Database) -> float | None:
    """The newest engine time in samples, aggregates or decisions (None for an empty store)."""
    row = db.execute(f"SELECT max(t) FROM (SELECT max(t) AS t FROM samples WHERE {number('t')} UNION ALL SELECT "
                     f"max(window_start + window_s) FROM aggregates WHERE {number('window_start')} AND "
                     f"{number('window_s')} UNION ALL SELECT max(t) FROM decisions WHERE {number('t')})").fetchone()
    return row[0]


def oldest_t(db: sqlite_utils.Database) -> float | None:
    """The oldest engine time in samples, aggregates or decisions (None for an empty store)."""
    row = db.execute(f"SELECT min(t) FROM (SELECT min(t) AS t FROM samples WHERE {number('t')} UNION ALL SELECT "
                     f"min(window_start) FROM aggregates WHERE {number('window_start')} UNION ALL SELECT min(t) FROM "
                     f"decisions WHERE {number('t')})").fetchone()
    return row[0]


def bins(db: sqlite_utils.Database, start: float, end: float, bin_s: float) -> list[dict[str, Any]]:
    """One row per bin of [start, end) that holds data: t (the bin's middle) and COLUMNS.
    A bin is read from the raw samples if any are left there, else from the aggregates."""
    params = {"start": start, "end": end, "bin": bin_s}
    rows: dict[int, tuple] = {r[0]: r[1:] for r in db.execute(_AGGREGATES, params).fetchall()}
    rows.update({r[0]: r[1:] for r in db.execute(_SAMPLES, params).fetchall()})
    return [{"t": start + (k + 0.5) * bin_s, **dict(zip(COLUMNS, (v or 0 for v in values)))}
            for k, values in sorted(rows.items())]


def threshold_steps(db: sqlite_utils.Database, start: float, end: float) -> list[dict[str, Any]]:
    """The threshold in force at `start` (the newest decision before it, if any) and every change
    until `end`: rows of t, threshold, exploratory (a trial), oldest first."""
    sound = "typeof(new) = 'integer'"      # (t: the ranges take numbers only; queries.number)
    before = db.execute(f"SELECT t, new, exploratory FROM decisions WHERE t < ? AND {sound} ORDER BY id DESC LIMIT 1",
                        [start]).fetchall()
    during = db.execute(f"SELECT t, new, exploratory FROM decisions WHERE t >= ? AND t < ? AND {sound} ORDER BY id",
                        [start, end]).fetchall()
    out = [{"t": start, "threshold": before[0][1], "exploratory": bool(before[0][2])}] if before else []
    return out + [{"t": t, "threshold": new, "exploratory": bool(ex)} for t, new, ex in during]
