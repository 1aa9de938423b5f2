"""Race review 2026-12-07 (bench/results/race-review-2026-12-07.md): an offline write on a fresh state folder racing a
daemon's first start, and two daemons starting at once on one control socket. No wall-clock assertions: each race's
window is held open by hand (a hook where the other party runs), never waited for."""
from __future__ import annotations

import os
import socket

import pytest
from click.testing import CliRunner

import state.lock
from controller.cli.main import cli
from state.db import StoreError
from state.lock import DaemonLock


@pytest.fixture
def no_grace(monkeypatch):
    """A start refused at once where the lock is held at all (no wait for a look or an offline write to end)."""
    monkeypatch.setattr(state.lock, "LOOK_GRACE_S", 0.0)
    monkeypatch.setattr(state.lock, "HELD_OFF_S", 0.0)


def test_held_off_on_a_fresh_folder_keeps_a_start_out(short_tmp, no_grace):
    """No lock file yet (no daemon ever ran there): held_off held nothing, so a first start took the lock inside it."""
    db = short_tmp / "state" / "s.db"
    with DaemonLock(db).held_off():
        with pytest.raises(StoreError, match="stayed locked by another process"):
            DaemonLock(db).acquire()
    lock = DaemonLock(db)          # once the write is over, the start goes ahead
    lock.acquire()
    lock.release()


def test_an_offline_pin_on_a_fresh_folder_is_not_read_around_by_a_first_start(short_tmp, no_grace, monkeypatch):
    """`specctl threshold pin 7` with no daemon ever run on the database (no lock file), and a daemon's first start between its check that no
    daemon holds the database and its write: the start read its settings without the pin, ran unpinned, and the pin
    said 'applied at next start' (exit 0) came back only at the restart after, undoing an unpin given meanwhile. Where
    the start comes inside that window it must wait (here: be refused, graces at 0), and the pin then be there."""
    import controller.cli.offline as offline
    from state.db import open_store
    db = short_tmp / "state" / "spec-controller.db"
    db.parent.mkdir()
    open_store(db).conn.close()       # a database and no lock file: only ever written offline (or copied there)
    assert not DaemonLock(db).path.exists()
    tried: list[str] = []
    real = offline.offline_db

    def a_start_now(ctx, write=False):       # (the offline write's check has just found no daemon: its write is next)
        db_open = real(ctx, write)
        if write:
            try:
                lock = DaemonLock(db)
                lock.acquire()
                lock.release()
                tried.append("started")
            except StoreError as e:
                tried.append(str(e))
        return db_open
    monkeypatch.setattr(offline, "offline_db", a_start_now)
    monkeypatch.setenv("SPECCTL_DB", str(db))
    monkeypatch.setenv("SPECCTL_SOCKET", str(short_tmp / "none.sock"))
    res = CliRunner().invoke(cli, ["threshold", "pin", "7"])
    assert res.exit_code == 0 and "saved to" in res.output, res.output
    assert len(tried) == 1 and "stayed locked by another process" in tried[0], tried


def test_a_refused_offline_pin_still_makes_nothing(short_tmp, monkeypatch):
    """held_off now makes the lock file (and its folder): the refusal of --socket without its --db comes first, so a
    refused pin makes nothing."""
    import controller.cli.common as common
    import controller.paths as paths
    for module in (paths, common):           # (no service's database on this host, whatever the host has)
        monkeypatch.setattr(module, "UNIT_DB", short_tmp / "unit" / "spec-controller.db")
        monkeypatch.setattr(module, "UNIT_SOCKET", short_tmp / "unit" / "control.sock")
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp / "xdg"))
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "b.sock"), "threshold", "pin", "5"])
    assert res.exit_code == 3 and "give the --db of the daemon meant; nothing changed" in res.output, res.output
    assert not (short_tmp / "xdg").exists() and not (short_tmp / "unit").exists()


