"""helper-161's mutation pass x over the lines changed since dc75f91 (bench/results/mutation-today-2026-12-07x.md):
numtext.held_float and the boundaries that read numbers, TOML dates as written, the saved states' integers, the load
flags of 0 and the load clash's hint, config check's profile and resumed policy, policy set fixed's check_engine and
the guard's row, the install and usage hints. A test for each surviving mutant that is not equivalent, named by its
id; then the two defects the pass found (an empty database file noted as unreadable, a --set table's value refused
as no table)."""
from __future__ import annotations

import shlex
import sys

import pytest
from click.testing import CliRunner

from controller import numtext
from controller.cli.main import cli
from controller.daemon.config import ConfigError, load_config
from controller.daemon.setpairs import parse_set
from controller.daemon.main import main as daemon_cli
from policies import PolicyError, make_policy

INT64_MAX = (1 << 63) - 1


# --- numtext.held_float and its callers --------------------------------------------------------------------------------
def test_lt_le_the_least_normal_float_is_read_one_ulp_under_it_is_not():
    """nt-lt-le: the boundary itself (2.2250738585072014e-308, sys.float_info.min) is a float that holds it; the
    subnormal just under it is not."""
    least = repr(sys.float_info.min)
    assert numtext.decimal_text(least) == sys.float_info.min == numtext.held_float(least)
    with pytest.raises(numtext.Unheld, match="closer to 0 than a number here can be"):
        numtext.decimal_text("2.225073858507201e-308")


@pytest.mark.parametrize("toml,said", [('[sim]\nspeed = "1e-400"\n', "config: [sim] speed='1e-400' must be a number"),
                                       ('[guard]\nmin_threshold = "1e-400"\n',
                                        "[guard] setting min_threshold='1e-400' must be an integer")])
def test_misread_unheld_uncaught_quoted_text_a_float_does_not_hold_is_refused_as_text(tmp_path, toml, said):
    """nt-misread-unheld-uncaught, gc-unquoted-unheld-uncaught: a quoted "1e-400" where a number goes is text, refused as
    such in one line; with misread's (or the guard's _unquoted) Unheld let through, load_config raised Unheld, no
    ConfigError (run and config check: a traceback)."""
    (tmp_path / "c.toml").write_text(toml)
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.toml")
    assert said in str(e.value) and "closer to 0" not in str(e.value), str(e.value)


@pytest.mark.parametrize("written,shown", [("1979-05-27T07:32:00.999999", "1979-05-27T07:32:00.999999"),
                                           ("1979-05-27T07:32:00.5-07:00", "1979-05-27T07:32:00.500000-07:00"),
                                           ("07:32:00.25", "07:32:00.250000")])
def test_datetime_time_no_micro_a_toml_time_keeps_its_fraction_of_a_second(tmp_path, written, shown):
    """nt-datetime-no-micro, nt-time-no-micro: the value shown is the value read, its fraction of a second too (the
    tests had whole seconds only). isoformat writes six digits: the same time, as TOML may write it."""
    (tmp_path / "c.toml").write_text(f"[sim]\nspeed = {written}\n")
    with pytest.raises(ConfigError, match=rf"\[sim\] speed={shown} must be a number"):
        load_config(tmp_path / "c.toml")
    value = numtext.data_text(f"v = {written}")["v"]
    assert repr(value) == shown and value.microsecond == int(shown.split(".")[1][:6])


def test_list_unheld_uncaught_simulates_rate_list_refuses_a_rate_it_would_read_as_0():
    """op-list-unheld-uncaught: number_list's Unheld as the flag's usage error, one line, exit 2 (not a traceback)."""
    res = CliRunner().invoke(cli, ["simulate", "--profile", "crossover-a", "--arrival-rate", "1,1e-400", "--seconds",
                                   "5"], prog_name="specctl")
    assert res.exit_code == 2 and res.output == (
        "specctl: invalid value for --arrival-rate: 1e-400 is closer to 0 than a number here can be (a float's least "
        "is 2.2e-308: it would be read as 0)\n"), (res.output, res.exception)


