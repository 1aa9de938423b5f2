"""The daemon's moving parts: ingest, control loop, actuation, persistence jobs, status."""
from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from policies import Policy, PolicyError, make_policy, resolve_name
from policies.params import shown      # (a value in a refusal, cut short)
from state import queries
from state.db import open_store
from state.items import event_item, policy_state_item, setting_item
from state.logs import RateLimitedLog
from state.retention import Retention, Rollups, apply_retention
from state.writer import WriteFailed, Writer

from ..status import build_status
from .engines.base import Engine, EngineError
from .ingest import Ingest
from .intake import SampleGate, SteadyClock
from .livestats import LiveStats
from .notify import sd_notify, status_text
from .restore import config_policy_unused, saved_policy, start_loop

if TYPE_CHECKING:
    import sqlite_utils

log = logging.getLogger("spec_controller")


class CommandRefused(Exception):
    """An operator command that could not be made durable: nothing changed (HTTP 503, one line)."""


class Service:
    """Owns the control loop. Ingest feeds it on its thread, retune() asks it on the scheduler's.

    Locks: `lock` guards the loop's state and is held for microseconds, never across I/O, so that
    status answers whatever SGLang or SQLite is doing; `_actuation` keeps retunes (and the HTTP
    calls that apply them) in order; `_commands` runs one operator command at a time: its durable
    write first, then its effect in memory. A command waits for its turn and its write's start
    within command_timeout_s in all (_command).
    """

    def __init__(self, cfg: dict, engine: Engine, writer: Writer, newest_t: float = 0.0):
        """newest_t: the database's newest engine time, read once by the start: the clock never goes back past it."""
        self.cfg = cfg
        self.engine = engine
        self.writer = writer
        self.lock = threading.RLock()
        self._actuation = threading.Lock()
        self._commands = threading.Lock()
        self.started_wall = time.time()
        self.stats = LiveStats()
        self.engine_errors, self.stopping = 0, False     # stopping: the drain began (a pin is saved, the engine going)
        self.refused: tuple[int, str] | None = None    # (threshold, why) while the engine refuses to take it
        self.decisions = 0
        self.last_decision: dict | None = None
        self.job_errors: dict[str, int] = {}
        self.job_failing: dict[str, str] = {}     # job -> its error, while its newest run failed
        self.last_retune_ok = time.monotonic()
        self.command_timeout_s = 5.0       # a command whose write has not started by then is refused (its turn included)
        self._unsettled = False     # a command's write may yet land (maybe_saved): the next pin is written even as a no-op
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

    # --- commands -------------------------------------------------------------
    @contextmanager
    def _command(self) -> Iterator[float]:
        """The operator commands' one lane; its deadline. The wait for a turn counts toward command_timeout_s: behind a
        stuck writer each command waited out the one before it first, so the Nth of N at once was answered after N x 5 s
        (specctl gave up at 10 s without knowing whether its pin was applied; helper-119)."""
        deadline = time.monotonic() + self.command_timeout_s
        if not self._commands.acquire(timeout=self.command_timeout_s):
            why = self.writer.problem or "another command is waiting for it"
            raise CommandRefused(f"the database writer is busy ({why}); nothing changed")
        try:
            yield deadline
        finally:
            self._commands.release()

    def _durable(self, items: list[tuple], deadline: float) -> None:
        try:
            self.writer.transaction(items, timeout=max(0.0, deadline - time.monotonic()))
        except WriteFailed as e:
            self._unsettled |= e.maybe_saved
            raise CommandRefused(str(e) if e.maybe_saved else f"{e}; nothing changed") from None
        self._unsettled = False       # (the writer commits in queue order: whatever was under way has landed)

    def set_policy(self, name: str, params: Mapping[str, Any]) -> dict:
        """Validate, save, switch; PolicyError or CommandRefused (nothing changed) on failure."""
        policy = self._build_policy(name, params)
        policy.check_engine()       # (a threshold judged by the engine that runs it, as a pin is)
        with self._command() as deadline:
            with self.lock:
                old, old_state = self.loop.policy, self.loop.policy.state()
            same = resolve_name(name) == old.name
            learned = "new"         # what the policy now in force knows: told to the operator
            if not same:
                policy, restored = self._restore(policy, name, params)
                learned = "restored" if restored else "new"
            items = [setting_item("policy", {"name": name, "params": dict(params)}), event_item("policy", f"{name} "
                     f"{dict(params)}")]
            try:        # the current policy's state, saved with the switch: a switch back resumes from it
                items.insert(0, policy_state_item(old.name, dict(old.params), old_state))
            except ValueError:
                log.error("policy %s: its state holds a non-finite number; not saved", old.name)
            self._durable(items, deadline)
            with self.lock:
                if same:     # the same policy with new params keeps what it learned up to this instant
                    try:
                        policy.load_state(self.loop.policy.state())
                        learned = "kept"
                    except PolicyError as e:
                        log.warning(f"policy {name}: learned state not carried over: {e}")
                else:       # its state now, queued after any checkpoint taken since old_state (helper-145: a switch
                    self.guarded("checkpoint", self.checkpoint)()       # back restored old_state, the older of the two)
                self.loop.set_policy(policy)
                self.policy_name = name
                if not policy.state():      # fixed, always, never: nothing learned to keep, restore or start on
                    learned = "none"
        return {**self.policy_info(), "learned": learned}

    def policy_info(self) -> dict:
        with self.lock:
            p = self.loop.policy
            return {"name": self.policy_name, "policy": p.name, "params": dict(p.params), "seed": p.seed,
                    "state_keys": sorted(p.state()), "pinned": self.loop.pinned}

    def pin(self, threshold: int | None) -> dict:
        if threshold is not None and not 0 <= threshold <= self.engine.max_batch_size:
            raise ValueError(f"threshold {shown(threshold)} out of range (allowed 0 .. the engine's largest batch, "
                             f"{self.engine.max_batch_size})")
        with self._command() as deadline:
            with self.lock:
                changed = self.loop.pinned != threshold      # a pin where it is pinned, an unpin of nothing: no-ops
            if changed or self._unsettled:      # (else an unpin after a pin that may yet land left it on disk)
                self._durable([setting_item("pinned", threshold),
                               event_item("pin" if threshold is not None else "unpin", str(threshold))], deadline)
                with self.lock:
                    self.loop.pin(threshold)
        if changed and not self.stopping:      # (draining: its next start applies the saved pin; no retune runs now)
            self.retune()
        # a pin's answer names only a refusal of the pin itself (a retune that failed before it actuated leaves an
        # older refusal of another threshold); an unpin's, the policy's
        refused = self.refused if self.refused and threshold in (None, self.refused[0]) else None
        with self.lock:
            loop = self.loop
            return {"threshold": loop.threshold, "pinned": loop.pinned is not None, "exploit_threshold": loop.guard.exploit,
                    "trial": loop.exploring, "changed": changed, "pinned_at": loop.pinned, "stopping": self.stopping,
                    "refused": refused[1] if refused else None, "refused_threshold": refused[0] if refused else None}

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