def test_a_control_socket_is_at_its_path_only_once_it_listens(short_tmp, monkeypatch):
    """Two daemons started at once on one --socket (each its own --db): the second's check_socket_free came between the
    first's bind and its listen, found a socket nobody listens on (a crashed run's left-over, as far as it could tell)
    and removed it. The first then exited 'control socket S: No such file or directory', or, had the second bound
    again first, recorded the second's socket as its own and ran where no specctl reached it. The second's check is
    run here at that instant, from the first's listen."""
    from controller.daemon import api
    from controller.daemon.sockprobe import check_socket_free
    path = short_tmp / "c.sock"
    real = api._UnixHTTPServer.server_activate
    looked: list[bool] = []

    def listen_beside_a_second_start(server):
        looked.append(path.exists())
        check_socket_free(path)              # (the other daemon's start, before this one listens)
        real(server)
    monkeypatch.setattr(api._UnixHTTPServer, "server_activate", listen_beside_a_second_start)
    server = api.ControlServer(path, service=None)
    try:
        server.start()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))        # this daemon's socket, reachable at its path
        assert looked == [False], looked
        assert [p.name for p in short_tmp.iterdir()] == ["c.sock"]     # (its own name for it gone)
    finally:
        server.stop()
    assert not path.exists()                 # stop() removes what it made


def test_a_socket_that_appears_while_starting_is_never_replaced(short_tmp, monkeypatch):
    """The other way round: another daemon's socket appears at the path after this one's check: refused, that one
    left serving (a guard on the publishing: bound at the path, EADDRINUSE refused it before; the hard link, which
    never replaces, must keep it so, and leave no name of its own behind)."""
    from controller.daemon import api
    from controller.daemon.sockprobe import SocketRefused
    path = short_tmp / "c.sock"
    other = socket.socket(socket.AF_UNIX)
    real = api._UnixHTTPServer.server_activate

    def another_daemon_binds_meanwhile(server):
        other.bind(str(path))
        other.listen(1)
        real(server)
    monkeypatch.setattr(api._UnixHTTPServer, "server_activate", another_daemon_binds_meanwhile)
    try:
        with pytest.raises(SocketRefused, match=f"^control socket {path} appeared while this daemon was starting"):
            api.ControlServer(path, service=None)
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))        # the other daemon's socket still there and listening
        assert [p.name for p in short_tmp.iterdir()] == ["c.sock"]
    finally:
        other.close()


def test_a_socket_taken_while_the_engine_starts_is_refused_in_its_own_words(short_tmp):
    """A daemon on the same --socket started while this one's engine was starting (minutes on a GPU): this one's check
    at its bind refuses in the preflight's words, not 'start-up failed: RuntimeError: ...' (race review)."""
    import sys
    from pathlib import Path

    from tests.daemon_proc import DaemonProc
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from faultkit import fake_sglang_config
    work = short_tmp / "w"
    work.mkdir()
    d = DaemonProc(work, config_text=fake_sglang_config(work, ready_s=4.0), speed=None,
                   env_extra={"STATE_DIRECTORY": str(work), "RUNTIME_DIRECTORY": str(work)})
    other = socket.socket(socket.AF_UNIX)
    try:
        assert d.wait_start_recorded() and not d.socket.exists(), d.log_text()      # the engine not ready yet
        other.bind(str(d.socket))
        other.listen(1)                                              # another daemon's, live
        code = d.proc.wait(60)
    finally:
        other.close()
        d.close()
    assert code == 1
    log = d.log_text()
    assert f"control socket {d.socket} is in use by " in log and "start-up failed" not in log, log


def test_a_left_over_replaced_while_probed_is_not_removed(short_tmp, monkeypatch):
    """A crashed run's socket at the path, and a daemon starting beside this one publishes its live socket there
    between this one's probe (nobody listened) and its removal of the left-over: the live one is asked again, not
    removed (the race review's narrower case)."""
    from controller.daemon import sockprobe
    path = short_tmp / "c.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()                                               # a left-over nobody listens on
    live = socket.socket(socket.AF_UNIX)
    real = sockprobe.who_listens

    def probe_then_another_daemon_publishes(p, *args):
        answer = real(p, *args)
        if not live.getsockname():
            live.bind(str(short_tmp / ".c.other"))
            live.listen(1)
            os.replace(short_tmp / ".c.other", path)            # (its publishing: the path now its live socket)
        return answer
    monkeypatch.setattr(sockprobe, "who_listens", probe_then_another_daemon_publishes)
    try:
        with pytest.raises(sockprobe.SocketRefused, match=f"^control socket {path} is in use by another daemon"):
            sockprobe.check_socket_free(path)
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))                           # the other daemon's socket still there
    finally:
        live.close()


