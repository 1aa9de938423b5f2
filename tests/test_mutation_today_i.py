"""Tests for the gaps the mutation pass of 2026-12-06i found in the lines changed since 53ba336
(bench/results/mutation-today-2026-12-06i.md). Each test is named after the mutant it kills (test_<id>_...). Each was
checked red with its mutant applied and green on the original."""
import errno
import os
import socket
import types

import pytest
from click.testing import CliRunner

from controller.daemon.config import load_config
from controller.daemon.main import main
from tests.conftest import repeat_filtered, unremovable_left_over

DEEP_TOML = "[sim]\nspeed = 5\nx = " + "[" * 5000 + "]" * 5000 + "\n"


def _passed_records(run):
    """The messages of the spec_controller log that pass the daemon's RepeatFilter (a still clock) while run() runs."""
    with repeat_filtered() as records:
        run()
    return [r.getMessage() for r in records]


# --- OP2: specctl simulate's --arrival-rate list takes spaces after its commas ----------------------------------------
def test_op2_a_rate_list_with_spaces_after_its_commas_is_read():
    """decimal_text takes no space: the spaces beside each comma are the list's ('2, 12', as the concurrency list);
    around the list they are no number's (numtext's rule, as a single value's: ' 8' is refused)."""
    import click
    from controller.cli.openloop import parse_rates
    from controller.cli.simulate import _levels
    assert parse_rates("2, 12 ,24", ()) == [2.0, 12.0, 24.0]
    assert _levels("8 , 16", ()) == [8, 16]
    with pytest.raises(click.BadParameter):
        _levels(" 8, 16", ())


# --- AP3: a left-over control socket that unlink refuses for any reason is one line ----------------------------------
@pytest.mark.parametrize("code", [errno.EROFS, errno.EBUSY, errno.EPERM])
def test_ap3_a_left_over_socket_that_cannot_be_removed_for_any_reason_is_refused_in_words(short_tmp, monkeypatch,
                                                                                          code):
    """Not only EPERM / EACCES: a read-only mount (EROFS) or EBUSY escaped check_socket_free as an OSError, not the
    RuntimeError that `run` says in one line."""
    from controller.daemon import api
    path = short_tmp / "c.sock"
    unremovable_left_over(path, monkeypatch, code)
    with pytest.raises(RuntimeError, match=rf"a left-over nobody listens on, which this user cannot remove "
                                           rf"\({os.strerror(code)}\)"):
        api.check_socket_free(path)
    assert path.is_socket()


# --- CF3: [policy] params alone is a policy given ---------------------------------------------------------------------
def test_cf3_a_config_giving_policy_params_only_is_a_policy_given(tmp_path):
    """`[policy] params = {...}` without a name chooses the default policy with those params: a choice, so a start
    whose database holds another policy names it unused (only name or params absent is nobody's choice)."""
    from controller.daemon.restore import config_policy_unused
    (tmp_path / "c.toml").write_text("[policy]\nparams = { half_life_s = 20 }\n")
    cfg = load_config(tmp_path / "c.toml")
    assert cfg["_policy_given"] is True
    note = config_policy_unused(cfg, {"policy": {"name": "ucb", "params": {}}})
    assert note is not None and "the database's policy ucb" in note, note
    assert load_config(None, {"policy": {"params": {"half_life_s": 20}}})["_policy_given"] is True


# --- CF7 and MA5: a file nested too deeply read a second time is no traceback ----------------------------------------
def test_cf7_shadowed_of_a_file_nested_too_deeply_is_nothing(tmp_path):
    """shadowed() reads the config file again after load_config (a reload's warnings, one frame deeper): unreadable
    there is 'nothing to say', not a RecursionError out of the SIGHUP handler."""
    from controller.daemon.configdiff import shadowed
    (tmp_path / "c.toml").write_text(DEEP_TOML)
    assert shadowed(tmp_path / "c.toml", {"sim": {"speed": 2.0}}) == []


def test_ma5_the_empty_config_note_is_the_files_own_as_load_config_read_it(tmp_path):
    """config check's _empty_note: only a file that sets nothing (comments only) gets it, from the one reading of the
    file (load_config); a file nested too deeply never reaches it (refused there, no traceback)."""
    from controller.daemon.config import ConfigError, load_config
    from controller.daemon.main import _empty_note
    (tmp_path / "c.toml").write_text(DEEP_TOML)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(tmp_path / "c.toml")
    (tmp_path / "e.toml").write_text("# nothing\n")
    assert _empty_note(load_config(tmp_path / "e.toml")) == [
        f"{tmp_path / 'e.toml'} sets nothing: run takes every default, the simulator (engine sim), and starts no SGLang"]
    (tmp_path / "s.toml").write_text("[sim]\nspeed = 2.0\n")
    assert _empty_note(load_config(tmp_path / "s.toml")) == []
    assert _empty_note(load_config(tmp_path / "e.toml", {"sim": {"speed": 2.0}})) != []   # the file's, not --set's


# --- SE2: [sglang] env's booleans are checked as the plugin reads them ("1" / "0") -----------------------------------
@pytest.mark.parametrize("value,seen", [(True, "1"), (False, "0")])
def test_se2_a_boolean_coalesce_in_sglang_env_is_taken_as_the_plugin_reads_it(value, seen):
    """TOML true / false reach SGLang as "1" / "0" (user_env's docstring); the check must judge that text, not
    str(True): SPEC_CONTROLLER_DRAFT_KV_COALESCE = true is 1 write per replay, not 'must be an integer'."""
    from controller.daemon.engines.sglang_env import user_env
    assert user_env({"env": {"SPEC_CONTROLLER_DRAFT_KV_COALESCE": value}}) == {
        "SPEC_CONTROLLER_DRAFT_KV_COALESCE": seen}


