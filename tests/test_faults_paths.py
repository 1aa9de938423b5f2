"""Fault injection at the file system: the root daemon never deletes what is not its socket, never
writes through a symbolic link planted at its lock file, database or engine files, never adds its
tables to another application's database, and creates its files readable by their owner only."""
import os
import sqlite3
import stat

import pytest

from controller.daemon.api import ControlServer
from controller.daemon.sockprobe import check_socket_free
from controller.daemon.engines.base import EngineError
from state.db import StoreError, open_store
from state.lock import DaemonLock
from tests.conftest import fake_sglang_python
from tests.test_daemon_e2e import run_daemon_once


def _one_line(res, needle: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(lines) == 1 and needle in lines[0], res.stderr


def test_a_regular_file_or_a_directory_given_as_socket_is_refused_as_usage_and_kept(short_tmp):
    """(exit 2, as specctl's --socket of the same path: a usage error, not a fault)"""
    precious = short_tmp / "notes.txt"
    precious.write_text("do not delete")
    res = run_daemon_once(short_tmp, "--db", str(short_tmp / "a.db"), "--socket", str(precious))
    _one_line(res, f"socket {precious}: not a socket")
    assert res.returncode == 2 and precious.read_text() == "do not delete"
    res = run_daemon_once(short_tmp, "--db", str(short_tmp / "a.db"), "--socket", str(short_tmp))
    _one_line(res, f"socket {short_tmp}: a directory, not a socket")
    assert res.returncode == 2 and short_tmp.is_dir()


def test_the_database_given_as_socket_is_refused_and_kept(short_tmp):
    db = short_tmp / "a.db"
    open_store(db).conn.close()
    before = db.read_bytes()
    res = run_daemon_once(short_tmp, "--db", str(db), "--socket", str(db))
    _one_line(res, "the database's own path")
    assert db.read_bytes() == before


@pytest.mark.parametrize("given", ["--socket run/telemetry.ipc", "--socket state/adaptive.json",
                                   "--socket run/../run/telemetry.ipc", "--db state/adaptive.json"])
def test_a_socket_or_database_on_a_file_the_engine_writes_is_refused_before_anything_starts(short_tmp, given):
    """helper-101: run took them, wrote its start to the database, wrote adaptive.json, launched SGLang and waited
    until it was ready; only the control socket's bind then refused ('in use by another daemon (pid <its own>)' for
    the telemetry socket), exit 1, which the unit restarts. Now run and config check refuse in one line, exit 2,
    and nothing is made or launched."""
    import subprocess
    import sys

    from tests.daemon_proc import ROOT
    (short_tmp / "run").mkdir()
    (short_tmp / "state").mkdir()
    python = fake_sglang_python(short_tmp / "python", f"touch {short_tmp}/launched")
    flag, rel = given.split()
    paths = {"--db": str(short_tmp / "a.db"), "--socket": str(short_tmp / "c.sock"), flag: f"{short_tmp}/{rel}"}
    (short_tmp / "c.toml").write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\n'
                                      f'speculative_algorithm = "EAGLE3"\npython = "{python}"\n'
                                      f'[storage]\ndb = "{paths["--db"]}"\n[control]\nsocket = "{paths["--socket"]}"\n')
    what = "the engine's telemetry socket" if "ipc" in rel else "SGLang's adaptive config"
    said = (f"control socket {paths['--socket']} is {what}; give another --socket" if flag == "--socket" else
            f"{what} {short_tmp}/state/adaptive.json is the database's own path; give another --db")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RUNTIME_DIRECTORY": str(short_tmp / "run"),
           "STATE_DIRECTORY": str(short_tmp / "state")}
    env.pop("INVOCATION_ID", None)
    before = sorted(p.relative_to(short_tmp) for p in short_tmp.rglob("*"))
    for words in (["config", "check"], ["run"]):
        res = subprocess.run([sys.executable, "-m", "controller.daemon", *words, "--config", str(short_tmp / "c.toml")],
                             capture_output=True, text=True, env=env, timeout=60)
        assert (res.returncode, res.stderr) == (2, f"spec-controller: {said}\n"), words
    assert sorted(p.relative_to(short_tmp) for p in short_tmp.rglob("*")) == before      # no database, no launch


