"""helper's mutation check of the lines changed since e2381f0 (bench/results/mutation-today-2026-12-07s.md): a test for
each surviving mutant, named by its id. No wall-clock assertions: a race's window is held open by a hook."""
from __future__ import annotations

import errno
import os
import socket as socketlib
import subprocess
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller import paths
from controller.cli import client, common
from controller.cli.main import cli
from controller.daemon import api
from controller.daemon.apicheck import ApiError, check
from controller.daemon.main import main as daemon_main
from controller.daemon.sockprobe import FOREIGN, NOBODY, SocketRefused, check_socket_free
from state.lock import DaemonLock
from tests.fdtable import descriptors, unix_sockets_under

ROOT = Path(__file__).resolve().parents[1]


# --- controller/cli/common.py: own_daemon_hint ------------------------------------------------------------------------
@pytest.fixture
def service_paths(short_tmp, monkeypatch):
    """The service's socket under short_tmp/unit (bound, nobody listening) and the user's state under short_tmp/home;
    refuse(path): that socket refuses this user (EACCES, as for one outside its group, also as root)."""
    unit = short_tmp / "unit"
    unit.mkdir()
    for module in (paths, common):
        monkeypatch.setattr(module, "UNIT_SOCKET", unit / "control.sock")
        monkeypatch.setattr(module, "UNIT_DB", unit / "spec-controller.db")
    refused: set[str] = set()

    class Refusing(socketlib.socket):
        def connect(self, address):
            if str(address) in refused:
                raise PermissionError(13, "Permission denied")
            return super().connect(address)
    monkeypatch.setattr(client, "socket", types.SimpleNamespace(
        socket=Refusing, AF_UNIX=socketlib.AF_UNIX, SOCK_STREAM=socketlib.SOCK_STREAM))
    yield types.SimpleNamespace(unit=unit / "control.sock", home=short_tmp / "home",
                                own=short_tmp / "home" / "spec-controller" / "control.sock",
                                refuse=lambda path: refused.add(str(path)))


def _bound(path: Path) -> socketlib.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socketlib.socket(socketlib.AF_UNIX)
    s.bind(str(path))
    return s


def _specctl(home, *args, **env):
    return CliRunner().invoke(cli, list(args), env={"XDG_STATE_HOME": str(home), "SPECCTL_DB": None,
                                                   "SPECCTL_SOCKET": None, "RUNTIME_DIRECTORY": None,
                                                   "STATE_DIRECTORY": None, **env})


def test_hint_any_error_another_answer_of_the_service_names_no_own_daemon(service_paths, monkeypatch):
    """hint-any-error: `isinstance(e, DaemonDenied)` -> True. The hint is for a socket that refuses this user; the
    service answering (an error of its own) while the user's daemon also runs is not that: no hint."""
    def answered(*args, **kwargs):
        raise client.DaemonError("the daemon's own error", 500)
    monkeypatch.setattr(common, "request", answered)
    with _bound(service_paths.unit), _bound(service_paths.own):
        res = _specctl(service_paths.home, "status")
    assert (res.exit_code, res.output.strip()) == (1, "specctl: the daemon's own error"), res.output


def test_hint_not_unit_a_refused_own_socket_is_not_offered_as_the_way_round(service_paths):
    """hint-not-unit: `ctx.socket != UNIT_SOCKET` dropped. No service here: specctl took the user's own socket, and it
    refused: the hint would offer that very socket as the way round."""
    service_paths.refuse(service_paths.own)
    with _bound(service_paths.own):
        res = _specctl(service_paths.home, "status")
    assert res.exit_code == 1, res.output
    assert res.output.strip() == f"specctl: permission denied on {service_paths.own} (run as root or a member of its " \
                                 "group)", res.output


def test_hint_own_is_unit_under_the_services_runtime_directory_no_hint(service_paths):
    """hint-own-is-unit: `own == UNIT_SOCKET` dropped. With the service's RUNTIME_DIRECTORY (its own environment) the
    'own' socket is the service's: the refusal must not call it the user's own daemon's."""
    service_paths.refuse(service_paths.unit)
    with _bound(service_paths.unit):
        res = _specctl(service_paths.home, "status", RUNTIME_DIRECTORY=str(service_paths.unit.parent))
    assert res.exit_code == 1, res.output
    assert "your own daemon" not in res.output and res.output.strip().endswith("member of its group)"), res.output


