"""What the fault campaign (bench/faults.py) needs around a real daemon process: a small tmpfs, a
fake SGLang engine configuration, latency probes of /status, and the database checks."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.cli.client import DaemonError, DaemonUnreachable, request  # noqa: E402

BAD_ROWS = ("SELECT count(*) FROM samples WHERE NOT (batch_size > 0 AND steps >= 0 AND tokens >= batch_size "
            "AND tokens <= batch_size * (steps + 1) AND step_s >= 1e-5 AND step_s <= 3600 AND t = t AND t < 1e12)")


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "4m"):
    """A tmpfs of `size` at path (root only); yields False where mounting is not permitted."""
    path.mkdir(parents=True, exist_ok=True)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                        capture_output=True).returncode == 0
    try:
        yield ok
    finally:
        if ok:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path, leave: int = 0) -> int:
    """Write a file at path until the file system is full (or has only `leave` bytes free); the bytes written."""
    n = 0
    with open(path, "wb") as f:
        try:
            while not leave or shutil.disk_usage(path.parent).free > leave:
                f.write(b"\0" * 65536)
                f.flush()
                n += 65536
        except OSError:
            pass
    return n


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_sglang_config(work: Path, hostile_per_s: int = 0, stall_s: float = 0.0, ready_s: float = 0.0,
                       oversize_per_s: float = 0.0) -> str:
    """[engine] sglang with bench/fake_sglang.py standing in for SGLang and its plugin."""
    wrapper = work / "fake-python"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT}/bench/fake_sglang.py "$@"\n')
    wrapper.chmod(0o755)
    return (f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/fake"\nspeculative_algorithm = "EAGLE3"\n'
            f'max_running_requests = 64\npython = "{wrapper}"\nport = {free_port()}\nprobe_s = 2\n'
            f'ready_timeout_s = 60\n[sglang.env]\nFAKE_SGLANG_HOSTILE = "{hostile_per_s}"\n'
            f'FAKE_SGLANG_STALL_S = "{stall_s}"\nFAKE_SGLANG_READY_S = "{ready_s}"\n'
            f'FAKE_SGLANG_OVERSIZE = "{oversize_per_s}"\n')


class StatusProbe:
    """Asks /status in a loop on its own thread; the latencies, and the failures by message."""

    def __init__(self, sock: Path, pause: float = 0.02):
        self.sock, self.pause = sock, pause
        self.latencies: list[float] = []
        self.failures: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "StatusProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.pause):
            t0 = time.perf_counter()
            try:
                request(self.sock, "GET", "/status", timeout=30)
                self.latencies.append(time.perf_counter() - t0)
            except (DaemonError, DaemonUnreachable) as e:
                self.failures[str(e)[:80]] = self.failures.get(str(e)[:80], 0) + 1

    def summary(self) -> str:
        lat = sorted(self.latencies) or [float("nan")]
        return (f"{len(self.latencies)} /status answers, median {1000 * lat[len(lat) // 2]:.1f} ms, "
                f"max {1000 * lat[-1]:.1f} ms, {sum(self.failures.values())} failed")


def db_checks(db: Path) -> dict:
    """Integrity, the settings, and what must never be stored (bad samples, non-finite checkpoints)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        settings = {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM settings")}
        states = [r[0] for r in conn.execute("SELECT state FROM policy_state")]
        finite = all(_finite(s) for s in states)
        return {"integrity": conn.execute("PRAGMA integrity_check").fetchone()[0], "settings": settings,
                "bad_rows": conn.execute(BAD_ROWS).fetchone()[0], "states": len(states), "finite": finite,
                "samples": conn.execute("SELECT count(*) FROM samples").fetchone()[0],
                "max_decision": conn.execute("SELECT max(id) FROM decisions").fetchone()[0] or 0}
    finally:
        conn.close()


def _finite(text: str) -> bool:
    try:
        json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        return True
    except ValueError:
        return False


def log_lines(path: Path, needle: str, since: int = 0) -> int:
    """Lines of the daemon's log after byte offset `since` that contain needle."""
    with open(path, "rb") as f:
        f.seek(since)
        return sum(needle.encode() in line for line in f)


def wait_until(predicate, timeout: float, pause: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(pause)
    return None


def env_for(work: Path) -> None:
    """The sglang engine's state and runtime directories (its telemetry socket, adaptive config)."""
    os.environ["STATE_DIRECTORY"] = str(work)
    os.environ["RUNTIME_DIRECTORY"] = str(work)
