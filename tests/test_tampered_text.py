"""Text read from the database (a decision's policy and reason) printed as it was stored: a tampered database's ESC
sequences reached the operator's terminal (a window title set, the screen cleared) and a newline in a reason forged
a line of its own (helper-141's note). Shown now as escapes, each record on its one line."""
from click.testing import CliRunner

from controller.cli.main import cli
from state.db import open_store
from state.items import INSERTS, decision_item

REASON = "why\x1b]0;PWNED\x07 here\nFAKE: line"


def _tampered(db):
    store = open_store(db)
    kind, row = decision_item(1.0, 0, 5, "band\x1b[2Jit", REASON, False)
    store.conn.execute(INSERTS[kind], row)
    store.conn.commit()
    store.conn.close()


def _offline(short_tmp, *args):
    db = short_tmp / "s.db"
    _tampered(db)
    return CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), *args])


def test_history_shows_a_tampered_reason_and_policy_as_escapes_on_one_line(short_tmp):
    res = _offline(short_tmp, "history")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert len(lines) == 1 and "\x1b" not in res.stdout and "\x07" not in res.stdout, res.stdout
    assert lines[0].endswith(r"0 -> 5     band\x1b[2Jit: why\x1b]0;PWNED\x07 here\nFAKE: line"), lines[0]


def test_status_shows_a_tampered_last_reason_as_escapes_on_one_line(short_tmp):
    res = _offline(short_tmp, "status")
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout, res.stdout
    last = [line for line in res.stdout.splitlines() if line.startswith("last change:")]
    assert len(last) == 1 and last[0].endswith(r"0 -> 5, why\x1b]0;PWNED\x07 here\nFAKE: line"), res.stdout
    assert not any(line.startswith("FAKE") for line in res.stdout.splitlines())


def test_json_keeps_the_stored_text_as_it_is(short_tmp):
    """(JSON escapes control characters itself; a script reading it gets what was stored)"""
    import json
    res = _offline(short_tmp, "history", "--json")
    assert json.loads(res.stdout)[0]["reason"] == REASON


def test_every_rendered_text_reaches_the_terminal_without_its_control_characters(capsys):
    """emit's text (every command's rendering): the lines and tabs a rendering puts there stay, the rest escaped"""
    from controller.cli.common import emit
    emit({}, False, lambda _: "a\x1b[2Jb\nc\td\x9b")
    assert capsys.readouterr().out == "a\\x1b[2Jb\nc\td\\x9b\n"


def test_threshold_alone_shows_a_tampered_saved_threshold_as_escapes(short_tmp):
    """`specctl threshold` prints status's threshold line itself (not through emit): a pin saved as text in a tampered
    database reached the terminal raw (color=True: click strips ANSI only from output that is no terminal)."""
    import json
    db = short_tmp / "s.db"
    store = open_store(db)
    store.conn.execute("INSERT OR REPLACE INTO settings(key, value) VALUES ('pinned', ?)", (json.dumps("\x1b[2J"),))
    store.conn.commit()
    store.conn.close()
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), "threshold"], color=True)
    assert res.exit_code == 3, res.output
    assert "\x1b" not in res.stdout and r"\x1b[2J" in res.stdout, repr(res.stdout)