# --- config: the load clash's hint -----------------------------------------------------------------------------------
@pytest.mark.parametrize("toml,flags,hint", [
    ('[sim]\ntrace = "load-steps"\nconcurrency = 0\n', {"arrival_rate": 2.0},
     "c.toml sets [sim] trace, which no flag unsets: remove it there"),
    ('[sim]\ntrace = "load-steps"\narrival_rate = 0.0\n', {"concurrency": 4},
     "c.toml sets [sim] trace, which no flag unsets: remove it there"),
])
def test_on_conc_rate_ge_a_load_the_file_turns_off_with_0_is_not_named(tmp_path, toml, flags, hint):
    """cf-on-conc-ge, cf-on-rate-ge, cf-ours-on-dropped: the file's `concurrency = 0` / `arrival_rate = 0.0` chose no
    load (the config's 'none'): the hint names the file's trace alone, not 'trace and concurrency'."""
    (tmp_path / "c.toml").write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "c.toml", {"sim": flags})
    assert hint in str(err.value) and " and " not in str(err.value).split("; ")[-1], str(err.value)


def test_ours_in_flags_too_a_key_the_flag_sets_is_not_the_files_to_unset(tmp_path):
    """cf-ours-in-flags-too: the file's concurrency the flag replaced is not to be set to 0 (that would drop the
    flag's own load); the file's arrival_rate is, and doing so is accepted."""
    (tmp_path / "c.toml").write_text('[sim]\nconcurrency = 8\narrival_rate = 2.0\n')
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "c.toml", {"sim": {"concurrency": 4}})
    assert ("c.toml sets [sim] arrival_rate: add --set sim.arrival_rate=0 or remove it there to choose the load on the "
            "command line") in str(err.value), str(err.value)
    assert load_config(tmp_path / "c.toml", {"sim": {"concurrency": 4, "arrival_rate": 0}})["sim"]["concurrency"] == 4


# --- config check: the policy run resumes ----------------------------------------------------------------------------
def _saved(db, policy: dict) -> None:
    from state import queries
    from state.db import open_store
    store = open_store(db)
    store.conn.execute("INSERT INTO settings (key, value, wall) VALUES (:key, :value, :wall)",
                       queries.setting_row("policy", policy))
    store.conn.close()


def _check(tmp, *args: str):
    (tmp / "empty.toml").write_text("")
    return CliRunner().invoke(daemon_cli, ["config", "check", "--config", str(tmp / "empty.toml"), "--db",
                                           str(tmp / "s.db"), "--socket", str(tmp / "c.sock"), "--concurrency", "4",
                                           *args])


def test_unknown_warn_log_a_saved_policy_this_version_does_not_know_is_noted_and_the_configs_named(short_tmp):
    """rs-unknown-warn-log, rs-resumed-saved-raw, rs-resumed-notes-lost-same: the start's warning (the config's policy
    runs instead) is config check's note, and the ok line names the config's policy, which run starts."""
    _saved(short_tmp / "s.db", {"name": "gone", "params": {"k": 1}})
    res = _check(short_tmp)
    assert res.exit_code == 0 and res.stdout.strip().endswith("; policy bandit)"), res.output
    assert "spec-controller: note: saved policy gone (k=1) not run (unknown policy 'gone'" in res.stderr and \
        "the default policy bandit runs instead" in res.stderr, res.stderr


def test_notes_lost_same_a_dropped_parameter_is_noted_where_the_rest_is_the_configs_policy(short_tmp):
    """rs-resumed-notes-lost-same, rs-resumed-saved-raw: saved ucb {c: 2, gone: 1} runs as ucb c=2, the config's own:
    the line names ucb (no 'saved in'), and the note says what the start drops."""
    _saved(short_tmp / "s.db", {"name": "ucb", "params": {"c": 2, "gone": 1}})
    res = _check(short_tmp, "--policy", "ucb", "--set", "policy.params.c=2")
    assert res.exit_code == 0 and res.stdout.strip().endswith("; policy ucb)"), res.output
    assert "spec-controller: note: saved policy ucb: unknown parameter 'gone'" in res.stderr, res.stderr


