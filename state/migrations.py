"""Versioned schema migrations (PRAGMA user_version); each step runs once, in order."""
from __future__ import annotations

import sqlite_utils


# version 1's tables and their columns (the migration makes them; _check_schema asks a file for them)
V1_COLUMNS: dict[str, dict[str, type]] = {
    "samples": {"t": float, "batch_size": int, "steps": int, "tokens": int, "step_s": float, "decode_only": int},
    "aggregates": {"window_start": float, "window_s": float, "bucket": int, "mode": str, "batches": int, "tokens": int,
                   "busy_s": float, "mean_batch_size": float},
    "decisions": {"id": int, "t": float, "wall": float, "old": int, "new": int, "policy": str, "reason": str,
                  "exploratory": int},
    "policy_state": {"id": int, "wall": float, "policy": str, "params": str, "state": str},
    "settings": {"key": str, "value": str, "wall": float},
    "events": {"id": int, "wall": float, "kind": str, "detail": str},
}
V1_KEYS = {"aggregates": ("window_start", "bucket", "mode"), "decisions": "id", "policy_state": "id",
           "settings": "key", "events": "id"}


def _v1(db: sqlite_utils.Database) -> None:
    for table, columns in V1_COLUMNS.items():
        db[table].create(columns, pk=V1_KEYS.get(table))
    db["samples"].create_index(["t"])


MIGRATIONS = [_v1]
# the tables every schema version from 1 on holds, each with version 1's columns at least (a later step may add tables
# and columns, never drop these): a file whose user_version says spec-controller's schema but that lacks one is
# refused at its opening (db._check_schema)
TABLES = tuple(V1_COLUMNS)


class NewerSchema(RuntimeError):
    """A schema version this spec-controller does not know: a newer version wrote it (db._newer_schema words it)."""

    def __init__(self, version: int):
        super().__init__(f"database schema version {version} is newer than this spec-controller knows "
                         f"({len(MIGRATIONS)})")


def migrate(db: sqlite_utils.Database) -> int:
    """Bring the schema to the newest version; returns that version. NewerSchema where the file's is newer."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise NewerSchema(version)
    for i in range(version, len(MIGRATIONS)):
        db.conn.execute("BEGIN IMMEDIATE")
        try:
            MIGRATIONS[i](db)
            db.conn.execute(f"PRAGMA user_version={i + 1}")
            db.conn.execute("COMMIT")
        except BaseException:
            db.conn.execute("ROLLBACK")
            raise
    return len(MIGRATIONS)
