"""The daemon's stop (SIGTERM, SIGINT, `specctl stop`, a condition it cannot go on under): stop deciding, let the engine
drain, fold in what it still sent, checkpoint, flush, record the stop, let go of the socket and the lock; one log line.

All of it within STOP_BUDGET_S, each wait taking what is left of it: the waits on the engine alone (a retune in SGLang's
set_internal_state, 30 s; a health probe, 60 s; SGLang's exit, 60 s) could outlast the unit's TimeoutStopSec (120 s),
whose SIGKILL then lost the final flush and the stop event (helper-157). What the last steps need is kept from the
engine's waits, so that they happen whatever SGLang does; and no wait takes longer than it did before the budget
(STEP_S: a stuck writer's flush was given ~90 s, so a stop on a locked database took ~90 s to exit 5, not ~30)."""
from __future__ import annotations

import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Callable

from state.db import hold_open, leave_wal
from state.lock import DaemonLock
from state.writer import Writer

from ..cli.options import EXIT_UNFLUSHED
from .clients import STOP_WAIT_S
from .engines.base import Engine
from .notify import sd_notify

if TYPE_CHECKING:                   # (lifecycle imports this module; service, numpy and the policies)
    from .lifecycle import Daemon
    from .service import Service

log = logging.getLogger("spec_controller")

# The whole drain, from the stop's first step to the lock let go of. systemd/spec-controller.service's TimeoutStopSec
# (120 s; tests/test_review_h157.py holds the two apart by at least STOP_MARGIN_S) kills the process past it: the margin
# is for the interpreter's own exit.
STOP_BUDGET_S = 100.0
STOP_MARGIN_S = 15.0
SOCKETS_S = 2 * STOP_WAIT_S     # kept for the last: the control socket's and the metrics port's stops
WRITES_S = 20.0 + SOCKETS_S     # ... and before them, the final flush and the writer's stop
FOLD_S = 10.0 + WRITES_S        # ... and before those, the ingest thread's fold of the engine's last samples
STEP_S = 30.0                   # the most any one wait but SGLang's exit takes (each one's ceiling before the budget)


class Budget:
    """What is left of `seconds` from its start, on `clock`."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.began = clock()
        self.end = self.began + seconds

    def left(self, keep: float = 0.0, most: float = math.inf) -> float:
        """The seconds left, less `keep` (what a later step is promised), never below 0 nor above `most`."""
        return min(most, max(0.0, self.end - keep - self.clock()))


def drain(daemon: Daemon, engine: Engine, service: Service, parts: tuple, db, lock: DaemonLock) -> None:
    """Daemon._drain's work (daemon: its stop_reason, exit_code, own_files, metrics and clock, `monotonic`); parts: the
    control server, the scheduler, the ingest thread and the retune ticker; db: the store the writer writes."""
    server, sched, ingest, retune = parts
    budget = Budget(STOP_BUDGET_S, daemon.monotonic)
    sd_notify("STOPPING=1")
    service.stopping = True
    lost = service.writer.errors
    # what was learned, queued before anything that waits on SGLang (a retune in set_internal_state, its exit:
    # minutes in all where it hangs, past the unit's TimeoutStopSec, whose SIGKILL lost it; helper-153)
    service.guarded("checkpoint", service.checkpoint)()
    # the scheduler's jobs stop at once; those running (a health probe waits up to 60 s on a hung SGLang) are waited
    # for after the engine's exit, which ends their waits on it (APScheduler's shutdown has no timeout of its own)
    jobs = threading.Thread(target=sched.shutdown, kwargs={"wait": True}, name="drain-scheduler", daemon=True)
    jobs.start()
    retune.stop(budget.left(FOLD_S, STEP_S))
    engine.stop(budget.left(FOLD_S))
    jobs.join(budget.left(FOLD_S))
    service.ingest.stop()
    ingest.join(budget.left(WRITES_S, STEP_S))
    service.guarded("checkpoint", service.checkpoint)()
    # flushed first, so that the stop event names the exit code the process ends with (helper-149: it said
    # "exit 0" where a lost final checkpoint then made it exit 5); a writer stuck past its time gets no event
    flushed = service.writer.flush(budget.left(SOCKETS_S, STEP_S))
    note_unsaved(daemon, service.writer, lost, stopped=False)
    if flushed:
        service.writer.event("stop", f"{daemon.stop_reason or 'error'}: exit {daemon.exit_code}")
    service.writer.stop(budget.left(SOCKETS_S, STEP_S) if flushed else min(1.0, budget.left(SOCKETS_S)))
    if daemon.own_files.moved("database"):   # (its -wal and -shm paths: perhaps another daemon's now)
        hold_open(db)
    else:
        leave_wal(db)
    server.stop()
    daemon._stop_metrics()
    lock.release()
    # (the writer's own error lines are held back for a minute: on a full disk the final checkpoint, what the
    # policy learned since the last one, was lost under "drained and flushed")
    unsaved = note_unsaved(daemon, service.writer, lost)
    log.log(logging.ERROR if unsaved else logging.INFO, "spec-controller stopped (%s): drained and %s in %.1f s; "
            "exit %d", daemon.stop_reason or "error", f"not flushed: {unsaved}" if unsaved else "flushed",
            budget.clock() - budget.began, daemon.exit_code)


def note_unsaved(daemon: Daemon, writer: Writer, errors_before: int, stopped: bool = True) -> str:
    """Why the drain's writes are not all on disk ('' when they are): the stopped writer still busy, or writes
    lost; then a clean stop exits EXIT_UNFLUSHED (helper-147: exit 0 said nothing to the unit; 1 would restart
    what was stopped)."""
    lost = writer.errors - errors_before
    unsaved = "the database writer did not finish" if stopped and writer.thread.is_alive() else \
        f"{lost} final write{'s' if lost != 1 else ''} lost ({writer.problem or 'see above'})" if lost else ""
    if unsaved and daemon.exit_code == 0:
        daemon.exit_code = EXIT_UNFLUSHED
    return unsaved
