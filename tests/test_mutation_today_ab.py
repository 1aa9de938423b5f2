"""helper-184's mutation pass ab over the lines changed since 86df00e (bench/results/mutation-today-2026-12-07ab.md):
common.unpaired / refuse_unpaired, steer._active_policy, Ctx.named_again and main's typed-on-the-command-line tracking,
config.validate's echo through numtext.plain, restore.policy_words and numtext.value_text. A test for each surviving
mutant that is not equivalent, named by its id."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from controller import paths
from controller.cli.main import cli
from state.db import open_store
from state.writer import Writer
from tests.conftest import saved_settings
from tests.test_mutation_today_p import unit  # noqa: F401 (a fixture: the service's database, created)
from tests.test_mutation_today_x import _saved
from tests.test_review_h166 import _foreign_http


def _specctl(home, *args, **env):
    """specctl with home as XDG_STATE_HOME and no variable of its own."""
    return CliRunner().invoke(cli, [str(a) for a in args], env={"XDG_STATE_HOME": str(home), "SPECCTL_DB": None,
                                                               "SPECCTL_SOCKET": None, "RUNTIME_DIRECTORY": None, **env})


def _with_start(db, socket) -> None:
    """db made with a start event recorded, as a daemon that served socket writes it."""
    w = Writer(open_store(db)).start()
    w.event("start", f"engine=sim policy=bandit threshold=4 pinned=None pid=123 socket={socket}")
    assert w.flush(10)
    w.stop()


# --- common.unpaired ---------------------------------------------------------------------------------------------------

def test_pair_socket_only_the_users_socket_does_not_take_the_services_database(unit):
    """un-pair-socket-only: the default pair is the default socket AND the default database. With the service's database
    present and the user's daemon down, the database found is the service's; `--socket` naming the user's own default
    socket is not that database's pair (it records no daemon on it): refused, exit 3, nothing saved there."""
    home = unit[0]
    res = _specctl(home, "--socket", home / "spec-controller" / "control.sock", "threshold", "pin", "7")
    assert res.exit_code == 3 and res.stdout == "", res.output
    assert res.stderr == (f"specctl: no daemon answers on {home}/spec-controller/control.sock, and {paths.UNIT_DB} (the "
                          "default database, with no --db) records no daemon on it: give the --db of the daemon meant; "
                          "nothing changed\n"), res.stderr
    assert "pinned" not in saved_settings(paths.UNIT_DB)


def test_pair_socket_eq_the_default_socket_spelled_otherwise_is_still_the_default_pair(short_tmp, monkeypatch):
    """un-pair-socket-eq: the pair is judged by the path the socket is (realpath), not by its spelling: `--socket
    control.sock` typed in the state folder is the default socket, and an offline pin goes into the default database (a
    spelling compared by == read it as another daemon's socket: 'records no daemon on it', exit 3)."""
    state = short_tmp / "spec-controller"
    state.mkdir()
    monkeypatch.chdir(state)
    res = _specctl(short_tmp, "--socket", "control.sock", "threshold", "pin", "7")
    assert res.exit_code == 0, res.output
    assert saved_settings(state / "spec-controller.db")["pinned"] == 7


def test_served_eq_the_socket_a_start_recorded_spelled_otherwise_is_that_daemons(short_tmp, monkeypatch):
    """un-served-eq: a default database whose newest start served S stands in for the daemon at S however S is spelled:
    `--socket a.sock` typed in S's folder saves the pin there (== on the spellings refused it, exit 3)."""
    db = short_tmp / "spec-controller" / "spec-controller.db"
    _with_start(db, short_tmp / "a.sock")
    monkeypatch.chdir(short_tmp)
    res = _specctl(short_tmp, "--socket", "a.sock", "threshold", "pin", "7")
    assert res.exit_code == 0, res.output
    assert saved_settings(db)["pinned"] == 7


# --- steer._active_policy ----------------------------------------------------------------------------------------------

def test_daemonerror_unpaired_another_programs_answer_does_not_mark_the_default_databases_policy(short_tmp):
    """ap-daemonerror-unpaired, and the defect it showed: `specctl --socket S policy list` where another program answers
    on S (a daemon's error, a denied socket alike) marked the default database's policy `[active]`, exit 0, as if it
    were S's: the fall-back to the database skipped unpaired's judgement that a socket no daemon answers on gets. Now
    the list is unmarked and stderr says what S said and whose the database is (dropping the DaemonError catch: a
    traceback)."""
    db = short_tmp / "spec-controller" / "spec-controller.db"
    _saved(db, {"name": "ucb", "params": {}})
    sock = short_tmp / "other.sock"
    listener = _foreign_http(sock, "404 Not Found", b'{"message": "page not found"}')
    try:
        res = _specctl(short_tmp, "--socket", sock, "policy", "list")
    finally:
        listener.close()
    assert res.exit_code == 0 and "\nucb: " in "\n" + res.stdout and "[active" not in res.stdout, res.output
    assert res.stderr == (f"specctl: the active policy is not marked: the program on {sock} is not a spec-controller "
                          "daemon (or one of another release): it answered GET /policy with HTTP 404 and no error line "
                          f"of the daemon's, and {db} (the default database, with no --db) records no daemon on it: give "
                          "the --db of the daemon meant\n"), res.stderr


