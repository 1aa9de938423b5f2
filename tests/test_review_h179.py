"""helper-179: operator-facing leftovers of the start-up refusals and specctl's wording: a newer schema written between
the schema check and the migration (exit 2, the early check's line); the control socket's folder (below a folder that
cannot be searched, an error a retry may pass, a kernel file system such as /proc) judged by one check for run and
config check; numbers in full; specctl where the lock file cannot be read, and `policy show` with the daemon down."""
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.daemon.preflight import store_refusal
from state import db as state_db
from state.db import open_store
from state.faults import Lasting
from tests.daemon_proc import ROOT
from tests.test_review_h172 import _daemon

# `run` in its own process, with a newer version's write landing between _check_schema and migrate
_RACED_RUN = """
import sys
from state import db
real = db.migrate
def raced(store):
    store.execute("PRAGMA user_version=7")      # (a newer spec-controller starting beside, in between)
    return real(store)
db.migrate = raced
from controller.daemon.main import main
main(sys.argv[1:])
"""


def _newer_line(db) -> str:
    return (f"spec-controller: database {db}: database schema version 7 is newer than this spec-controller knows "
            "(1): a newer version wrote it; upgrade spec-controller, or give another --db")


def test_a_newer_schema_met_by_the_migration_is_lasting_in_the_early_checks_words(short_tmp, monkeypatch):
    """migrate's RuntimeError was wrapped as a StoreError: exit 1, restarted every 5 s for good."""
    db, raced_db = short_tmp / "x.db", short_tmp / "y.db"
    for path in (db, raced_db):
        open_store(path).conn.close()
    newer = open_store(db)
    newer.execute("PRAGMA user_version=7")      # (x.db: found newer by the early check)
    newer.conn.close()
    with pytest.raises(Lasting) as found_early:
        open_store(db)
    early_refusal = store_refusal(found_early.value)
    real = state_db.migrate

    def raced(store):
        store.execute("PRAGMA user_version=7")
        return real(store)
    monkeypatch.setattr(state_db, "migrate", raced)
    with pytest.raises(Lasting) as found_late:
        open_store(raced_db)
    late_refusal = store_refusal(found_late.value)
    assert (late_refusal.code, early_refusal.code) == (2, 2)
    assert str(late_refusal) == str(early_refusal).replace(str(db), str(raced_db))


def test_run_refuses_a_newer_schema_written_during_its_open_with_exit_2_and_one_line(short_tmp):
    (short_tmp / "e.toml").write_text("")
    db = short_tmp / "x.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(short_tmp / "state")}
    env.pop("INVOCATION_ID", None)
    res = subprocess.run([sys.executable, "-c", _RACED_RUN, "run", "--config", str(short_tmp / "e.toml"), "--db",
                          str(db), "--socket", str(short_tmp / "c.sock"), "--concurrency", "2"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert (res.returncode, res.stderr.strip().splitlines()) == (2, [_newer_line(db)]), res.stderr
    assert not (short_tmp / "x.db.lock").exists()


def _check_as_nobody(tmp, *args: str) -> tuple[int, str, str]:
    """`config check` acting as nobody where the tests run as root (as themselves otherwise), in-process (the
    interpreter may live where nobody cannot read: its modules imported first, by a check as this user)."""
    from click.testing import CliRunner

    from controller.daemon import main as daemon_main
    from tests.conftest import as_nobody
    (tmp / "e.toml").write_text("")
    os.chmod(tmp, 0o755)
    (own := tmp / "own").mkdir(mode=0o777)          # (the database's folder: nobody may write it)
    os.chmod(own, 0o777)
    words = ["config", "check", "--config", str(tmp / "e.toml"), "--db", str(own / "x.db"), *args]
    CliRunner().invoke(daemon_main.main, [*words[:4], "--db", str(tmp / "warm.db"), "--socket", str(tmp / "w.sock")])

    def answer():
        res = CliRunner(env={"XDG_STATE_HOME": str(own / "state")}).invoke(daemon_main.main, words)
        return res.exit_code, res.stderr, type(res.exception).__name__
    return as_nobody(answer)


def test_config_check_refuses_a_socket_below_a_folder_it_cannot_search_in_one_line_not_a_traceback(short_tmp):
    """check_socket_folder asked sock.parent.is_dir(), which raises under a folder without x: a PermissionError
    traceback, exit 1, out of `config check` (run refused it before, at its socket probe)."""
    (locked := short_tmp / "locked").mkdir()
    locked.chmod(0o000)
    code, said, raised = _check_as_nobody(short_tmp, "--socket", str(locked / "sub" / "c.sock"))
    assert (code, raised) == (2, "SystemExit"), said
    assert said.startswith(f"spec-controller: cannot create the control socket's directory {locked}/sub: Permission "
                           "denied"), said
    assert len(said.splitlines()) == 1, said


@pytest.mark.parametrize("code,exit_code", [(errno.EIO, 1), (errno.EAGAIN, 1), (errno.EACCES, 2)])
def test_the_socket_folders_check_splits_an_error_met_asking_as_faults_refused_does(short_tmp, monkeypatch, code,
                                                                                    exit_code):
    """An I/O error met while asking about the folder was exit 2, which the unit does not restart: only what no restart
    changes is (faults.refused); the rest is exit 1, retried, as for the database's folder."""
    import pathlib

    from controller.daemon.preflight import Fatal, check_socket_folder
    sock = short_tmp / "s" / "c.sock"
    sock.parent.mkdir()
    (short_tmp / "d").mkdir()
    real = pathlib.Path.exists

    def exists(self, *args, **kwargs):
        if self == sock.parent:
            raise OSError(code, os.strerror(code))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "exists", exists)
    with pytest.raises(Fatal) as refusal:
        check_socket_folder(sock)
    line = f"cannot create the control socket's directory {sock.parent}: {os.strerror(code)}"
    assert (refusal.value.code, str(refusal.value)) == (exit_code, line)
    # config check: refused where run's start is (exit 2), a note where run's exit 1 is retried (as the database's)
    from click.testing import CliRunner

    from controller.daemon import main as daemon_main
    (short_tmp / "e.toml").write_text("")
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(short_tmp / "e.toml"), "--db",
                                                str(short_tmp / "d" / "x.db"), "--socket", str(sock)])
    said = f"spec-controller: {'note: ' if exit_code == 1 else ''}{line}"
    assert (res.exit_code, said in res.stderr.splitlines()) == (0 if exit_code == 1 else 2, True), res.output


