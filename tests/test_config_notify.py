import socket

import pytest

from controller.daemon.config import ConfigError, load_config
from controller.daemon.notify import sd_notify


def test_missing_default_config_means_defaults(monkeypatch, tmp_path):
    import controller.daemon.config as c
    monkeypatch.setattr(c, "DEFAULT_CONFIG", tmp_path / "absent.toml")
    cfg = load_config(None)
    assert cfg["engine"]["kind"] == "sim" and cfg["policy"]["name"] == "bandit"


def test_file_then_flags(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[policy]\nname = "ucb"\n[policy.params]\nc = 2.0\n[sim]\nspeed = 4.0\n[guard]\nexplore_share = 0.02\n')
    cfg = load_config(f, {"sim": {"speed": 8.0}})
    assert cfg["policy"]["name"] == "ucb" and cfg["policy"]["params"] == {"c": 2.0}
    assert cfg["sim"]["speed"] == 8.0 and cfg["guard"]["explore_share"] == 0.02


@pytest.mark.parametrize("text,match", [
    ("[engine\n", "not valid TOML"),
    ("[nope]\nx = 1\n", r"unknown section \[nope\]"),
    ("[sim]\nsped = 2\n", r"unknown key 'sped' in \[sim\]"),
    ("[sim]\nspeed = 'fast'\n", r"\[sim\] speed='fast' must be a number"),
    ("[sim]\nconcurrency = 5.0\n", r"\[sim\] concurrency=5.0 must be an integer"),
    ("[engine]\nkind = 'gpu'\n", "must be 'sim' or 'sglang'"),
    ("[policy]\ntick_s = 0\n", r"tick_s=0 out of range"),
    ("[guard]\nexplore_share = 5\n", "explore_share=5 out of range"),
])
def test_bad_config_one_line(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        load_config(f)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text,line", [
    ("[sim]\nsped = 2\n", "config: unknown key 'sped' in [sim] (did you mean 'speed'? known: profile, trace, "
                           "concurrency, arrival_rate, speed, seed)"),
    ("[contrl]\nx = 1\n", "config: unknown section [contrl] (did you mean [control]? known: engine, sim, sglang, "
                           "policy, guard, storage, control)"),
    ("[engine]\nspeed = 10\n", "config: unknown key 'speed' in [engine] (it belongs in [sim]; known: kind)"),
    ("[control]\npolicy = 'ucb'\n", "config: unknown key 'policy' in [control] ([policy] is a section of its own; "
                                     "known: socket, metrics_port, metrics_addr, ingest_queue, log_level)"),
    ("[sim]\nzzz = 1\n", "config: unknown key 'zzz' in [sim] (known: profile, trace, concurrency, arrival_rate, "
                          "speed, seed)"),
    # a key above every header (helper-129: 'unknown section [speed]')
    ("speed = 10\n[sim]\nconcurrency = 4\n", "config: key 'speed' is above every [section] header (put it under [sim])"),
    ("seed = 1\n", "config: key 'seed' is above every [section] header (put it under [sim] or [policy])"),
    ("zzz = 1\n", "config: key 'zzz' is above every [section] header (a key goes under one of [engine], [sim], "
                   "[sglang], [policy], [guard], [storage], [control])"),
])
def test_mistyped_key_names_the_close_one(tmp_path, text, line):
    """A mistyped key or section names the close one, as specctl's usage errors do (a newcomer's `sped`, `[contrl]`,
    a key put in the wrong section); a name close to none keeps the bare list."""
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    assert str(err.value) == line


