"""helper-175: operator-facing wording from a newcomer's run of the README (what specctl says, not what it does)."""
from __future__ import annotations

from click.testing import CliRunner

from controller.cli.main import cli
from controller.paths import default_socket


def _store(path):
    from state.db import open_store
    open_store(path).conn.close()
    return path


def test_status_with_db_alone_and_no_daemon_says_none_holds_that_database_not_the_default_socket(short_tmp):
    """`specctl --db OTHER.db status` said `no daemon socket at <the default socket>`, a socket the operator never named
    (the default one is asked only in case its daemon keeps OTHER.db): it says no daemon holds OTHER.db."""
    db = _store(short_tmp / "other.db")
    res = CliRunner().invoke(cli, ["--db", str(db), "status"], prog_name="specctl")
    assert res.exit_code == 3, res.output
    assert res.stderr == f"specctl: daemon is not running (no daemon holds {db}); last state from the database:\n"
    assert str(default_socket()) not in res.stderr


def test_status_with_socket_and_db_still_names_the_socket_given(short_tmp):
    db, sock = _store(short_tmp / "other.db"), short_tmp / "x.sock"
    res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "status"], prog_name="specctl")
    assert res.exit_code == 3 and f"(no daemon socket at {sock})" in res.stderr, res.output