def test_a_socket_folder_on_proc_is_refused_by_config_check_and_run_alike_before_any_engine(short_tmp):
    """As root, access(2) said /proc may be written: config check said ok, and run started the engine (minutes on a
    GPU), then failed the bind with exit 1 ('cannot be created there (No such file or directory)'), restarted every 5 s
    for good. Now one check in the preflight refuses it for both, exit 2, a user's in the same words (helper-180)."""
    args = ["--db", str(short_tmp / "x.db"), "--socket", "/proc/h179.sock"]
    said = {words[0]: (res.returncode, res.stderr.strip().splitlines())
            for words in (["run"], ["config", "check"]) for res in [_daemon(short_tmp, *words, *args)]}
    assert said["run"] == said["config"] and said["run"][0] == 2 and len(said["run"][1]) == 1, said
    assert said["run"][1][0].startswith("spec-controller: cannot create the control socket in /proc: "), said
    if os.geteuid() == 0:
        assert said["run"][1][0].endswith(": nothing can be made in it (proc: the kernel's own file system)"), said
    assert not (short_tmp / "x.db").exists()          # (refused before the database is opened)


def test_the_kernel_file_system_under_a_path_is_read_from_its_mount(short_tmp):
    from state.mounts import kernel_file_system
    if not os.path.exists("/proc/self/mountinfo"):
        pytest.skip("no /proc/self/mountinfo here")
    assert (kernel_file_system(Path("/proc")), kernel_file_system(Path("/proc/self")), kernel_file_system(short_tmp)) \
        == ("proc", "proc", None)


def test_config_check_refuses_a_database_on_proc_as_run_does(short_tmp):
    """config check said ok of --db /proc/x.db as root, which run refuses (exit 2: nothing can be made there).
    helper-180: in one line (run's said the open's ENOENT), for a user too (told to get write access to /proc)."""
    args = ["--db", "/proc/h179.db", "--socket", str(short_tmp / "c.sock")]
    run, check = _daemon(short_tmp, "run", *args), _daemon(short_tmp, "config", "check", *args)
    assert (run.returncode, run.stderr) == (check.returncode, check.stderr) and run.returncode == 2, (run, check)
    assert check.stderr.startswith("spec-controller: lock file /proc/h179.db.lock cannot be created in /proc "), check.stderr


# --- numbers an operator gave, in full (numtext.plain), not %g's 1e+09 or 1.23457 ---------------------------------------
def test_the_disk_floor_is_said_in_full(short_tmp):
    """[storage] min_free_mb = 1e9 (its largest) read '1e+09 MiB kept free' in status and config check."""
    from state.room import Room
    problem = Room(short_tmp / "x.db", 1e9).problem()       # (no disk has a petabyte free: under the floor)
    assert problem is not None and "under the 1000000000 MiB kept free ([storage] min_free_mb)" in problem, problem


def test_the_simulators_rate_is_said_in_full():
    """run --arrival-rate 1000000 (its largest): status's load 'rate=1e+06/s', config check's '1e+06 requests/s', and
    a rate beside a trace 'arrival_rate = 1e+06'; 1234.5678 read 1234.57."""
    from controller.daemon.config import load_conflict
    from controller.daemon.engines.sim import SimEngine
    from controller.sim.openeval import rate_segments
    from controller.sim.profile import load_profile
    engine = SimEngine(load_profile("crossover-b"), arrival_rate=1e6)
    assert engine._load_at(0.0)[2] == "rate=1000000/s"
    assert engine.not_ready_reason(1234.5678) == "engine did not become ready within 1234.5678 s"
    assert rate_segments([1e6], 10.0)[0].label == "rate=1000000"
    assert "[sim] arrival_rate = 1000000 (--arrival-rate)" in load_conflict("mixed-shift", 0, 1e6)


