"""helper-184's mutation pass ab over the lines changed since 86df00e (bench/results/mutation-today-2026-12-07ab.md):
common.unpaired / refuse_unpaired, steer._active_policy, Ctx.named_again and main's typed-on-the-command-line tracking,
config.validate's echo through numtext.plain, restore.policy_words and numtext.value_text. A test for each surviving
mutant that is not equivalent, named by its id."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from controller import paths
from controller.cli import common
from controller.cli.main import cli
from state.db import open_store
from state.writer import Writer
from tests.conftest import saved_settings
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
