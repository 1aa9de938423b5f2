"""`specctl status --json` is one schema live and offline (controller/status.py: one builder): helper-84 found the
database's copy giving the policy's parameters as saved (only those given: {} for the defaults) where the live one
and `policy show` give them all, and the last decision as its database row (an id and a policy more, exploratory
0 / 1 where live says false / true)."""
import json

from click.testing import CliRunner

from controller.cli.main import cli
from state.db import open_store
from state.items import decision_item, setting_item
from tests.daemon_proc import DaemonProc


def _status_json(flags: list[str]) -> dict:
    res = CliRunner().invoke(cli, [*flags, "status", "--json"])
    assert res.exit_code in (0, 3), res.output
    return json.loads(res.stdout)


def test_the_policy_and_the_last_decision_read_the_same_live_and_offline(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2")
    flags = ["--socket", str(d.socket), "--db", str(d.db)]
    try:
        d.wait_socket()
        d.wait_for(lambda st: st["last_decision"] is not None, what="a decision")
        live = _status_json(flags)
    finally:
        assert d.stop() == 0
    offline = _status_json(flags)
    assert offline["daemon"]["running"] is False
    assert offline["policy"] == live["policy"] and len(live["policy"]["params"]) > 3
    assert set(offline["last_decision"]) == set(live["last_decision"]) == {"t", "wall", "old", "new", "reason",
                                                                          "exploratory"}
    assert type(offline["last_decision"]["exploratory"]) is bool


def test_offline_params_are_policy_shows_and_a_trial_reads_true(tmp_path):
    path = tmp_path / "s.db"
    db = open_store(path)
    for table, row in (setting_item("policy", {"name": "ucb", "params": {"c": 2.0}}),
                       decision_item(1.0, 0, 7, "bandit", "trial: x", True)):
        db[table].insert(row, replace=table == "settings", pk="key" if table == "settings" else None)
    db.conn.close()
    flags = ["--socket", str(tmp_path / "none.sock"), "--db", str(path)]
    shown = json.loads(CliRunner().invoke(cli, [*flags, "policy", "show", "--json"]).stdout)["params"]
    status = _status_json(flags)
    assert status["policy"]["params"] == shown and shown["c"] == 2.0 and len(shown) > 1
    assert status["last_decision"]["exploratory"] is True
