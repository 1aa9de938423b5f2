"""Reads over the store (they work on a read-only connection); the maintenance jobs are in retention."""
from __future__ import annotations

import json
import math
import time
from typing import Any

import sqlite_utils


# Every number the store's reads compute with is a time or a duration in seconds (engine time, wall time, a step, a
# window): none comes near 2**43 s (~280,000 years), and past it a float's step is over a millisecond, so an engine
# clock resumed from such a time stood still (a hand-edited sample at 1e300: the simulator's time no longer moved).
MAX_SECONDS = float(2 ** 43)


def number(column: str, indexed: bool = True) -> str:
    """SQL: `column` holds a number of seconds (MAX_SECONDS). SQLite keeps whatever a hand edit stores, whatever the
    column's declared type: a text or a blob in a number's column sorts after every number (max(t) was that text) and
    Python's arithmetic on it was a traceback out of specctl status, threshold, plot and history and the daemon's start
    (exit 1), and failed the daemon's rollups for good; an infinite sample time (9e999) became the start's clock, and
    every sample after it was rejected (helper-151). Every read of the store takes such numbers only where it computes
    with them: a row without one is left out, as a damaged settings row is. (One range: text, blobs, NULL and the
    infinities all fall outside it; an index on the column still serves it, max and min.)
    indexed=False: beside a window's own bounds on an indexed column (t >= :start AND t < :end), a check only (unary +):
    given the range, SQLite took its constants as the index's bounds and scanned the whole index from -2**43 to the
    window's end (2 M samples: 8 -> 145 ms for status's newest 60 s, 12 -> 133 ms for each 10 s rollup)."""
    return f"({'' if indexed else '+'}{column} BETWEEN {-MAX_SECONDS!r} AND {MAX_SECONDS!r})"


def text(column: str) -> str:
    """SQL: `column` holds text (a blob there was bytes in Python: history's rendering and JSON failed on it)."""
    return f"typeof({column}) = 'text'"


# A sample row whose every column holds what the daemon writes (a text step count read as speculative: text > 0). For
# a window's scan: t's own bounds, not these, are the index's (number's indexed=False)
SOUND_SAMPLE = " AND ".join([number("t", indexed=False), number("step_s"),
                             *(f"typeof({c}) = 'integer'" for c in ("batch_size", "steps", "tokens", "decode_only"))])


def setting_row(key: str, value: Any) -> dict:
    """A settings row (value as JSON): written by the daemon's writer and by specctl offline."""
    return {"key": key, "value": json.dumps(value), "wall": time.time()}


def _policy_shaped(value: Any) -> bool:
    """{"name": a non-empty str, "params": {...}}: an empty name is no policy (the daemon refused it at start, while
    status showed the newest checkpoint's as if it ran; mutation-today-2026-12-06j Q3)."""
    name = value.get("name") if isinstance(value, dict) else None
    return isinstance(name, str) and name != "" and isinstance(value.get("params", {}), dict)


SHAPED = {"policy": _policy_shaped, "clock": lambda value: isinstance(value, dict)}     # (the readers' .get)


