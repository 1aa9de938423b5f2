"""Mutation pass q over 12-06's changes (bench/results/mutation-today-2026-12-06q.md): each test kills a mutant the
earlier tests let live. One-line success lines (options.say), status's problem line (queries.last_run_error),
`specctl stop` meeting a drain (stop.stopping, common.call dropped=), config check's model_path note, --help texts and
install-service.sh's PYTHON check."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon.main import main
from state.db import open_store
from state.items import INSERTS, event_item
from tests.conftest import stub_sglang_python
from tests.test_stop_while_draining import _closing_daemon, _holder, held

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(db, sock, *args):
    return CliRunner().invoke(cli, ["--db", str(db), "--socket", str(sock), *args])


# --- options.say: every offline success line naming the database is one line ---------------------------------------

def test_offline_unpin_with_no_database_at_a_default_path_holding_a_newline_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "a\nb"))     # (the default --db and --socket under it)
    res = CliRunner().invoke(cli, ["threshold", "unpin"])
    assert res.exit_code == 0 and res.output.count("\n") == 1, res.output
    assert "there is no database at " in res.output and "a\\nb" in res.output, res.output


@pytest.mark.parametrize("case", ["unpin-not-pinned", "pin-again"])
def test_offline_nothing_changed_lines_naming_a_newline_path_are_one_line(tmp_path, case):
    db = tmp_path / "a\nb.db"
    open_store(db).conn.close()
    if case == "pin-again":
        assert _cli(db, tmp_path / "s.sock", "threshold", "pin", "5").exit_code == 0
    res = _cli(db, tmp_path / "s.sock", "threshold", *(["pin", "5"] if case == "pin-again" else ["unpin"]))
    assert res.exit_code == 0 and res.output.count("\n") == 1, res.output
    assert "nothing changed" in res.output and "a\\nb.db" in res.output, res.output


def test_specctl_plot_to_a_newline_path_says_so_in_one_line(tmp_path):
    from tests.test_plots import _store
    _store(tmp_path / "s.db").conn.close()
    png = tmp_path / "a\nb.png"
    res = _cli(tmp_path / "s.db", tmp_path / "no.sock", "plot", str(png), "--last", "120")
    assert res.exit_code == 0 and png.exists(), res.output
    assert res.output.count("\n") == 1 and res.output.startswith(f"wrote {tmp_path}/a\\nb.png: "), res.output


# --- status: the problem line of a run that ended on an error -------------------------------------------------------

def _events(db, rows):
    store = open_store(db)
    for kind, detail in rows:
        store.conn.execute(INSERTS["events"], event_item(kind, detail)[1])
    store.conn.commit()
    store.conn.close()


def _problems(tmp_path, db):
    res = _cli(db, tmp_path / "none.sock", "status", "--json")
    assert res.exit_code == 3, res.output
    return json.loads(res.stdout)["daemon"]["problems"]


def test_the_problem_names_the_newest_error_of_the_run_and_not_its_stop(tmp_path):
    db = tmp_path / "x.db"
    _events(db, [("start", "engine=sglang pid=1"), ("error", "first error"),
                 ("error", "second error"), ("stop", "stall: exit 1")])
    problems = _problems(tmp_path, db)
    assert len(problems) == 1 and problems[0].endswith("ago: second error"), problems


def test_the_problem_is_one_line_and_says_how_long_ago_from_the_events_wall(tmp_path):
    db = tmp_path / "x.db"
    _events(db, [("start", "engine=sglang pid=1")])
    store = open_store(db)
    store.conn.execute("INSERT INTO events (wall, kind, detail) VALUES (?, 'error', ?)",
                       [time.time() - 7200, "SGLang exited 1 before it was ready\nTraceback: last line"])
    store.conn.commit()
    store.conn.close()
    res = _cli(db, tmp_path / "none.sock", "status")
    problems = [line for line in res.stdout.splitlines() if line.startswith("problem:")]
    assert res.exit_code == 3 and len(problems) == 1, res.output
    assert problems[0].endswith("met an error 2.0 h ago: SGLang exited 1 before it was ready\\nTraceback: last line"), \
        problems
    assert "Traceback: last line" not in res.stdout.replace(problems[0], ""), res.stdout


# --- specctl stop meeting a daemon that drains ----------------------------------------------------------------------

def _serve(path, status: dict, post_answer: bytes | None) -> socket.socket:
    """Answers GET (status) on every connection; a POST gets post_answer, or the connection closed unanswered."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(8)
    listener.settimeout(0.1)        # (the caller's close() does not wake an accept() blocked in this thread: it looks)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            first = conn.recv(65536).split(b"\r\n")[0]
            if first.startswith(b"GET"):
                body = json.dumps(status).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
            elif post_answer is not None:
                conn.sendall(post_answer)
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    return listener


