"""helper-183: operator-facing leftovers in specctl and the daemon's lines, each red before its fix."""
import os

import pytest

from click.testing import CliRunner

from controller.cli.main import cli
from tests.daemon_proc import DaemonProc


def _default_daemon(tmp_path) -> tuple[DaemonProc, str, str]:
    """The README's own daemon: the default database and socket (under the test's XDG_STATE_HOME)."""
    state = os.path.join(os.environ["XDG_STATE_HOME"], "spec-controller")
    os.makedirs(state, mode=0o700)
    db, sock = os.path.join(state, "spec-controller.db"), os.path.join(state, "control.sock")
    d = DaemonProc(tmp_path, "--concurrency", "4", config_text=f'[storage]\ndb = "{db}"\n[control]\nsocket = "{sock}"\n',
                   paths_in_config=(db, sock))
    return d, db, sock


def test_policy_list_at_a_wrong_socket_does_not_mark_the_default_daemons_policy(tmp_path):
    """`specctl --socket TYPO policy list` beside the default daemon marked that daemon's policy [active], exit 0, as if
    it were the one at TYPO; the other commands name the socket it serves, exit 2. Now so does list; with that daemon
    stopped (its database records another socket) the list is printed unmarked, and stderr says why."""
    d, db, sock = _default_daemon(tmp_path)
    wrong = tmp_path / "typo.sock"
    try:
        d.wait_socket()
        d.wait_start_recorded()
        res = CliRunner().invoke(cli, ["--socket", str(wrong), "policy", "list"])
        assert res.exit_code == 2, res.output
        assert res.stdout == "" and "[active" not in res.output
        assert res.stderr.startswith(f"specctl: daemon pid {d.proc.pid} holding {db} serves its control socket at "
                                     f"{sock}, not at {wrong}; give --socket {sock}"), res.stderr
    finally:
        assert d.stop() == 0
    res = CliRunner().invoke(cli, ["--socket", str(wrong), "policy", "list"])
    assert res.exit_code == 0, res.output
    assert "thompson" in res.stdout and "[active" not in res.stdout
    assert res.stderr == (f"specctl: the active policy is not marked: no daemon answers on {wrong}, and {db} (the default "
                          f"database, with no --db) is the state of the daemon that serves {sock}: give the --db of the "
                          "daemon meant\n")
    res = CliRunner().invoke(cli, ["--socket", sock, "policy", "list"])      # its own socket: its database speaks
    assert res.exit_code == 0 and "[active as bandit]" in res.stdout, res.output


