"""helper-166's hostile-input pass over the boundaries: what it found, each test red before its fix."""
import socket
import sqlite3
import threading

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from state.db import StoreError, open_store
from tests.conftest import unheld_port
from tests.test_daemon_e2e import run_daemon_once
from tests.test_faults_api import _Service
from tests.test_faults_cli import _one_line, specctl


# --- the database: a table of ours without its columns ----------------------------------------------------------------
def _table_without_its_columns(db, table: str = "decisions") -> bytes:
    """A database of ours whose table was made again by hand with other columns (user_version 1, every table there)."""
    open_store(db).conn.close()
    conn = sqlite3.connect(db)
    conn.execute(f"DROP TABLE {table}")
    conn.execute(f"CREATE TABLE {table} (x)")
    conn.commit()
    conn.close()
    return db.read_bytes()


@pytest.mark.parametrize("readonly", [False, True])
def test_a_table_of_ours_without_its_columns_is_refused_at_the_opening(short_tmp, readonly):
    db = short_tmp / "d.db"
    before = _table_without_its_columns(db)
    with pytest.raises(StoreError, match="its table decisions lacks the columns id, t, wall, old, new, policy, reason, exploratory; refusing it"):
        open_store(db, readonly=readonly)
    assert db.read_bytes() == before


@pytest.mark.parametrize("command", [["status"], ["history"], ["threshold"], ["plot", "x.png"],
                                     ["threshold", "pin", "3"]])
def test_specctl_on_a_table_without_its_columns_is_one_line(short_tmp, command):
    """status, history, threshold and plot were a traceback (no such column: t)."""
    db = short_tmp / "d.db"
    before = _table_without_its_columns(db)
    _one_line(specctl(short_tmp, db, *command), "is not a spec-controller database, or a damaged one: its table "
                                                "decisions lacks the columns")
    assert db.read_bytes() == before


def test_the_daemon_refuses_a_table_without_its_columns_in_one_line(short_tmp):
    """The start was a traceback of 37 lines (exit 1)."""
    db = short_tmp / "d.db"
    before = _table_without_its_columns(db, "samples")
    res = run_daemon_once(short_tmp, "--concurrency", "4", "--db", str(db), "--socket", str(short_tmp / "s"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr          # (a config error: helper-168)
    assert "its table samples lacks the columns t, batch_size" in lines[0] and db.read_bytes() == before


# --- specctl: a --socket on which another program answers HTTP ---------------------------------------------------------
def _foreign_http(path, status: str, body: bytes) -> None:
    """Another program's HTTP server on a unix socket (docker.sock's kind): every request answered with `body`."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(8)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                conn.sendall(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (status.encode(), len(body), body))
    threading.Thread(target=serve, daemon=True).start()
    return listener


@pytest.mark.parametrize("status, body", [("404 Not Found", b'{"message": "page not found"}'),
                                          ("200 OK", b'{"status": "ok"}'), ("200 OK", b"[1, 2]"), ("200 OK", b"null")])
@pytest.mark.parametrize("command", [["status"], ["threshold"], ["history"], ["policy", "show"],
                                     ["threshold", "pin", "3"], ["policy", "set", "ucb"], ["stop", "--no-wait"]])
def test_specctl_on_another_programs_http_socket_is_one_line(short_tmp, monkeypatch, status, body, command):
    """A JSON 404 printed 'specctl: None'; a JSON answer of another shape was a traceback (KeyError: 'daemon')."""
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp))
    monkeypatch.delenv("SPECCTL_DB", raising=False)
    sock = short_tmp / "other.sock"
    listener = _foreign_http(sock, status, body)
    try:
        res = CliRunner().invoke(cli, ["--socket", str(sock), *command])
    finally:
        listener.close()
    _one_line(res, f"specctl: the program on {sock} is not a spec-controller daemon")


# --- the config: a metrics address ipaddress takes and no bind does ---------------------------------------------------
def test_a_metrics_address_no_bind_takes_is_a_config_error_exit_2(short_tmp):
    """'::1%lo' is an IP address to ipaddress; its bind fails 'Name or service not known'. run exited 1 ('metrics port
    N: Name or service not known', naming the port), which the unit restarts every 5 s, where config check said 2."""
    res = run_daemon_once(short_tmp, "--concurrency", "4", "--db", str(short_tmp / "d.db"), "--socket",
                          str(short_tmp / "s"), "--metrics-port", str(unheld_port()),
                          "--set", 'control.metrics_addr="::1%lo"')
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("spec-controller: metrics address ::1%lo ([control] metrics_addr) cannot be bound: ")
    assert not (short_tmp / "d.db").exists()


# --- the control socket: clients that do not read their answers -------------------------------------------------------
class _BigAnswers(_Service):
    """/status answers 4 MB (a long /history's size), more than the socket's buffers hold for a client that reads none."""

    @staticmethod
    def status():
        return {"daemon": {"running": True}, "pad": "x" * (4 << 20)}


def test_at_the_cap_an_answer_its_client_does_not_read_gives_its_slot_to_the_next_client(short_tmp, monkeypatch):
    """64 clients that asked for `GET /history?limit=10000` on a daemon with that many decisions and read nothing held
    every slot for the answer's 10 s write: `specctl status` said 'busy ... try again', exit 1, every round of them (a
    request still arriving gave its slot up since helper-157, an answer being written did not)."""
    from controller.cli.client import request
    from controller.daemon import api, clients
    from controller.daemon.api import ControlServer
    monkeypatch.setattr(api, "MAX_CLIENTS", 4)
    monkeypatch.setattr(clients, "CUT_AFTER_S", 0.0)
    server = ControlServer(short_tmp / "c.sock", _BigAnswers(), read_timeout_s=60)
    server.start()
    holders = []
    try:
        for _ in range(4):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(str(short_tmp / "c.sock"))
            s.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
            holders.append(s)
        for s in holders:                           # (each answer is being written: its first bytes are there)
            s.settimeout(30)
            assert s.recv(1, socket.MSG_PEEK) == b"H"
        assert request(short_tmp / "c.sock", "GET", "/health", timeout=30) == {"ok": True}
    finally:
        for s in holders:
            s.close()
        server.stop()


def test_specctl_on_a_socket_that_streams_without_end_stops_reading(short_tmp, monkeypatch):
    """A program on the socket that sends without end (no answer's head) was read into specctl's memory for as long as
    it sent: here 64 MiB, then the test's stop; now one line once 64 KiB hold no end of the headers."""
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp))
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(short_tmp / "stream.sock"))
    listener.listen(1)
    sent = []

    def serve():
        conn, _ = listener.accept()
        with conn:
            try:
                while sum(sent) < 64 << 20:
                    sent.append(conn.send(b"x" * 65536))
            except OSError:
                pass
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "stream.sock"), "status"])
    finally:
        thread.join(30)
        listener.close()
    _one_line(res, "gave no usable answer (no end of the answer's headers in 64 KiB)")
    assert sum(sent) < 64 << 20