def test_a_dropped_stop_after_the_drain_let_go_of_the_lock_is_waited_for(short_tmp):
    db, sock = short_tmp / "state.db", short_tmp / "d.sock"
    child = _holder(db, sock, stopping=True)
    child.stdin.write("go\n")
    child.stdin.flush()
    assert child.wait(10) == 0                          # (lock free, process gone: only its socket still drops)
    _closing_daemon(sock, {"daemon": {"pid": child.pid, "db": str(db), "running": True}})
    res = _cli(db, sock, "stop", "--timeout", "20")
    assert res.exit_code == 0 and res.output.strip() == f"daemon pid {child.pid} stopped (it was already stopping)", \
        res.output


@pytest.mark.parametrize("record", ["other-pid", "earlier-run", "other-socket", "no-pid"])
def test_a_dropped_stop_whose_record_is_not_this_drain_is_a_fault(short_tmp, record):
    """The stop on record must follow the newest start, of the lock's holder, on this socket: else not waited on."""
    db, sock = short_tmp / "state.db", short_tmp / "d.sock"
    if record == "earlier-run":
        _events(db, [("start", f"engine=sim pid=1 socket={sock}"), ("stop", "SIGTERM: exit 0")])
    with held(db, sock, stopping=record != "earlier-run") as child:
        newest = {"other-pid": f"engine=sim pid=999999 socket={sock}", "other-socket":
                  f"engine=sim pid={child.pid} socket={short_tmp}/other.sock", "no-pid": f"engine=sim socket={sock}"}
        if record in newest:
            _events(db, [("start", newest[record]), ("stop", "SIGTERM: exit 0")])
        _closing_daemon(sock, {"daemon": {"pid": child.pid, "db": str(db), "running": True}})
        res = _cli(db, sock, "stop", "--timeout", "1")
        assert res.exit_code == 1 and res.output.strip() == (
            f"specctl: the daemon at {sock} closed the connection without answering: "
            "whether POST /stop was applied, `specctl status` says"), (res.output, res.exception)


def test_a_drain_that_outlasts_the_timeout_is_said_still_draining(short_tmp):
    """Its lock still held at --timeout: 'still draining', not 'has drained and let go of its database'."""
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    with held(db, sock, stopping=True) as child:
        res = _cli(db, sock, "stop", "--timeout", "1")
        assert res.exit_code == 1 and res.output.strip() == f"specctl: daemon pid {child.pid} is still draining after 1 s", \
            res.output


def test_a_refused_stop_is_one_line_not_a_traceback(short_tmp):
    db, sock = short_tmp / "state.db", short_tmp / "d.sock"
    body = b'{"error": "not now"}'
    listener = _serve(sock, {"daemon": {"pid": os.getpid(), "db": str(db), "running": True}},
                      b"HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(body), body))
    try:
        res = _cli(db, sock, "stop")
    finally:
        listener.close()
    assert res.exit_code == 1 and res.output.strip() == "specctl: not now", (res.output, res.exception)
    assert isinstance(res.exception, SystemExit), res.exception


def test_a_dropped_pin_is_one_line_not_a_traceback(short_tmp):
    """Only stop takes DaemonDropped (common.call dropped=): any other change says it in one line, exit 1."""
    db, sock = short_tmp / "state.db", short_tmp / "d.sock"
    listener = _serve(sock, {"daemon": {"pid": os.getpid(), "db": str(db), "running": True}}, None)
    try:
        res = _cli(db, sock, "threshold", "pin", "3")
    finally:
        listener.close()
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), (res.output, res.exception)
    assert res.output.startswith(f"specctl: the daemon at {sock} closed the connection without answering: whether "
                                 "POST ") and res.output.count("\n") == 1, res.output


