"""Fault campaign on the real daemon process (a benchmark, not a test; root for the tmpfs case):

    python bench/faults.py [--kills 50] [--cases kills,full,floor,lock,stall,flood,clients] [--seed 0]

Writes bench/results/faults.md: case, expected, observed, verdict. About 6-8 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

from faultkit import ROOT, StatusProbe, db_checks, env_for, fake_sglang_config, fill, log_lines, small_tmpfs, wait_until
from kills import case_kills

from controller.cli.client import DaemonError, request
from tests.daemon_proc import DaemonProc, notify_listener

Row = tuple[str, str, str, bool]


def _unhealthy(d: DaemonProc) -> dict | None:
    st = d.call("GET", "/status")
    return None if st["daemon"]["healthy"] else st


def case_full(work: Path) -> list[Row]:
    # The floor off: a 4 MB disk is under any floor ([storage] min_free_mb, 64 by default, 16 at least) from the
    # start, so with it on this case would measure the floor, not a full disk (case_floor does that).
    with small_tmpfs(work / "full", "4m") as mounted:
        if not mounted:
            return [("disk full", "-", "not run: mounting a tmpfs is not permitted here", False)]
        d = DaemonProc(work, "--db", str(work / "full" / "state.db"), "--concurrency", "8",
                       "--set", "storage.min_free_mb=0", speed=20)
        try:
            d.wait_socket(90)
            wait_until(lambda: d.call("GET", "/status")["samples"]["written"] > 100, 30)
            offset = (work / "daemon.log").stat().st_size
            filled = fill(work / "full" / "filler")
            t0 = time.monotonic()
            st = wait_until(lambda: _unhealthy(d), 30)
            detect = time.monotonic() - t0
            try:
                d.call("POST", "/threshold/pin", {"threshold": 9})
                refusal = "ACKNOWLEDGED (wrong)"
            except DaemonError as e:
                refusal = f"refused: {e}"
            unchanged = not d.call("GET", "/status")["pinned"]
            time.sleep(10)
            lines = log_lines(work / "daemon.log", "state writer", offset)
            (work / "full" / "filler").unlink()
            t1 = time.monotonic()
            wait_until(lambda: d.call("GET", "/status")["daemon"]["healthy"], 60)
            recover = time.monotonic() - t1
            pinned = d.call("POST", "/threshold/pin", {"threshold": 9})["pinned"]
            code = d.stop()
        finally:
            if d.proc.poll() is None:
                d.proc.kill()
        chk = db_checks(work / "full" / "state.db")
    problems = "; ".join(st["daemon"]["problems"]) if st else "never unhealthy"
    ok = (st is not None and "disk full" in problems and refusal.startswith("refused") and unchanged and lines <= 3
          and pinned and code == 0 and chk["integrity"] == "ok" and chk["settings"].get("pinned") == 9)
    return [("disk full (4 MB tmpfs filled up while the daemon writes; [storage] min_free_mb = 0: no floor)",
             "healthy false with the reason; a pin refused with one line, nothing changed; a few log lines, "
             "not one per write; recovery when space returns",
             f"filled {filled // 1024} KB; unhealthy after {detect:.1f} s ({problems[:90]}); pin {refusal[:160]}; "
             f"state unchanged: {unchanged}; writer log lines in 10+ s full: {lines}; healthy again {recover:.1f} s "
             f"after space returned; pin then acknowledged: {pinned}; SIGTERM exit {code}; integrity {chk['integrity']}",
             ok)]


def case_floor(work: Path, size_mb: int = 96, leave_mb: int = 32) -> list[Row]:
    """The default floor (64 MiB kept free): another process leaves `leave_mb` free, under it but not full."""
    with small_tmpfs(work / "floor", f"{size_mb}m") as mounted:
        if not mounted:
            return [("disk under the floor", "-", "not run: mounting a tmpfs is not permitted here", False)]
        d = DaemonProc(work, "--db", str(work / "floor" / "state.db"), "--concurrency", "8", speed=20)
        try:
            d.wait_socket(90)
            healthy0 = wait_until(lambda: d.call("GET", "/status")["samples"]["written"] > 100, 30) and \
                d.call("GET", "/status")["daemon"]["healthy"]
            offset = (work / "daemon.log").stat().st_size
            fill(work / "floor" / "filler", leave=leave_mb << 20)
            t0 = time.monotonic()
            st = wait_until(lambda: _unhealthy(d), 30)
            detect = time.monotonic() - t0
            dropped0 = d.call("GET", "/status")["samples"]["write_dropped"]
            try:
                pinned, pin = bool(d.call("POST", "/threshold/pin", {"threshold": 9})["pinned"]), "acknowledged"
            except DaemonError as e:
                pinned, pin = False, f"refused ({e})"
            time.sleep(10)
            dropped = d.call("GET", "/status")["samples"]["write_dropped"] - dropped0
            lines = log_lines(work / "daemon.log", "state writer", offset)
            (work / "floor" / "filler").unlink()
            t1 = time.monotonic()
            back = wait_until(lambda: d.call("GET", "/status")["daemon"]["healthy"], 60)
            recover = time.monotonic() - t1
            code = d.stop()
        finally:
            if d.proc.poll() is None:
                d.proc.kill()
        chk = db_checks(work / "floor" / "state.db")
    problems = "; ".join(st["daemon"]["problems"]) if st else "never unhealthy"
    ok = (bool(healthy0) and st is not None and "disk nearly full" in problems and pinned and dropped > 0
          and lines <= 3 and bool(back) and code == 0 and chk["integrity"] == "ok"
          and chk["settings"].get("pinned") == 9)
    return [(f"disk under the floor ({size_mb} MB tmpfs, another file leaves {leave_mb} MiB free; "
             "[storage] min_free_mb = 64, the default)",
             "healthy at the start; then healthy false with the reason; a pin acknowledged (the floor keeps room for "
             "commands); samples turned away and counted; a few log lines; healthy again when space returns",
             f"healthy at the start: {bool(healthy0)}; unhealthy after {detect:.1f} s ({problems[:110]}); pin "
             f"{pin[:120]}; samples turned away in 10 s: {dropped}; writer log lines: {lines}; healthy "
             f"again {recover:.1f} s after space returned: {bool(back)}; SIGTERM exit {code}; integrity "
             f"{chk['integrity']}; pinned on disk {chk['settings'].get('pinned')}", ok)]


def case_lock(work: Path) -> list[Row]:
    import sqlite3
    d = DaemonProc(work, "--concurrency", "8", speed=20)
    try:
        d.wait_socket(90)
        wait_until(lambda: d.call("GET", "/status")["samples"]["written"] > 0, 30)
        other = sqlite3.connect(d.db, isolation_level=None, timeout=30)
        other.execute("BEGIN IMMEDIATE")               # an operator's sqlite3 shell, a backup tool
        with StatusProbe(d.socket) as probe:
            t0 = time.monotonic()
            try:
                d.call("POST", "/threshold/pin", {"threshold": 5})
                outcome = "acknowledged"
            except DaemonError as e:
                outcome = f"refused after {time.monotonic() - t0:.1f} s: {e}"
            problems = d.call("GET", "/status")["daemon"]["problems"]
            time.sleep(max(0.0, 12.0 - (time.monotonic() - t0)))
            other.execute("ROLLBACK")
            other.close()
            wait_until(lambda: d.call("GET", "/status")["daemon"]["healthy"], 60)
        pinned = d.call("POST", "/threshold/pin", {"threshold": 5})["pinned"]
        lost = d.call("GET", "/status")["samples"]["write_errors"]
        code = d.stop()
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
    fast = probe.latencies and max(probe.latencies) < 0.1 and not probe.failures
    ok = outcome.startswith("refused") and fast and pinned and lost == 0 and code == 0
    return [("database write-locked by another process for 12 s",
             "status answers < 100 ms throughout; a pin refused clearly; nothing lost after the lock goes",
             f"{probe.summary()}; pin {outcome[:160]}; problems then: {'; '.join(problems)[:80]}; after release: "
             f"pin acknowledged {pinned}, writes lost {lost}; exit {code}", bool(ok))]


def case_stall(work: Path) -> list[Row]:
    env_for(work)
    d = DaemonProc(work, config_text=fake_sglang_config(work, stall_s=8.0), speed=None)
    try:
        d.wait_socket(120)
        with StatusProbe(d.socket) as probe:
            t0 = time.monotonic()
            res = request(d.socket, "POST", "/threshold/pin", {"threshold": 7}, timeout=60)
            took = time.monotonic() - t0
        code = d.stop()
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
    fast = probe.latencies and max(probe.latencies) < 0.1 and not probe.failures
    return [("SGLang's set_internal_state takes 8 s (fake SGLang)", "status answers < 100 ms meanwhile",
             f"{probe.summary()}; the pin answered after {took:.1f} s with threshold {res['threshold']}; exit {code}",
             bool(fast and res["threshold"] == 7 and code == 0))]


def case_flood(work: Path, seconds: float = 20.0, hostile: int = 5000, oversize: float = 0.0) -> list[Row]:
    env_for(work)
    listener = notify_listener(str(work / "notify"))
    config = fake_sglang_config(work, hostile_per_s=hostile, oversize_per_s=oversize)
    d = DaemonProc(work, config_text=config, speed=None, notify=str(work / "notify"))
    try:
        d.wait_socket(120)
        pings, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                pings += listener.recv(4096) == b"WATCHDOG=1"
            except OSError:
                pass
        st = d.call("GET", "/status")
        d.call("POST", "/policy", {"name": "bandit", "params": {}})      # a checkpoint of what it learned
        t0 = time.monotonic()
        code = d.stop()
        took = time.monotonic() - t0
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
        listener.close()
    chk = db_checks(d.db)
    rejected = {k: v for k, v in st["samples"]["rejected"].items() if v}
    bad = st["engine"].get("bad_telemetry") or 0
    ok = (pings > seconds and (sum(rejected.values()) > 1000 or not hostile) and (bad > 0 or not oversize)
          and chk["bad_rows"] == 0 and chk["finite"] and st["samples"]["total"] > 1000 and code == 0
          and chk["integrity"] == "ok")
    what = " + ".join(([f"{hostile} hostile"] if hostile else []) + ([f"{oversize:g} oversized"] if oversize else []))
    return [(f"telemetry flood: 500 sound + {what} messages/s for {seconds:.0f} s (fake SGLang, real zmq)",
             "the loop goes on (watchdog pings); rejects counted by kind (an oversized message: its dropped "
             "connection); no bad row stored; checkpoints finite",
             f"{pings} WATCHDOG pings; {st['samples']['total']} samples taken; rejected {rejected}; malformed "
             f"messages {bad}; bad rows stored {chk['bad_rows']}; checkpoints finite {chk['finite']} "
             f"({chk['states']}); healthy {st['daemon']['healthy']}; stop {took:.1f} s, exit {code}", bool(ok))]


def case_clients(work: Path, clients: int = 200, each: int = 10) -> list[Row]:
    d = DaemonProc(work, "--concurrency", "8", speed=20)
    lat: list[float] = []
    failures: dict[str, int] = {}

    def client(k: int) -> None:
        rng = random.Random(k)
        for _ in range(each):
            path, method, body = rng.choice([("/status", "GET", None)] * 6 + [
                ("/history?limit=5", "GET", None), ("/policy", "GET", None),
                ("/threshold/pin", "POST", {"threshold": rng.randint(0, 64)}), ("/threshold/unpin", "POST", {})])
            t0 = time.perf_counter()
            try:
                request(d.socket, method, path, body, timeout=30)
                lat.append(time.perf_counter() - t0)
            except Exception as e:
                failures[str(e)[:70]] = failures.get(str(e)[:70], 0) + 1
    try:
        d.wait_socket(90)
        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        wall = time.monotonic() - t0
        code = d.stop()
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
    lat.sort()
    return [(f"{clients} concurrent clients x {each} requests (status, history, policy, pin, unpin)",
             "every request answered; none reported as 'daemon not running'",
             f"{len(lat)}/{clients * each} answered in {wall:.1f} s; median {1000 * lat[len(lat) // 2]:.0f} ms, "
             f"max {1000 * lat[-1]:.0f} ms; failures {failures or 0}; exit {code}", not failures and code == 0)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--cases", default="kills,full,floor,lock,stall,flood,clients")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "faults.md"))
    args = ap.parse_args()
    rng, rows, t0 = random.Random(args.seed), [], time.monotonic()
    for name in args.cases.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"f{name}-", dir="/tmp"))
        try:
            run = {"kills": lambda: case_kills(work, args.kills, rng), "full": lambda: case_full(work),
                   "floor": lambda: case_floor(work),
                   "lock": lambda: case_lock(work), "stall": lambda: case_stall(work),
                   "flood": lambda: case_flood(work), "oversize": lambda: case_flood(work, hostile=0, oversize=5),
                   "clients": lambda: case_clients(work)}[name]
            rows += run()
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"{name}: {'ok' if rows[-1][3] else 'FAILED'} ({time.monotonic() - t0:.0f} s)", flush=True)
    lines = [f"command: python bench/faults.py --kills {args.kills} --cases {args.cases} --seed {args.seed}  "
             f"({time.monotonic() - t0:.0f} s on a shared 2-core machine, {time.strftime('%Y-%m-%d')})", "",
             "| case | expected | observed | verdict |", "|---|---|---|---|"]
    lines += [f"| {c} | {e} | {o} | {'ok' if ok else '**FAILED**'} |" for c, e, o, ok in rows]
    lines += ["", "Disk full is a real tmpfs mount (root; where mounting is refused the case says 'not run'). "
              "The SGLang cases run bench/fake_sglang.py as the engine child: SGLang's HTTP answers and the "
              "plugin's zmq telemetry, no GPU. Each case's daemon is the real `spec-controller run` process."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
