"""helper-180: a review of helper-179's start-up refusals. run and config check refuse a path with one check, one line
and one exit code: the control socket below a folder this user cannot search (run's socket probe said it first, exit 1),
a database folder on a kernel file system (run said the open's ENOENT, config check the preflight's words; a user was
told to get write access to /proc)."""
import os

import pytest
from click.testing import CliRunner

from controller.daemon import main as daemon_main


def _as_nobody_both(tmp, *args: str, db: str | None = None) -> dict:
    """run's and config check's (exit code, stderr), each acting as nobody where the tests run as root (as themselves
    otherwise), in-process: the modules imported first, as this user (nobody may not read the interpreter's folder)."""
    from tests.conftest import as_nobody
    (tmp / "e.toml").write_text("")
    os.chmod(tmp, 0o755)
    (own := tmp / "own").mkdir(mode=0o777, exist_ok=True)     # (the database's folder: nobody may write it)
    os.chmod(own, 0o777)
    base = ["--config", str(tmp / "e.toml"), "--db", db or str(own / "x.db"), "--concurrency", "2"]
    CliRunner().invoke(daemon_main.main, ["config", "check", *base[:2], "--db", str(tmp / "w.db"), "--socket",
                                          str(tmp / "w.sock")])
    import controller.daemon.lifecycle  # noqa: F401  (run's modules, imported as this user)
    import controller.daemon.sockprobe  # noqa: F401

    def answer(words):
        res = CliRunner(env={"XDG_STATE_HOME": str(own / "state")}).invoke(daemon_main.main, words)
        return res.exit_code, res.stderr
    return {cmd[0]: as_nobody(lambda: answer([*cmd, *base, *args])) for cmd in (["run"], ["config", "check"])}


@pytest.mark.parametrize("below,own", [("sub", False), ("", False), ("", True)], ids=["below-it", "in-it", "its-own"])
def test_run_refuses_a_socket_below_a_folder_it_cannot_search_as_config_check_does(short_tmp, below, own):
    """run met it first at its socket probe: 'control socket path ...: Permission denied', exit 1, which the unit
    restarts every 5 s for good; config check said the folder check's line, exit 2. A folder of the user's own: the
    chmod, in both (as the probe said it: helper-168)."""
    (locked := short_tmp / "locked").mkdir()
    if own and os.geteuid() == 0:
        os.chown(locked, 65534, 65534)
    locked.chmod(0o000)
    sock = locked / below / "c.sock" if below else locked / "c.sock"
    said = _as_nobody_both(short_tmp, "--socket", str(sock))
    assert said["run"] == said["config"], said
    code, line = said["run"]
    assert code == 2 and len(line.splitlines()) == 1, said
    what = f"the control socket's directory {locked}/sub" if below else f"the control socket in {locked}"
    assert line.startswith(f"spec-controller: cannot create {what}: Permission denied"), said
    assert not own or line.endswith(f"(the folder {locked} is yours but its mode 0 refuses you: chmod u+rwx "
                                    f"{locked})\n")
    assert not (short_tmp / "own" / "x.db").exists()



def _daemon(tmp, words: list[str], *args: str, state: str) -> tuple[int, str]:
    import subprocess
    import sys

    from tests.daemon_proc import ROOT
    (tmp / "e.toml").write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": state}
    env.pop("INVOCATION_ID", None)
    extra = ["--concurrency", "2"] if words == ["run"] else []
    res = subprocess.run([sys.executable, "-m", "controller.daemon", *words, "--config", str(tmp / "e.toml"), *args,
                          *extra], capture_output=True, text=True, env=env, timeout=120)
    return res.returncode, res.stderr


_KERNEL = "nothing can be made in it (proc: the kernel's own file system)"
_ELSEWHERE = ("; give a --db on a writable file system (under the unit: leave [storage] db empty, for its state "
             "directory)")


