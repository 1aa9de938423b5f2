"""The policy `specctl status` names with the daemon down or starting: the saved one, its alias
resolved, never the newest checkpoint's (a switch checkpoints the policy switched from)."""
from click.testing import CliRunner

from controller.cli.main import cli
from state import queries
from state.db import open_store
from state.items import policy_state_item, setting_item


def _store(path, *items):
    db = open_store(path)
    with db.conn:
        for table, row in items:
            db[table].insert(row, replace=table == "settings", pk="key" if table == "settings" else None)
    return db


def test_the_saved_policy_is_named_not_the_newest_checkpoints(tmp_path):
    db = _store(tmp_path / "s.db", policy_state_item("ucb", {}, {"x": 1}), setting_item("policy", {"name": "model"}))
    assert queries.latest_policy(db) == "model"


def test_an_alias_is_resolved_and_an_unknown_name_has_none(tmp_path):
    db = _store(tmp_path / "a.db", setting_item("policy", {"name": "bandit", "params": {}}))
    assert queries.latest_policy(db) == "thompson"
    db = _store(tmp_path / "b.db", setting_item("policy", {"name": "no-such-policy"}))
    assert queries.latest_policy(db) is None


def test_without_a_saved_policy_the_newest_checkpoint_names_it(tmp_path):
    db = _store(tmp_path / "c.db", policy_state_item("ucb", {}, {}), policy_state_item("thompson", {}, {}))
    assert queries.latest_policy(db) == "thompson"


def test_offline_status_after_an_offline_switch_names_the_saved_policy(tmp_path):
    path = tmp_path / "d.db"
    _store(path, setting_item("policy", {"name": "ucb", "params": {}}), policy_state_item("ucb", {}, {})).conn.close()
    base = ["--socket", str(tmp_path / "none.sock"), "--db", str(path)]
    assert CliRunner().invoke(cli, [*base, "policy", "set", "model"]).exit_code == 0
    res = CliRunner().invoke(cli, [*base, "status"])
    assert res.exit_code == 3
    assert "policy:      model\n" in res.stdout, res.stdout
    assert CliRunner().invoke(cli, [*base, "policy", "set", "bandit"]).exit_code == 0
    assert "policy:      bandit (= thompson)\n" in CliRunner().invoke(cli, [*base, "status"]).stdout


def test_offline_policy_show_without_a_saved_policy_says_so_not_none(tmp_path):
    """helper-114: `policy show` on a database with no saved policy printed "None"."""
    path = tmp_path / "e.db"
    _store(path, setting_item("pinned", 3)).conn.close()
    res = CliRunner().invoke(cli, ["--socket", str(tmp_path / "none.sock"), "--db", str(path), "policy", "show"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == (f"no policy saved in {path}: the daemon starts with its config's [policy] name "
                                  "(bandit unless set)")
    _store(path, setting_item("policy", {"name": "ucb", "params": {"c": 1.5}})).conn.close()
    shown = CliRunner().invoke(cli, ["--socket", str(tmp_path / "none.sock"), "--db", str(path), "policy", "show"])
    assert shown.stdout.splitlines()[0] == "ucb" and "c=1.5" in shown.stdout