# --- controller/daemon/api.py: ControlServer's own name and _publish ----------------------------------------------------
SECOND = """import sys
from controller.daemon.api import ControlServer
ControlServer(sys.argv[1], service=None)
print("published")
"""


def test_sock_own_no_pid_a_second_daemons_own_name_is_its_own(short_tmp, monkeypatch):
    """sock-own-no-pid: the own name without the pid. A second daemon (another process) starting on the same --socket
    between this one's bind and its listen must bind a name of its own, and this one be refused as 'appeared'; with one
    name for both the second failed 'Address already in use' (and a crashed run's left-over blocked every start)."""
    path = short_tmp / "c.sock"
    real = api._UnixHTTPServer.server_activate
    second: list[subprocess.CompletedProcess] = []

    def a_second_daemon_starts(server):
        second.append(subprocess.run([sys.executable, "-c", SECOND, str(path)], capture_output=True, text=True,
                                     timeout=60, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT))))
        real(server)
    monkeypatch.setattr(api._UnixHTTPServer, "server_activate", a_second_daemon_starts)
    with pytest.raises(SocketRefused, match="appeared while this daemon was starting"):
        api.ControlServer(path, service=None)
    assert second[0].returncode == 0 and second[0].stdout == "published\n", second[0].stderr
    assert [p.name for p in short_tmp.iterdir()] == ["c.sock"]


def _path_of(short_tmp: Path, size: int, name: str) -> Path:
    base = short_tmp / ("d" * (size - len(str(short_tmp)) - len(name) - 2))
    base.mkdir()
    path = base / name
    assert len(os.fsencode(str(path))) == size
    return path


def test_sock_too_long_a_107_byte_path_whose_own_name_is_longer_is_served(short_tmp):
    """sock-too-long-dropped / -path-only: a path of 107 bytes (the preflight takes it) with a short name, whose own
    name (.c.sock.PID) would pass AF_UNIX's limit: bound at the path at once, served, not refused at the bind."""
    path = _path_of(short_tmp, 107, "c.sock")
    server = api.ControlServer(path, service=None)
    try:
        server.start()
        with socketlib.socket(socketlib.AF_UNIX) as s:
            s.connect(str(path))
    finally:
        server.stop()


def test_sock_too_long_own_only_a_path_too_long_is_refused_by_the_bind_not_linked_to(short_tmp):
    """sock-too-long-own-only: a path past the limit whose own name fits (a long file name): bound under the own name
    and hard-linked, the daemon 'served' where no client can reach it. The bind at the path refuses it."""
    path = _path_of(short_tmp, 110, "a-control-socket-name-this-long.sock")
    with pytest.raises(OSError):
        api.ControlServer(path, service=None)
    assert list(path.parent.iterdir()) == []


def test_publish_no_close_a_refused_publish_closes_its_listening_socket(short_tmp, monkeypatch):
    """publish-no-close: the server's socket kept open when the path appeared meanwhile (listening on a name already
    removed, for as long as the refusal is held: the daemon's error path)."""
    path = short_tmp / "c.sock"
    other = socketlib.socket(socketlib.AF_UNIX)
    real = api._UnixHTTPServer.server_activate

    def another_binds_meanwhile(server):
        other.bind(str(path))
        real(server)
    monkeypatch.setattr(api._UnixHTTPServer, "server_activate", another_binds_meanwhile)
    before = descriptors(unix_sockets_under(short_tmp))      # (not the whole table: tests/fdtable.py)
    try:
        with pytest.raises(SocketRefused) as err:
            api.ControlServer(path, service=None)
        server = err.traceback[-1].frame.f_locals["self"].server      # (the refused ControlServer's, still referenced)
        assert server.socket.fileno() == -1
        after = descriptors(unix_sockets_under(short_tmp))
        after.pop(str(other.fileno()), None)                            # (the test's own, bound meanwhile)
        assert after == before
    finally:
        other.close()


