"""The daemon's moving parts: ingest, control loop, actuation, persistence jobs, status (the operator's commands:
`commands`)."""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from policies import Policy, PolicyError, make_policy, resolve_name
from state import queries
from state.db import open_store
from state.logs import RateLimitedLog
from state.retention import Retention, Rollups, apply_retention
from state.writer import Writer

from ..status import build_status
from .commands import Commands
from .engines.base import Engine, EngineError
from .ingest import Ingest
from .intake import SampleGate, SteadyClock
from .livestats import LiveStats
from .notify import sd_notify, status_text
from .restore import config_policy_unused, saved_policy, start_loop

if TYPE_CHECKING:
    import sqlite_utils

log = logging.getLogger("spec_controller")


class Service(Commands):
    """Owns the control loop. Ingest feeds it on its thread, retune() asks it on the scheduler's.

    Locks: `lock` guards the loop's state and is held for microseconds, never across I/O, so that
    status answers whatever SGLang or SQLite is doing; `_actuation` keeps retunes (and the HTTP
    calls that apply them) in order; `_commands` runs one operator command at a time (Commands).
    """

    def __init__(self, cfg: dict, engine: Engine, writer: Writer, newest_t: float = 0.0):
        """newest_t: the database's newest engine time, read once by the start: the clock never goes back past it."""
        Commands.__init__(self)
        self.cfg = cfg
        self.engine = engine
        self.writer = writer
        self.lock = threading.RLock()
        self._actuation = threading.Lock()
        self.started_wall = time.time()
        self.stats = LiveStats()
        self.engine_errors, self.stopping = 0, False     # stopping: the drain began (a pin is saved, the engine going)
        self.refused: tuple[int, str] | None = None    # (threshold, why) while the engine refuses to take it
        self.decisions = 0
        self.last_decision: dict | None = None
        self.job_errors: dict[str, int] = {}
        self.job_failing: dict[str, str] = {}     # job -> its error, while its newest run failed
        self.last_retune_ok = time.monotonic()
        self._logs = RateLimitedLog(log)
        saved = self._read(queries.settings)
        name, params, policy = saved_policy(saved, cfg, self._build_policy)
        policy, _ = self._restore(policy, name, params)
        self.loop, self.start_reason = start_loop(cfg, policy, saved, engine.max_batch_size)
        if unused := config_policy_unused(cfg, {"policy": {"name": name, "params": params}} if "policy" in saved else {}):
            log.warning("%s", unused)
        self.policy_name = name
        self.clock = SteadyClock(engine.now, newest_t or None)   # never going back
        gate = SampleGate(engine.max_batch_size, engine.spec_steps, self.clock)
        self.ingest = Ingest(self.lock, self.loop, self.stats, writer, gate, cfg["control"]["ingest_queue"])
        self._rollups = Rollups(cfg["storage"]["rollup_s"], policy.buckets.edges)
        if "policy" not in saved:        # first start: record the configured policy as the active one
            writer.setting("policy", {"name": name, "params": params})
        self.clock_speed = float(getattr(engine, "speed", 1.0) or 1.0)
        writer.setting("clock", {"speed": self.clock_speed})    # offline status: whose time the rates are in

    def reader(self) -> sqlite_utils.Database:
        """A fresh read-only connection: the writer thread owns self.db's connection."""
        return open_store(self.cfg["storage"]["db"], readonly=True, check=False)

    def _read(self, query: Callable, *args):
        db = self.reader()
        try:
            return query(db, *args)
        finally:
            db.conn.close()

    def _build_policy(self, name: str, params: Mapping[str, Any]) -> Policy:
        """Validates name and params: PolicyError, and nothing changed, on bad input."""
        return make_policy(name, params, seed=self.cfg["policy"]["seed"], max_batch_size=self.engine.max_batch_size)

    def _restore(self, policy: Policy, name: str, params: Mapping[str, Any]) -> tuple[Policy, bool]:
        """(the policy with the newest committed state saved for it, True) if any and sound; else (the
        fresh policy, False)."""
        # (not JSON: a ValueError, which the API would answer as a bad argument; nested too deeply, a RecursionError; a
        # number a float or the random generator cannot take, OverflowError: each start a traceback, restarted for ever)
        try:
            saved = self._read(queries.latest_policy_state, resolve_name(name))
            if saved:
                policy.load_state(saved["state"])
                return policy, True
        except (PolicyError, TypeError, ValueError, AttributeError, KeyError, RecursionError, OverflowError) as e:
            log.warning(f"saved state of {name} not restored: {e}")   # (f: RepeatFilter keys on the text)
            return self._build_policy(name, params), False     # a half-loaded state is no state
        return policy, False

    # --- actuation --------------------------------------------------------------
    def apply_initial(self) -> None:
        """Re-apply the restored threshold before the first retune, and start the stall clock: the
        engine's start (minutes on a GPU) is not a loop that stopped deciding."""
        with self._actuation:
            self._actuate(self.loop.threshold, self.loop.threshold, self.start_reason, False, self.clock.now())
        self.last_retune_ok = time.monotonic()

    def _actuate(self, new: int, old: int, reason: str, exploratory: bool, now: float) -> None:
        """Apply a threshold (the caller holds _actuation, not lock: SGLang's answer can take seconds)."""
        try:
            self.engine.set_threshold(new)
        except EngineError as e:
            self.engine_errors += 1
            self.refused = (new, str(e))
            with self.lock:
                self.loop.revert(old)          # the engine still runs `old`: the next tick tries again
            if self._logs.error("actuate", "could not apply threshold %d: %s", new, e):
                self.writer.event("error", f"set_threshold({new}) failed: {e}")
            return
        self.refused = None
        self._record(new, old, reason, exploratory, now)

    def _record(self, new: int, old: int, reason: str, exploratory: bool, now: float) -> None:
        """A decision the engine runs: the history's row and the threshold setting."""
        self.decisions += 1
        self.last_decision = {"t": now, "wall": time.time(), "old": old, "new": new, "reason": reason,
                              "exploratory": exploratory}
        self.writer.decision(now, old, new, self.policy_name, reason, exploratory)
        with self.lock:         # what a restart resumes from: the learned threshold, not a trial's or a pin's
            learned = self.loop.guard.exploit
        self.writer.setting("threshold", learned)

    def _retune(self) -> None:
        with self._actuation:
            with self.lock:
                now = self.clock.now()
                self.loop.prefills_pay_draft = self.engine.prefills_pay_draft()
                tick = self.loop.tick(now)
            if tick.changed:
                self._actuate(tick.threshold, tick.previous, tick.reason, tick.exploratory, now)
                return
            self.refused = None     # the loop wants what the engine runs: a refusal of another threshold is moot
            if tick.trial_kept:           # the engine runs it already: only the history's row
                self._record(tick.threshold, tick.previous, tick.reason, False, now)

    def retune(self) -> None:
        """The scheduler's job. A failure is counted and logged (rate-limited), and the loop goes on;
        only a retune that worked restarts the stall clock, which the daemon's watchdog pings follow
        (Daemon._serve), so one that keeps failing is restarted."""
        if not self.guarded("retune", self._retune)():
            return
        self.last_retune_ok = time.monotonic()
        sd_notify("STATUS=" + status_text(self.loop.threshold, self.loop.pinned is not None, self.policy_name,
                                          self.stats.snapshot()))

    # --- jobs -------------------------------------------------------------------
    def guarded(self, name: str, fn: Callable[[], None]) -> Callable[[], bool]:
        """fn as a job that never raises: a failure is counted, logged (rate-limited) and reported."""
        def run() -> bool:
            try:
                fn()
            except Exception as e:
                self.job_errors[name] = self.job_errors.get(name, 0) + 1
                self.job_failing[name] = f"{type(e).__name__}: {e}"
                self._logs.error(f"job:{name}", "%s failed (%s: %s); carrying on", name, type(e).__name__, e)
                return False
            self.job_failing.pop(name, None)
            return True
        return run

    def checkpoint(self) -> None:       # queued under the lock (a put: never blocks): a switch's newer snapshot after it
        with self.lock:
            p = self.loop.policy
            try:
                self.writer.policy_state(p.name, dict(p.params), p.state())
            except ValueError:
                raise PolicyError(f"policy {p.name}: its state holds a non-finite number; not checkpointed") from None

    def rollup(self) -> None:
        self.writer.call(self._rollups, self._rollups.committed)

    def retention(self) -> None:
        keep, now, trim = Retention.from_storage(self.cfg["storage"]), self.clock.now(), self.writer.trim_due()
        self.writer.call(lambda db: apply_retention(db, now, keep, trim=trim))

    # --- status -------------------------------------------------------------------
    def problems(self, health: Mapping[str, Any]) -> list[str]:
        """Why the daemon is not healthy (empty when it is)."""
        out = [] if health.get("ok") else [f"engine: {health.get('detail')}"]
        out += [p for p in (self.writer.problem, self.writer.room.problem()) if p]   # (room: the disk nearly full)
        out += [f"{job}: {error}" for job, error in sorted(self.job_failing.items())]
        if self.ingest.failing:
            out.append(f"ingest: {self.ingest.failing}")
        out += [stalled for stalled in (self.ingest.gate.stalled(), health.get("telemetry")) if stalled]
        if self.refused:        # (the loop decides on; the engine runs what it last took)
            out.append("actuation: the engine did not take threshold %d (%s); retried every retune" % self.refused)
        return out

    def status(self) -> dict:
        with self.lock:
            window = self.stats.snapshot(self.clock.now(), self.clock_speed)
            window["clock_speed"] = self.clock_speed
            loop, guard = self.loop, self.loop.guard
            control = {"threshold": loop.threshold, "pinned": loop.pinned is not None, "exploit_threshold": guard.exploit,
                       "trial": loop.exploring,
                       "policy": {"name": self.policy_name, "policy": loop.policy.name,
                                  "params": dict(loop.policy.params)},
                       "exploration_share": round(guard.explore_used, 4), "last_decision": self.last_decision,
                       "engine_errors": self.engine_errors, "decisions": self.decisions,
                       "job_errors": dict(self.job_errors)}
        problems = self.problems(health := {**self.engine.health(), "max_batch_size": self.engine.max_batch_size})
        daemon = {"running": True, "pid": os.getpid(), "uptime_s": round(time.time() - self.started_wall, 1),
                  "db": self.cfg["storage"]["db"], "socket": self.cfg["control"]["socket"],
                  "healthy": not problems, "problems": problems}
        ing, w = self.ingest, self.writer
        samples = {"total": self.stats.total, "per_s": self.stats.arrival_rate(time.monotonic()), "dropped": ing.dropped,
                   "rejected": dict(ing.gate.rejected), "ingest_errors": ing.errors,
                   "written": w.written_samples, "write_dropped": w.dropped, "write_errors": w.errors}
        return build_status(daemon, health, control, window, samples)