@pytest.mark.parametrize("given", [True, False], ids=["--db", "default-state-folder"])
def test_a_database_folder_on_proc_is_one_line_from_run_and_config_check(short_tmp, given):
    """As root, config check said 'lock file ... cannot be created in /proc (Read-only file system) ...' and run, whose
    preflight did not ask, 'lock file ... cannot be created there (No such file or directory) ...' at its open; with the
    state folder on /proc run named the control socket's folder, config check the database's. One check now."""
    args = ["--db", "/proc/h180.db", "--socket", str(short_tmp / "c.sock")] if given else []
    state = str(short_tmp / "state") if given else "/proc"
    run, check = (_daemon(short_tmp, words, *args, state=state) for words in (["run"], ["config", "check"]))
    first = f"lock file /proc/h180.db.lock cannot be created in /proc ({_KERNEL})" if given else \
        f"cannot create /proc/spec-controller: {_KERNEL}"
    assert run == check == (2, f"spec-controller: {first}{_ELSEWHERE}\n"), (run, check)


def test_a_user_is_told_the_kernels_file_system_not_to_get_write_access_to_it(short_tmp):
    """A user (nobody, where the tests run as root) met /proc's mode first: 'Permission denied; let this user write
    there (its owner, its mode)', of /proc, for the database and the socket alike."""
    said = _as_nobody_both(short_tmp, "--socket", str(short_tmp / "own" / "c.sock"), db="/proc/h180.db")
    assert said["run"] == said["config"] == (2, f"spec-controller: lock file /proc/h180.db.lock cannot be created in "
                                                f"/proc ({_KERNEL}){_ELSEWHERE}\n"), said
    said = _as_nobody_both(short_tmp, "--socket", "/proc/h180.sock")
    assert said["run"] == said["config"] == (2, f"spec-controller: cannot create the control socket in /proc: {_KERNEL}"
                                                "\n"), said


def test_a_folder_that_takes_no_file_beside_a_lock_file_names_the_database_as_run_does(short_tmp):
    """The lock file there (the database not), the folder closed to this user: config check said the lock file could not
    be created; run, whose open met the database's file, named that. One check, run's words."""
    (folder := short_tmp / "f").mkdir()
    (folder / "x.db.lock").write_text("")
    (folder / "x.db.lock").chmod(0o666)         # (one this user may open: what refuses is the folder)
    folder.chmod(0o555)
    try:
        said = _as_nobody_both(short_tmp, "--socket", str(short_tmp / "own" / "c.sock"), db=str(folder / "x.db"))
    finally:
        folder.chmod(0o755)
    assert said["run"] == said["config"] and said["run"][0] == 2, said
    assert said["run"][1].startswith(f"spec-controller: database {folder}/x.db cannot be created in {folder} "
                                     "(Permission denied)"), said
    assert os.listdir(folder) == ["x.db.lock"]


# --- specctl policy show while a daemon holds the database, its engine still loading ------------------------------
def test_policy_show_of_a_daemon_still_starting_says_what_status_says_not_that_none_runs(short_tmp):
    """helper-179's line said 'daemon is not running (...); the policy saved for its next start' while a daemon held the
    database (status: STARTING, exit 4): the start it spoke of was under way. status's reading, one place, says it."""
    from controller.cli.main import cli
    from state.db import open_store
    from state.lock import DaemonLock
    db, sock = short_tmp / "x.db", short_tmp / "none.sock"
    open_store(db).conn.close()
    args = ["--socket", str(sock), "--db", str(db)]
    assert CliRunner().invoke(cli, [*args, "policy", "set", "ucb"]).exit_code == 0
    lock = DaemonLock(db)
    lock.acquire()          # (a daemon's start: the lock held, its socket not open yet)
    try:
        shown = CliRunner().invoke(cli, [*args, "policy", "show"])
        status = CliRunner().invoke(cli, [*args, "status"])
    finally:
        lock.release()
    why = (f"daemon pid {os.getpid()} holds the database but does not answer on {sock} (engine starting, the daemon "
           "stopping, or is its socket another one? see --socket)")
    assert status.exit_code == 4 and status.stderr == f"specctl: {why}; last state from the database:\n", status.output
    assert shown.exit_code == 0 and shown.stdout.splitlines()[0] == "ucb", shown.output
    assert shown.stderr == f"specctl: {why}; the policy saved in the database:\n", shown.stderr


