"""Edges of 2026-12-05's specctl / from-launch changes (140af19..7b5ffd8) that a mutation pass found untested
(bench/results/mutation-cli-2026-12-05b.md): each test kills a mutant that survived the existing suite."""
import json
import os
import socket

import pytest
from click.testing import CliRunner

from controller.cli.offline import START_HINT
from controller.cli.main import cli
from controller.daemon import launchcfg, launchparse
from controller.daemon.launchcmd import path_notes
from state import timeline
from state.db import open_store
from tests.test_cli_daemon import daemon  # noqa: F401  (module-scoped daemon fixture)
from tests.test_launchcmd import SPEC, _fake, from_launch, one_line

PY = ["python", "-m", "sglang.launch_server"]


# --- specctl policy list: where the mark comes from -------------------------------------------------------------
def test_policy_list_with_db_and_socket_marks_the_databases_policy(daemon, short_tmp):   # noqa: F811
    """--db names whose state a command is about: with --socket too, the mark is that database's saved policy, not
    what the daemon on the socket (keeping another database) runs."""
    from policies import resolve_name
    running = resolve_name(daemon.call("GET", "/policy")["name"])
    saved = "ucb" if running != "ucb" else "fixed"
    other = short_tmp / "other.db"
    open_store(other).conn.close()
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(other), "policy", "set", saved])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(other), "policy", "list", "--json"])
    assert res.exit_code == 0, res.output
    assert [r["name"] for r in json.loads(res.stdout) if r["active"]] == [saved]


def test_policy_list_with_no_database_yet_lists_quietly(short_tmp):
    """No database at the default path (a daemon never started): nothing to mark, and nothing to complain of."""
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "policy", "list"])
    assert res.exit_code == 0 and "thompson (alias: bandit): " in res.stdout and "[active" not in res.stdout, res.output
    assert res.stderr == "", res.stderr


# --- specctl plot: the span in the figure's title ---------------------------------------------------------------
def test_the_plots_title_says_the_span_it_drew(tmp_path, monkeypatch):
    """The figure's title, as the line printed: what was recorded (120 s), not --last's default (600 s)."""
    from controller.cli import plot
    from tests.test_plots import _store
    _store(tmp_path / "s.db").conn.close()
    titles, real = [], plot.draw
    monkeypatch.setattr(plot, "draw", lambda rows, steps, t_end, title: titles.append(title) or
                        real(rows, steps, t_end, title))
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                   "plot", str(tmp_path / "x.png")])
    assert res.exit_code == 0, res.output
    assert titles == ["s.db: the last 120 engine seconds (all recorded) (2 threshold steps)"]


# --- timeline.oldest_t: every table that holds engine time --------------------------------------------------------
def _aggregate(window_start: float) -> dict:
    return {"window_start": window_start, "window_s": 30.0, "bucket": 8, "mode": "spec", "batches": 10, "tokens": 20,
            "busy_s": 0.2, "mean_batch_size": 8.0}


def test_oldest_t_of_aggregates_alone_is_their_first_window(tmp_path):
    """Raw samples gone (retention), the rollup's windows left: the oldest is the first window's start."""
    db = open_store(tmp_path / "a.db")
    db["aggregates"].insert_all([_aggregate(10.0), _aggregate(40.0), _aggregate(70.0)])
    assert timeline.oldest_t(db) == 10.0
    db.conn.close()


def test_oldest_t_counts_a_decision_older_than_any_sample(tmp_path):
    db = open_store(tmp_path / "d.db")
    db["samples"].insert_all([{"t": 50.0 + i, "batch_size": 8, "steps": 2, "tokens": 20, "step_s": 0.02,
                               "decode_only": 1} for i in range(10)])
    db["decisions"].insert({"t": 5.0, "wall": 0.0, "old": 0, "new": 16, "policy": "bandit", "reason": "x",
                            "exploratory": 0})
    assert timeline.oldest_t(db) == 5.0
    assert timeline.oldest_t(open_store(tmp_path / "empty.db")) is None
    db.conn.close()


# --- the lock beside the database -------------------------------------------------------------------------------
def test_status_of_a_missing_database_whose_lock_is_unreadable_says_not_running(short_tmp):
    """Who holds an unreadable lock cannot be told: not a 'daemon pid unreadable' starting (exit 4); nor 'not running'
    (helper-179): the line says it cannot be told, and why."""
    db = short_tmp / "x.db"
    (short_tmp / "x.db.lock").symlink_to(short_tmp / "nowhere")
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), "status"])
    assert res.exit_code == 3, res.output
    assert res.stderr.startswith("specctl: no daemon answers (") and "cannot be told: lock file " in res.stderr and \
        res.stderr.endswith(f"and there is no database at {db}{START_HINT}\n"), res.stderr


# --- check_socket_free: the listener's pid ------------------------------------------------------------------------
def test_a_busy_socket_names_a_listener_of_another_user(short_tmp, monkeypatch):
    """os.kill(pid, 0) says EPERM for another user's live process: alive, so named."""
    from controller.daemon import api
    path = short_tmp / "c.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)

    def not_ours(pid, sig):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(api.os, "kill", not_ours)
    try:
        with pytest.raises(RuntimeError) as err:
            api.check_socket_free(path)
    finally:
        listener.close()
    assert f"is in use by another daemon (pid {os.getpid()}); stop it" in str(err.value), str(err.value)


