"""The daemon's life: preflight (preflight.py's checks), engine start, bring-up, serving, reload and orderly shutdown."""
from __future__ import annotations

import copy
import errno
import logging
import os
import signal
import threading
import time
from pathlib import Path

from policies import PolicyError
from state import queries
from state.db import open_store
from state.lock import DaemonLock
from state.room import Room
from state.writer import Writer

from ..numtext import one_line
from ..paths import DEFAULT_CONFIG, default_db, default_socket, denied_note, pid_namespace
from .config import load_config
from .configdiff import RELOADED, reloadable, restart_needed, shadowed
from .drain import drain
from .engines.base import Engine, EngineError
from .notify import extend_timeout_usec, sd_notify
from .preflight import Fatal, check_given_paths, check_installed, check_no_clash, configured_engine, port_taken
from .ownfiles import OwnFiles
from .sockprobe import SocketRefused
from .ticker import Ticker

log = logging.getLogger("spec_controller")


class Daemon:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.hups_before: list = []      # SIGHUPs since the config was read, before _signals (main.run's)
        self.started_cfg = copy.deepcopy(cfg)        # what a reload compares with (run() fills in paths)
        self.stop_flag = threading.Event()
        self.reload_asked = False    # (SIGHUP's: a plain flag, no lock, so that a flood of them cannot nest handlers)
        self.exit_code = 0
        self.stop_reason = ""
        self.watch: dict[str, threading.Thread] = {}     # worker threads whose death ends the daemon
        self.stall_s = 60.0                               # no retune that worked for this long: exit
        self.own_files = OwnFiles()                       # the database and the socket, removed under it: exit
        self.metrics = None                               # the metrics server ([control] metrics_port), once serving
        self.monotonic = time.monotonic                   # the drain's clock (a test's own)

    def request_stop(self, reason: str) -> dict:
        """Ask the daemon to drain and exit 0 (SIGTERM, SIGINT, `specctl stop`); the first reason wins."""
        self.stop_reason = self.stop_reason or reason
        self.stop_flag.set()
        return {"stopping": True, "pid": os.getpid(), "db": self.cfg["storage"]["db"], "pid_namespace": pid_namespace()}

    def _signals(self) -> None:
        # Handlers only set flags; the main loop acts on them.
        signal.signal(signal.SIGTERM, lambda *_: self.request_stop("SIGTERM"))
        signal.signal(signal.SIGINT, lambda *_: self.request_stop("SIGINT"))
        signal.signal(signal.SIGHUP, lambda *_: setattr(self, "reload_asked", True))
        self.reload_asked = self.reload_asked or bool(self.hups_before)     # (after the handler: none falls between)

    def _bring_up(self, engine: Engine, service):
        """Engine ready -> ingest, metrics, control socket, jobs. Returns (server, scheduler, ingest
        thread, retune ticker), or Nones when a stop was asked for while the engine was starting."""
        from apscheduler.schedulers.background import BackgroundScheduler

        from .api import ControlServer

        cfg, st, ctl = self.cfg, self.cfg["storage"], self.cfg["control"]
        ready_timeout_s = engine.ready_timeout_s      # validated where the engine was built
        # systemd would kill a start longer than the unit's TimeoutStartSec (1200 s) that the config allows:
        # the start timeout is extended (never shortened) to cover the engine's wait and the bring-up after it
        if (usec := extend_timeout_usec(ready_timeout_s)) is not None:
            sd_notify(f"EXTEND_TIMEOUT_USEC={usec}")
        if not engine.wait_ready(ready_timeout_s, cancel=self.stop_flag):
            if self.stop_flag.is_set():
                return None, None, None, None
            from .launchcheck import not_ready_exit
            raise Fatal(*not_ready_exit(engine, ready_timeout_s))
        service.apply_initial()
        ingest = threading.Thread(target=service.ingest.run, name="ingest", daemon=True)
        ingest.start()
        if ctl["metrics_port"]:      # before the control socket: once that answers, everything is up
            from .metrics import start_metrics
            try:
                self.metrics = start_metrics(service, ctl["metrics_port"], ctl["metrics_addr"])
            except OSError as e:
                raise port_taken(ctl["metrics_port"], e, ctl["metrics_addr"]) from None
        try:
            server = ControlServer(ctl["socket"], service, on_stop=lambda: self.request_stop("specctl stop"))
        except OSError as e:       # (the preflight asked; its directory changed since: named, not a bare errno)
            why = f" cannot be created there ({e.strerror})" if e.errno == errno.ENOENT else \
                f": {e.strerror or e}{denied_note(ctl['socket'], e)}"
            raise Fatal(f"control socket {ctl['socket']}{why}") from None      # (ENOENT at bind: /proc, as --db's)
        retune = None
        try:        # a failure from here on (a thread refused, a job not scheduled) must not leave these serving
            server.start()
            self.own_files.add("control socket", ctl["socket"])
            speed = cfg["sim"]["speed"] if cfg["engine"]["kind"] == "sim" else 1.0
            tick = max(cfg["policy"]["tick_s"] / speed, 0.02)
            retune = Ticker("retune", tick, service.retune).start()
            sched = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 5})
            jobs = [("rollup", service.rollup, max(st["rollup_s"] / speed, 0.5)),
                    ("retention", service.retention, max(60.0 / speed, 5.0)),
                    ("checkpoint", service.checkpoint, max(st["checkpoint_s"] / speed, 1.0))]
            if engine.probe_s > 0:
                jobs.append(("engine-probe", engine.probe, engine.probe_s))
            for name, fn, seconds in jobs:
                sched.add_job(service.guarded(name, fn), "interval", seconds=seconds, id=name)
            sched.start()
        except BaseException:
            if retune is not None:
                retune.stop()
            server.stop()
            raise
        self.stall_s = max(60.0, 20 * tick)
        self.watch = {"ingest": ingest, "state writer": service.writer.thread, "control API": server.thread,
                      "retune": retune.thread, "scheduler": getattr(sched, "_thread", None) or ingest}
        return server, sched, ingest, retune

    def run(self) -> int:
        from .service import Service

        st, ctl = self.cfg["storage"], self.cfg["control"]
        check_given_paths(self.cfg)
        # absolute: what status reports and specctl --db compares is not the daemon's working directory's
        st["db"] = str(Path(st["db"]).absolute()) if st["db"] else str(default_db())
        ctl["socket"] = ctl["socket"] or str(default_socket())
        self._signals()
        configured = configured_engine(self.cfg)        # its configuration refused before anything is written
        check_no_clash(self.cfg, configured.own_files)
        check_installed(configured)
        lock = DaemonLock(st["db"])
        lock.acquire(pid_namespace())
        try:
            db = open_store(st["db"])
            # as opened, not after the engine's start (minutes on a GPU): removed meanwhile, the first check says so
            self.own_files.add("database", st["db"])
        except BaseException:                # a refused database keeps no lock file of ours beside it
            lock.release(remove_if_created=True)
            raise                            # (main: exit 2 where no restart changes it, preflight.store_refusal)
        newest_t = queries.last_engine_time(db)      # (read once: the simulator resumes there, the loop's clock too)
        engine = configured_engine(self.cfg, newest_t)
        writer = Writer(db, room=Room(st["db"], st["min_free_mb"])).start()
        try:
            service = Service(self.cfg, engine, writer, newest_t)
        except PolicyError as e:
            writer.stop()
            raise Fatal(f"policy: {e}", 2) from None
        writer.event("start", f"engine={self.cfg['engine']['kind']} policy={service.policy_name} threshold={service.loop.threshold} "
                     f"pinned={service.loop.pinned} pid={os.getpid()} max_batch={engine.max_batch_size} socket={Path(ctl['socket']).absolute()}")
        server, sched, ingest, retune = self._start(engine, service, writer)
        if server is None:                 # stopped (SIGTERM) while the engine was still starting
            engine.stop()
            writer.event("stop", f"{self.stop_reason}: stopped before the engine was ready")
            writer.stop()
            lock.release()
            log.info("spec-controller stopped (%s) before the engine was ready; exit 0", self.stop_reason)
            return 0
        log.info("spec-controller ready: engine %s, policy %s, threshold %s, socket %s, db %s",
                 self.cfg["engine"]["kind"], service.policy_name, service.loop.threshold, ctl["socket"], st["db"])
        if self.cfg["engine"]["kind"] == "sim" and os.environ.get("INVOCATION_ID"):     # (set by systemd for a unit)
            log.warning("engine sim under systemd: the simulator starts no SGLang and serves no requests; [engine] kind "
                        "= \"sglang\" in %s runs SGLang", self.cfg.get("_path") or DEFAULT_CONFIG)
        sd_notify("READY=1")
        try:
            self._serve(engine, service, writer)
        finally:
            self._drain(engine, service, (server, sched, ingest, retune), db, lock)
        return self.exit_code

    def _drain(self, engine: Engine, service, parts: tuple, db, lock: DaemonLock) -> None:
        """Stop deciding, drain the engine, fold in what it still sent, checkpoint, flush, let go of the socket and
        the lock, within drain.STOP_BUDGET_S; one log line."""
        drain(self, engine, service, parts, db, lock)

    def _start(self, engine: Engine, service, writer: Writer):
        """Start the engine and bring the daemon up around it; a started engine is never left
        behind on failure (the SGLang child holds the GPUs)."""
        try:
            # The pinned or restored threshold from the start: SGLang serves (its warm-up, early requests)
            # before the daemon sees it ready and applies it, and got [policy] initial_threshold.
            engine.initial_threshold = service.loop.threshold
            engine.start(service.ingest.on_sample)
            return self._bring_up(engine, service)
        except BaseException as e:
            self._stop_metrics()           # (started before a control socket that failed)
            engine.stop()
            service.ingest.stop()          # (its thread, started once the engine was ready, ends at its next wake)
            message = str(e) if isinstance(e, (Fatal, EngineError, SocketRefused)) else \
                f"start-up failed: {type(e).__name__}: {e}"
            writer.event("error", message)
            writer.stop()
            if isinstance(e, Fatal) or not isinstance(e, Exception):
                raise
            raise Fatal(message) from None

    def _stop_metrics(self) -> None:
        """The metrics port let go and its threads ended (it served on after the daemon stopped: ServiceCollector
        read a drained service for as long as the process lived)."""
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None

    def _serve(self, engine: Engine, service, writer: Writer) -> None:
        """Until SIGTERM, or until the daemon cannot go on: the engine gone, a worker thread dead, or
        no retune that worked for stall_s. Then it exits 1 and systemd restarts it: never a live
        process that has stopped deciding. SIGHUP reloads. systemd's watchdog is fed here, while none
        of that is wrong: a ping per retune starved it whenever tick_s came near WatchdogSec, and with
        stall_s equal to WatchdogSec its SIGABRT always beat this orderly exit 1."""
        while not self.stop_flag.wait(0.5):
            if self.reload_asked:
                self.reload_asked = False
                self._reload(service)
            why = self._fatal_condition(engine, service)
            if why:
                log.error("%s; exiting so that the service is restarted", why)
                writer.event("error", why)
                self.exit_code = 1
                self.stop_reason = why.split(":")[0]
                return
            sd_notify("WATCHDOG=1")

    def _fatal_condition(self, engine: Engine, service) -> str | None:
        health = engine.health()
        if not health.get("ok"):
            return f"engine gone: {health.get('detail')}"
        dead = [name for name, thread in self.watch.items() if not thread.is_alive()]
        if dead:
            return f"worker thread died: {', '.join(dead)}"
        quiet = time.monotonic() - service.last_retune_ok
        if quiet > self.stall_s:
            return f"control loop stalled: no retune has worked for {quiet:.0f} s ({service.job_failing.get('retune')})"
        return self.own_files.changed()

    def _reload(self, service) -> None:
        """Re-read the guard, retention, min_free_mb and log level; a bad config (or any failure) keeps the running one."""
        from ..control.guard_config import GuardConfig
        try:
            fresh = load_config(self.cfg.get("_path") or None, self.cfg.get("_overrides"))
            guard = GuardConfig.from_mapping(fresh["guard"])
        except Exception as e:         # any failure: the daemon goes on (RecursionError stopped it)
            log.error(f"reload refused, keeping the running config: {one_line(str(e))}")   # (each its own line)
            service.writer.event("reload", f"refused: {one_line(str(e))}")
            # ... and status says so until a reload works (it said 'healthy' and nothing of it: a restart, e.g. one
            # systemd makes after a crash, would meet the same refusal; helper-153)
            service.job_errors["reload"] = service.job_errors.get("reload", 0) + 1
            service.job_failing["reload"] = (f"refused at {time.strftime('%H:%M:%S')}, the running config kept: "
                                             f"{one_line(str(e))}")
            return
        service.job_failing.pop("reload", None)
        with service.lock:
            service.loop.set_guard_config(guard)
            self.cfg["storage"].update({k: v for k, v in fresh["storage"].items() if reloadable("storage", k)})
        service.writer.room.set_floor(fresh["storage"]["min_free_mb"])     # (it was read at the start only)
        logging.getLogger().setLevel(fresh["control"]["log_level"])
        service.writer.event("reload", RELOADED)
        log.info("configuration reloaded (SIGHUP): %s from %s", RELOADED,
                 self.cfg.get("_path") or "built-in defaults")
        self._reload_warnings(service, fresh)

    def _reload_warnings(self, service, fresh: dict) -> None:
        """What a reload did not apply, named key by key (it used to be ignored silently)."""
        for what, keys in (("changed, not applied until a restart", restart_needed(self.started_cfg, fresh)),
                           ("changed, a first start's only (the database's policy and threshold win at every start; "
                            "`specctl policy set` switches now)", restart_needed(self.started_cfg, fresh, True)),
                           ("in the config file but overridden by the command line, not applied",
                            shadowed(self.cfg.get("_path"), self.cfg.get("_overrides")))):
            if keys:
                text = "; ".join(keys)
                service.writer.event("reload", f"{what}: {text}")
                log.warning(f"reload: {what}: {text}")     # (RepeatFilter keys on the format: each its own)
