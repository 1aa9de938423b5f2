"""newcomer-146: with the daemon down, `specctl policy set fixed --param threshold=17` saved, status said the threshold
was the last run's (29, or 256) while the next start ran 17 at once (a rule's decision is a command). Offline
status shows what a saved rule sets at the next start; a learner's saved threshold stays as it was."""
import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from state.db import open_store
from state.items import INSERTS, decision_item, setting_item


def _last_run_at_29(db):
    store = open_store(db)
    for kind, row in (decision_item(60.0, 32, 29, "bandit", "speculate only up to batch 29", False),
                      setting_item("threshold", 29)):
        store.conn.execute(INSERTS[kind], row)
    store.conn.commit()
    store.conn.close()


@pytest.mark.parametrize("policy,shown", [(["fixed", "--param", "threshold=17"], "17 (at next start; last run at 29)"),
                                          (["never"], "0 (at next start; last run at 29)"),
                                          (["bandit"], "29   ")])
def test_offline_status_shows_what_a_saved_rule_sets_at_the_next_start(short_tmp, policy, shown):
    db = short_tmp / "s.db"
    _last_run_at_29(db)
    base = ["--socket", str(short_tmp / "none.sock"), "--db", str(db)]
    assert CliRunner().invoke(cli, [*base, "policy", "set", *policy]).exit_code == 0
    res = CliRunner().invoke(cli, [*base, "status"])
    line = [x for x in res.stdout.splitlines() if x.startswith("threshold:")]
    assert line and line[0].startswith(f"threshold:   {shown}"), res.stdout


def test_a_pin_saved_offline_still_wins_over_a_saved_rule(short_tmp):
    db = short_tmp / "s.db"
    _last_run_at_29(db)
    base = ["--socket", str(short_tmp / "none.sock"), "--db", str(db)]
    assert CliRunner().invoke(cli, [*base, "policy", "set", "never"]).exit_code == 0
    assert CliRunner().invoke(cli, [*base, "threshold", "pin", "7"]).exit_code == 0
    res = CliRunner().invoke(cli, [*base, "threshold"])
    assert res.stdout.startswith("threshold:   7 (pinned"), res.stdout