def test_publish_no_rename_without_hard_links_the_socket_is_still_put_at_its_path(short_tmp, monkeypatch):
    """publish-no-rename: on a file system without hard links (link: EPERM) the own name is renamed to the path."""
    path = short_tmp / "c.sock"

    def no_links(src, dst, *args, **kwargs):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(api.os, "link", no_links)
    server = api.ControlServer(path, service=None)
    try:
        server.start()
        with socketlib.socket(socketlib.AF_UNIX) as s:
            s.connect(str(path))
        assert [p.name for p in short_tmp.iterdir()] == ["c.sock"]
    finally:
        server.stop()
    assert not path.exists()              # (stop() knows it as its own: the same inode)


# --- controller/daemon/apicheck.py: a query not UTF-8 ------------------------------------------------------------------
def test_query_utf8_404_a_query_not_utf8_is_a_bad_request_not_a_missing_endpoint():
    """query-utf8-404: the endpoint exists; the request is refused as given (400: specctl calls that a usage error)."""
    from controller.daemon.api import make_routes
    from tests.test_api_hostile import _Service
    with pytest.raises(ApiError) as err:
        check("GET", "/history?%ff=1", b"", make_routes(_Service(), None))
    assert err.value.status == 400, err.value


# --- controller/daemon/lifecycle.py: the bind's errno ------------------------------------------------------------------
# run, its preflight blind to the socket's folder (as where the folder changed after it asked): the bind's own refusal.
# (The preflight refuses /proc and /sys since helper-179, so this test, on /sys as run sees it, always skipped.)
_BLIND_RUN = """
import sys
from state import mounts
mounts.refusing = lambda directory: None
from controller.daemon.main import main
main(sys.argv[1:])
"""


def _bind_errno(path: str) -> int | None:
    """The errno this user's bind at path meets (None: it bound): the kernel's, not a guess by uid (helper-182: a user's
    bind in /proc is ENOENT on Linux 6.18, as root's; this test expected EACCES of every user and failed for one)."""
    with socketlib.socket(socketlib.AF_UNIX) as s:
        try:
            s.bind(path)
        except OSError as e:
            return e.errno
    os.unlink(path)
    return None