def test_config_checks_ok_line_says_the_rate_in_full(short_tmp):
    from click.testing import CliRunner

    from controller.daemon import main as daemon_main
    (short_tmp / "e.toml").write_text("")
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(short_tmp / "e.toml"), "--db",
                                                str(short_tmp / "x.db"), "--socket", str(short_tmp / "c.sock"),
                                                "--arrival-rate", "1000000"])
    assert res.exit_code == 0 and "1000000 requests/s" in res.stdout, res.output


# --- specctl where the lock file cannot be read: who holds the database cannot be told, and it says so ---------------------
def _specctl(env: dict, *args: str):
    from click.testing import CliRunner

    from controller.cli.main import cli
    return CliRunner(env=env).invoke(cli, list(args))


@pytest.mark.parametrize("command", [["status"], ["threshold"], ["stop"]], ids=" ".join)
def test_a_lock_that_cannot_be_read_is_said_not_the_default_socket_nor_not_running(short_tmp, command):
    """--db alone, its lock file a link (refused: not read): status, threshold and stop said 'daemon is not running (no
    daemon socket at <the default socket>)', a socket never meant; who holds the database cannot be told."""
    db = short_tmp / "x.db"
    open_store(db).conn.close()
    (lock := short_tmp / "x.db.lock").unlink(missing_ok=True)
    lock.symlink_to(short_tmp / "nowhere")
    env = {"XDG_STATE_HOME": str(short_tmp / "elsewhere"), "SPECCTL_SOCKET": None, "SPECCTL_DB": None}
    res = _specctl(env, "--db", str(db), *command)
    first = res.stderr.splitlines()[0]
    assert res.exit_code == 3, res.output
    assert first.startswith(f"specctl: no daemon answers, and whether a daemon holds {db} (one still starting, its "
                            f"socket not open yet) cannot be told: lock file {lock} is a symbolic link"), first
    assert "elsewhere" not in res.stderr and "not running" not in first, res.stderr


def test_a_lock_this_user_may_not_read_is_named_with_its_path(short_tmp):
    """The service's lock (0600) to an operator in its group, here mode 000: 'daemon is not running'; the lock named."""
    from tests.conftest import as_nobody
    os.chmod(short_tmp, 0o755)
    (folder := short_tmp / "state" / "spec-controller").mkdir(parents=True)
    os.chmod(short_tmp / "state", 0o755)
    db = folder / "spec-controller.db"
    store = open_store(db)
    store.execute("PRAGMA journal_mode=DELETE")         # (read by another user without a -shm of its own)
    store.conn.close()
    os.chmod(folder, 0o755)
    os.chmod(db, 0o644)
    (lock := folder / "spec-controller.db.lock").write_text("")
    lock.chmod(0o000)
    env = {"XDG_STATE_HOME": str(short_tmp / "state"), "SPECCTL_SOCKET": None, "SPECCTL_DB": None}
    _specctl(env, "status")             # (its modules imported, as this user: the child may not read them)
    import importlib.metadata  # noqa: F401
    from sqlite_utils.plugins import ensure_plugins_loaded
    ensure_plugins_loaded()

    def answer():       # (the paths given: pytest's stand-in for the service's socket is where nobody cannot look)
        res = _specctl(env, "--socket", str(folder / "control.sock"), "--db", str(db), "stop")
        return res.exit_code, res.stderr
    code, said = as_nobody(answer)
    assert (code, said) == (3, f"specctl: no daemon answers (no daemon socket at {folder}/control.sock), and whether "
                               f"a daemon holds {db} (one still starting, its socket not open yet) cannot be told: "
                               f"lock file {lock}: Permission denied\n"), said


# --- specctl policy show with the daemon down ------------------------------------------------------------------------------
def test_policy_show_with_the_daemon_down_says_so_as_status_does(short_tmp):
    """It printed the saved policy exactly as a running daemon's, exit 0, not a word that none runs (status says so on
    stderr); a policy set since the last run read as the one running. --json keeps its daemon_running: false."""
    db = short_tmp / "x.db"
    open_store(db).conn.close()
    args = ["--socket", str(short_tmp / "none.sock"), "--db", str(db)]
    assert _specctl({}, *args, "policy", "set", "ucb", "--param", "c=1.5").exit_code == 0
    res = _specctl({}, *args, "policy", "show")
    assert res.exit_code == 0 and res.stdout.splitlines()[0] == "ucb" and "    c=1.5" in res.stdout, res.output
    assert res.stderr == (f"specctl: daemon is not running (no daemon socket at {short_tmp}/none.sock); the policy "
                          "saved for its next start, from the database:\n"), res.stderr
    shown = _specctl({}, *args, "policy", "show", "--json")
    assert shown.stderr == "" and '"daemon_running": false' in shown.stdout, shown.output