def test_daemonerror_paired_the_default_pairs_database_still_marks_where_its_socket_errs(short_tmp):
    """The judgement, not a blanket refusal: where S is the database's own socket (its newest start served S), an error
    answered there still marks the policy the database saved (the daemon saves it before it acknowledges a switch)."""
    db = short_tmp / "spec-controller" / "spec-controller.db"
    sock = short_tmp / "other.sock"
    _with_start(db, sock)
    _saved(db, {"name": "ucb", "params": {}})
    listener = _foreign_http(sock, "404 Not Found", b'{"message": "page not found"}')
    try:
        res = _specctl(short_tmp, "--socket", sock, "policy", "list")
    finally:
        listener.close()
    assert res.exit_code == 0 and "\nucb [active]: " in "\n" + res.stdout and res.stderr == "", res.output


# --- Ctx.named_again ---------------------------------------------------------------------------------------------------

def test_get_not_setdefault_a_db_after_a_group_and_after_its_command_must_agree(short_tmp):
    """na-get-not-setdefault: with none before the command, a --db after the group's name (`threshold --db A`) is the one
    typed first, and one after its command (`pin 5 --db B`) must name it too: refused, exit 2, neither changed."""
    a, b = short_tmp / "a.db", short_tmp / "b.db"
    for db in (a, b):
        open_store(db).conn.close()
    res = _specctl(short_tmp, "--socket", short_tmp / "none.sock", "threshold", "--db", a, "pin", "5", "--db", b)
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr == f"specctl: --db given twice, as {a} and as {b}: give it once; nothing changed\n", res.stderr
    assert "pinned" not in saved_settings(a) and "pinned" not in saved_settings(b)


def test_last_kept_the_refusal_names_the_path_as_first_typed(short_tmp, monkeypatch):
    """na-last-kept: typed three times, the first two one path spelled two ways, the third another: the line names the
    first as typed first (the one the operator began with), not the second spelling."""
    a, b = short_tmp / "a.db", short_tmp / "b.db"
    for db in (a, b):
        open_store(db).conn.close()
    monkeypatch.chdir(short_tmp)
    res = _specctl(short_tmp, "--socket", short_tmp / "none.sock", "--db", a, "threshold", "--db", "a.db", "pin", "5",
                   "--db", b)
    assert res.exit_code == 2, res.output
    assert res.stderr == f"specctl: --db given twice, as {a} and as {b}: give it once; nothing changed\n", res.stderr


def test_setattr_after_a_path_no_daemon_can_use_is_refused_as_such_before_it_is_compared(short_tmp):
    """na-setattr-after: a --db after the command that names a directory is refused for what it is (as it is where it
    is given once), not as a second --db."""
    a = short_tmp / "a.db"
    open_store(a).conn.close()
    res = _specctl(short_tmp, "--socket", short_tmp / "none.sock", "--db", a, "status", "--db", short_tmp)
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr == f"specctl: database {short_tmp}: a directory, not a database file; nothing changed\n", res.stderr


# --- config.validate: the zero-or-at-least ranges ----------------------------------------------------------------------

@pytest.mark.parametrize("args,line", [
    (["--set", "storage.min_free_mb=1.0"], "[storage] min_free_mb=1 out of range (allowed 0 for none, or 16 .. "
                                           "1000000000: a checkpoint of the WAL needs that room) (given on the command "
                                           "line: --set storage.min_free_mb=1.0)"),
    (["--set", "sim.arrival_rate=0.0001234567"], "[sim] arrival_rate=0.0001234567 out of range (allowed 0 for none, or "
                                                 "0.001 .. 1000000 requests/s, as a trace's rate and specctl "
                                                 "simulate's) (given on the command line: --set "
                                                 "sim.arrival_rate=0.0001234567)"),
])
@pytest.mark.parametrize("command", [["run"], ["config", "check"]])
def test_zero_repr_zero_g_a_value_under_its_least_is_echoed_as_written(short_tmp, monkeypatch, command, args, line):
    """cf-zero-repr, cf-zero-g: the second range check (0 for none, or at least LEAST) echoes the value by plain, as the
    first does: `min_free_mb=1.0` read `1.0` (a float's repr), and %g rounded 0.0001234567 to 0.000123457."""
    from controller.daemon import logs
    from controller.daemon.main import main
    monkeypatch.setattr(logs, "setup", lambda level: None)
    res = CliRunner().invoke(main, [*command, "--db", str(short_tmp / "x.db"), "--socket", str(short_tmp / "s"), *args])
    assert res.exit_code == 2 and res.output == f"spec-controller: config: {line}\n", res.output
    assert not (short_tmp / "x.db").exists()


# --- restore.policy_words, numtext.value_text, policy list -------------------------------------------------------------

