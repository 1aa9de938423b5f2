"""The daemon's moving parts: ingest, control loop, actuation, persistence, status."""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any, Mapping

from policies import Policy, PolicyError, Sample, make_policy, resolve_name
from state import queries
from state.db import open_store
from state.writer import Writer

from ..control.guard import GuardConfig
from ..control.loop import ControlLoop
from ..status import build_status
from .engines.base import Engine, EngineError
from .livestats import LiveStats
from .notify import sd_notify

log = logging.getLogger("spec_controller")


class Service:
    """Owns the control loop. observe() runs on the ingest thread, retune() on the
    scheduler's; one lock serialises them and the API's commands."""

    def __init__(self, cfg: dict, engine: Engine, writer: Writer):
        self.cfg = cfg
        self.engine = engine
        self.writer = writer
        self.lock = threading.RLock()
        self.started_wall = time.time()
        self.stats = LiveStats()
        self.ingest_q: queue.Queue = queue.Queue(maxsize=cfg["control"]["ingest_queue"])
        self.dropped = 0
        self.engine_errors = 0
        self.decisions = 0
        self.last_decision: dict | None = None
        self._stop = threading.Event()
        db = self.reader()
        try:
            saved = queries.settings(db)
        finally:
            db.conn.close()
        pol = saved.get("policy") or {"name": cfg["policy"]["name"], "params": cfg["policy"]["params"]}
        policy = self._restore(self._build_policy(pol["name"], pol.get("params") or {}), pol["name"])
        pinned = saved.get("pinned")
        initial = pinned if pinned is not None else saved.get("threshold", cfg["policy"]["initial_threshold"])
        self.loop = ControlLoop(policy, GuardConfig.from_mapping(cfg["guard"]), int(initial))
        self.loop.pin(pinned)
        self.policy_name = pol["name"]
        if "policy" not in saved:        # first start: record the configured policy as the active one
            writer.setting("policy", {"name": pol["name"], "params": dict(pol.get("params") or {})})

    # --- policy -------------------------------------------------------------
    def reader(self):
        """A fresh read-only connection: the writer thread owns self.db's connection."""
        return open_store(self.cfg["storage"]["db"], readonly=True, check=False)

    def _build_policy(self, name: str, params: Mapping[str, Any]) -> Policy:
        """Validates name and params: PolicyError, and nothing changed, on bad input."""
        return make_policy(name, params, seed=self.cfg["policy"]["seed"], max_batch_size=self.engine.max_batch_size)

    def _restore(self, policy: Policy, name: str) -> Policy:
        """Load the newest committed state saved for this policy, if any."""
        db = self.reader()
        try:
            saved = queries.latest_policy_state(db, resolve_name(name))
        finally:
            db.conn.close()
        if saved:
            try:
                policy.load_state(saved["state"])
            except PolicyError as e:
                log.warning("saved state of %s not restored: %s", name, e)
        return policy

    def set_policy(self, name: str, params: Mapping[str, Any]) -> dict:
        """Validate and switch; raises PolicyError (nothing changed) on bad input."""
        policy = self._build_policy(name, params)
        with self.lock:
            # The current policy's state is checkpointed and committed before the new one restores, so
            # a switch back (or the same policy with new params) resumes from what was learned until now.
            self.checkpoint()
            if not self.writer.flush(5):
                log.warning("policy switch: the state writer is slow; %s may restore an older state", name)
            self.loop.set_policy(self._restore(policy, name))
            self.policy_name = name
            self.writer.setting("policy", {"name": name, "params": dict(params)})
            self.writer.event("policy", f"{name} {dict(params)}")
        return self.policy_info()

    def policy_info(self) -> dict:
        p = self.loop.policy
        return {"name": self.policy_name, "policy": p.name, "params": dict(p.params), "seed": p.seed,
                "state_keys": sorted(p.state()), "pinned": self.loop.pinned}

    # --- threshold ----------------------------------------------------------
    def pin(self, threshold: int | None) -> dict:
        if threshold is not None and not 0 <= threshold <= self.engine.max_batch_size:
            raise ValueError(f"threshold {threshold} out of range (allowed 0 .. {self.engine.max_batch_size})")
        with self.lock:
            self.loop.pin(threshold)
            self.writer.setting("pinned", threshold)
            self.writer.event("pin" if threshold is not None else "unpin", str(threshold))
        self.retune()
        return {"threshold": self.loop.threshold, "pinned": self.loop.pinned is not None}

    def apply_initial(self) -> None:
        """Re-apply the restored threshold before the first retune."""
        self._actuate(self.loop.threshold, self.loop.threshold, "restored at start", False, self.engine.now())

    def _actuate(self, new: int, old: int, reason: str, exploratory: bool, now: float) -> None:
        try:
            self.engine.set_threshold(new)
        except EngineError as e:
            self.engine_errors += 1
            self.writer.event("error", f"set_threshold({new}) failed: {e}")
            log.error("could not apply threshold %d: %s", new, e)
            return
        self.decisions += 1
        self.last_decision = {"t": now, "wall": time.time(), "old": old, "new": new, "reason": reason,
                              "exploratory": exploratory}
        self.writer.decision(now, old, new, self.policy_name, reason, exploratory)
        self.writer.setting("threshold", new)

    def retune(self) -> None:
        with self.lock:
            now = self.engine.now()
            tick = self.loop.tick(now)
            if tick.changed:
                self._actuate(tick.threshold, tick.previous, tick.reason, tick.exploratory, now)
        # One status line and a watchdog ping per retune (non-blocking datagrams: cheap).
        snap = self.stats.snapshot()
        sd_notify(f"STATUS=threshold {self.loop.threshold}{' (pinned)' if self.loop.pinned is not None else ''}"
                  f", policy {self.policy_name}, accept {snap['mean_accept_length']}, tok/s {snap['tok_per_s']}")
        sd_notify("WATCHDOG=1")

    # --- ingest -------------------------------------------------------------
    def on_sample(self, sample: Sample) -> None:
        """Called on the engine's thread: never blocks, drops and counts when full."""
        try:
            self.ingest_q.put_nowait(sample)
        except queue.Full:
            self.dropped += 1

    def ingest_forever(self) -> None:
        while not self._stop.is_set() or not self.ingest_q.empty():
            try:
                first = self.ingest_q.get(timeout=0.2)
            except queue.Empty:
                continue
            batch = [first]
            while len(batch) < 1024:
                try:
                    batch.append(self.ingest_q.get_nowait())
                except queue.Empty:
                    break
            with self.lock:
                for s in batch:
                    self.loop.observe(s)
                    self.stats.add(s)
                self.stats.arrived(len(batch), time.monotonic())
            self.writer.samples([s.as_tuple() for s in batch])

    def stop_ingest(self) -> None:
        self._stop.set()

    # --- persistence jobs ---------------------------------------------------
    def checkpoint(self) -> None:
        with self.lock:
            p = self.loop.policy
            self.writer.policy_state(p.name, dict(p.params), p.state())

    def rollup(self) -> None:
        window = self.cfg["storage"]["rollup_s"]
        end = self.engine.now() // window * window
        edges = self.loop.policy.buckets.edges
        self.writer.call(lambda db: queries.rollup(db, end - window, window, edges))

    def retention(self) -> None:
        st = self.cfg["storage"]
        now = self.engine.now()
        self.writer.call(lambda db: queries.apply_retention(db, now, st["retention_samples_s"],
                                                            st["retention_max_rows"], st["retention_aggregates_s"]))

    # --- status ---------------------------------------------------------------
    def status(self) -> dict:
        with self.lock:
            window = self.stats.snapshot(self.engine.now(), getattr(self.engine, "speed", 1.0))
            health = self.engine.health()
            daemon = {"running": True, "pid": os.getpid(), "uptime_s": round(time.time() - self.started_wall, 1),
                      "db": self.cfg["storage"]["db"], "socket": self.cfg["control"]["socket"],
                      "healthy": bool(health.get("ok"))}
            control = {"threshold": self.loop.threshold, "pinned": self.loop.pinned is not None,
                       "exploit_threshold": self.loop.guard.exploit,
                       "policy": {"name": self.policy_name, "policy": self.loop.policy.name,
                                  "params": self.loop.policy.params},
                       "exploration_share": round(self.loop.guard.explore_used, 4),
                       "last_decision": self.last_decision, "engine_errors": self.engine_errors,
                       "decisions": self.decisions}
            samples = {"total": self.stats.total, "per_s": self.stats.arrival_rate(time.monotonic()),
                       "dropped": self.dropped,
                       "written": self.writer.written_samples, "write_dropped": self.writer.dropped,
                       "write_errors": self.writer.errors}
            return build_status(daemon, health, control, window, samples)