# --- helper-179's numbers in full (numtext.plain): the call sites its tests left out ----------------------------------
def test_the_numbers_an_operator_gave_are_said_in_full_where_helper_179_changed_them(tmp_path, monkeypatch):
    """%g said 1234.57 of 1234.5678: the guard's stabilisation window, status's clock, stop's timeout, simulate's tables
    (helper-179 changed these without a test that sees it)."""
    import click

    from controller.cli import openloop, stop
    from controller.cli.status import render_status
    from controller.control.guard import Guard
    from controller.control.guard_config import GuardConfig
    from policies import Decision
    from policies.buckets import Buckets
    held = Guard(GuardConfig(stabilisation_s=1234.5678, max_step_buckets=100), Buckets(256), initial=8)
    assert held.apply(0.0, Decision(12, 12, "a"), 0.0)[1] == "a"
    assert held.apply(0.5, Decision(4, 4, "b"), 0.5)[1] == "guard: 12 held, 4 not yet proposed for 1234.5678 s; the " \
                                                          "policy: b"
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 30, "healthy": True},
          "engine": {"engine": "sim", "profile": "crossover-b", "load": "C=32", "state": "running", "speed": 1234.5678}}
    assert "clock x1234.5678" in render_status(st), render_status(st)
    monkeypatch.setattr(stop, "wait_gone", lambda *a, **k: False)
    monkeypatch.setattr(stop, "_gone", lambda *a: False)
    res = CliRunner().invoke(click.command()(lambda: stop._wait(tmp_path / "x.db", 7, 1234.5678)))
    assert res.output == "specctl: daemon pid 7 is still draining after 1234.5678 s\n", res.output
    mode = {"tok_s": 1.0, "tpot_ms_mean": 1.0, "tpot_ms_median": 1.0, "e2e_ms_median": 1.0, "mean_batch_size": 1.0,
            "spec_share": 0.5, "duration_s": 1.0}
    row = {"rate": 1234.5678, **mode, **{m: mode for m in openloop.MODES}, "tok_s_vs_best_fixed": 1.0,
           "tpot_vs_best_fixed": 1.0, "final_threshold": 8}
    table = openloop.render_open_table({"policy": "ucb", "profile": "seed", "seed": 0, "rows": [row]})
    assert "rate 1234.5678: ucb" in table and "\n1234.5678  " in table, table
    finite = openloop.render_finite_table({"policy": "ucb", "profile": "seed", "seconds": 1234.5678, "seeds": [0, 1],
                                           "rows": [{"rate": 1e6, "requests": 3, "modes": {"policy": mode}}]})
    assert "(1234.5678 s of arrivals" in finite and "1000000" in finite, finite


# --- a symbolic link at the control socket's path -----------------------------------------------------------------
@pytest.mark.parametrize("to", ["nowhere", "a socket"])
def test_a_link_at_the_control_sockets_path_is_refused_by_run_and_config_check_alike(short_tmp, to):
    """run's probe refused it, 'exists and is a symbolic link; refusing to remove it', exit 1 (retried every 5 s, for
    good: only the operator removes it); config check said ok (it follows links, as specctl's connect does)."""
    import socket
    link = short_tmp / "c.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(short_tmp / "real.sock"))
        link.symlink_to(short_tmp / ("real.sock" if to == "a socket" else "nowhere"))
        args = ["--db", str(short_tmp / "x.db"), "--socket", str(link)]
        run, check = (_daemon(short_tmp, words, *args, state=str(short_tmp / "state")) for words in
                      (["run"], ["config", "check"]))
    assert run == check == (2, f"spec-controller: control socket path {link} is a symbolic link, which a start neither "
                               "follows nor removes; remove it, or give another --socket\n"), (run, check)
    assert link.is_symlink() and not (short_tmp / "x.db").exists()


def test_simulates_rate_limits_are_said_as_every_allowed_range_says_them():
    """'rates must be 0.001 .. 1e6 requests/s', where run's --arrival-rate says 'allowed 0 .. 1000000'."""
    from controller.cli.main import cli
    res = CliRunner().invoke(cli, ["simulate", "--arrival-rate", "2000000"])
    assert (res.exit_code, res.stderr) == (2, "specctl: invalid value for --arrival-rate: rates must be 0.001 .. "
                                              "1000000 requests/s\n"), res.output