def test_no_one_line_the_starts_warning_of_a_saved_policy_whose_name_holds_a_newline_is_one_log_line(short_tmp):
    """pw-no-one-line: a database's policy this version does not know, its name holding a newline (tampered with, or
    another program's): the daemon's start logs its warning as one line (config check's notes are cut to one line where
    they are said; the daemon's log takes the words as they are)."""
    from tests.daemon_proc import DaemonProc
    _saved(short_tmp / "state.db", {"name": "gone\nx", "params": {"k": 1}})
    d = DaemonProc(short_tmp, "--concurrency", "4")
    try:
        d.wait_socket()
    finally:
        assert d.stop() == 0
        d.close()
    lines = [line for line in d.log_text(20000).splitlines() if "saved policy" in line]
    assert len(lines) == 1 and lines[0].split(" spec_controller: ", 1)[1].startswith(
        "saved policy gone\\nx (k=1) not run (unknown policy 'gone\\nx' "), lines
    assert not any(line.startswith("x (k=1)") for line in d.log_text(20000).splitlines())


def test_sep_space_configured_name_only_bool_number_a_saved_policy_not_run_and_the_one_run_instead(short_tmp):
    """pw-sep-space, sp-configured-name-only, vt-bool-number: the note of a saved policy not run names its parameters
    apart (', '), a true as true is written (not 1: no number), and the policy run instead with its own parameters."""
    from tests.test_mutation_today_x import _check
    _saved(short_tmp / "s.db", {"name": "gone", "params": {"k": True, "j": 2.0}})
    res = _check(short_tmp, "--policy", "ucb", "--set", "policy.params.c=2.0")
    assert res.exit_code == 0, res.output
    assert "spec-controller: note: saved policy gone (k=True, j=2) not run (unknown policy 'gone' " in res.stderr, \
        res.stderr
    assert "; policy ucb (c=2) given on the command line runs instead (the database keeps it" in res.stderr, res.stderr


def test_min_raw_policy_list_writes_a_ranges_lower_bound_as_its_upper(short_tmp):
    """sl-min-raw: `policy list` writes a parameter's range as plain writes it at both ends: `c=1  [0 .. 100]`, not
    `[0.0 .. 100]` (helper-124's test read the default and the upper bound only)."""
    res = _specctl(short_tmp, "policy", "list")
    assert res.exit_code == 0, res.output
    ucb = res.stdout.split("\nucb", 1)[1]
    assert "\n    c=1  [0 .. 100] " in ucb and "min_samples=" in ucb and "[0.0" not in res.stdout, res.stdout


# --- beside the pass: --socket / --db typed twice on one side of the command's name -----------------------------------

@pytest.mark.parametrize("args", [
    ["--socket", "{none}", "--db", "{a}", "--db", "{b}", "threshold", "pin", "5"],
    ["--socket", "{none}", "threshold", "pin", "5", "--db", "{a}", "--db", "{b}"],
    ["--socket", "{none}", "--db", "{a}", "threshold", "pin", "5", "--db", "{a}", "--db", "{b}"],
])
def test_a_db_typed_twice_before_the_command_or_twice_after_it_must_agree_too(short_tmp, args):
    """`specctl --db A --db B threshold pin 5` pinned in B, A dropped unsaid (click keeps the last of a flag given
    twice): helper-183's named_again saw a --db before the command against one after it, not two on one side. Now any
    two that differ are one line, exit 2, neither database changed."""
    a, b = short_tmp / "a.db", short_tmp / "b.db"
    for db in (a, b):
        open_store(db).conn.close()
    res = _specctl(short_tmp, *[x.format(a=a, b=b, none=short_tmp / "none.sock") for x in args])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr == f"specctl: --db given twice, as {a} and as {b}: give it once; nothing changed\n", res.stderr
    assert "pinned" not in saved_settings(a) and "pinned" not in saved_settings(b)


def test_a_socket_typed_twice_before_the_command_must_agree_and_the_same_path_twice_is_taken(short_tmp, monkeypatch):
    """The same for --socket; one path typed twice (spelled two ways) is that path; a variable's value is one path, its
    spaces kept (a flag that may be typed twice must not read SPECCTL_DB as a list)."""
    a = short_tmp / "a.db"
    open_store(a).conn.close()
    x, y = short_tmp / "x.sock", short_tmp / "y.sock"
    res = _specctl(short_tmp, "--socket", x, "--socket", y, "--db", a, "threshold", "pin", "5")
    assert res.exit_code == 2 and res.stderr == (f"specctl: --socket given twice, as {x} and as {y}: give it once; "
                                                 "nothing changed\n"), res.output
    monkeypatch.chdir(short_tmp)
    res = _specctl(short_tmp, "--socket", x, "--db", a, "--db", "a.db", "threshold", "pin", "5")
    assert res.exit_code == 0 and saved_settings(a)["pinned"] == 5, res.output
    spaced = short_tmp / "a b.db"
    open_store(spaced).conn.close()
    res = _specctl(short_tmp, "--socket", x, "threshold", "pin", "6", SPECCTL_DB=str(spaced))
    assert res.exit_code == 0 and saved_settings(spaced)["pinned"] == 6, res.output
