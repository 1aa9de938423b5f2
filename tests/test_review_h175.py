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


def _live(**over) -> dict:
    """A live status document (the daemon's shape) before the engine's first decode batch."""
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 1, "healthy": True}, "engine": {"engine": "sim"},
          "threshold": 0, "policy": {"name": "bandit", "policy": "thompson"}, "window_s": 30.0, "tok_per_s": None,
          "spec_share": None, "clock_speed": 10.0, "samples": {"per_s": None, "total": 0, "dropped": 0}}
    return {**st, **over}


def test_live_samples_line_before_the_first_batch_says_so_in_words():
    """A live status before the daemon's first batch read `samples:     -/s real time, 0 this run, 0 dropped`."""
    from controller.cli.status import render_status
    lines = render_status(_live()).splitlines()
    assert "samples:     no decode batch yet this run, 0 dropped" in lines, lines
    after = render_status(_live(samples={"per_s": 0.0, "total": 1, "dropped": 2})).splitlines()
    assert "samples:     0.0/s real time, 1 this run, 2 dropped" in after, after


def test_a_range_writes_an_integral_bound_as_an_integer(short_tmp):
    """`specctl plot F --last 5` said `out of range (allowed 10 .. 1e+09)` (%g: Python's float format for a limit); the
    config's ranges likewise (`[sim] seed` up to 9.22337e+18, not even the bound) and a profile's (1.67772e+07)."""
    res = CliRunner().invoke(cli, ["plot", str(short_tmp / "p.png"), "--last", "5"], prog_name="specctl")
    assert (res.exit_code, res.stderr.splitlines()[-1]) == (
        2, "specctl: --last 5 out of range (allowed 10 .. 1000000000)"), res.output
    from controller.daemon.config import ConfigError, load_config
    for key, allowed in (("sim.seed", "0 .. 9223372036854775808"), ("storage.min_free_mb", "0 .. 1000000000")):
        section, name = key.split(".")
        try:
            load_config(None, {section: {name: -1}})
        except ConfigError as e:
            assert str(e).endswith(f"out of range (allowed {allowed})"), str(e)
        else:
            raise AssertionError(f"{key}=-1 was taken")


def test_plain_keeps_what_is_not_integral_exact():
    from controller.numtext import plain
    assert [plain(x) for x in (1e9, 1 << 24, 2**63, 10.0, 0.001, 1e-05, 1.23456789, -10.0, 0.5)] == \
        ["1000000000", "16777216", "9223372036854775808", "10", "0.001", "1e-05", "1.23456789", "-10", "0.5"]


def test_policy_set_of_a_policy_without_parameters_says_it_has_none(offline):
    """`specctl policy set always` said `(default parameters)` of a policy that has none (live and saved offline: one
    note); a policy with parameters still says its defaults are back."""
    args, db = offline
    for name, note in (("always", "(it has no parameters)"), ("never", "(it has no parameters)"),
                       ("ucb", "(default parameters)")):
        res = CliRunner().invoke(cli, [*args, "policy", "set", name], prog_name="specctl")
        assert res.exit_code == 0, res.output
        assert res.output.startswith(f"daemon is not running: policy {name} {note} saved to {db}"), res.output


def _policy_line(flags: list[str]) -> tuple[str, dict]:
    import json
    res = CliRunner().invoke(cli, [*flags, "status"], prog_name="specctl")
    assert res.exit_code == 3, res.output
    doc = json.loads(CliRunner().invoke(cli, [*flags, "status", "--json"], prog_name="specctl").stdout)
    return next(line for line in res.stdout.splitlines() if line.startswith("policy:")), doc["policy"]


def test_a_policy_set_while_the_daemon_is_down_says_it_runs_from_the_next_start(short_tmp):
    """With the daemon down, `policy set ucb` then `status` read `policy:      ucb` as if it ran; the threshold line says
    `at next start; last run at N` in that case, and so does the policy's now (the last run's policy: its start event,
    or a live switch after it). A real daemon, switched live, then stopped: no note; then one set offline: the note."""
    from tests.daemon_proc import DaemonProc
    d = DaemonProc(short_tmp, "--concurrency", "2")
    flags = ["--socket", str(d.socket), "--db", str(d.db)]
    try:
        d.wait_socket()
        res = CliRunner().invoke(cli, [*flags, "policy", "set", "ucb"], prog_name="specctl")
        assert res.exit_code == 0 and res.stdout.startswith("policy ucb active"), res.output
    finally:
        assert d.stop() == 0
    line, doc = _policy_line(flags)
    assert (line, doc["last_run"]) == ("policy:      ucb", None), (line, doc)       # (what the last run ran)
    assert CliRunner().invoke(cli, [*flags, "policy", "set", "bandit"], prog_name="specctl").exit_code == 0
    line, doc = _policy_line(flags)
    assert line == "policy:      bandit (= thompson) (at next start; last run ran ucb)", line
    assert (doc["name"], doc["last_run"]) == ("bandit", "ucb"), doc


def test_the_last_runs_policy_is_its_start_events_without_a_switch(short_tmp):
    from state.db import open_store
    from state.items import event_item, setting_item
    db = short_tmp / "s.db"
    store = open_store(db)
    for table, row in (event_item("start", "engine=sim policy=bandit threshold=5 pinned=None pid=1 max_batch=256 "
                                  "socket=/x y.sock"), event_item("stop", "SIGTERM: exit 0"),
                       setting_item("policy", {"name": "never", "params": {}})):
        store[table].insert(row, replace=table == "settings", pk="key" if table == "settings" else None)
    store.conn.close()
    line, doc = _policy_line(["--socket", str(short_tmp / "none.sock"), "--db", str(db)])
    assert line == "policy:      never (at next start; last run ran bandit)" and doc["last_run"] == "bandit", line
