"""Boundary 1 of bench/fuzz.py: the control API over the real unix socket of a real daemon (simulator, --speed 10,
a fresh XDG_STATE_HOME), fed the seeded hostile requests of fuzz_api_cases.

Checked after every case: the daemon still runs; each answer is a status line, a 200 or a 4xx (503 only as the busy
answer of a burst) with a JSON body, an error as one line of JSON; a refused command changed nothing (the policy and
the pin, as GET /policy and the settings table say); no traceback reached the daemon's log. At the end: specctl's
commands still work, and POST /stop (specctl stop) ends the daemon with exit 0. The daemon is only ever stopped by
that, or by its own pid (Popen) where it does not answer."""
from __future__ import annotations

import concurrent.futures
import json
import os
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fuzz_api_cases as cases

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.cli.client import DaemonError, DaemonUnreachable, request  # noqa: E402

BUSY = b'{"error": "too many clients at once"}'


class Daemon:
    """`spec-controller run --speed 10` in its own state folder, its output in daemon.log there."""

    def __init__(self, state: Path):
        self.state = state
        self.env = dict(os.environ, XDG_STATE_HOME=str(state), PYTHONUNBUFFERED="1")
        self.socket = state / "spec-controller" / "control.sock"
        self.db = state / "spec-controller" / "spec-controller.db"
        self.log_path = state / "daemon.log"
        self._log_at = 0
        self.starts = 0
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "controller.daemon", "run", "--speed", "10"],
                                         cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.starts += 1
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode} at start: "
                                   f"{self.log_path.read_text()[-2000:]}")
            try:
                request(self.socket, "GET", "/health", timeout=2)
                return
            except (DaemonUnreachable, DaemonError):
                time.sleep(0.1)
        raise RuntimeError("daemon did not serve within 60 s")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def new_log(self) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(self._log_at)
            text = f.read()
        self._log_at += len(text)
        return text.decode(errors="replace")

    def snapshot(self) -> tuple:
        """What an operator command changes: the policy and the pin, in memory and on disk."""
        live = request(self.socket, "GET", "/policy")
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            rows = dict(conn.execute("SELECT key, value FROM settings WHERE key IN ('policy', 'pinned')").fetchall())
        finally:
            conn.close()
        return live["name"], json.dumps(live["params"], sort_keys=True), live["pinned"], rows.get("policy"), \
            rows.get("pinned")

    def revive(self) -> str | None:
        """None while the daemon answers; else why not, and it is started again on the same state."""
        try:
            request(self.socket, "GET", "/health", timeout=10)
            return None
        except (DaemonUnreachable, DaemonError) as e:
            why = f"daemon stopped answering ({e})"
        try:
            why = f"daemon exited ({self.proc.wait(30)})"
        except subprocess.TimeoutExpired:
            self.kill()
        self.start()
        return why

    def checked_snapshot(self, problem) -> tuple:
        """snapshot(), after reviving a daemon that is gone (problem(why) records it)."""
        try:
            return self.snapshot()
        except (DaemonUnreachable, DaemonError) as e:
            problem(self.revive() or str(e))
            return self.snapshot()

    def kill(self) -> None:
        """By the pid we started, where POST /stop was not answered."""
        if self.alive():
            self.proc.terminate()
            self.proc.wait(30)


def connect(path: Path, timeout: float = 20.0) -> socket.socket | bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(path))
    except OSError as e:              # (no daemon there: the case's violation says so, the campaign revives it)
        s.close()
        return f"<connect: {e.strerror}>".encode()
    return s


def exchange(path: Path | socket.socket | bytes, data: bytes, half_close: bool = True, timeout: float = 20.0) -> bytes:
    """What the daemon answered to data (sent on a new connection to path, or on a connected socket)."""
    s = connect(path, timeout) if isinstance(path, Path) else path
    if isinstance(s, bytes):
        return s
    out = b""
    try:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass                                   # answered and closed before reading it all (413): read that
        while chunk := s.recv(65536):
            out += chunk
    except (ConnectionResetError, socket.timeout) as e:
        if not out:              # (a reset after the answer is the daemon closing with our surplus unread: fine)
            out = f"<{type(e).__name__}>".encode()
    finally:
        s.close()
    return out


