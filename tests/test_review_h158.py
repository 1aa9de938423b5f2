"""helper-158: values an operator types or writes (numbers, policy parameters, simulator flags, the config check's
answer), each refused or said at the one boundary that reads it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon.api import make_routes
from controller.daemon.apicheck import ApiError, check
from controller.daemon.config import ConfigError, load_config
from controller.daemon.setpairs import parse_set
from controller.daemon.main import main as daemon_cli
from controller import numtext
from policies import PolicyError, make_policy
from tests.conftest import saved_settings

ROOT = Path(__file__).resolve().parents[1]


# --- 1. a number a float does not hold (1e-400 was read as 0) ---------------------------------------------------------
@pytest.mark.parametrize("text", ["1e-400", "-1e-400", "1e-320", "0.00001e-305"])
def test_number_text_closer_to_0_than_a_float_holds_is_refused(text):
    with pytest.raises(ValueError, match="closer to 0 than a number here can be"):
        numtext.decimal_text(text)


@pytest.mark.parametrize("text,value", [("0e-400", 0.0), ("0.0", 0.0), ("2.3e-308", 2.3e-308), ("1e400", float("inf"))])
def test_zero_and_what_a_float_holds_are_read(text, value):
    assert numtext.decimal_text(text) == value        # (past a float's range: inf, which every range refuses)


def test_policy_set_refuses_a_parameter_that_would_run_as_0_and_saves_nothing(offline):
    with pytest.raises(PolicyError, match=r"^policy ucb: parameter c=1e-400 is closer to 0"):
        make_policy("ucb", {"c": "1e-400"})
    flags, db = offline
    res = CliRunner().invoke(cli, [*flags, "policy", "set", "ucb", "--param", "c=1e-400"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "c=1e-400 is closer to 0" in res.output and "policy" not in saved_settings(db)


def test_a_config_float_a_float_does_not_hold_is_refused_where_it_is(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[policy]\nname = "ucb"\n[policy.params]\nc = 1e-400\n')
    with pytest.raises(ConfigError, match=r"policy\.params\.c: 1e-400 is closer to 0"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"^--set policy\.params\.c=1e-400 is closer to 0"):
        parse_set(["policy.params.c=1e-400"])
    with pytest.raises(ValueError, match=r"rate: 1e-400 is closer to 0"):
        numtext.data_text('{"rate": 1e-400}', json_text=True)        # (a profile's or trace's JSON)


def test_run_and_config_check_refuse_an_arrival_rate_that_would_be_none(tmp_path):
    (tmp_path / "empty.toml").write_text("")
    res = CliRunner().invoke(daemon_cli, ["config", "check", "--config", str(tmp_path / "empty.toml"),
                                          "--arrival-rate", "1e-400"])
    assert res.exit_code == 2 and "--arrival-rate 1e-400 is closer to 0" in res.output, res.output


def test_the_api_refuses_a_json_number_it_would_read_as_0():
    body = json.dumps({"name": "ucb", "params": {"c": 1}}).replace('"c": 1', '"c": 1e-400').encode()
    with pytest.raises(ApiError, match="c") as e:
        check("POST", "/policy", body, make_routes(object()))
    assert e.value.status == 400 and "1e-400 is closer to 0" in str(e.value)


# --- 2. a saved state's integers: integers in range, or the state is refused (nothing loaded) -------------------------
@pytest.mark.parametrize("steps", [10**40, 1e40, 4.0, 0, 65, True, "4"])
def test_a_learners_saved_max_steps_past_any_engine_is_refused_whole(steps):
    state = make_policy("thompson").state()
    state["max_steps"] = steps
    fresh = make_policy("thompson")
    with pytest.raises(PolicyError, match=r"saved state's max_steps=.* is not an integer in 1 \.\. 64"):
        fresh.load_state(state)
    assert fresh.max_steps == 1


@pytest.mark.parametrize("steps,loaded", [(4, 4), (64, 64), (None, 1)])
def test_a_learners_saved_max_steps_in_range_loads(steps, loaded):
    state = make_policy("ucb").state()
    state.pop("max_steps") if steps is None else state.update(max_steps=steps)    # (None: a state without it)
    policy = make_policy("ucb")
    policy.load_state(state)
    assert policy.max_steps == loaded


@pytest.mark.parametrize("slot,live", [([1e40, 1.0, 3], 0), ([1, 1.0, 1e40], 0), ([1, 1.0, 10**40], 0),
                                       ([2, 1.0, 3], 0), ([1.0, 1.0, 3], 0), ([1, 1.0, -1], 0), ([1, 1.0, 3], 2.0)])
def test_sglang_emas_saved_switch_and_count_are_integers_in_range(slot, live):
    state = make_policy("sglang-ema").state()
    state["slots"][0], state["live"] = slot, live
    with pytest.raises(PolicyError, match="saved state holds a slot or live slot"):
        make_policy("sglang-ema").load_state(state)
    state["slots"][0], state["live"] = [0, 0.5, 12], 2
    policy = make_policy("sglang-ema")
    policy.load_state(state)
    assert policy.slots[0] == [0, 0.5, 12] and policy.live == 2


# --- 4. run's and config check's --concurrency 0 / --arrival-rate 0: the config's "none", typed as a choice ----------
@pytest.mark.parametrize("flag,said", [("--concurrency", "give 1 .. 65536 clients"),
                                       ("--arrival-rate", "give 0.001 .. 1000000 requests/s")])
def test_config_check_refuses_a_load_flag_of_0(tmp_path, flag, said):
    (tmp_path / "empty.toml").write_text("")
    res = CliRunner().invoke(daemon_cli, ["config", "check", "--config", str(tmp_path / "empty.toml"), flag, "0"])
    assert res.exit_code == 2 and res.output.strip().splitlines() == [
        f"spec-controller: {flag} 0 chooses no load: {said}, or leave {flag} out for the trace"], res.output


def test_run_refuses_concurrency_0_before_it_starts(short_tmp):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(short_tmp / "state")}
    env.pop("INVOCATION_ID", None)
    (short_tmp / "empty.toml").write_text("")
    try:        # (it ran the trace: a daemon that would not end)
        res = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--config", str(short_tmp / "empty.toml"),
                              "--concurrency", "0"], capture_output=True, text=True, env=env, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("run --concurrency 0 started")
    assert res.returncode == 2 and "--concurrency 0 chooses no load" in res.stderr and not (short_tmp / "state").exists()


# --- 6. a TOML date or time in a refusal: as TOML writes it, not datetime.date(1979, 5, 27) --------------------------
@pytest.mark.parametrize("written,shown", [("1979-05-27", "1979-05-27"), ("1979-05-27T07:32:00", "1979-05-27T07:32:00"),
                                           ("07:32:00", "07:32:00"), ("[1979-05-27]", "[1979-05-27]"),
                                           ("1979-05-27T07:32:00+01:00", "1979-05-27T07:32:00+01:00")])
@pytest.mark.parametrize("section,key,said", [("sim", "speed", "[sim] speed={} must be a number"),
                                              ("policy.params", "scale", "parameter scale={} is not a number"),
                                              ("guard", "min_threshold", "[guard] setting min_threshold={} must be")])
def test_a_toml_date_is_refused_as_it_is_written(tmp_path, written, shown, section, key, said):
    path = tmp_path / "c.toml"
    path.write_text(f"[{section}]\n{key} = {written}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert said.format(shown) in str(e.value) and "datetime" not in str(e.value), str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(None, parse_set([f"{section}.{key}={written}"]))
    assert said.format(shown) in str(e.value) and "datetime" not in str(e.value), str(e.value)


def test_a_date_in_a_profile_is_refused_as_it_is_written(tmp_path):
    from controller.sim.profile import ProfileError, load_profile
    text = (ROOT / "controller/profiles/seed.toml").read_text()
    path = tmp_path / "p.toml"
    path.write_text(text.replace("\nnoise = 0.03\n", "\nnoise = 1979-05-27\n", 1))
    with pytest.raises(ProfileError, match=r"noise=1979-05-27 must be a number"):
        load_profile(str(path))


# --- 7. config check names the simulator's profile it checked -------------------------------------------------------
@pytest.mark.parametrize("args,said", [(["--profile", "seed", "--concurrency", "16"], "16 clients, profile seed"),
                                       ([], "trace mixed-shift, profile crossover-b"),
                                       (["--profile", "crossover-a", "--arrival-rate", "2"], "2 requests/s, profile crossover-a")])
def test_config_check_names_the_profile_it_checked(short_tmp, args, said):
    (short_tmp / "empty.toml").write_text("")
    res = CliRunner().invoke(daemon_cli, ["config", "check", "--config", str(short_tmp / "empty.toml"),
                                          "--db", str(short_tmp / "s.db"), *args])
    assert res.exit_code == 0 and f": ok (engine sim: {said}; policy bandit)" in res.stdout, res.output


# --- 8. config check names the policy run resumes from the database where it is not the config's -------------------
def _check(tmp, *args: str):
    (tmp / "empty.toml").write_text("")
    return CliRunner().invoke(daemon_cli, ["config", "check", "--config", str(tmp / "empty.toml"), "--db",
                                           str(tmp / "s.db"), "--socket", str(tmp / "c.sock"), "--concurrency", "4",
                                           *args])


def test_config_check_names_the_saved_policy_run_resumes(short_tmp):
    from state.db import open_store
    from state.lock import DaemonLock
    db = short_tmp / "s.db"
    open_store(db).conn.close()
    set_ucb = CliRunner().invoke(cli, ["--db", str(db), "--socket", str(short_tmp / "c.sock"), "policy", "set", "ucb",
                                       "--param", "c=2"])
    assert set_ucb.exit_code == 0, set_ucb.output
    lock = DaemonLock(db)
    lock.acquire()          # (as a running daemon holds it: the check reads past it, takes nothing)
    try:
        before = {p.name: p.read_bytes() for p in short_tmp.iterdir() if p.is_file()}
        res = _check(short_tmp)
        assert res.exit_code == 0 and res.stdout.strip().endswith(
            f"policy ucb (c=2) saved in {db}, which run resumes (the default policy bandit is a first start's only: "
            "`specctl policy set` switches))"), res.output
        assert {p.name: p.read_bytes() for p in short_tmp.iterdir() if p.is_file() and p.name in before} == before
        same = _check(short_tmp, "--policy", "ucb", "--set", "policy.params.c=2.0")     # (saved as the text "2")
        assert same.exit_code == 0 and same.stdout.strip().endswith("; policy ucb)"), same.output
    finally:
        lock.release()


def test_config_check_notes_a_saved_parameter_run_would_drop(short_tmp):
    from state import queries
    from state.db import open_store
    db = short_tmp / "s.db"
    store = open_store(db)
    store.conn.execute("INSERT INTO settings (key, value, wall) VALUES (:key, :value, :wall)", queries.setting_row(
        "policy", {"name": "ucb", "params": {"c": 2, "gone": 1}}))
    store.conn.close()
    res = _check(short_tmp)
    assert res.exit_code == 0 and "policy ucb (c=2) saved in" in res.stdout, res.output
    assert "spec-controller: note: saved policy ucb: unknown parameter 'gone'" in res.stderr, res.stderr


def test_the_starts_warning_takes_a_saved_parameters_text_for_its_number():
    from controller.daemon.restore import config_policy_unused
    cfg = load_config(None, {"policy": {"name": "ucb", "params": {"c": 2}}})
    assert config_policy_unused(cfg, {"policy": {"name": "ucb", "params": {"c": "2"}}}) is None
    assert config_policy_unused(cfg, {"policy": {"name": "ucb", "params": {"c": "3"}}}) is not None


# --- 5. a fixed threshold above the engine's largest batch: refused by a running daemon, as a pin is -----------------
@pytest.fixture(scope="module")
def daemon():
    import shutil
    import tempfile

    from tests.daemon_proc import DaemonProc
    d = Path(tempfile.mkdtemp(prefix="sc-h158-", dir="/tmp"))
    proc = DaemonProc(d, "--concurrency", "4", "--profile", "crossover-b")      # (its engine's largest batch: 256)
    proc.wait_socket()
    yield proc
    assert proc.stop() == 0
    shutil.rmtree(d, ignore_errors=True)


def test_a_running_daemon_refuses_a_fixed_threshold_above_its_engines_largest_batch(daemon):
    before = daemon.call("GET", "/policy")
    res = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(daemon.db), "policy", "set", "fixed",
                                   "--param", "threshold=300"])
    assert res.exit_code == 2 and res.output == ("specctl: policy fixed: parameter threshold=300 out of range (allowed "
                                                 "0 .. the engine's largest batch, 256)\n"), res.output
    assert daemon.call("GET", "/policy") == before
    top = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(daemon.db), "policy", "set", "fixed",
                                   "--param", "threshold=256"])
    assert top.exit_code == 0 and daemon.call("GET", "/policy")["params"] == {"threshold": 256}, top.output


def test_a_fixed_threshold_saved_offline_above_the_last_starts_engine_says_what_the_start_makes_of_it(short_tmp):
    from state.db import open_store
    db = short_tmp / "s.db"
    store = open_store(db)
    store["events"].insert({"wall": 1000.0, "kind": "start", "detail": "engine=sim policy=bandit threshold=4 "
                            "pinned=None pid=1 max_batch=16 socket=/tmp/a.sock"})
    store.conn.close()
    flags = ["--db", str(db), "--socket", str(short_tmp / "none.sock")]
    res = CliRunner().invoke(cli, [*flags, "policy", "set", "fixed", "--param", "threshold=20"])
    assert res.exit_code == 0 and res.output.strip().endswith(
        "used at next start (above the engine's largest batch at its last start, 16: taken as 16 if it is so then)"), \
        res.output
    assert saved_settings(db)["policy"] == {"name": "fixed", "params": {"threshold": "20"}}
    within = CliRunner().invoke(cli, [*flags, "policy", "set", "fixed", "--param", "threshold=16"])
    assert within.exit_code == 0 and within.output.strip().endswith("used at next start"), within.output


def test_the_guard_says_a_fixed_threshold_it_applies_within_its_bounds():
    from controller.control.guard import Guard
    from controller.control.guard_config import GuardConfig
    from policies import Decision
    from policies.buckets import Buckets
    g = Guard(GuardConfig(max_threshold=128), Buckets(256), initial=8)
    thr, reason, _ = g.apply(1.0, Decision(200, 200, "fixed threshold 200", command=True), 1.0)
    assert (thr, reason) == (128, "fixed threshold 200; guard: 128, within the bounds 0 .. 128")
    thr, reason, _ = g.apply(2.0, Decision(20, 20, "fixed threshold 20", command=True), 2.0)
    assert (thr, reason) == (20, "fixed threshold 20")