# --- EW3: the coalesce range's top, 64, is taken ---------------------------------------------------------------------
def test_ew3_coalesce_64_is_taken_and_65_refused():
    from controller.contract import ENV_DRAFT_KV_COALESCE
    from controller.daemon.engines.base import EngineError
    from controller.daemon.engines.sglang_env import user_env
    from controller.envwords import operator_value_problem
    from controller.plugin.instance import coalesce_batches
    assert operator_value_problem(ENV_DRAFT_KV_COALESCE, "64") is None
    assert operator_value_problem(ENV_DRAFT_KV_COALESCE, "65") == "must be an integer 0 .. 64"
    assert user_env({"env": {ENV_DRAFT_KV_COALESCE: 64}}) == {ENV_DRAFT_KV_COALESCE: "64"}
    with pytest.raises(EngineError, match="must be an integer 0 .. 64"):
        user_env({"env": {ENV_DRAFT_KV_COALESCE: 65}})
    assert coalesce_batches("64") == 64                # what the plugin then reads
    assert coalesce_batches("65") is None


# --- LF1: a reload that fails in any way keeps the running daemon ----------------------------------------------------
@pytest.mark.parametrize("error", [RecursionError("maximum recursion depth exceeded"), OSError(5, "I/O error"),
                                   KeyError("guard")])
def test_lf1_a_reload_that_fails_in_any_way_is_refused_and_logged(monkeypatch, error):
    """_reload caught ConfigError and ValueError only: anything else (RecursionError was one) left the SIGHUP handler
    and stopped the daemon. Now it is a refused reload: one log line, one event, the running config kept."""
    from controller.daemon import lifecycle

    def failing(*a, **k):
        raise error
    monkeypatch.setattr(lifecycle, "load_config", failing)
    events = []
    service = types.SimpleNamespace(writer=types.SimpleNamespace(event=lambda kind, text: events.append((kind, text))),
                                    loop=None, lock=None, job_errors={}, job_failing={})
    daemon = types.SimpleNamespace(cfg={"_path": "", "_overrides": None})
    got = _passed_records(lambda: lifecycle.Daemon._reload(daemon, service))
    assert got == [f"reload refused, keeping the running config: {error}"], got
    assert events == [("reload", f"refused: {error}")]


# --- MO2, MO5: from-launch's own options and the launch command's `--` -----------------------------------------------
def _from_launch(tmp_path, *args):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return CliRunner().invoke(main, ["config", "from-launch", *args])
    finally:
        os.chdir(cwd)


def test_mo2_a_mistyped_option_before_dash_dash_is_named_whatever_the_launch_command(tmp_path):
    """`--ouput FILE -- python serve.py ...`: the `--` alone says a launch command follows (a wrapper script names no
    sglang.launch_server), so --ouput is from-launch's mistyped option, not a word before the interpreter."""
    res = _from_launch(tmp_path, "--ouput", "c.toml", "--", "python", "serve.py", "--model-path", "/m")
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "no such option '--ouput' (did you mean '--output'?)" in lines[0], res.output
    assert os.listdir(tmp_path) == []


def test_mo5_a_second_dash_dash_is_the_launch_commands_word_not_a_mistyped_option(tmp_path):
    """`from-launch -- -- python -m sglang.launch_server ...`: click takes the first `--`; the second is the launch
    command's (refused there as a word before the interpreter), not 'no such option: --'."""
    res = _from_launch(tmp_path, "--", "--", "python", "-m", "sglang.launch_server", "--model-path", "/m")
    assert res.exit_code == 2, res.output
    assert "no such option" not in res.output and "-- before the interpreter" in res.output, res.output
    assert os.listdir(tmp_path) == []


# --- SV1: each saved state not restored is its own warning -----------------------------------------------------------
def test_sv1_two_saved_states_not_restored_within_a_minute_each_reach_the_log():
    """The warning went through one format string, and RepeatFilter holds back a format seen within the minute: of
    two switches to policies whose saved states were damaged, the second said nothing."""
    from controller.daemon.service import Service
    from policies import PolicyError

    class Broken:
        def __init__(self, why):
            self.why = why

        def load_state(self, state):
            raise PolicyError(self.why)
    service = types.SimpleNamespace(_read=lambda query, *a: {"state": {}}, _build_policy=lambda name, params: "fresh")
    results = []
    got = _passed_records(lambda: results.extend([Service._restore(service, Broken("no arms"), "ucb", {}),
                                                  Service._restore(service, Broken("bad prior"), "thompson", {})]))
    assert results == [("fresh", False), ("fresh", False)]
    assert got == ["saved state of ucb not restored: no arms", "saved state of thompson not restored: bad prior"], got


# --- Q5: a settings row that json.loads cannot take in any way is left out --------------------------------------------
@pytest.mark.parametrize("value", [None, "[" * 100000 + "]" * 100000])
def test_q5_a_null_or_too_deeply_nested_settings_row_is_no_setting(tmp_path, value):
    """json.loads(None) is a TypeError and a row nested past the recursion limit a RecursionError: both ended the
    daemon's start and specctl's offline reads in a traceback where a row that is not JSON is left out."""
    from state import queries
    from state.db import open_store
    db = open_store(tmp_path / "s.db")
    try:
        db.conn.execute("INSERT INTO settings (key, value, wall) VALUES ('pinned', ?, 0)", [value])
        db.conn.execute("INSERT INTO settings (key, value, wall) VALUES ('threshold', '7', 0)")
        db.conn.commit()
        assert queries.settings(db) == {"threshold": 7}
    finally:
        db.conn.close()
