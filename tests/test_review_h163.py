"""helper-163: small defects earlier sessions noticed and left alone, each test red before its fix."""
import pytest

from controller import numtext


@pytest.mark.parametrize("text, end", [
    ("1e-308", "(a float's least is 2.2e-308; under it a float keeps fewer digits)"),     # was 'read as 1e-308'
    ("-1.0e-310", "(a float's least is 2.2e-308; under it a float keeps fewer digits)"),
    ("3e-320", "(a float's least is 2.2e-308; under it a float keeps fewer digits: it would be read as 2.99997e-320)"),
    ("1e-400", "(a float's least is 2.2e-308: it would be read as 0)")])
def test_held_floats_refusal_says_what_it_would_be_read_as_only_where_that_differs(text, end):
    with pytest.raises(numtext.Unheld) as e:
        numtext.held_float(text)
    assert str(e.value) == f"{text} is closer to 0 than a number here can be {end}"


def test_sighup_applies_a_changed_min_free_mb(short_tmp):
    """[storage] min_free_mb was read at the start only: a reload named it 'not applied until a restart'. A floor
    above any disk's free space (1e9 MiB) must make status say the disk is nearly full right after the reload."""
    from tests.daemon_proc import DaemonProc
    from tests.test_faults_config import _hup_and_wait
    d = DaemonProc(short_tmp, "--concurrency", "2", config_text="[storage]\nmin_free_mb = 0\n")
    try:
        d.wait_socket()
        assert not any("nearly full" in p for p in d.call("GET", "/status")["daemon"]["problems"])
        (short_tmp / "config.toml").write_text("[storage]\nmin_free_mb = 1e9\n")
        got = _hup_and_wait(d, 1)
        assert got == ["guard, retention, min_free_mb and log level re-read"], got      # nothing left for a restart
        problems = d.call("GET", "/status")["daemon"]["problems"]
        assert any(p.startswith("database disk nearly full: ") and "under the 1000000000 MiB kept free" in p
                   for p in problems), problems
    finally:
        assert d.stop() == 0


# --- what the tests left open or running --------------------------------------------------------------------------
def test_a_parser_whose_interpreter_cannot_run_closes_its_log(tmp_path):
    """SGLangParser made its log file, then Popen refused the interpreter: the LaunchError left the file open (a
    ResourceWarning in `config from-launch --python /nonexistent/python`'s tests)."""
    import gc
    import warnings

    from controller.daemon.launchcfg import LaunchError, SGLangParser
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(LaunchError, match="cannot run"):
            SGLangParser(str(tmp_path / "no-python"))
        gc.collect()
    assert [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []


def test_the_telemetry_sender_closes_its_socket_and_makes_it_again_on_the_next_use(short_tmp):
    """TelemetrySender had no close: a process that made plugins and went on kept their zmq sockets open."""
    import zmq

    from controller.plugin.failures import Failures
    from controller.plugin.telemetry import TelemetrySender
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(f"ipc://{short_tmp}/t.ipc")
    sender = TelemetrySender(f"ipc://{short_tmp}/t.ipc", Failures(), lambda: ({}, {}), rank=lambda: 0)
    try:
        first = sender._socket()
        sender.close()
        assert first.closed and sender.sock is None
        again = sender._socket()
        assert again and not again.closed and again is not first
    finally:
        sender.close()
        pull.close(linger=0)


LEAVES = """
import pathlib, subprocess, sys, threading, time
def test_leaves_a_child_and_a_thread():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pathlib.Path("child.pid").write_text(str(child.pid))
    threading.Thread(target=time.sleep, args=(3,), name="not-a-daemon").start()
"""


def test_the_session_fails_where_its_tests_left_a_child_process_or_a_non_daemon_thread(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT
    (tmp_path / "conftest.py").write_text("import tests.conftest as ours\nfrom tests.conftest import "
                                          "_nothing_left_running  # noqa: F401\nours.LEFT_GRACE_S = 0.5\n")
    (tmp_path / "test_leaves.py").write_text(LEAVES)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "test_leaves.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert run.returncode == 1, run.stdout + run.stderr
        assert "1 passed, 1 error" in run.stdout, run.stdout
        assert "the tests left running: thread 'not-a-daemon'; child pid " in run.stdout, run.stdout
    finally:
        os.kill(int((tmp_path / "child.pid").read_text()), signal.SIGKILL)


# --- spaces other than ASCII's around a name or value -----------------------------------------------------------
@pytest.mark.parametrize("pair, named", [("c\u00a0=1.5", "U+00A0 (NO-BREAK SPACE)"),
                                         ("c=\u20031.5", "U+2003 (EM SPACE)"), ("c=1.5\u3000", "U+3000 (IDEOGRAPHIC SPACE)")])
def test_specctl_refuses_a_param_pasted_with_another_space_and_names_it(offline, pair, named):
    """parse_kv's strip() took them off: 'c\u00a0=\u00a01.5' pasted from a page was c=1.5, unsaid."""
    from click.testing import CliRunner

    from controller.cli.main import cli
    from tests.conftest import saved_settings
    args, db = offline
    before = saved_settings(db)
    res = CliRunner().invoke(cli, [*args, "policy", "set", "ucb", "--param", pair])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr == f"specctl: bad parameter {pair!r}: {named} around a name or value: type a plain space, or none\n"
    assert saved_settings(db) == before


def test_ascii_spaces_around_a_param_are_still_the_pairs():
    from policies import parse_kv
    assert parse_kv([" c = 1.5 ", "\tn=2\n"]) == {"c": "1.5", "n": "2"}


@pytest.mark.parametrize("pair", ["sim.speed=\u00a03", "sim.\u2003speed=3"])
def test_spec_controller_refuses_a_set_pasted_with_another_space(pair):
    from click.testing import CliRunner

    from controller.daemon.main import main
    res = CliRunner().invoke(main, ["config", "check", "--set", pair])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.startswith(f"spec-controller: --set {pair!r}: U+") and len(res.stderr.splitlines()) == 1


def test_a_switch_word_with_another_space_is_not_read_and_the_daemon_refuses_it():
    from controller.envwords import EXPERIMENTS_ENV, operator_value_problem, switch_on
    assert switch_on({EXPERIMENTS_ENV: " 0\t"}, EXPERIMENTS_ENV) is False
    assert switch_on({EXPERIMENTS_ENV: "0\u00a0"}, EXPERIMENTS_ENV) is True          # not a switch word: the default
    assert operator_value_problem(EXPERIMENTS_ENV, "0\u00a0").startswith("must be one of 0 / false")


def test_the_service_takes_the_newest_engine_time_the_start_read_and_reads_it_no_more(tmp_path, monkeypatch):
    """The daemon's start read queries.last_engine_time twice: for the engine (the simulator resumes there) and again
    in Service, for its clock's floor. It is read once (lifecycle) and handed to both."""
    from controller.daemon.config import load_config
    from controller.daemon.service import Service
    from state import queries
    from state.db import open_store
    from state.writer import Writer
    from tests.fakes import FakeEngine
    reads = []
    real = queries.last_engine_time
    monkeypatch.setattr(queries, "last_engine_time", lambda db: reads.append(1) or real(db))
    cfg = load_config(None, {"storage": {"db": str(tmp_path / "s.db")}})
    writer = Writer(open_store(cfg["storage"]["db"])).start()
    try:
        engine = FakeEngine()
        engine.t = 100.0                 # its clock stepped back while the daemon was down
        service = Service(cfg, engine, writer, 5000.0)
        assert reads == [] and service.clock.now() >= 5000.0
    finally:
        writer.stop()
