"""SIGHUP re-reads the guard, retention, min_free_mb and log level; a changed key it cannot apply is named in
a warning (and an event), not ignored silently (it said only "configuration reloaded")."""
import pytest

from controller.daemon.config import load_config
from controller.daemon.configdiff import restart_needed, shadowed
from tests.daemon_proc import DaemonProc
from tests.test_faults_config import _events, _hup_and_wait


def test_restart_keys_are_named_with_both_values_and_reloadable_ones_are_not():
    running = load_config(None, {"sim": {"speed": 10.0}})
    fresh = load_config(None, {"sim": {"speed": 3}, "guard": {"min_gain": 0.01}, "control": {"log_level": "DEBUG"},
                               "storage": {"retention_samples_s": 10.0, "rollup_s": 5.0},
                               "sglang": {"port": 3}, "policy": {"params": {"scale": 2.0}}, "engine": {"kind": "sim"}})
    assert restart_needed(running, fresh) == ["[sglang] port (unset) -> 3", "[sim] speed 10.0 -> 3",
                                              "[storage] rollup_s 10.0 -> 5.0"]
    # helper-82: a restart never applied these either (the database's policy wins): named apart
    assert restart_needed(running, fresh, first_start=True) == ["[policy] params.scale (unset) -> 2.0"]
    fresh["policy"].update(name="ucb", initial_threshold=7, tick_s=1.0)
    assert restart_needed(running, fresh, first_start=True) == [
        "[policy] initial_threshold 0 -> 7", "[policy] name 'bandit' -> 'ucb'", "[policy] params.scale (unset) -> 2.0"]
    assert "[policy] tick_s 0.5 -> 1.0" in restart_needed(running, fresh)


def test_the_same_values_written_otherwise_are_no_change():
    assert restart_needed(load_config(None, {"sim": {"speed": 1.0}}), load_config(None, {"sim": {"speed": 1}})) == []
    assert restart_needed(load_config(None), load_config(None)) == []


def test_file_values_under_a_flag_are_named(tmp_path):
    (tmp_path / "c.toml").write_text("[sim]\nspeed = 3\nseed = 1\n")
    assert shadowed(tmp_path / "c.toml", {"sim": {"speed": 10.0, "seed": 1}}) == [
        "[sim] speed 3 (overridden by the command line: 10.0)"]
    assert shadowed(tmp_path / "c.toml", {}) == [] and shadowed("", {"sim": {"speed": 1}}) == []


def test_sighup_warns_of_each_key_that_needs_a_restart(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2", config_text="[sim]\nseed = 0\n")
    try:
        d.wait_socket()
        (short_tmp / "config.toml").write_text("[sim]\nseed = 5\nspeed = 3\n[policy]\ntick_s = 1.0\n"
                                               "[guard]\nexplore_share = 0.1\n")
        got = _hup_and_wait(d, 3)
        assert d.proc.poll() is None, d.log_text()
        assert got[0] == "guard, retention, min_free_mb and log level re-read", got
        assert "changed, not applied until a restart: [policy] tick_s 0.5 -> 1.0; [sim] seed 0 -> 5" in got, got
        assert ("in the config file but overridden by the command line, not applied: "
                "[sim] speed 3 (overridden by the command line: 20.0)") in got, got
        log = d.log_text()
        assert "WARNING spec_controller: reload: changed, not applied until a restart: [policy] tick_s" in log, log
    finally:
        assert d.stop() == 0
    assert len(_events(d.db, "reload")) == 3


def test_a_config_policy_after_the_first_start_is_named_unused_at_reload_and_at_start(short_tmp):
    """helper-82: a reload said `[policy] name 'bandit' -> 'ucb'` was 'not applied until a restart', and the restart
    then ran bandit without a word (the database's policy wins after the first start, as config.example.toml says)."""
    d = DaemonProc(short_tmp, "--concurrency", "2", config_text='[policy]\nname = "bandit"\n')
    try:
        d.wait_socket()
        (short_tmp / "config.toml").write_text('[policy]\nname = "ucb"\n')
        got = _hup_and_wait(d, 2)
        assert got[1] == ("changed, a first start's only (the database's policy and threshold win at every start; "
                          "`specctl policy set` switches now): [policy] name 'bandit' -> 'ucb'"), got
    finally:
        assert d.stop() == 0
    again = DaemonProc(short_tmp, "--concurrency", "2", config_text='[policy]\nname = "ucb"\n')
    try:
        again.wait_socket()
        assert again.call("GET", "/status")["policy"]["name"] == "bandit"
        assert ("WARNING spec_controller: [policy] ucb in the config is not used: the database's policy bandit "
                "is (a config's policy is a first start's only; `specctl policy set ucb` switches)") in again.log_text()
    finally:
        assert again.stop() == 0


def test_the_same_policy_by_its_alias_or_with_the_same_params_is_no_note():
    from controller.daemon.restore import config_policy_unused
    cfg = load_config(None, {"policy": {"name": "bandit", "params": {"half_life_s": 20}}})
    assert config_policy_unused(cfg, {"policy": {"name": "thompson", "params": {"half_life_s": 20.0}}}) is None
    assert config_policy_unused(cfg, {}) is None                       # a first start: the config's is the one
    assert "the database's policy thompson is (" in config_policy_unused(cfg, {"policy": {"name": "thompson"}})
    assert "the database's policy ucb" in config_policy_unused(cfg, {"policy": {"name": "ucb", "params": {}}})


def test_no_note_of_an_unused_config_policy_where_the_config_names_none(tmp_path):
    """The built-in default (bandit {}) is nobody's choice: after a `specctl policy set`, a start with no config file,
    or one without [policy] name / params, said at every start that '[policy] bandit {} in the config is not used'."""
    from controller.daemon.restore import config_policy_unused
    saved = {"policy": {"name": "ucb", "params": {}}}
    assert config_policy_unused(load_config(None), saved) is None
    (tmp_path / "c.toml").write_text("[policy]\nseed = 3\n")
    assert config_policy_unused(load_config(tmp_path / "c.toml"), saved) is None
    (tmp_path / "c.toml").write_text('[policy]\nname = "bandit"\n')
    assert "[policy] bandit in the config is not used" in config_policy_unused(load_config(tmp_path / "c.toml"), saved)
    assert config_policy_unused(load_config(None, {"policy": {"name": "always"}}), saved).startswith(
        "policy always given on the command line is not used: the database's policy ucb is")   # (newcomer-54)
    (tmp_path / "c.toml").write_text('[policy]\nname = "bandit"\n')    # (a flag over the file's: the flag's said)
    assert config_policy_unused(load_config(tmp_path / "c.toml", {"policy": {"name": "always"}}), saved).startswith(
        "policy always given on the command line")
