"""What the writer thread writes: one (table, row) item per write, its SQL, and the ticket a
caller holds while it waits for a write of its own to commit."""
from __future__ import annotations

import json
import threading
import time
from typing import Any

from .queries import setting_row

INSERTS = {
    "samples": "INSERT INTO samples (t, batch_size, steps, tokens, step_s, decode_only) VALUES (?, ?, ?, ?, ?, ?)",
    "settings": "INSERT INTO settings (key, value, wall) VALUES (:key, :value, :wall) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value, wall = excluded.wall",
    "decisions": "INSERT INTO decisions (t, wall, old, new, policy, reason, exploratory) "
                 "VALUES (:t, :wall, :old, :new, :policy, :reason, :exploratory)",
    "policy_state": "INSERT INTO policy_state (wall, policy, params, state) VALUES (:wall, :policy, :params, :state)",
    "events": "INSERT INTO events (wall, kind, detail) VALUES (:wall, :kind, :detail)",
}


def setting_item(key: str, value: Any) -> tuple:
    return ("settings", setting_row(key, value))


def utf8_escaped(text: str) -> str:
    """`text` with what UTF-8 cannot hold (a path's undecodable byte, as Python reads argv and the environment:
    '\\udcff') as its escape: SQLite refused such text (a write failed) and matplotlib's font code too."""
    return text.encode("utf-8", "backslashreplace").decode()


def event_item(kind: str, detail: str = "") -> tuple:
    """detail: any text (utf8_escaped: a daemon started with --socket or --db naming such a path lost its start event,
    an error logged and counted for it)."""
    return ("events", {"wall": time.time(), "kind": kind, "detail": utf8_escaped(detail)})


def decision_item(t: float, old: int, new: int, policy: str, reason: str, exploratory: bool) -> tuple:
    return ("decisions", {"t": t, "wall": time.time(), "old": old, "new": new, "policy": policy, "reason": reason,
                          "exploratory": int(exploratory)})


def policy_state_item(policy: str, params: dict, state: dict) -> tuple:
    """ValueError if the state holds a NaN or an infinity: such a state is never checkpointed."""
    return ("policy_state", {"wall": time.time(), "policy": policy, "params": json.dumps(params, allow_nan=False),
                             "state": json.dumps(state, allow_nan=False)})


class Ticket:
    """One durable write. The writer begins it unless its caller already gave up (cancel), so a
    write the caller reported as refused never commits later."""

    def __init__(self, items: list):
        self.items = items
        self.done = threading.Event()
        self.error: str | None = None
        self._lock = threading.Lock()
        self._state = "queued"

    def begin(self) -> bool:
        with self._lock:
            if self._state == "cancelled":
                return False
            self._state = "started"
            return True

    def cancel(self) -> bool:
        """True if the write had not started (it never will); False if it is under way or done."""
        with self._lock:
            if self._state != "queued":
                return False
            self._state = "cancelled"
            return True

    def finish(self, error: str | None) -> None:
        self.error = error
        self.done.set()