def test_check_socket_free_never_removes_a_link_or_a_directory(short_tmp):
    target = short_tmp / "target"
    target.write_text("x")
    (short_tmp / "link").symlink_to(target)
    (short_tmp / "dir").mkdir()
    for name in ("link", "dir"):
        with pytest.raises(RuntimeError, match="refusing to remove it|neither follows nor removes"):    # (helper-180)
            check_socket_free(short_tmp / name)
    assert (short_tmp / "link").is_symlink() and target.read_text() == "x" and (short_tmp / "dir").is_dir()


def test_a_symlink_planted_at_the_lock_file_is_refused(short_tmp):
    victim = short_tmp / "passwd"
    victim.write_text("root:x:0:0\n")
    (short_tmp / "a.db.lock").symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link; refusing to follow it"):
        DaemonLock(short_tmp / "a.db").acquire()    # the old code truncated the target and wrote a pid
    with pytest.raises(StoreError, match="symbolic link"):
        DaemonLock(short_tmp / "a.db").holder()
    assert victim.read_text() == "root:x:0:0\n"


def _other_application_db(path):
    """Another application's SQLite file, with a table of its own."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts (id INTEGER)")
    conn.commit()
    conn.close()
    return path


def test_a_symlinked_database_is_refused_at_start_and_its_target_untouched(short_tmp):
    other = _other_application_db(short_tmp / "other-app.db")
    before = other.read_bytes()
    (short_tmp / "a.db").symlink_to(other)
    res = run_daemon_once(short_tmp, "--db", str(short_tmp / "a.db"), "--socket", str(short_tmp / "s"))
    _one_line(res, "a symbolic link; refusing to follow it")
    assert other.read_bytes() == before
    for suffix in ("-wal", "-shm"):
        (short_tmp / "b.db").unlink(missing_ok=True)
        open_store(short_tmp / "b.db").conn.close()
        for leftover in ("-wal", "-shm"):
            (short_tmp / f"b.db{leftover}").unlink(missing_ok=True)
        (short_tmp / f"b.db{suffix}").symlink_to(other)
        with pytest.raises(StoreError, match="journal .* symbolic link"):
            open_store(short_tmp / "b.db")
        (short_tmp / f"b.db{suffix}").unlink()
    assert other.read_bytes() == before


def test_another_applications_database_gets_no_tables(short_tmp):
    other = _other_application_db(short_tmp / "other.db")
    with pytest.raises(StoreError, match="belongs to another application"):
        open_store(other)
    tables = [r[0] for r in sqlite3.connect(other).execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == ["accounts"]


def test_files_are_created_readable_by_their_owner_and_the_database_by_its_group_never_by_others(short_tmp):
    old = os.umask(0o022)                           # a permissive umask, as under many init systems
    try:
        lock = DaemonLock(short_tmp / "m.db")
        lock.acquire()
        db = open_store(short_tmp / "m.db")
        db.execute("INSERT INTO events (wall, kind, detail) VALUES (1, 'x', '')")
        for name, want in (("m.db", 0o640), ("m.db-wal", 0o640), ("m.db-shm", 0o640), ("m.db.lock", 0o600)):
            mode = stat.S_IMODE(os.stat(short_tmp / name).st_mode)
            assert mode == want, (name, oct(mode))
        db.conn.close()
        lock.release()
    finally:
        os.umask(old)


def test_the_control_server_removes_only_its_own_socket(short_tmp):
    server = ControlServer(short_tmp / "c.sock", service=None)
    assert stat.S_IMODE(os.stat(short_tmp / "c.sock").st_mode) == 0o660
    os.unlink(short_tmp / "c.sock")
    (short_tmp / "c.sock").write_text("someone else's file now")
    server.stop()
    assert (short_tmp / "c.sock").read_text() == "someone else's file now"


def _sglang_engine(short_tmp, monkeypatch):
    from controller.daemon.engines.sglang import SGLangEngine
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    (short_tmp / "run").mkdir()
    (short_tmp / "state").mkdir()
    # another interpreter with SGLang and the plugin (asked, not imported); nothing is launched before the refusals
    python = fake_sglang_python(short_tmp / "python")
    return SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "python": str(python)})


def test_the_engine_never_removes_a_file_at_its_telemetry_socket_path(short_tmp, monkeypatch):
    eng = _sglang_engine(short_tmp, monkeypatch)
    (short_tmp / "run" / "telemetry.ipc").write_text("keep")
    with pytest.raises(EngineError, match="not a socket; refusing"):
        eng.start(lambda s: None)                   # zmq's bind unlinks whatever is there
    assert (short_tmp / "run" / "telemetry.ipc").read_text() == "keep" and eng.proc is None


def test_the_engine_never_writes_through_a_link_at_its_adaptive_config(short_tmp, monkeypatch):
    eng = _sglang_engine(short_tmp, monkeypatch)
    victim = short_tmp / "victim"
    victim.write_text("keep")
    (short_tmp / "state" / "adaptive.json").symlink_to(victim)
    with pytest.raises(EngineError, match="symbolic link"):
        eng.start(lambda s: None)
    assert victim.read_text() == "keep" and eng.proc is None
    eng.stop()


@pytest.mark.parametrize("where", ["after", "before", "env"])
def test_a_socket_path_no_daemon_can_listen_on_is_refused_and_no_pin_is_saved_offline(short_tmp, where):
    # a directory named as the socket: before, specctl took it for "daemon not running" and saved the pin in the
    # database offline, while the daemon the operator meant ran on and never applied it
    from click.testing import CliRunner

    from controller.cli.main import cli
    db, folder = short_tmp / "a.db", short_tmp / "sockets"
    folder.mkdir()
    args = {"after": ["--db", str(db), "threshold", "pin", "5", "--socket", str(folder)],
            "before": ["--socket", str(folder), "--db", str(db), "threshold", "pin", "5"],
            "env": ["--db", str(db), "threshold", "pin", "5"]}[where]
    env = {"SPECCTL_SOCKET": str(folder)} if where == "env" else {}
    res = CliRunner().invoke(cli, args, env=env)
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and lines == [f"specctl: control socket {folder}: a directory, not a socket; "
                                            "nothing changed"], res.output
    assert not db.exists()


def test_a_socket_path_too_long_for_a_unix_socket_is_refused_by_specctl_and_the_daemon(short_tmp):
    from click.testing import CliRunner

    from controller.cli.main import cli
    long_path = short_tmp / ("s" * 120)
    res = CliRunner().invoke(cli, ["--db", str(short_tmp / "a.db"), "status", "--socket", str(long_path)])
    assert res.exit_code == 2 and "too long for a unix socket" in res.output and len(res.output.splitlines()) == 1
    _one_line(run_daemon_once(short_tmp, "--db", str(short_tmp / "a.db"), "--socket", str(long_path)),
              "too long for a unix socket")
    assert not (short_tmp / "a.db").exists()


def test_a_live_daemon_whose_backlog_is_full_is_in_use_not_waited_on(short_tmp):
    """A blocking connect to a unix socket whose backlog is full waits until the listener accepts: check_socket_free
    (the daemon's start on another daemon's socket) waited for good on a stuck one. It says 'in use' now."""
    import socket
    import threading
    path = short_tmp / "c.sock"
    held = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stuck:
        stuck.bind(str(path))
        stuck.listen(0)                              # accepts nothing from here on
        while True:                                  # fill its backlog
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(str(path))
            except BlockingIOError:
                c.close()
                break
            held.append(c)
        said: list = []

        def check():
            try:
                check_socket_free(path)
            except RuntimeError as e:
                said.append(str(e))
        t = threading.Thread(target=check, daemon=True)
        t.start()
        t.join(30)
        for c in held:
            c.close()
        assert not t.is_alive() and said and "is in use by another daemon" in said[0], said
    assert not path.exists() or path.is_socket()