def test_a_socket_or_db_given_before_and_after_the_command_must_agree(short_tmp, monkeypatch):
    """`specctl --db A threshold pin 5 --db B` pinned in B, A dropped unsaid (the last one won). Now two differing values
    are one line, exit 2, and neither database changes; the same path twice (spelled two ways) is one path, and a
    variable's (SPECCTL_DB) is replaced by the flag as before."""
    from state.db import open_store

    from tests.conftest import saved_settings
    a, b = short_tmp / "a.db", short_tmp / "b.db"
    for db in (a, b):
        open_store(db).conn.close()
    none = str(short_tmp / "none.sock")
    for args in (["--socket", none, "--db", str(a), "threshold", "pin", "5", "--db", str(b)],
                 ["--socket", none, "--db", str(a), "threshold", "--db", str(b), "pin", "5"],
                 ["--db", str(a), "--socket", none, "threshold", "--socket", str(short_tmp / "other.sock"), "pin", "5"]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stdout == "" and len(res.stderr.splitlines()) == 1, (args, res.output)
        flag, first, second = ("--db", a, b) if "--db" in args[3:] else ("--socket", none, short_tmp / "other.sock")
        assert res.stderr == f"specctl: {flag} given twice, as {first} and as {second}: give it once; nothing changed\n"
        assert "pinned" not in saved_settings(a) and "pinned" not in saved_settings(b)
    monkeypatch.chdir(short_tmp)
    res = CliRunner().invoke(cli, ["--socket", none, "--db", str(a), "threshold", "pin", "5", "--db", "a.db"])
    assert res.exit_code == 0 and saved_settings(a)["pinned"] == 5, res.output
    monkeypatch.setenv("SPECCTL_DB", str(a))
    res = CliRunner().invoke(cli, ["--socket", none, "threshold", "pin", "6", "--db", str(b)])
    assert res.exit_code == 0 and saved_settings(b)["pinned"] == 6 and saved_settings(a)["pinned"] == 5, res.output


@pytest.mark.parametrize("args,line", [
    (["--speed", "0"], "[sim] speed=0 out of range (allowed 0.01 .. 10000) (given on the command line: --speed)"),
    (["--speed", "1e5"], "[sim] speed=100000 out of range (allowed 0.01 .. 10000) (given on the command line: --speed)"),
    (["--set", "storage.min_free_mb=2e9"], "[storage] min_free_mb=2000000000 out of range (allowed 0 .. 1000000000) "
                                           "(given on the command line: --set storage.min_free_mb=2e9)"),
    (["--set", "guard.explore_share=5"], "[guard] setting explore_share=5 out of range (allowed 0 .. 1) (given on "
                                         "the command line: --set guard.explore_share=5)"),
])
@pytest.mark.parametrize("command", [["run"], ["config", "check"]])
def test_a_number_refused_by_its_range_is_echoed_as_the_operator_wrote_it(short_tmp, monkeypatch, command, args, line):
    """`spec-controller run --speed 0` said `[sim] speed=0.0 out of range` (a float flag's repr), `[guard] explore_share
    = 5` said `explore_share=5.0`: numtext.plain, as the range beside it is written."""
    from controller.daemon import logs
    from controller.daemon.main import main
    monkeypatch.setattr(logs, "setup", lambda level: None)
    res = CliRunner().invoke(main, [*command, "--db", str(short_tmp / "x.db"), "--socket", str(short_tmp / "s"), *args])
    assert res.exit_code == 2 and res.output == f"spec-controller: config: {line}\n", res.output
    assert not (short_tmp / "x.db").exists()


def test_history_says_a_pin_restored_at_start_is_a_pin(short_tmp):
    """A restart with a pinned threshold wrote `7 -> 7  bandit: restored at start`, the words of a learned threshold
    restored: nothing said the start's threshold was the operator's pin. Its row now says so as the pin's own row does."""
    sock, db = short_tmp / "ctl.sock", short_tmp / "state.db"
    paths = ["--socket", str(sock), "--db", str(db)]
    for run in range(2):
        d = DaemonProc(short_tmp, "--concurrency", "4")
        try:
            d.wait_socket()
            if run == 0:
                assert CliRunner().invoke(cli, [*paths, "threshold", "pin", "7"]).exit_code == 0
                d.wait_for(lambda st: st["threshold"] == 7, what="the pin applied")
            else:
                res = CliRunner().invoke(cli, [*paths, "history", "--limit", "5"])
                assert res.exit_code == 0, res.output
                newest, pin = res.stdout.splitlines()[:2]       # (newest first)
                assert newest.endswith("    7 -> 7     bandit: restored at start: pinned at 7 by an operator"), res.stdout
                assert pin.endswith(" -> 7     bandit: pinned at 7 by an operator"), res.stdout
        finally:
            stopped = CliRunner().invoke(cli, [*paths, "stop"]).exit_code
            d.close()
        assert stopped == 0


def test_the_start_names_an_unused_policy_and_its_parameters_as_key_value_words(short_tmp):
    """`run --policy model` on a database that runs bandit logged `policy model {} given on the command line is not
    used: the database's policy bandit {} is ...`: a Python dict's text. Now `model`, `ucb (c=2)` (c=2.0 too)."""
    sock, db = short_tmp / "ctl.sock", short_tmp / "state.db"
    paths = ["--socket", str(sock), "--db", str(db)]
    for extra in ([], ["--policy", "model"], ["--set", "policy.name=ucb", "--set", "policy.params.c=2.0"]):
        d = DaemonProc(short_tmp, "--concurrency", "4", *extra)
        try:
            d.wait_socket()
        finally:
            stopped = CliRunner().invoke(cli, [*paths, "stop"]).exit_code
            d.close()
        assert stopped == 0
    warnings = [line.split(" spec_controller: ", 1)[1] for line in d.log_text(20000).splitlines() if " WARNING " in line]
    assert warnings == [
        "policy model given on the command line is not used: the database's policy bandit is (a config's policy is a "
        "first start's only; `specctl policy set model` switches)",
        "policy ucb (c=2) given on the command line is not used: the database's policy bandit is (a config's policy is "
        "a first start's only; `specctl policy set ucb` switches)"], warnings
