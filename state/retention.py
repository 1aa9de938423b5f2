"""Maintenance jobs over the store, run on the writer thread: rollups and retention.

Rollups aggregate every complete window exactly once, however fast the engine's clock runs
(the simulator at 80x covers eight windows of 10 s per real second): each run catches up on
every window since the last one in one statement. Retention bounds every table."""
from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

import sqlite_utils

from .queries import SOUND_SAMPLE, number


def rollup(db: sqlite_utils.Database, start: float, end: float, window_s: float, edges: Sequence[int]) -> int:
    """Aggregate the raw decode-only samples of every window in [start, end) per (bucket, mode)."""
    case = " ".join(f"WHEN batch_size <= {int(e)} THEN {int(e)}" for e in edges)
    sql = (
        "INSERT OR REPLACE INTO aggregates (window_start, window_s, bucket, mode, batches, tokens, busy_s, "
        "mean_batch_size) "
        f"SELECT CAST(t / :w AS INTEGER) * :w AS ws, :w, CASE {case} ELSE {int(edges[-1])} END AS bucket, "
        "CASE WHEN steps > 0 THEN 'spec' ELSE 'off' END AS mode, count(*), sum(tokens), sum(step_s), "
        "avg(batch_size) FROM samples WHERE t >= :start AND t < :end AND decode_only = 1 AND "
        f"{SOUND_SAMPLE} GROUP BY ws, bucket, mode")
    return db.execute(sql, {"w": float(window_s), "start": start, "end": end}).rowcount


class Rollups:
    """The rollup job's memory: windows before `until` are done, committed. Called on the writer thread, which calls
    committed() once the run's transaction has committed (Writer.call): a run rolled back (a full disk, a failed
    write in its batch) left `until` ahead of the aggregates, and its windows were never rolled up."""

    def __init__(self, window_s: float, edges: Sequence[int]):
        self.window_s = float(window_s)
        self.edges = tuple(edges)
        self.until: float | None = None
        self._pending: float | None = None      # the newest run's end, until its transaction commits

    def _first(self, db: sqlite_utils.Database) -> float | None:
        row = db.execute(f"SELECT max(window_start) FROM aggregates WHERE window_s = ? AND {number('window_start')}",
                         [self.window_s]).fetchone()
        if row[0] is not None:
            return row[0] + self.window_s      # a restart resumes after the newest aggregated window
        row = db.execute(f"SELECT min(t) FROM samples WHERE {number('t')}").fetchone()
        return None if row[0] is None else (row[0] // self.window_s) * self.window_s

    def __call__(self, db: sqlite_utils.Database) -> int:
        self._pending = None
        newest = db.execute(f"SELECT max(t) FROM samples WHERE {number('t')}").fetchone()[0]
        if newest is None:
            return 0
        start = self.until if self.until is not None else self._first(db)
        # The window holding the newest committed sample may still fill; every one before it is complete.
        end = (newest // self.window_s) * self.window_s
        if start is None or end <= start:
            return 0
        n = rollup(db, start, end, self.window_s, self.edges)
        self._pending = end
        return n

    def committed(self) -> None:
        if self._pending is not None:
            self.until, self._pending = self._pending, None


@dataclass(frozen=True)
class Retention:
    """How long (engine seconds for samples, aggregates, decisions; wall seconds for events and policy
    state) and how many rows each table keeps. Policy state: the newest `states_keep` per policy, and
    the newest of each hour for `states_hourly_s`."""
    samples_s: float = 3600.0
    max_samples: int = 2_000_000
    aggregates_s: float = 7 * 86400.0
    decisions_s: float = 30 * 86400.0
    max_decisions: int = 200_000
    events_s: float = 30 * 86400.0
    max_events: int = 20_000
    states_keep: int = 48
    states_hourly_s: float = 7 * 86400.0

    @classmethod
    def from_storage(cls, storage: Mapping[str, Any]) -> "Retention":
        """From the [storage] config section's retention_* keys."""
        names = {f.name for f in fields(cls)}
        return cls(**{k[len("retention_"):]: v for k, v in storage.items()
                      if k.startswith("retention_") and k[len("retention_"):] in names})


TRIM_SHARE = 0.1     # the oldest samples' share a run deletes while the disk turns new ones away (state/room.py)


def apply_retention(db: sqlite_utils.Database, now_t: float, keep: Retention, wall: float | None = None,
                    trim: bool = False) -> int:
    """Delete what `keep` no longer covers, and with trim the oldest TRIM_SHARE of the samples (by row: rowids grow
    with time), whose pages new samples then reuse; returns the number of rows deleted."""
    wall = time.time() if wall is None else wall
    steps = [
        ("DELETE FROM samples WHERE t < ?", [now_t - keep.samples_s]),
        ("DELETE FROM samples WHERE rowid <= (SELECT max(rowid) FROM samples) - ?", [keep.max_samples]),
        ("DELETE FROM aggregates WHERE window_start < ?", [now_t - keep.aggregates_s]),
        ("DELETE FROM decisions WHERE t < ?", [now_t - keep.decisions_s]),
        ("DELETE FROM decisions WHERE id <= (SELECT max(id) FROM decisions) - ?", [keep.max_decisions]),
        ("DELETE FROM events WHERE wall < ?", [wall - keep.events_s]),
        ("DELETE FROM events WHERE id <= (SELECT max(id) FROM events) - ?", [keep.max_events]),
        ("DELETE FROM policy_state WHERE id NOT IN (SELECT id FROM (SELECT id, row_number() OVER "
         "(PARTITION BY policy ORDER BY id DESC) AS n FROM policy_state) WHERE n <= ?) "
         "AND (wall < ? OR id NOT IN (SELECT max(id) FROM policy_state GROUP BY policy, CAST(wall / 3600 AS INTEGER)))",
         [keep.states_keep, wall - keep.states_hourly_s]),
    ]
    if trim:
        steps.append(("DELETE FROM samples WHERE rowid < (SELECT min(rowid) + (max(rowid) - min(rowid) + 1) * ? "
                      "FROM samples)", [TRIM_SHARE]))
    return sum(db.execute(sql, args).rowcount for sql, args in steps)