def _finite(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else text


def settings(db: sqlite_utils.Database) -> dict[str, Any]:
    """The saved settings. A row that is not JSON, or a policy that is not {"name": str, "params": {...}} or a clock
    that is no object (a damaged row: the daemon's start, status and policy show ended in a traceback), is left out,
    as if never saved."""
    out = {}
    for row in db["settings"].rows:
        try:       # (JSON has no NaN or infinity: NaN, Infinity or 1e999 there, by hand, is read as its text, no number,
            # refused where a number goes; it was shown as 'inf' and written as Infinity into status --json, no JSON)
            value = json.loads(row["value"], parse_constant=str, parse_float=_finite)
        except (TypeError, ValueError, RecursionError):
            continue
        if SHAPED.get(row["key"], lambda _: True)(value):
            out[row["key"]] = value
    return out


def latest_policy_state(db: sqlite_utils.Database, policy: str) -> dict | None:
    rows = list(db.query("SELECT params, state, wall FROM policy_state WHERE policy = ? ORDER BY id DESC LIMIT 1",
                         [policy]))
    if not rows:
        return None
    return {"params": json.loads(rows[0]["params"]), "state": json.loads(rows[0]["state"]), "wall": rows[0]["wall"]}


def latest_policy(db: sqlite_utils.Database) -> str | None:
    """The registered policy the saved policy setting names (`bandit` -> `thompson`); the newest
    checkpoint's only when no policy is saved. Not the newest checkpoint's when one is saved: a
    switch (live or offline) checkpoints the policy switched *from*, so after `policy set model`
    the newest checkpoint is the old policy's (status said `model (= ucb)`)."""
    saved = settings(db).get("policy")
    name = saved.get("name") if isinstance(saved, dict) else None
    if isinstance(name, str):
        from policies import known_name   # here: specctl's start-up imports nothing heavy
        return known_name(name)           # (None: a name this version does not know, shown as saved, no alias)
    row = db.execute(f"SELECT policy FROM policy_state WHERE {text('policy')} ORDER BY id DESC LIMIT 1").fetchone()
    return row[0] if row else None


def last_engine_time(db: sqlite_utils.Database) -> float:
    """The newest engine-clock time recorded (samples or decisions); 0 for an empty store."""
    row = db.execute(f"SELECT max(t) FROM (SELECT max(t) AS t FROM samples WHERE {number('t')} UNION ALL "
                     f"SELECT max(t) FROM decisions WHERE {number('t')})").fetchone()
    return float(row[0] or 0.0)


def last_wall(db: sqlite_utils.Database) -> float | None:
    """The wall-clock time of the newest write made while an engine ran (checkpoint, decision): what
    the stored figures are as of. Not events: a daemon writes its start event before its engine's
    start (minutes on a GPU), and one that fails to start an error, and status then showed the
    previous run's figures, hours old, as current."""
    row = db.execute(f"SELECT max(w) FROM (SELECT max(wall) AS w FROM policy_state WHERE {number('wall')} UNION ALL "
                     f"SELECT max(wall) FROM decisions WHERE {number('wall')})").fetchone()
    return row[0]


def recent_decisions(db: sqlite_utils.Database, limit: int = 20) -> list[dict]:
    """The newest decisions first; exploratory a bool, as status's last_decision has it (newcomer-53: 0 / 1 here)."""
    return [{**row, "exploratory": bool(row["exploratory"])} for row in db.query(
        "SELECT id, t, wall, old, new, policy, reason, exploratory FROM decisions WHERE "
        f"{number('t')} AND {number('wall')} AND typeof(old) = 'integer' AND typeof(new) = 'integer' AND "
        f"{text('policy')} AND {text('reason')} ORDER BY id DESC LIMIT ?", [limit])]


def sample_sums(db: sqlite_utils.Database, since_t: float | None = None) -> dict:
    """The sums (controller.status.SUM_KEYS) over the raw samples since since_t (default: the newest
    60 s), the window's span and the newest sample's time; {"batches": 0} for an empty store."""
    if since_t is None:
        last = db.execute(f"SELECT max(t) FROM samples WHERE {number('t')}").fetchone()[0]
        if last is None:
            return {"batches": 0}
        since_t = last - 60.0
    row = db.execute(
        "SELECT count(*), sum(tokens), sum(step_s), sum(steps > 0), "
        "sum(CASE WHEN steps > 0 THEN tokens END), sum(CASE WHEN steps > 0 THEN batch_size END), "
        f"max(steps), min(t), max(t) FROM samples WHERE t >= ? AND {SOUND_SAMPLE}", [since_t]).fetchone()
    keys = ("batches", "tokens", "busy_s", "spec_batches", "spec_tokens", "spec_requests", "max_steps")
    out = {k: v or 0 for k, v in zip(keys, row)}
    out["span_s"] = (row[8] - row[7]) if row[0] else 0.0
    out["newest_t"] = row[8]
    return out


def newest_start(db: sqlite_utils.Database) -> dict[str, str]:
    """The newest start event's NAME=value words ({}: none): engine, policy, threshold, pinned, pid, max_batch (since
    12-05) and socket, the last, whole (a path may hold spaces)."""
    row = db.execute("SELECT detail FROM events WHERE kind = 'start' ORDER BY id DESC LIMIT 1").fetchone()
    return start_words(row[0] if row else None)


def start_words(detail: object) -> dict[str, str]:
    """A start event's detail as its NAME=value words (newest_start's), the socket whole; {} for no text."""
    head, sep, sock = detail.partition(" socket=") if isinstance(detail, str) else ("", "", "")
    words = dict(word.split("=", 1) for word in head.split() if "=" in word)
    return {**words, "socket": sock} if sep else words


def last_run_policy(db: sqlite_utils.Database) -> str | None:
    """The policy (its name as set) the newest run ran last: a live switch's since its start (a `policy` event, 'NAME
    {params}'), else the start event's; None where no start is recorded. (An offline `policy set` writes no event.)"""
    row = db.execute(f"SELECT kind, detail FROM events WHERE kind IN ('start', 'policy') AND {text('detail')} "
                     "ORDER BY id DESC LIMIT 1").fetchone()
    if row is None:
        return None
    return (row[1].split(" ", 1)[0] if row[0] == "policy" else start_words(row[1]).get("policy")) or None


def started_max_batch(db: sqlite_utils.Database) -> int | None:
    """The engine's largest batch as the newest start recorded it (None: no start, or one from before 12-05)."""
    value = newest_start(db).get("max_batch", "")
    return int(value) if value.isascii() and value.isdigit() else None     # (isdigit alone: '²', int() refused it)


def after_newest_start(db: sqlite_utils.Database, kind: str) -> dict | None:
    """{wall, detail} of the newest `kind` event (stop, error) since the newest start, or None."""
    row = db.execute(f"SELECT wall, detail FROM events WHERE kind = ? AND {number('wall')} AND {text('detail')} AND "
                     "id > (SELECT coalesce(max(id), 0) FROM events WHERE kind = 'start') ORDER BY id DESC LIMIT 1",
                     [kind]).fetchone()
    return {"wall": row[0], "detail": row[1]} if row else None


def exit_of(stop: dict | None) -> int | None:
    """The exit code a stop event (after_newest_start's) names, as the drain writes it ('SIGTERM: exit 5'), or None."""
    words = stop["detail"].rsplit(": exit ", 1) if stop else []
    return int(words[1]) if len(words) == 2 and words[1].isascii() and words[1].isdigit() else None


def unstopped_run(db: sqlite_utils.Database) -> str | None:
    """The pid (as recorded, '?' where not) of the newest start that neither a stop nor an error event follows: SIGKILL,
    the OOM killer or a crash left no word. None otherwise. Only where no daemon holds the database: a daemon still
    starting has no stop yet."""
    started = db.execute("SELECT 1 FROM events WHERE kind = 'start' LIMIT 1").fetchone() is not None
    if not started or after_newest_start(db, "stop") or after_newest_start(db, "error"):
        return None
    return newest_start(db).get("pid") or "?"


def last_run_error(db: sqlite_utils.Database) -> dict | None:
    """{wall, detail} of the newest error the newest start met (a start that failed, an exit 1), or None: what an
    offline status says beside NOT RUNNING (it said nothing; the reason sat in the journal and the events table)."""
    stop = after_newest_start(db, "stop")
    if exit_of(stop) == 0:      # a run that went on and stopped cleanly (a retried set_threshold)
        return None
    return after_newest_start(db, "error")
