"""Start the real daemon as a subprocess (simulated engine, fast clock) for end-to-end tests."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from controller.cli.client import DaemonError, DaemonUnreachable, request

ROOT = Path(__file__).resolve().parent.parent


class DaemonProc:
    def __init__(self, workdir: Path, *extra: str, notify: str | None = None, speed: float | None = 20.0,
                 config_text: str = "", env_extra: dict[str, str] | None = None, cwd: Path = ROOT,
                 paths_in_config: tuple[Path, Path] | None = None):
        """paths_in_config: (database, socket) where config_text puts them, given by no flag. speed: the simulator's
        --speed (None: given not, as to an SGLang engine, which refuses it)."""
        self.dir = workdir
        self.db, self.socket = paths_in_config or (workdir / "state.db", workdir / "ctl.sock")
        config = workdir / "config.toml"
        config.write_text(config_text)
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
        env.pop("INVOCATION_ID", None)       # (a test run by a systemd unit: its daemons are not the service)
        env.update(env_extra or {})
        if notify:
            env["NOTIFY_SOCKET"] = notify
        self.log = open(workdir / "daemon.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "controller.daemon", "run", "--config", str(config),
             *(() if paths_in_config else ("--db", str(self.db), "--socket", str(self.socket))),
             *(("--speed", str(speed)) if speed is not None else ()), *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=str(cwd))

    def call(self, method: str, path: str, body: dict | None = None):
        return request(self.socket, method, path, body)

    def wait_socket(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log_text()}")
            try:
                self.call("GET", "/health")
                return
            except (DaemonUnreachable, DaemonError):
                time.sleep(0.1)
        raise TimeoutError(f"daemon socket did not come up: {self.log_text()}")

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "condition"):
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            last = self.call("GET", "/status")
            if predicate(last):
                return last
            time.sleep(0.1)
        raise TimeoutError(f"{what} not reached; last status {last}")

    def wait_start_recorded(self, timeout: float = 30.0) -> bool:
        """Whether the daemon wrote its start event within timeout (its engine may not be ready yet: a slow fake
        SGLang's start is the window between the two)."""
        import sqlite3
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.proc.poll() is None:
            time.sleep(0.1)
            try:
                conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
                try:
                    if conn.execute("SELECT count(*) FROM events WHERE kind = 'start'").fetchone()[0]:
                        return True
                finally:
                    conn.close()
            except sqlite3.Error:
                pass
        return False

    def log_text(self, tail: int = 3000) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.dir / "daemon.log").read_text(errors="replace")[-tail:]

    def close(self) -> None:
        """Whatever the test did: killed if it still runs, reaped, its log closed (a test's `finally`; stop() is the
        orderly end)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()

    def stop(self, sig=None, timeout: float = 30.0) -> int:
        import signal
        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()


def notify_listener(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(0.5)
    return s


def wait_notify(sock: socket.socket, prefix: bytes, timeout: float = 30.0) -> list[bytes]:
    seen = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            msg = sock.recv(4096)
        except socket.timeout:
            continue
        seen.append(msg)
        if msg.startswith(prefix):
            return seen
    raise TimeoutError(f"no {prefix!r} among {seen[-5:]}")


class StartingDaemon:
    """What a daemon whose engine is still loading leaves for specctl to see: the database lock held by
    this process and, unless record=False (a daemon of an older version), its start event naming its pid
    and the control socket it will open. No socket."""

    def __init__(self, db: Path, socket_path: Path, record: bool = True):
        from state.db import open_store
        from state.lock import DaemonLock
        from state.items import INSERTS, event_item
        self.lock = DaemonLock(db)
        self.lock.acquire()
        store = open_store(db)
        if record:
            _, row = event_item("start", f"engine=sglang policy=bandit threshold=8 pinned=None pid={os.getpid()} "
                                         f"socket={Path(socket_path).absolute()}")
            store.conn.execute(INSERTS["events"], row)
        store.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.lock.release()
