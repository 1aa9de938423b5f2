"""The one writer thread: everything that changes the database goes through its queue."""
from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from typing import Any, Callable, Sequence

import sqlite_utils

from .queries import setting_row

log = logging.getLogger("spec_controller.state")

_STOP = object()
LOCKED_RETRIES = 6          # x the connection's busy timeout (5 s): a lock held up to ~30 s loses nothing


class Writer:
    """Batches queued writes into one transaction per drain; never blocks its callers.

    A full queue drops samples and counts them (telemetry, best effort); settings,
    decisions, policy state and events wait for room instead.
    """

    def __init__(self, db: sqlite_utils.Database, maxsize: int = 10000, batch: int = 512):
        self.db = db
        self.q: queue.Queue = queue.Queue(maxsize=maxsize)
        self.batch = batch
        self.dropped = 0
        self.written_samples = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="state-writer", daemon=True)

    def start(self) -> "Writer":
        self._thread.start()
        return self

    # --- producers (any thread) -------------------------------------------
    def _put(self, item: tuple, essential: bool = True) -> bool:
        """Samples are dropped (and counted) when the queue is full; everything else waits
        for room, since a decision or a setting must never be lost."""
        try:
            if essential:
                self.q.put(item, timeout=30)
            else:
                self.q.put_nowait(item)
            return True
        except queue.Full:
            self.dropped += 1
            if essential:
                self.errors += 1
                log.error("state writer: queue full for 30 s; a %s write was lost", item[0])
            return False

    def samples(self, rows: Sequence[tuple]) -> bool:
        return self._put(("samples", rows), essential=False)

    def decision(self, t: float, old: int, new: int, policy: str, reason: str, exploratory: bool) -> bool:
        return self._put(("decisions", {"t": t, "wall": time.time(), "old": old, "new": new, "policy": policy,
                                         "reason": reason, "exploratory": int(exploratory)}))

    def setting(self, key: str, value: Any) -> bool:
        return self._put(("settings", setting_row(key, value)))

    def policy_state(self, policy: str, params: dict, state: dict) -> bool:
        return self._put(("policy_state", {"wall": time.time(), "policy": policy, "params": json.dumps(params),
                                            "state": json.dumps(state)}))

    def event(self, kind: str, detail: str = "") -> bool:
        return self._put(("events", {"wall": time.time(), "kind": kind, "detail": detail}))

    def call(self, fn: Callable[[sqlite_utils.Database], None]) -> bool:
        """Run fn(db) on the writer thread (rollups, retention)."""
        return self._put(("call", fn))

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until everything queued before this call is committed (visible to readers)."""
        done = threading.Event()
        try:
            self.q.put(("barrier", done), timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        try:
            self.q.put(_STOP, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)

    # --- the thread -------------------------------------------------------
    def _run(self) -> None:
        while True:
            first = self.q.get()
            items = [first]
            while len(items) < self.batch:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            stop = any(i is _STOP for i in items)
            self._write([i for i in items if i is not _STOP])
            if stop:
                return

    def _write(self, items: list) -> None:
        # Barriers are released after the commit: a flush() caller then reads committed rows.
        barriers = [payload for kind, payload in items if kind == "barrier"]
        work = [item for item in items if item[0] != "barrier"]
        try:
            if work:
                self._write_batch(work)
        finally:
            for done in barriers:
                done.set()

    def _write_batch(self, work: list) -> None:
        for attempt in range(LOCKED_RETRIES):
            error = self._commit(work)
            if error is None:
                return
            if not _is_lock(error):
                break
            # Another process holds the write lock (each attempt waited the busy timeout): keep the batch.
            if attempt == 0:
                log.warning("state writer: database locked by another process, retrying: %s", error)
        else:
            self.errors += len(work)
            log.error("state writer: database locked for %d attempts; %d writes lost", LOCKED_RETRIES, len(work))
            return
        # One bad write must not take the rest of its batch with it: retry one by one.
        for item in work:
            error = self._commit([item])
            if error is not None:
                self.errors += 1
                log.error("state writer: a %s write failed and was rolled back: %s", item[0], error)

    def _commit(self, items: list) -> Exception | None:
        """One transaction; the error that rolled it back, or None."""
        conn = self.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            for kind, payload in items:
                if kind == "samples":
                    conn.executemany("INSERT INTO samples (t, batch_size, steps, tokens, step_s, decode_only) "
                                     "VALUES (?, ?, ?, ?, ?, ?)", payload)
                elif kind == "settings":
                    self.db["settings"].upsert(payload, pk="key")
                elif kind == "call":
                    payload(self.db)
                else:
                    self.db[kind].insert(payload)
            conn.execute("COMMIT")
        except Exception as e:
            try:
                conn.execute("ROLLBACK")
            except Exception:
                pass
            return e
        self.written_samples += sum(len(p) for k, p in items if k == "samples")
        return None


def _is_lock(error: Exception) -> bool:
    return isinstance(error, sqlite3.OperationalError) and ("locked" in str(error) or "busy" in str(error))
