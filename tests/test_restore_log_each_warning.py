"""helper-94: both saved thresholds above a smaller engine's largest batch (a pin of 250 and a learned 256, then a
start on a profile of max batch 128) logged one warning: both went through one format string, and the log's
RepeatFilter holds back a warning whose format string passed within the minute. Each now says its own."""
import json
import sqlite3

import pytest

from controller.daemon.restore import saved_batch_size
from tests.conftest import repeat_filtered


def test_the_pin_and_the_learned_threshold_each_say_they_were_clipped():
    with repeat_filtered() as records:
        saved = {"pinned": 250, "threshold": 256, "bad": -3, "worse": "x"}
        assert [saved_batch_size(saved, key, 128) for key in ("pinned", "threshold", "bad", "worse")] == [
            128, 128, None, None]
    assert [r.getMessage() for r in records] == [
        "saved pinned=250 is above the engine's largest batch; taken as 128 (every batch speculates)",
        "saved threshold=256 is above the engine's largest batch; taken as 128 (every batch speculates)",
        "saved bad=-3 is not a batch size (0 .. 128); ignored",
        "saved worse='x' is not a batch size (0 .. 128); ignored"]


@pytest.mark.parametrize("saved,runs,warned", ids=["params", "policy", "alias"], argvalues=[
    ({"name": "ucb", "params": {"c": 500, "half_life_s": 30, "old_knob": 2}}, ("ucb", {"c": 1.0, "half_life_s": 30.0}),
     "saved policy ucb: parameter c=500 out of range (allowed 0 .. 100); unknown parameter 'old_knob' (allowed: "),
    ({"name": "retired", "params": {"k": 1}}, ("bandit", {"half_life_s": 60.0}),
     "saved policy retired (k=1) not run (unknown policy 'retired' (known: "),
    ({"name": "bandit", "params": {"c": 2}}, ("bandit", {"half_life_s": 60.0}),     # (not 'policy bandit (thompson):')
     "saved policy bandit: unknown parameter 'c' (allowed: ")])
def test_a_saved_policy_that_no_longer_builds_starts_at_its_defaults_with_one_warning(short_tmp, saved, runs, warned):
    """helper-101: a policy saved by an older version with a parameter out of today's range (or renamed, or a policy no
    longer known) refused the start: 'policy: policy ucb: parameter c=500 out of range', exit 2, which the unit does
    not restart, until the database was edited. Now the daemon starts on the rest (or the config's policy), one
    warning names what was dropped, and the database keeps what it saved."""
    from state import queries
    from state.db import open_store
    from state.items import INSERTS
    from tests.daemon_proc import DaemonProc
    db = open_store(short_tmp / "state.db")
    db.conn.execute(INSERTS["settings"], queries.setting_row("policy", saved))
    db.conn.close()
    daemon = DaemonProc(short_tmp, "--concurrency", "2")
    try:
        daemon.wait_socket()
        policy = daemon.call("GET", "/policy")
        assert (policy["name"], {k: policy["params"][k] for k in runs[1]}) == runs
    finally:
        assert daemon.stop() == 0
    warnings = [line for line in daemon.log_text(100000).splitlines() if " WARNING " in line and "saved policy" in line]
    assert len(warnings) == 1 and warned in warnings[0], warnings
    conn = sqlite3.connect(short_tmp / "state.db")
    assert json.loads(conn.execute("SELECT value FROM settings WHERE key = 'policy'").fetchone()[0]) == saved
    conn.close()


def test_offline_policy_show_and_status_show_the_parameters_the_next_start_runs(short_tmp):
    """helper-101: with the daemon down, a saved parameter out of today's range was shown as saved (c=500), while the
    daemon's start runs it at its default (c=1.0); both now read policies.runnable_params."""
    from click.testing import CliRunner

    from controller.cli.main import cli
    from policies import runnable_params
    from state import queries
    from state.db import open_store
    from state.items import INSERTS
    assert runnable_params("ucb", {"c": 500, "half_life_s": 30, "old": 1})[0] == {"half_life_s": 30}
    assert runnable_params("bandit", {"c": 2})[1] == {"c": "unknown parameter 'c' (allowed: accept_half_life_s, "
                                                           "dominance, guess, half_life_s, indifference, min_samples, "
                                                           "prefill, scale, zero_margin); c is a parameter of ucb"}
    db = open_store(short_tmp / "state.db")
    db.conn.execute(INSERTS["settings"], queries.setting_row("policy", {"name": "ucb", "params": {"c": 500,
                                                                                                   "half_life_s": 30}}))
    db.conn.close()
    shown = json.loads(CliRunner().invoke(cli, ["--db", str(short_tmp / "state.db"), "policy", "show", "--json"]).output)
    assert (shown["params"]["c"], shown["params"]["half_life_s"]) == (1.0, 30.0), shown
    status = CliRunner().invoke(cli, ["--db", str(short_tmp / "state.db"), "status", "--json"])
    assert json.loads(status.output)["policy"]["params"]["c"] == 1.0, status.output
