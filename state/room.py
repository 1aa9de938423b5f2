"""Room left on the database's file system, and what the writer does when little is left.

A store in WAL mode that fills its own disk wedges: every write, a DELETE too, appends to the WAL, and the
checkpoint that would let the WAL start over must first grow the database file. Retention then never frees a
byte, however old the rows (helper-159: a 16 MB file system stayed full while an hour of samples was due for
deletion), until the operator frees space. So the writer keeps `floor` bytes free: under it, new samples go only
into pages the database has freed itself (retention's), and retention deletes the oldest samples to free such
pages while samples are being turned away (retention.TRIM_SHARE). Commands, decisions, events and policy state are
always written: they are small, and that room is what the floor keeps for them."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlite_utils

DEFAULT_MIN_FREE_MB = 64.0        # [storage] min_free_mb: well above the WAL's 8 MiB limit and a batch's growth
LEAST_MIN_FREE_MB = 16.0          # ... and never under this (0: off): a checkpoint copies the WAL's pages (up to ~8 MiB,
                                  # more while a reader holds it) into the database file, whose room the floor is
ROW_BYTES = 128                   # what a sample row may take, its index entry included (~55 measured): an estimate
MIB = 1 << 20


class Room:
    """Free bytes on the file system holding the database at `path`, read at most every `every_s` (statvfs's f_bavail:
    what `df` calls Avail), against a floor of `min_free_mb` ([storage] min_free_mb). 0, or no path: never short."""

    def __init__(self, path: str | os.PathLike = "", min_free_mb: float = 0.0, every_s: float = 1.0):
        self.dir = os.path.dirname(os.path.abspath(path)) if path else ""
        self.set_floor(min_free_mb)
        self.every_s = every_s
        self._seen: tuple[float, int | None] | None = None     # (when, free bytes): one tuple, swapped whole

    def set_floor(self, min_free_mb: float) -> None:
        """The floor, at the start and at a reload (SIGHUP); one int swapped whole: the writer thread reads it."""
        self.floor = int(min_free_mb * MIB)

    def free(self) -> int | None:
        """Free bytes, or None where it cannot be told (no file, statvfs failing)."""
        now = time.monotonic()
        seen = self._seen
        if seen is None or now - seen[0] >= self.every_s:
            try:
                st = os.statvfs(self.dir)
                seen = (now, st.f_bavail * st.f_frsize)
            except OSError:
                seen = (now, None)
            self._seen = seen
        return seen[1]

    def short(self) -> int | None:
        """The free bytes while under the floor, else None."""
        if not self.dir or self.floor <= 0:
            return None
        free = self.free()
        return free if free is not None and free < self.floor else None

    def problem(self) -> str | None:
        """Status's words while under the floor (None otherwise)."""
        free = self.short()
        if free is None:
            return None
        from controller.numtext import plain     # (a leaf: standard library only)
        return (f"database disk nearly full: {free / MIB:.1f} MiB free in {self.dir}, under the "
                f"{plain(self.floor / MIB)} MiB kept free ([storage] min_free_mb): new samples are stored only where "
                "retention freed room")


def freed_bytes(db: sqlite_utils.Database) -> int:
    """Bytes of the database's own free pages: rows written there do not grow the file."""
    free_pages = db.execute("PRAGMA freelist_count").fetchone()[0]
    return free_pages * db.execute("PRAGMA page_size").fetchone()[0]