def parse_answers(raw: bytes) -> list[tuple[int, dict, bytes]] | str:
    """Every HTTP answer in raw, or what is wrong with it."""
    answers = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ", 2)
        if not sep or len(status) < 2 or not status[0].startswith("HTTP/1.") or not status[1].isdigit():
            return f"not an HTTP answer: {raw[:120]!r}"
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        if not 100 <= int(status[1]) < 200:          # (100 Continue: an interim answer to Expect)
            answers.append((int(status[1]), headers, rest[:length]))
        raw = rest[length:]
    return answers


def answers_expected(data: bytes) -> bool:
    """http.server closes a connection whose request line is blank without an answer (nothing asked)."""
    return bool(data) and bool(data.split(b"\n", 1)[0].decode("latin-1").rstrip("\r\n").split())


def problems(case: cases.Case, raw: bytes, burst: bool = False) -> list[str]:
    parsed = parse_answers(raw)
    if isinstance(parsed, str):
        return [parsed]
    if not parsed:
        return [] if not answers_expected(case.data) else ["no answer"]
    out = []
    for n, (status, headers, body) in enumerate(parsed):
        if burst and status == 503 and body == BUSY and headers.get("retry-after"):
            continue
        try:
            payload = json.loads(body)
        except ValueError:
            out.append(f"{status} with a body that is not JSON: {body[:100]!r}")
            continue
        if status != 200:
            error = payload.get("error") if isinstance(payload, dict) else None
            if not isinstance(error, str) or "\n" in error or "Traceback" in error:
                out.append(f"{status}: error is not one line of JSON: {body[:100]!r}")
            if not 400 <= status < 500:
                out.append(f"{status} (not a 4xx): {error!r:.200}")
        want = case.expect if n == 0 else "refused"      # whatever follows the first answer was no request
        if want == "ok" and status != 200:
            out.append(f"valid request refused: {status} {body[:200]!r}")
        if want == "refused" and status == 200:
            out.append(f"accepted (200): {body[:120]!r}")
    return out