# --- config check: a model_path that is no model --------------------------------------------------------------------

def _config_check(tmp_path, section: str):
    (tmp_path / "c.toml").write_text(f'[engine]\nkind = "sglang"\n[sglang]\nspeculative_algorithm = "EAGLE3"\n{section}'
                                     f'python = "{stub_sglang_python(tmp_path / "py")}"\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    assert res.exit_code == 0, res.output
    return res.stderr


def test_a_draft_model_path_that_is_no_model_is_a_note_too(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "draft").mkdir()
    err = _config_check(tmp_path, f'model_path = "{tmp_path}/model"\n'
                                  f'speculative_draft_model_path = "{tmp_path}/draft"\n')
    assert f"speculative_draft_model_path = {tmp_path}/draft holds no config.json" in err, err
    assert f"model_path = {tmp_path}/model holds" not in err, err


def test_a_missing_model_path_is_said_missing_not_no_model(tmp_path):
    err = _config_check(tmp_path, 'model_path = "/nonexistent-q52/model"\n')      # (not under /tmp: PrivateTmp's note)
    assert "model_path = /nonexistent-q52/model does not exist here" in err and "config.json" not in err, err


def test_a_relative_model_path_is_judged_where_the_service_runs_not_here(tmp_path, monkeypatch):
    """The service runs in /: a relative path (or a hub name) is not looked up in this directory for config.json."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    err = _config_check(tmp_path, 'model_path = "m"\n')
    assert "model_path = m names " in err and "config.json" not in err, err


# --- --help texts ---------------------------------------------------------------------------------------------------

def test_help_texts_name_what_the_options_take():
    run = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    assert run.exit_code == 0 and "--db PATH " in run.output and "--socket PATH " in run.output, run.output
    assert "[control] metrics_addr" in run.output, run.output
    status = CliRunner().invoke(cli, ["status", "--help"], terminal_width=200)
    assert status.exit_code == 0 and "4: starting" in status.output, status.output


# --- install-service.sh: PYTHON ------------------------------------------------------------------------------------

INSTALL = os.path.join(ROOT, "scripts", "install-service.sh")


def _python_of(tmp_path, version: tuple) -> str:
    """An interpreter that runs `-c` code as this one with sys.version_info = version, and logs and fails anything
    else (a venv it was asked to make)."""
    path = tmp_path / "python-x"
    patch = f"import sys; sys.version_info = {version!r}; "
    path.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then exec "{sys.executable}" -c "{patch}$2"; fi\n'
                    f'if [ "$1" = -V ]; then echo "Python {".".join(map(str, version[:3]))}"; exit 0; fi\n'
                    f'echo "$@" >> "{tmp_path}/asked"; exit 3\n')
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("version, code", [((3, 10, 12, "final", 0), 2), ((3, 11, 0, "final", 0), 3)])
def test_the_install_script_judges_the_version_python_runs_and_makes_the_venv_with_it(tmp_path, version, code):
    root = tmp_path / "root"
    env = dict(os.environ, ROOT=str(root), EXTRAS="", PIP_FLAGS="--no-deps", PYTHON=_python_of(tmp_path, version))
    res = subprocess.run(["bash", INSTALL], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == code, res.stdout + res.stderr
    asked = (tmp_path / "asked").read_text() if (tmp_path / "asked").exists() else ""
    if code == 2:       # 3.10: refused in one line, nothing made, nothing asked of it beyond its version
        assert "Python 3.10.12" in res.stderr and "3.11 or newer" in res.stderr and asked == "", res.stderr
    else:               # 3.11: the venv is asked of PYTHON (its failure stops the script: set -e)
        assert asked == f"-m venv {root}/opt/spec-controller\n", asked
    assert not (root / "opt").exists()


def test_the_install_scripts_help_names_python():
    res = subprocess.run(["bash", INSTALL, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "PYTHON=python3" in res.stdout and "3.11 or newer" in res.stdout, res.stdout
