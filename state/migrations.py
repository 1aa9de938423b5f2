"""Versioned schema migrations (PRAGMA user_version); each step runs once, in order."""
from __future__ import annotations

import sqlite_utils


def _v1(db: sqlite_utils.Database) -> None:
    db["samples"].create({"t": float, "batch_size": int, "steps": int, "tokens": int, "step_s": float,
                          "decode_only": int})
    db["samples"].create_index(["t"])
    db["aggregates"].create({"window_start": float, "window_s": float, "bucket": int, "mode": str,
                             "batches": int, "tokens": int, "busy_s": float, "mean_batch_size": float},
                            pk=("window_start", "bucket", "mode"))
    db["decisions"].create({"id": int, "t": float, "wall": float, "old": int, "new": int, "policy": str,
                            "reason": str, "exploratory": int}, pk="id")
    db["policy_state"].create({"id": int, "wall": float, "policy": str, "params": str, "state": str}, pk="id")
    db["settings"].create({"key": str, "value": str, "wall": float}, pk="key")
    db["events"].create({"id": int, "wall": float, "kind": str, "detail": str}, pk="id")


MIGRATIONS = [_v1]
# the tables every schema version from 1 on holds (a later step may add tables, never drop these): a file whose
# user_version says spec-controller's schema but that lacks one is refused at its opening (db._check_schema)
TABLES = ("samples", "aggregates", "decisions", "policy_state", "settings", "events")


def migrate(db: sqlite_utils.Database) -> int:
    """Bring the schema to the newest version; returns that version."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise RuntimeError(f"database schema version {version} is newer than this spec-controller knows "
                           f"({len(MIGRATIONS)})")
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