def test_mistyped_guard_setting_names_the_close_one(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[guard]\nstabilization_s = 1.0\n")          # (the US spelling of stabilisation_s)
    with pytest.raises(ConfigError, match=r"unknown guard setting 'stabilization_s' \(did you mean 'stabilisation_s'\? "
                                          r"known: min_threshold, "):
        load_config(f)


POLICY_KEYS = "known: name, seed, tick_s, initial_threshold, params)"


@pytest.mark.parametrize("text,line", [
    # a key of another section close to one of this section's: where it belongs, not the close one ('seed')
    ("[policy]\nspeed = 2\n", "config: unknown key 'speed' in [policy] (it belongs in [sim]; " + POLICY_KEYS),
    # a [guard] setting is [guard]'s key (no 'initial_threshold'), and the other way round
    ("[policy]\nmin_threshold = 2\n", "config: unknown key 'min_threshold' in [policy] (it belongs in [guard]; "
                                       + POLICY_KEYS),
    ("[guard]\ninitial_threshold = 2\n", "config: [guard] unknown guard setting 'initial_threshold' (it belongs in "
                                          "[policy]; known: min_threshold, max_threshold, stabilisation_s, "),
    # a key of two sections names both ([sim] alone was half the answer)
    ("[storage]\nseed = 1\n", "config: unknown key 'seed' in [storage] (it belongs in one of [sim], [policy]; "
                               "known: db, "),
    # as close to two: both named, not the one difflib's order picked (metrics_port; min_threshold; [sim])
    ("[control]\nmetrics = 9100\n", "config: unknown key 'metrics' in [control] (did you mean one of "
                                     "'metrics_port', 'metrics_addr'? known: "),
    ("[guard]\nthreshold = 3\n", "config: [guard] unknown guard setting 'threshold' (did you mean one of "
                                  "'min_threshold', 'max_threshold'? known: "),
    ("[ensime]\nx = 1\n", "config: unknown section [ensime] (did you mean one of [engine], [sim]? known: "),
    # retention_max_rows (RENAMED: the samples' cap) mistyped: its new name, not the events' cap it looks like
    ("[storage]\nretention_max_row = 5000\n", "config: unknown key 'retention_max_row' in [storage] (did you mean "
                                               "'retention_max_samples'? known: "),
    ("[control]\nretention_max_rows = 5000\n", "config: unknown key 'retention_max_rows' in [control] (it belongs "
                                                "in [storage]; known: "),
    # a section's name as a key: that section, before any close key ('trace'; helper-126's CF6)
    ("[sim]\nstorage = 1\n", "config: unknown key 'storage' in [sim] ([storage] is a section of its own; known: "),
])
def test_a_mistyped_name_gets_the_hint_that_fits(tmp_path, text, line):
    """Where a key belongs, every name as close as the closest, a renamed key by its new name."""
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    assert str(err.value).startswith(line), str(err.value)


def test_explicit_missing_config_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_sd_notify_over_a_real_datagram_socket(short_tmp, monkeypatch):
    path = str(short_tmp / "notify")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    srv.bind(path)
    srv.settimeout(2)
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert sd_notify("READY=1")
    assert srv.recv(100) == b"READY=1"
    assert sd_notify("STATUS=threshold 4")
    assert srv.recv(100) == b"STATUS=threshold 4"
    srv.close()


def test_the_status_systemd_shows_is_in_words_without_none():
    """helper-171: `systemctl status` showed 'accept None, tok/s 3663.4' until a batch speculated (Python's None)."""
    from controller.contract import Sample
    from controller.daemon.livestats import LiveStats
    from controller.daemon.notify import status_text
    stats = LiveStats()
    assert status_text(0, False, "bandit", stats.snapshot()) == "threshold 0, policy bandit; last 30 s: no samples"
    stats.add(Sample(t=1.0, batch_size=32, steps=0, tokens=32, step_s=0.01))
    assert status_text(20, True, "ucb", stats.snapshot()) == \
        "threshold 20 (pinned), policy ucb; last 30 s: no speculative batch, 3,200 tok/s"
    stats.add(Sample(t=2.0, batch_size=8, steps=4, tokens=24, step_s=0.01))
    assert status_text(29, False, "bandit", stats.snapshot()) == \
        "threshold 29, policy bandit; last 30 s: accept length 3.00, 2,800 tok/s"


def test_sd_notify_without_socket_is_a_no_op(monkeypatch, short_tmp):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False
    monkeypatch.setenv("NOTIFY_SOCKET", str(short_tmp / "gone"))
    assert sd_notify("READY=1") is False          # never raises


@pytest.mark.parametrize("order", ["old first", "new first"])
def test_a_renamed_key_given_under_both_names_is_refused(tmp_path, order):
    """retention_max_rows and retention_max_samples both in [storage]: one was dropped silently (whichever came last
    won), so the cap the operator meant may not be the one in force."""
    lines = ["retention_max_rows = 5000", "retention_max_samples = 9000"]
    f = tmp_path / "c.toml"
    f.write_text("[storage]\n" + "\n".join(lines if order == "old first" else lines[::-1]) + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(f)
    assert str(err.value) == ("config: [storage] gives both retention_max_rows and retention_max_samples, its new "
                              "name: keep retention_max_samples")


def test_a_renamed_key_alone_is_still_taken_by_its_new_name(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[storage]\nretention_max_rows = 5000\n")
    assert load_config(f)["storage"]["retention_max_samples"] == 5000
