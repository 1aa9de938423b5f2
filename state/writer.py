"""The one writer thread: everything that changes the database goes through its queue."""
from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from typing import Any, Callable, Sequence

import sqlite_utils

from .db import classify, durable
from .items import INSERTS, Ticket, decision_item, event_item, policy_state_item, setting_item
from .logs import RateLimitedLog
from .room import ROW_BYTES, Room, freed_bytes

log = logging.getLogger("spec_controller.state")

_STOP = object()
LOCKED_RETRIES = 6          # x the connection's busy timeout (5 s): a lock held up to ~30 s loses nothing
SYSTEMIC = ("disk full", "read-only", "I/O error", "corrupt")   # every write would fail alike


class WriteFailed(RuntimeError):
    """A durable write did not commit (or, with maybe_saved, its outcome is unknown); one line."""

    def __init__(self, message: str, maybe_saved: bool = False):
        super().__init__(message)
        self.maybe_saved = maybe_saved


class Writer:
    """Batches queued writes into one transaction per drain; never blocks its callers.

    Samples are capped at `maxsize` queued groups (beyond it they are dropped and counted:
    telemetry, best effort); settings, decisions, policy state and events are always queued,
    so that no caller ever waits here (the queue is bounded by their low rate). transaction()
    is the one write a caller waits for: a command is acknowledged only once it is on disk.
    """

    def __init__(self, db: sqlite_utils.Database, maxsize: int = 10000, batch: int = 512,
                 log_interval_s: float = 60.0, room: Room | None = None):
        self.db = db
        self.q: queue.Queue = queue.Queue()
        self.maxsize = maxsize
        self.batch = batch
        self.dropped = 0              # sample rows not stored: the queue full, a write that failed, no room on disk
        self.turned_away = 0          # ... of them, those the disk had no room for (room.py: retention then trims)
        self.room = room or Room()    # the free space kept on the database's disk (none without one: tests, tools)
        self._short = False           # samples were turned away for room, and no batch has found room since
        self._trimmed_at = 0          # turned_away at the last trim_due()
        self.written_samples = 0
        self.errors = 0               # writes that failed and were lost
        self.commits = 0
        self.problem: str | None = None   # why writes fail now (disk full, read-only, locked); None when fine
        # A nearly full disk still takes small commits between failures: the problem is over only
        # once no write has failed for recover_s (else health and the log would flap with it).
        self.recover_s = 5.0
        self.finish_timeout_s = 120.0  # how long a begun command write is awaited before 'it may yet be saved'
        self._last_failure = 0.0
        self._stopping = False        # stop() called: a transaction then waits for nothing (none will run it)
        self._logs = RateLimitedLog(log, log_interval_s)
        self._thread = threading.Thread(target=self._run, name="state-writer", daemon=True)

    def start(self) -> "Writer":
        self._thread.start()
        return self

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    # --- producers (any thread) -------------------------------------------
    def samples(self, rows: Sequence[tuple]) -> bool:
        if self.q.qsize() >= self.maxsize:
            self.dropped += len(rows)
            return False
        self.q.put(("samples", rows))
        return True

    def _put(self, item: tuple) -> bool:
        self.q.put(item)
        return True

    def decision(self, t: float, old: int, new: int, policy: str, reason: str, exploratory: bool) -> bool:
        return self._put(decision_item(t, old, new, policy, reason, exploratory))

    def setting(self, key: str, value: Any) -> bool:
        return self._put(setting_item(key, value))

    def policy_state(self, policy: str, params: dict, state: dict) -> bool:
        """ValueError (nothing queued) if the state holds a NaN or an infinity."""
        return self._put(policy_state_item(policy, params, state))

    def event(self, kind: str, detail: str = "") -> bool:
        return self._put(event_item(kind, detail))

    def call(self, fn: Callable[[sqlite_utils.Database], Any],
             committed: Callable[[], None] | None = None) -> bool:
        """Run fn(db) on the writer thread, in its batch's transaction (rollups, retention); committed(), if given, once
        that transaction has committed (never for one rolled back: fn's memory of what it wrote must not run ahead)."""
        return self._put(("call", (fn, committed)))

    def trim_due(self) -> bool:
        """Whether samples were turned away for room since the last call: retention then frees the oldest's pages."""
        due, self._trimmed_at = self.turned_away > self._trimmed_at, self.turned_away
        return due

    def transaction(self, items: Sequence[tuple], timeout: float = 5.0) -> None:
        """Commit items (setting_item, event_item, ...) in a transaction of their own and wait for it.

        WriteFailed, with nothing written, when the commit fails or does not start within timeout
        (a writer stuck behind a locked database); once it has started, its outcome is awaited.
        """
        if self._stopping:     # (a command during the daemon's last seconds: was 'busy' after its whole timeout)
            raise WriteFailed("the daemon is stopping: its database writer has stopped")
        ticket = Ticket(list(items))
        self.q.put(("txn", ticket))
        if not ticket.done.wait(timeout) and ticket.cancel():
            raise WriteFailed(f"the database writer is busy ({self.problem or 'a slow write'})")
        if not ticket.done.wait(self.finish_timeout_s):
            raise WriteFailed(f"the database write did not finish in {self.finish_timeout_s:g} s; it may yet be saved",
                              maybe_saved=True)
        if ticket.error:
            raise WriteFailed(f"the database write failed: {ticket.error}")

    def flush(self, timeout: float = 10.0) -> bool:
        """Block until everything queued before this call is committed (visible to readers)."""
        done = threading.Event()
        self.q.put(("barrier", done))
        return done.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping = True
        self.q.put(_STOP)
        self._thread.join(timeout)

    # --- the thread -------------------------------------------------------
    def _run(self) -> None:
        while True:
            items = [self.q.get()]
            while len(items) < self.batch:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            stop = any(i is _STOP for i in items)
            try:
                self._write([i for i in items if i is not _STOP])
            except Exception as e:            # a bug here must not end the only writer: count it, go on
                self.errors += 1
                self._logs.error("internal", "state writer: unexpected %s: %s", type(e).__name__, e)
            if stop:
                return

    def _write(self, items: list) -> None:
        # Barriers are released after the commits: a flush() caller then reads committed rows.
        barriers, work = [], []
        try:
            for kind, payload in items:
                if kind == "barrier":
                    barriers.append(payload)
                elif kind == "txn":           # in queue order: what was queued before it commits first
                    self._write_batch(work)
                    work = []
                    self._durable(payload)
                else:
                    work.append((kind, payload))
            self._write_batch(work)
        finally:
            for done in barriers:
                done.set()

    def _durable(self, ticket: Ticket) -> None:
        if not ticket.begin():                # its caller gave up waiting and refused the command
            return
        error = self._synced(ticket.items)
        if error is not None and classify(error) in SYSTEMIC + ("locked",):
            self._note_problem(error)          # refused to its caller, so not counted as lost
        ticket.finish(None if error is None else f"{classify(error)} ({error})")

    def _write_batch(self, work: list) -> None:
        work = self._room_for(work)
        if not work:
            return
        for attempt in range(LOCKED_RETRIES):
            error = self._commit(work)
            if error is None:
                return
            if classify(error) != "locked":
                break
            # Another process holds the write lock (each attempt waited the busy timeout): keep the batch.
            self._note_problem(error)
        else:
            self._failed(error, work)
            return
        if classify(error) in SYSTEMIC:
            self._failed(error, work)
            return
        # One bad write must not take the rest of its batch with it: retry one by one.
        for item in work:
            error = self._commit([item])
            if error is not None:
                self._failed(error, [item], item[0])

    def _room_for(self, work: list) -> list:
        """work less the sample groups the disk has no room for: under room's floor, only as many as the database's
        own free pages hold (room.py); the others are counted, not written."""
        if not any(kind == "samples" for kind, _ in work):
            return work
        if self.room.short() is None:
            if self._short:
                self._short = False
                self._logs.reset("room")
                log.warning("state writer: room on disk again: samples are stored again (%d turned away)",
                            self.turned_away)
            return work
        try:
            budget = freed_bytes(self.db)
        except sqlite3.Error:
            budget = 0
        kept, turned = [], 0
        for kind, payload in work:
            if kind == "samples" and len(payload) * ROW_BYTES > budget:
                turned += len(payload)
                continue
            budget -= len(payload) * ROW_BYTES if kind == "samples" else 0
            kept.append((kind, payload))
        if turned:
            self.turned_away += turned
            self.dropped += turned
            self._short = True
            self._logs.error("room", "state writer: %s (%d samples turned away so far)",
                             self.room.problem() or "database disk nearly full", self.turned_away)
        return kept

    def _note_problem(self, error: Exception) -> None:
        kind = classify(error)
        self.problem = f"database {kind}: {error}"
        self._last_failure = time.monotonic()
        # (a locked database's writes are retried; any other failure's are lost: 'retried' said so of a full disk too)
        fate = "writes are retried" if kind == "locked" else "failed writes are lost, counted"
        self._logs.error(kind, "state writer: %s (%s; commands are refused meanwhile)", self.problem, fate)

    def _failed(self, error: Exception, items: list, what: str = "") -> None:
        """items rolled back for good: counted as writes lost, their samples as rows not stored."""
        self.errors += len(items)
        self.dropped += sum(len(payload) for kind, payload in items if kind == "samples")
        if classify(error) in SYSTEMIC or classify(error) == "locked":
            self._note_problem(error)
        else:
            self._logs.error(f"write:{what}", "state writer: a %s write failed and was rolled back: %s", what, error)

    def _synced(self, items: list) -> Exception | None:
        """_commit for a command, acknowledged once committed, so on disk when it returns (db.durable)."""
        try:
            with durable(self.db.conn):
                return self._commit(items)
        except sqlite3.Error as e:          # (the pragma's: nothing was written)
            return e

    def _commit(self, items: list) -> Exception | None:
        """One transaction; the error that rolled it back, or None."""
        conn = self.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            for kind, payload in items:
                if kind == "samples":
                    conn.executemany(INSERTS[kind], payload)
                elif kind == "call":
                    payload[0](self.db)
                else:
                    conn.execute(INSERTS[kind], payload)
            conn.execute("COMMIT")
        except Exception as e:
            try:
                conn.execute("ROLLBACK")
            except Exception:
                pass            # SQLite already rolled back (e.g. on a full disk)
            return e
        self.commits += 1
        self.written_samples += sum(len(p) for k, p in items if k == "samples")
        for committed in [p[1] for k, p in items if k == "call" and p[1] is not None]:
            committed()
        if self.problem is not None and time.monotonic() - self._last_failure >= self.recover_s:
            log.warning("state writer: the database takes writes again (%d writes lost so far)", self.errors)
            self.problem = None
            for kind in SYSTEMIC + ("locked",):
                self._logs.reset(kind)
        return None
