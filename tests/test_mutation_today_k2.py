"""Tests for the gaps the mutation pass of 2026-12-06k found in the lines changed since 23e5383 in the control API,
plots, paths, the open-loop simulator and the log filter (bench/results/mutation-today-2026-12-06k.md; the rest in
test_mutation_today_k.py). Each test is named after the mutant it kills (test_<id>_...). Each was checked red with
its mutant applied and green on the original."""
import os
import socket

import pytest
from click.testing import CliRunner

from controller.cli.main import cli


# --- api._DeadlineIO: each read waits only until the request's deadline -----------------------------------------------
def _deadline_reader(deadline_in_s: float, sock_timeout_s: float = 100.0):
    """A connected socket pair; the server end read through _DeadlineIO (its own timeout `sock_timeout_s`, the
    request's deadline `deadline_in_s` from now): (reader, server end, client end)."""
    import math
    import time

    from controller.daemon.clients import DeadlineIO as _DeadlineIO
    server, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server.settimeout(sock_timeout_s)
    reads = _DeadlineIO(server, "rb")
    reads.deadline = time.monotonic() + deadline_in_s if math.isfinite(deadline_in_s) else math.inf
    return reads, server, peer


def test_ap1_a_read_after_the_deadline_is_a_timeout_even_with_bytes_waiting():
    """Past the deadline a read is the request timing out (http.server closes the connection, a debug line), not a
    negative socket timeout's ValueError (the daemon's log: 'api: a connection failed' with a traceback)."""
    reads, server, peer = _deadline_reader(-1.0)
    peer.sendall(b"GET /status HTTP/1.1\r\n")
    with pytest.raises(TimeoutError):
        reads.readinto(bytearray(64))
    server.close()
    peer.close()


def test_ap2_a_read_waits_for_the_rest_of_the_request_only_until_its_deadline():
    """A client that sent part of its request and then nothing: the read gives up at the request's deadline (0.3 s
    here), not after the socket's whole timeout (100 s) started again for each read."""
    import threading
    reads, server, peer = _deadline_reader(0.3)
    outcome: list = []

    def read():
        try:
            outcome.append(reads.readinto(bytearray(64)))
        except TimeoutError as e:
            outcome.append(type(e).__name__)
    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(30)
    alive = t.is_alive()
    peer.close()                                     # (lets a read that still waits end)
    t.join(10)
    server.close()
    assert not alive and outcome == ["TimeoutError"], outcome


def test_ap4_a_read_leaves_the_connection_its_whole_timeout_for_the_reply():
    """The read's shortened timeout is the read's alone: the reply's writes keep the connection's whole timeout."""
    reads, server, peer = _deadline_reader(5.0)
    peer.sendall(b"GET /status HTTP/1.1\r\n")
    assert reads.readinto(bytearray(64)) == len(b"GET /status HTTP/1.1\r\n")
    assert server.gettimeout() == 100.0
    server.close()
    peer.close()


# --- figures.check_path: a plot named through a symbolic link replaces the file it names -------------------------------
def test_fg3_a_plot_through_a_symlink_replaces_the_file_it_names(tmp_path):
    """As a shell's `>` writes it (paths.replace_whole follows the link): the check must not refuse the link itself as
    'not a regular file'."""
    from tests.test_plots import PNG, _store
    _store(tmp_path / "s.db").conn.close()
    real = tmp_path / "real.png"
    real.write_bytes(b"the earlier plot")
    link = tmp_path / "link.png"
    link.symlink_to(real)
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                   "plot", str(link), "--last", "120"])
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and real.read_bytes()[:4] == PNG


# --- paths.find_db: $SPECCTL_DB wins over the user daemon's pair ------------------------------------------------------
def test_pt6_specctl_db_is_the_database_even_beside_the_user_daemons_socket(short_tmp, monkeypatch):
    """The pairing (the user daemon's socket there, the service's not: the user's database) is find_db's guess only
    where no database is named: $SPECCTL_DB names one, and it is that one."""
    from controller import paths
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp / "xdg"))
    monkeypatch.setattr(paths, "UNIT_DB", short_tmp / "unit" / "spec-controller.db")
    monkeypatch.setattr(paths, "UNIT_SOCKET", short_tmp / "unit" / "control.sock")     # (not there)
    named = short_tmp / "named.db"
    monkeypatch.setenv("SPECCTL_DB", str(named))
    paths.default_socket().parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as user:
        user.bind(str(paths.default_socket()))
        assert paths.find_db() == named


