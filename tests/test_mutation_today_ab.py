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
