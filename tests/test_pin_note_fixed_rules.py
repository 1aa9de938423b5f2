"""helper-94: `specctl policy set fixed` (always, never) under a pin noted "fixed learns from every batch but decides
nothing until `specctl threshold unpin`", while the same command's first line said "a fixed rule, it learns nothing"
(README: fixed, always, never learn nothing). The note says only what holds: it decides nothing until the unpin."""
import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from state.db import open_store


@pytest.mark.parametrize("name,learns", [("fixed", False), ("always", False), ("never", False), ("ucb", True),
                                         ("bandit", True)])
def test_the_pin_note_says_learning_only_of_a_policy_that_learns(tmp_path, name, learns):
    db, sock = tmp_path / "s.db", tmp_path / "c.sock"
    open_store(db).conn.close()
    run = lambda *args: CliRunner().invoke(cli, ["--db", str(db), "--socket", str(sock), *args])
    assert run("threshold", "pin", "7").exit_code == 0
    res = run("policy", "set", name)
    assert res.exit_code == 0, res.output
    note = res.stderr.strip()
    assert note.startswith("specctl: note: the threshold is pinned at 7; ") and note.endswith(
        "decides nothing until `specctl threshold unpin`"), note
    assert ("learns from every batch" in note) is learns, note
