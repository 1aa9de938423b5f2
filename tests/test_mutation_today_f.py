"""Tests that kill the survivors of helper-86's mutation pass over 12-05's sixth-session edits
(bench/results/mutation-today-2026-12-05f.md: the gap ids in each test's name)."""
import json
import math

import pytest

from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from controller.daemon.apicheck import ApiError, query_int
from controller.daemon.config import load_config
from controller.daemon.restore import config_policy_unused, start_loop
from controller.paths import is_db_own_path
from policies import Decision, make_policy
from tests.test_guard_history import Script


@pytest.mark.parametrize("saved,pinned,threshold", [({"pinned": 256}, 256, 256), ({"threshold": 256}, None, 256),
                                                    ({"pinned": True}, None, 0), ({"threshold": True}, None, 0)])
def test_r1_r2_a_saved_threshold_at_the_largest_batch_is_kept_and_true_is_no_batch_size(saved, pinned, threshold):
    cfg = load_config(None)
    loop, reason = start_loop(cfg, make_policy("thompson", max_batch_size=256), saved, 256)
    assert (loop.pinned, loop.threshold) == (pinned, threshold)
    assert reason == (f"restored at start: pinned at {pinned} by an operator" if pinned else "restored at start"
                      if threshold else "initial threshold ([policy] initial_threshold): the saved one is not a batch size")


def test_l4_a_restart_with_a_saved_pin_is_no_trial():
    loop, _ = start_loop(load_config(None), make_policy("thompson", max_batch_size=256), {"pinned": 12}, 256)
    assert not loop.exploring


def test_r8_r9_the_same_policy_with_other_params_is_named_and_a_broken_saved_one_is_not():
    cfg = load_config(None, {"policy": {"name": "ucb"}})
    assert "the database's policy ucb (c=2) is" in config_policy_unused(cfg, {"policy": {"name": "ucb",
                                                                                          "params": {"c": 2.0}}})
    assert config_policy_unused(cfg, {"policy": ""}) is None and config_policy_unused(cfg, {"policy": []}) is None


@pytest.mark.parametrize("suffix", ["", ".lock", "-wal", "-shm", "-journal"])
def test_p3_p4_every_file_of_the_database_is_its_own_and_relative_paths_compare_absolute(tmp_path, monkeypatch,
                                                                                         suffix):
    monkeypatch.chdir(tmp_path)
    assert is_db_own_path(tmp_path / f"a.db{suffix}", "a.db") and not is_db_own_path(tmp_path / "a.db-x", "a.db")


@pytest.mark.parametrize("text,error", [("9" * 19, "must be an integer"), ("-" + "9" * 18, None), ("9" * 18, None)])
def test_a1_a2_query_int_takes_18_digits_and_a_minus(text, error):
    if error is None:
        assert query_int(text, "limit") == int(text)
    else:
        with pytest.raises(ApiError, match=error):
            query_int(text, "limit")


def test_sa6_an_unknown_user_without_a_group_is_its_own_group(tmp_path, monkeypatch):
    from controller.daemon.serviceaccess import service_account
    from tests.test_service_account import _systemctl
    _systemctl(tmp_path, monkeypatch, "printf 'User=no-such-user-sc\\nGroup=\\n'\n")
    assert service_account() == ("no-such-user-sc", "no-such-user-sc")


def _learned():
    from tests.test_learner_restore import _learned as learned
    return learned("ucb")


@pytest.mark.parametrize("broken", ["short", "bools"])
def test_ls1_ls2_an_arrived_list_of_the_wrong_length_or_of_bools_is_not_loaded(broken):
    prof, loop, _ = _learned()
    state = json.loads(json.dumps(loop.policy.state()))
    n = len(loop.policy.buckets)
    state["arrived"] = [0.0] * (n - 1) if broken == "short" else [True] * n
    fresh = make_policy("ucb", seed=0, max_batch_size=prof.max_batch_size)
    fresh.load_state(state)
    assert fresh.arrived == [-math.inf] * n


@pytest.mark.parametrize("run", ["past the buckets", "no requests"])
def test_ls4_ls5_a_broken_fresh_run_starts_empty(run):
    prof, loop, _ = _learned()
    state = json.loads(json.dumps(loop.policy.state()))
    n = len(loop.policy.buckets)
    state["fresh_run"] = [n, 1.0, 1.0, 1.0] if run == "past the buckets" else [0, 1.0, None, 2.0]
    fresh = make_policy("ucb", seed=0, max_batch_size=prof.max_batch_size)
    fresh.load_state(state)
    assert fresh.state()["fresh_run"] == [-1, None, 0.0, 0.0]