def test_configured_no_params_the_configs_policy_is_named_with_its_parameters(short_tmp):
    """rs-configured-no-params: the config's policy that run will not use is named with its parameters, as the saved
    one is (the test's config had none)."""
    db = short_tmp / "s.db"
    _saved(db, {"name": "thompson", "params": {}})
    res = _check(short_tmp, "--policy", "ucb", "--set", "policy.params.c=1.5")
    assert res.exit_code == 0 and res.stdout.strip().endswith(
        f"policy thompson saved in {db}, which run resumes (policy ucb (c=1.5) given on the command line is a first "
        "start's only: "
        "`specctl policy set` switches))"), res.output


def test_storeerror_no_note_a_database_the_check_cannot_read_is_refused_as_run_refuses_it(short_tmp):
    """mn-storeerror-no-note: a database file with SQLite's header that SQLite cannot read was 'ok' with a note that the
    saved policy could not be read. helper-172: run refuses it, exit 2 (no restart mends it), and so does the check;
    tests/test_review_h172.py: a lock a retry passes is still the note."""
    from state.db import SQLITE_MAGIC
    db = short_tmp / "s.db"
    db.write_bytes(SQLITE_MAGIC + b"\x10\x00" + b"\xff" * 4000)
    res = _check(short_tmp)
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [
        f"spec-controller: database {db} is corrupt (file is not a database); move it aside to start afresh"], res.output


# --- policies: sglang-ema's counts -----------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [2.7, 3.0, INT64_MAX + 1])
def test_count_type_dropped_a_count_that_is_no_integer_in_range_is_refused(count):
    """em-count-type-dropped, em-count-upper-lt: a count is an integer (2.7 and 3.0 were taken by int()) up to 2**63 - 1."""
    state = make_policy("sglang-ema").state()
    state["slots"][0] = [1, 1.0, count]
    with pytest.raises(PolicyError, match="saved state holds a slot or live slot that is not numbers"):
        make_policy("sglang-ema").load_state(state)


def test_count_upper_lt_a_count_of_2_63_minus_1_is_restored():
    """em-count-upper-lt: the bound itself loads."""
    state = make_policy("sglang-ema").state()
    state["slots"][0] = [1, 1.0, INT64_MAX]
    policy = make_policy("sglang-ema")
    policy.load_state(state)
    assert policy.slots[0] == [1, 1.0, INT64_MAX]


# --- the guard's row of a command threshold ----------------------------------------------------------------------------
def test_within_lo_0_the_row_names_the_guards_lower_bound():
    """gd-within-lo-0: the bounds said are the guard's (min_threshold 4), not 0 .. hi."""
    from controller.control.guard import Guard
    from controller.control.guard_config import GuardConfig
    from policies import Decision
    from policies.buckets import Buckets
    g = Guard(GuardConfig(min_threshold=4, max_threshold=128), Buckets(256), initial=8)
    thr, reason, _ = g.apply(1.0, Decision(2, 2, "fixed threshold 2", command=True), 1.0)
    assert (thr, reason) == (4, "fixed threshold 2; guard: 4, within the bounds 4 .. 128")
    thr, reason, _ = g.apply(2.0, Decision(200, 200, "fixed threshold 200", command=True), 2.0)
    assert (thr, reason) == (128, "fixed threshold 200; guard: 128, within the bounds 4 .. 128")


# --- usage and install hints -----------------------------------------------------------------------------------------
def test_show_hint_any_error_an_unknown_option_of_policy_show_gets_the_usage_not_the_name_hint():
    """op-show-hint-any-error: the 'takes no name' hint is for an extra argument only; an unknown option is told the
    usage, as every command's is."""
    res = CliRunner().invoke(cli, ["policy", "show", "--zzz"], prog_name="specctl")
    assert res.exit_code == 2 and res.output == \
        "specctl: no such option '--zzz' (usage: specctl policy show [OPTIONS])\n", res.output