def test_a_name_left_by_a_daemon_killed_before_it_linked_its_socket_does_not_stop_a_start(short_tmp):
    """A daemon killed between binding .NAME.PID and linking it to the operator's path leaves that name; a later daemon
    with the same pid (a container's pids repeat) failed its bind 'Address already in use' (helper-138's note)."""
    from controller.daemon import api
    path = short_tmp / "c.sock"
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(api.own_name(path)))
    left.close()                             # (the killed daemon's: a socket file nothing listens on)
    server = api.ControlServer(path, service=None)
    try:
        server.start()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(path))
        assert [p.name for p in short_tmp.iterdir()] == ["c.sock"]
    finally:
        server.stop()


def test_a_file_that_is_not_a_socket_under_the_daemons_own_name_is_not_removed(short_tmp):
    from controller.daemon import api
    own = api.own_name(short_tmp / "c.sock")
    own.write_text("an operator's file")
    with pytest.raises(OSError):
        api.ControlServer(short_tmp / "c.sock", service=None)
    assert own.read_text() == "an operator's file"


def test_a_daemon_of_another_pid_namespace_with_the_same_pid_keeps_its_own_name(short_tmp, monkeypatch):
    """helper-145: two containers' daemons, pid 1 both, starting on sockets in one shared folder whose names begin
    alike: the second took the first's bound own name (.spec-con.1) for a dead one, removed it and bound its own there;
    the first's link then found none (its start failed), or linked the second's socket as its own, unreachable."""
    from controller.daemon import api
    first, second = short_tmp / "spec-controller-a.sock", short_tmp / "spec-controller-b.sock"
    stat, publish, servers = os.stat, api.ControlServer._publish, []

    def another_namespace(path, *args, **kwargs):         # (the second daemon's: another namespace, the same pid)
        st = stat(path, *args, **kwargs)
        return os.stat_result((st.st_mode, st.st_ino + 1, *st[2:])) if str(path) == "/proc/self/ns/pid" else st

    def publish_after_the_second_started(self, own):
        if self.path == first:                              # bound, not yet linked: the second starts now
            with monkeypatch.context() as m:
                m.setattr(os, "stat", another_namespace)
                servers.append(api.ControlServer(second, service=None))
        return publish(self, own)
    monkeypatch.setattr(api.ControlServer, "_publish", publish_after_the_second_started)
    servers.insert(0, api.ControlServer(first, service=None))
    try:
        for server, path in zip(servers, (first, second)):
            server.start()
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(str(path))
            assert (os.stat(path).st_dev, os.stat(path).st_ino) == server._inode       # each its own socket
    finally:
        for server in servers:
            server.stop()


def test_stop_of_a_daemon_in_another_pid_namespace_waits_for_its_lock_not_for_a_pid_here(short_tmp):
    """helper-145: a container's daemon (pid 1 there) answered /stop with its pid; specctl waited for that pid here (the
    host's init) to exit, then said 'had not exited after 150 s', exit 1, though the daemon had stopped in 0.5 s. Its
    answer names its pid namespace; specctl's own differs: the database lock's release is the end (no lock held here).
    A pid alive here (this test's) stands for the host's process of that number."""
    import os

    from click.testing import CliRunner

    from controller.cli.main import cli
    from controller.daemon import api
    db = short_tmp / "s.db"
    answer = {"stopping": True, "pid": os.getpid(), "db": str(db), "pid_namespace": 1}      # (no namespace's inode)
    server = api.ControlServer(short_tmp / "c.sock", service=None, on_stop=lambda: answer)
    server.start()
    try:
        res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "c.sock"), "stop", "--timeout", "3"])
    finally:
        server.stop()
    assert res.exit_code == 0 and res.output.strip() == f"daemon pid {os.getpid()} stopped", res.output