def test_l3_a_trial_the_engine_took_stays_a_trial_after_a_refused_move():
    from controller.contract import Sample
    script = [(0.0, Decision(105, 29, "trial", untried=True)), (1.0, Decision(60, 29, "trial", untried=True))]
    loop = ControlLoop(Script(script), GuardConfig(changes_per_min=0, explore_share=1.0), 29)
    loop.observe(Sample(0.49, 96, 0, 96, 0.02))
    assert loop.tick(0.5).threshold == 105 and loop.exploring         # the engine took 105
    loop.observe(Sample(0.99, 96, 3, 200, 0.05))
    tick = loop.tick(1.0)
    assert tick.changed and tick.exploratory
    loop.revert(tick.previous)                                       # the engine refused the move: 105 still runs
    assert loop.threshold == 105 and loop.exploring


def test_cm2_saved_params_that_no_longer_build_are_shown_offline_as_the_next_start_runs_them(tmp_path):
    """(Was: shown as saved, c=-5. Since 2026-12-06's runnable_params the daemon's start runs such a parameter at its
    default, and status / policy show offline say so, the same in both.)"""
    from click.testing import CliRunner

    from controller.cli.main import cli
    from state.db import open_store
    from state.items import setting_item
    db = open_store(tmp_path / "s.db")
    table, row = setting_item("policy", {"name": "ucb", "params": {"c": -5}})
    db[table].insert(row, replace=True, pk="key")
    db.conn.close()
    flags = ["--socket", str(tmp_path / "none.sock"), "--db", str(tmp_path / "s.db")]
    status = json.loads(CliRunner().invoke(cli, [*flags, "status", "--json"]).stdout)
    shown = json.loads(CliRunner().invoke(cli, [*flags, "policy", "show", "--json"]).stdout)
    from policies import make_policy
    assert status["policy"]["params"] == shown["params"] == dict(make_policy("ucb").params)


def test_mn2_config_check_names_the_units_group_in_the_secret_note(tmp_path, monkeypatch):
    import os

    from click.testing import CliRunner

    from controller.daemon.main import main
    from tests.test_service_account import _systemctl
    _systemctl(tmp_path, monkeypatch, "printf 'User=nobody\\nGroup=models\\n'\n")
    from tests.conftest import stub_sglang_python
    from tests.test_secret_mode import SECTION
    cfg = tmp_path / "c.toml"
    cfg.write_text(SECTION + f'python = "{stub_sglang_python(tmp_path / "stub")}"\n[sglang.env]\nHF_TOKEN = "hf_x"\n')
    os.chmod(cfg, 0o644)
    res = CliRunner().invoke(main, ["config", "check", "--config", str(cfg)])
    assert f"sudo chown root:models {cfg} && sudo chmod 640 {cfg}" in res.output, res.output


def test_lf1_a_socket_on_the_default_databases_lock_is_refused_before_anything_starts(short_tmp):
    """With no --db the config holds no db path, so only run's preflight can see the socket on the default
    database's own files (config validation compares given paths)."""
    import os
    import subprocess
    import sys

    from controller.paths import default_db
    from tests.daemon_proc import ROOT
    env = {**os.environ, "XDG_STATE_HOME": str(short_tmp), "PYTHONPATH": str(ROOT)}
    env.pop("INVOCATION_ID", None)
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(short_tmp)
    try:
        lock = f"{default_db()}.lock"
        default_db().parent.mkdir(parents=True)       # (the socket's directory must exist: a typo's guard)
    finally:
        os.environ.pop("XDG_STATE_HOME") if old is None else os.environ.__setitem__("XDG_STATE_HOME", old)
    res = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--concurrency", "2", "--socket", lock],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and "is the database's own path" in res.stderr, res.stderr


def test_e2_a_threshold_that_speculates_where_the_spread_makes_it_pay_is_scored_right():
    """h200-2b6 at 16 clients: speculation pays at the delivered accept length, not at the nominal one (compare.md:
    never 0.987 of the oracle there). A fixed threshold of 16 is right from the first tick (re-converged at 0 s);
    scored at the nominal accept length it read as wrong for the whole segment."""
    from controller.sim.evaluate import policy_runner, run_segments
    from controller.sim.profile import Segment, load_profile
    prof = load_profile("h200-2b6")
    res = run_segments(prof, [Segment(20, 16, None, "C=16")], policy_runner("fixed", {"threshold": 16}, prof, 0,
                                                                                    initial_threshold=16), 0)[0]
    assert res.spec_batches == res.batches and res.reconverge_s == 0.0