# --- paths.shared_path: an engine file reached through a symbolic link is the same file -------------------------------
def test_pt4_a_database_on_the_engines_file_through_a_linked_state_directory_is_refused(short_tmp):
    """STATE_DIRECTORY a symbolic link (/var/lib/spec-controller onto a larger disk), --db the file's real path: the
    database is still SGLang's adaptive config, refused in one line, exit 2, before anything is written."""
    import subprocess
    import sys

    from tests.conftest import fake_sglang_python
    from tests.daemon_proc import ROOT
    (short_tmp / "run").mkdir()
    (short_tmp / "real-state").mkdir()
    (short_tmp / "state").symlink_to(short_tmp / "real-state")
    python = fake_sglang_python(short_tmp / "python", f"touch {short_tmp}/launched")
    db = short_tmp / "real-state" / "adaptive.json"
    (short_tmp / "c.toml").write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\n'
                                      f'speculative_algorithm = "EAGLE3"\npython = "{python}"\n'
                                      f'[storage]\ndb = "{db}"\n[control]\nsocket = "{short_tmp}/c.sock"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNTIME_DIRECTORY": str(short_tmp / "run"),
           "STATE_DIRECTORY": str(short_tmp / "state")}
    env.pop("INVOCATION_ID", None)
    res = subprocess.run([sys.executable, "-m", "controller.daemon", "config", "check", "--config",
                          str(short_tmp / "c.toml")], capture_output=True, text=True, env=env, timeout=60)
    said = f"SGLang's adaptive config {short_tmp}/state/adaptive.json is the database's own path; give another --db"
    assert (res.returncode, res.stderr) == (2, f"spec-controller: {said}\n")
    assert not db.exists()


# --- paths.replace_whole: the partial file's name fits beside a long one ----------------------------------------------
def test_pt18_a_plot_whose_name_is_250_characters_is_written(tmp_path):
    """The partial file beside the target adds a dot, the pid and '.partial': a name the file system takes (250 of its
    255 bytes) must not become one it refuses ('File name too long') on the way."""
    from tests.test_plots import PNG, _store
    _store(tmp_path / "s.db").conn.close()
    out = tmp_path / ("p" * 246 + ".png")
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                   "plot", str(out), "--last", "120"])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:4] == PNG and [p.name for p in tmp_path.iterdir() if p.name.startswith("p")] == [out.name]


# --- sim/openloop: an arrival into a full queue is turned away, not queued later under its old arrival time -----------
def test_ol2_what_a_full_queue_takes_in_is_what_arrives_now_not_a_backlog_of_old_arrivals():
    """At 1e6 requests/s the queue is full from 0.1 s on. Those arriving while it is full are turned away: what it takes
    in as slots free (the first requests finish at ~10 s) are arrivals of that moment. Kept as pending arrivals
    instead, each freed slot took one that 'arrived' at the 0.1 s mark, and its wait, counted from then, grew with
    the run."""
    from controller.sim.openloop import OpenLoopCore, RateSchedule
    from controller.sim.profile import parse_profile
    from tests.test_openloop import GOOD, run_core
    core = OpenLoopCore(parse_profile(GOOD, "t"), 0, RateSchedule([(0.0, 1e6)]))
    run_core(core, 12.0)                                 # (the first requests finish at ~10 s: slots free)
    newest = max(arrival for arrival, _, _ in core.waiting)
    assert core.finished and newest > core.t - 2.0, (newest, core.t)


# --- daemon/logs RepeatFilter: text arguments are the key's whole (to 200 characters) ---------------------------------
def test_lg3_text_arguments_that_differ_past_their_first_characters_are_not_held_back():
    """'%s failed' for the engine's probe and for its stop: two failures, both said (their arguments share a start)."""
    import logging

    from tests.conftest import repeat_filtered
    log = logging.getLogger("spec_controller.test")
    with repeat_filtered() as records:
        log.warning("%s failed", "engine probe")
        log.warning("%s failed", "engine stop")
        log.warning("%s failed", "engine stop")            # (the same again: held back)
    assert [r.getMessage() for r in records] == ["engine probe failed", "engine stop failed"]