def run(seed: int, n: int, log=print) -> dict:
    rng = random.Random(seed)
    violations: list[dict] = []
    counts: dict[str, int] = {}
    statuses: dict[str, int] = {}           # first answers' status codes (bursts: the busy answers alone)

    def violated(what: str, case: cases.Case | None, problem: str) -> None:
        violations.append({"boundary": "api", "kind": what, "input": repr(case.data[:160]) if case else "",
                           "problem": problem[:300]})

    with tempfile.TemporaryDirectory(prefix="fuzz-api-") as tmp:
        d = Daemon(Path(tmp))
        try:
            stall_pool = concurrent.futures.ThreadPoolExecutor(8)
            stalls = [stall_pool.submit(exchange, Path(d.socket), data, False, 30)
                      for data in (cases.http("POST", "/threshold/pin", b'{"threshold": 5}', length="60"),
                                   cases.http("POST", "/policy", b'{"name": "fi', length="400"),
                                   b"GET /status HTTP/1.1\r\nHost: x\r\n", b"POST /threshold/pin HTT")]
            before = d.snapshot()
            for i in range(n):
                case = cases.case(rng)
                counts[case.kind] = counts.get(case.kind, 0) + 1
                raw = exchange(d.socket, case.data, case.half_close)
                for p in problems(case, raw):
                    violated(case.kind, case, p)
                if "Traceback" in (text := d.new_log()):
                    violated(case.kind, case, "traceback in the daemon log: " + text[text.index("Traceback"):][-300:])
                if why := d.revive():
                    violated(case.kind, case, why)
                answered = parse_answers(raw)
                for status, _, _ in answered if isinstance(answered, list) else ():
                    statuses[str(status)] = statuses.get(str(status), 0) + 1
                ok = isinstance(answered, list) and answered and answered[0][0] == 200   # (what follows: no request)
                after = d.checked_snapshot(lambda why: violated(case.kind, case, why))
                if after != before and not ok:
                    violated(case.kind, case, f"refused, yet changed {before} -> {after}")
                before = after
                if i % 200 == 199:         # a burst past the daemon's 64 clients at once: all connected, then all sent
                    burst = [c for c in (cases.case(rng) for _ in range(200)) if c.expect == "refused"][:90]
                    socks = [connect(d.socket) for _ in burst]
                    time.sleep(0.5)           # (the daemon takes them all in: 64 wait for a request, the rest busy)
                    with concurrent.futures.ThreadPoolExecutor(len(burst)) as pool:
                        for c, got in zip(burst, pool.map(lambda cs: exchange(cs[1], cs[0].data, cs[0].half_close),
                                                          zip(burst, socks))):
                            statuses["busy 503"] = statuses.get("busy 503", 0) + got.count(BUSY)
                            for p in problems(c, got, burst=True):
                                violated("burst", c, p)
                    counts["burst"] = counts.get("burst", 0) + len(burst)
                    if (after := d.checked_snapshot(lambda why: violated("burst", None, why))) != before:
                        violated("burst", None, f"a burst of refused requests changed {before} -> {after}")
                    before = after
            for data, fut in zip(("stall: body short, kept open", "stall: body short, kept open",
                                  "stall: headers unfinished", "stall: request line unfinished"), stalls):
                got = fut.result()
                first = parse_answers(got)
                key = f"stall {first[0][0]}" if isinstance(first, list) and first else "stall unanswered"
                statuses[key] = statuses.get(key, 0) + 1
                for p in problems(cases.Case("stall", data.encode(), "refused"), got):
                    if not (p == "no answer" and "unfinished" in data):      # (no request yet: closed unanswered)
                        violated("stall", cases.Case("stall", data.encode(), "refused"), p)
            counts["stall"] = len(stalls)
            stall_pool.shutdown()
            violations += [{"boundary": "api", "kind": "after", "input": "", "problem": p} for p in finish(d)]
        finally:
            d.kill()          # (a campaign that failed part way leaves no daemon behind: by the pid it started)
    return {"cases": counts, "total": sum(counts.values()), "violations": violations,
            "detail": {"statuses": dict(sorted(statuses.items())), "daemon_starts": d.starts}}


def finish(d: Daemon) -> list[str]:
    """Valid commands through specctl still work; no traceback in the whole log; specctl stop ends it, exit 0."""
    out = []
    specctl = [str(Path(sys.executable).with_name("specctl"))]
    pinned = json.loads
    for args, check in ((["threshold", "pin", "7"], None),
                        (["status", "--json"], lambda s: pinned(s)["pinned"] and pinned(s)["threshold"] == 7),
                        (["threshold", "unpin"], None), (["policy", "set", "bandit"], None),
                        (["history", "--json", "--limit", "3"], lambda s: isinstance(json.loads(s), list)),
                        (["status", "--json"], lambda s: not pinned(s)["pinned"])):
        res = subprocess.run(specctl + args, env=d.env, capture_output=True, text=True, timeout=60)
        if res.returncode != 0 or (check and not check(res.stdout)):
            out.append(f"specctl {' '.join(args)} after the campaign: exit {res.returncode}: "
                       f"{res.stderr.strip()[:200]}")
    res = subprocess.run(specctl + ["stop"], env=d.env, capture_output=True, text=True, timeout=60)
    try:
        code = d.proc.wait(30)
    except subprocess.TimeoutExpired:
        d.kill()
        code = None
    if res.returncode != 0 or code != 0:
        out.append(f"specctl stop: exit {res.returncode}, daemon exit {code}: {res.stderr.strip()[:200]}")
    if "Traceback" in (text := d.log_path.read_text(errors="replace")):
        out.append("traceback in the daemon log: " + text[text.index("Traceback"):][:300])
    return out