@pytest.mark.skipif(__import__("importlib").util.find_spec("sglang") is not None, reason="this interpreter has SGLang")
def test_hint_paren_kept_the_install_hint_is_inside_the_one_parenthesis(monkeypatch):
    """lc-hint-paren-kept, si-default-source-dropped: '(in PY; --python PATH: ..., or install SGLang in this one: PY -m
    pip install SOURCE[sglang])', one parenthesis closed once; SOURCE where this spec-controller was installed from."""
    from controller.daemon.engines import sglang_install
    from tests.test_launchcmd import SPEC
    monkeypatch.setattr(sglang_install, "install_source", lambda: "/srv/my clone")
    res = CliRunner().invoke(daemon_cli, ["config", "from-launch", "--", "--model-path", "m", *SPEC])
    line = res.output.strip()
    assert res.exit_code == 1 and line.endswith(
        f"the interpreter that runs SGLang, or install SGLang in this one: {sys.executable} -m pip install "
        f"{shlex.quote('/srv/my clone[sglang]')})"), res.output
    assert line.count("(") == line.count(")") and "), or install" not in line, line


def test_default_source_dropped_with_sglang_takes_this_installs_source(monkeypatch):
    """si-default-source-dropped: with_sglang() with no source is install_source()'s (a directory, or a URL as
    'NAME[extra] @ URL')."""
    from controller.daemon.engines import sglang_install
    monkeypatch.setattr(sglang_install, "install_source", lambda: "/srv/my clone")
    assert sglang_install.with_sglang() == "/srv/my clone[sglang]"
    monkeypatch.setattr(sglang_install, "install_source", lambda: "git+https://example.org/o/sc.git")
    assert sglang_install.with_sglang() == "spec-controller[sglang] @ git+https://example.org/o/sc.git"


# --- defects found beside the survivors ------------------------------------------------------------------------------
def test_an_empty_database_file_is_nothing_saved_not_a_database_that_could_not_be_read(short_tmp):
    """config check read an empty database file (which run's open makes the database: nothing saved, the config's
    policy starts) as unreadable: 'the policy saved in ..., which run would resume, could not be read: ... holds no
    spec-controller data (an empty file)'. state.db.NoData: nothing to resume, no note."""
    (short_tmp / "s.db").write_bytes(b"")
    res = _check(short_tmp)
    assert res.exit_code == 0 and res.stdout.strip().endswith("; policy bandit)"), res.output
    assert "could not be read" not in res.stderr and "s.db" not in res.stderr, res.stderr
    assert (short_tmp / "s.db").read_bytes() == b""         # (read-only: nothing made)


@pytest.mark.parametrize("pair,said", [
    ("policy.params={c=1e-400}", "--set policy.params.c: 1e-400 is closer to 0 than a number here can be"),
    ("sim.speed=[1e-400]", "--set sim.speed[0]: 1e-400 is closer to 0"),
    ("policy.params={c=99999999999999999999}", "--set policy.params.c: an integer past 64 bits"),
])
def test_a_set_tables_value_data_text_refuses_is_named_not_called_no_table(tmp_path, pair, said):
    """--set policy.params={c=1e-400} (a table whole, as --set takes one) was refused as 'config: [policy] params must
    be a table': data_text's refusal of the value in it (held_float's, or past 64 bits) fell back to the text. Now
    its own line, naming the key; `--set policy.params.c=1e-400` as before."""
    with pytest.raises(ConfigError) as e:
        parse_set([pair])
    assert str(e.value).startswith(said) and "must be a table" not in str(e.value), str(e.value)
    (tmp_path / "empty.toml").write_text("")
    res = CliRunner().invoke(daemon_cli, ["config", "check", "--config", str(tmp_path / "empty.toml"), "--set", pair])
    assert res.exit_code == 2 and res.output.startswith(f"spec-controller: {said}") and res.output.count("\n") == 1, \
        res.output
    assert parse_set(["policy.params={c=2.5}"]) == {"policy": {"params": {"c": 2.5}}}
    assert parse_set(["policy.params={c=1"]) == {"policy": {"params": "{c=1"}}      # (not TOML: text, as before)