# --- config from-launch: which interpreter parses, and what is noted ----------------------------------------------
def _bare(tmp_path) -> str:
    """An interpreter without SGLang, as launchparse.py answers from one."""
    return _fake(tmp_path, "bare", "read -r l; echo '{\"error\": \"ModuleNotFoundError: no sglang\"}' >&\"$2\"")


def _parser(tmp_path, items: str) -> str:
    """A stand-in for launchparse.py in an interpreter with SGLang: the answer, then an empty round trip."""
    return _fake(tmp_path, "python", f"read -r l; echo '{items}' >&\"$2\"; read -r l; "
                                     "echo '{\"version\": \"9.9\", \"differ\": []}' >&\"$2\"; cat >/dev/null")


ITEMS = ('{"version": "9.9", "items": [["--model-path", "/m", "model_path"], '
         '["--speculative-algorithm", "EAGLE3", "speculative_algorithm"]]')


def test_an_explicit_python_without_sglang_is_not_swapped_for_the_commands(tmp_path):
    """--python is the operator's word: where it has no SGLang, that is the error, even if the command names an
    interpreter that has."""
    bare = _bare(tmp_path)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    named = _parser(tmp_path / "venv" / "bin", ITEMS + "}")
    res = from_launch("--python", bare, "-o", str(tmp_path / "c.toml"), "--", named, *PY[1:], "--model-path", "/m",
                      *SPEC)
    one_line(res, f"ModuleNotFoundError: no sglang (in {bare}", 1)
    assert not (tmp_path / "c.toml").exists()


def test_the_flags_sglang_deprecates_are_noted(tmp_path):
    items = ITEMS + ', "deprecated": [["--disable-cuda-graph", "Deprecated. Use --cuda-graph-backend=disabled."]]}'
    res = from_launch("--python", _parser(tmp_path, items), "--", "--model-path", "/m", *SPEC)
    assert res.exit_code == 0, res.output
    assert ("--disable-cuda-graph: SGLang 9.9 deprecates it and warns at every start; its help: Deprecated. Use "
            "--cuda-graph-backend=disabled.") in res.stderr, res.stderr


def test_a_shebang_naming_no_path_asks_for_python(tmp_path, monkeypatch):
    """`#!python3` depends on a PATH the service does not have, as `#!/usr/bin/env python3` does."""
    monkeypatch.setattr(launchcfg.sys, "executable", _bare(tmp_path))
    (tmp_path / "sglang").write_text("#!python3\n")
    one_line(from_launch("--", str(tmp_path / "sglang"), "serve", "--model-path", "/m", *SPEC),
             "does not name its interpreter by path", 1)


def test_the_note_on_a_script_without_an_interpreter_path_does_not_offer_the_script(tmp_path, monkeypatch):
    """The daemon's interpreter has SGLang; the command ran an `env` script: --python wants an interpreter, which
    the script does not name: the note says PATH, never --python /…/sglang."""
    monkeypatch.setattr(launchcfg.sys, "executable", _parser(tmp_path, ITEMS + "}"))
    (tmp_path / "sglang").write_text("#!/usr/bin/env python3\n")
    res = from_launch("--", str(tmp_path / "sglang"), "serve", "--model-path", "/m", *SPEC)
    assert res.exit_code == 0, res.output
    assert "--python PATH (the interpreter that runs it) keeps yours" in res.stderr, res.stderr
    assert f"--python {tmp_path / 'sglang'}" not in res.stderr


# --- path_notes, launchparse.deprecated ---------------------------------------------------------------------------
def test_path_notes_take_a_parent_relative_path_as_a_path(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    assert path_notes({"model_path": "../models/t"}) == [
        f"model_path = ../models/t names {tmp_path / 'models' / 't'} here; the service runs in /: give the absolute "
        "path if it is one"]


def _deprecating_parser():
    p = launchparse.Parser(prog="t")
    p.add_argument("--model-path")
    p.add_argument("--disable-graph", action=type("DeprecatedStoreTrueAction", (__import__("argparse")._StoreTrueAction,),
                                                  {}), help="Turn graphs off.")
    p.add_argument("--old-fusion", action="store_true", help="Deprecated: use --fusion-backend=auto (" + "x" * 300 + ")")
    return p


def test_a_deprecated_action_class_is_said_whatever_its_help():
    """SGLang's Deprecated* actions mark a flag deprecated even where its help does not say so."""
    said = launchparse.answer(_deprecating_parser(), {"argv": ["--disable-graph"]})["deprecated"]
    assert said == [["--disable-graph", "Turn graphs off."]]


def test_a_deprecated_flags_help_is_said_whole_up_to_its_limit():
    said = launchparse.answer(_deprecating_parser(), {"argv": ["--old-fusion"]})["deprecated"]
    assert len(said) == 1 and said[0][1].startswith("Deprecated: use --fusion-backend=auto (xxx")
    assert 100 < len(said[0][1]) <= 160