@pytest.mark.parametrize("folder", ["/sys", "/proc"])
def test_enoent_any_errno_a_socket_refused_otherwise_at_its_bind_is_worded_as_db_is(tmp_path, folder):
    """enoent-any-errno: 'cannot be created there' for every errno. Only ENOENT (/proc) reads so, as --db's; another
    errno at the bind (EPERM in sysfs to root; EACCES to a user) is 'control socket S: <strerror>', as --db's lock file
    says it. Exit 1 either way: the preflight asked, and the folder changed since."""
    (config := tmp_path / "empty.toml").write_text("")
    sock = f"{folder}/x.sock"
    refused = _bind_errno(sock)
    if refused is None:
        pytest.skip(f"{sock} binds here")
    proc = subprocess.run([sys.executable, "-c", _BLIND_RUN, "run", "--socket", sock, "--config", str(config),
                           "--speed", "10", "--db", str(tmp_path / "s.db")], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={"XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                                                     "PYTHONPATH": str(ROOT)})
    said = " cannot be created there (No such file or directory)" if refused == errno.ENOENT else \
        f": {os.strerror(refused)}"
    assert (proc.returncode, proc.stderr) == (1, f"spec-controller: control socket {sock}{said}\n"), proc.stderr
    if folder == "/sys":        # (the mutant's witness: sysfs refuses a bind with another errno than ENOENT)
        assert refused != errno.ENOENT


# --- controller/daemon/main.py: DaemonGroup.resolve_command ------------------------------------------------------------
def test_specctl_msg_the_whole_line_says_where_the_command_is():
    """specctl-msg-no-name: the line names `specctl NAME` and the clone's .venv/bin/specctl NAME, both."""
    res = CliRunner().invoke(daemon_main, ["history"])
    assert res.exit_code == 2
    assert res.output.strip().endswith("no such command 'history': a running daemon is steered with specctl (specctl "
                                       "history; in a clone .venv/bin/specctl history)"), res.output


def test_resolve_name_last_a_value_named_like_a_specctl_command_is_no_command(tmp_path):
    """resolve-name-last: the command is the first word, not any later one: `config check --config status` checks a
    file named status (absent), never 'no such command'."""
    res = CliRunner().invoke(daemon_main, ["config", "check", "--config", str(tmp_path / "x" / "status")])
    assert "no such command" not in res.output and "status" in res.output, res.output
    res = CliRunner().invoke(daemon_main, ["run", "--config", "start"])
    assert "no such command" not in res.output and "start" in res.output, res.output


# --- controller/daemon/sockprobe.py: every refusal is a SocketRefused ---------------------------------------------------
@pytest.mark.parametrize("case", ["lstat", "not-a-socket", "foreign", "left-over-kept"])
def test_probe_every_refusal_of_check_socket_free_is_a_socket_refused(short_tmp, monkeypatch, case):
    """probe-*-runtimeerror: each refusal, met again at the bind after the engine started (minutes on a GPU), must read
    as the preflight's line, not 'start-up failed: RuntimeError: ...' (lifecycle tells them by SocketRefused)."""
    from controller.daemon import sockprobe
    path = short_tmp / "c.sock"
    if case == "lstat":
        (short_tmp / "f").write_text("")
        path = short_tmp / "f" / "c.sock"             # (ENOTDIR)
    elif case == "not-a-socket":
        path.write_text("")
    else:
        _bound(path).close()
        monkeypatch.setattr(sockprobe, "who_listens", lambda p: (FOREIGN if case == "foreign" else NOBODY, None))
        real_unlink = Path.unlink

        def kept(self, *args, **kwargs):
            if self == path:
                raise PermissionError(1, "Operation not permitted")
            return real_unlink(self, *args, **kwargs)
        monkeypatch.setattr(Path, "unlink", kept)
    with pytest.raises(SocketRefused, match=f"^control socket (path )?{path}"):
        check_socket_free(path)


# --- state/lock.py: held_off on a fresh folder -------------------------------------------------------------------------
def test_lock_oserror_raised_a_folder_that_cannot_be_made_holds_nothing_and_raises_nothing(short_tmp):
    """lock-oserror-raised: `except (StoreError, OSError)` -> `except StoreError`. Where the state folder cannot be made
    (its parent a regular file) held_off holds nothing and says nothing: the check after it names the problem."""
    (short_tmp / "f").write_text("")
    entered = []
    with DaemonLock(short_tmp / "f" / "s.db").held_off():
        entered.append(True)
    assert entered == [True]


def test_lock_dir_mode_the_state_folder_an_offline_write_makes_is_not_for_others(short_tmp):
    """lock-dir-mode-777: held_off makes the state folder now, before the database's open: 0750 as the daemon's own
    (the umask here 022: 0755 would let every user list it)."""
    old = os.umask(0o022)
    try:
        with DaemonLock(short_tmp / "state" / "s.db").held_off():
            pass
    finally:
        os.umask(old)
    assert (short_tmp / "state").stat().st_mode & 0o777 == 0o750


# --- state/lock.py: a lock file root makes for an offline write (a defect found by this pass, fixed) --------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="only root makes a lock file for a database another user owns")
def test_a_lock_file_root_makes_offline_is_the_databases_owners(short_tmp, monkeypatch):
    """held_off now makes the lock file. `sudo specctl threshold pin 7` on the service's database with no lock file yet
    (a restored database) left it root's, 0600: the service's user could not open it, and its next start was refused
    'lock file ...: Permission denied'. It is the database's owner's, as SQLite gives its journals."""
    from state.db import open_store
    folder = short_tmp / "svc"
    folder.mkdir(mode=0o750)
    open_store(folder / "s.db").conn.close()
    (folder / "s.db.lock").unlink(missing_ok=True)
    for p in (folder, folder / "s.db"):
        os.chown(p, 65534, 65534)
    monkeypatch.setenv("SPECCTL_SOCKET", str(short_tmp / "none.sock"))
    res = CliRunner().invoke(cli, ["--db", str(folder / "s.db"), "threshold", "pin", "7"])
    assert res.exit_code == 0 and "saved to" in res.output, res.output
    st = os.lstat(folder / "s.db.lock")
    assert (st.st_uid, st.st_gid) == (65534, 65534)
