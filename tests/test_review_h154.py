"""helper-154: a SIGHUP that reaches `spec-controller run` after its config is read and before the daemon's own handler
(Daemon._signals) is the reload it asks for, not ignored."""
import os
import signal

from click.testing import CliRunner

from controller.daemon import lifecycle
from controller.daemon import main as daemon_main


def _quiet(monkeypatch):
    """(run's logs.setup takes the daemon's loggers from the root's handlers: caplog in later tests saw nothing)"""
    monkeypatch.setattr(daemon_main.logs, "setup", lambda level: None)


def _run(short_tmp, sighup=None) -> None:
    """`spec-controller run` through click, SIGHUP as given first, the signals' handlers put back after it."""
    before = [signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)]
    if sighup is not None:
        signal.signal(signal.SIGHUP, sighup)
    try:
        res = CliRunner().invoke(daemon_main.main, ["run", "--db", str(short_tmp / "s.db"),
                                                    "--socket", str(short_tmp / "c.sock")])
    finally:
        for s, handler in zip((signal.SIGHUP, signal.SIGTERM, signal.SIGINT), before):
            signal.signal(s, handler)
    assert res.exit_code == 0, (res.output, res.exception)


def test_a_sighup_after_the_config_is_read_before_the_daemons_handler_is_a_reload(short_tmp, monkeypatch):
    """(the entry point ignores SIGHUP until the handler: one sent just after an edit, ~25 ms after the start read the
    config, was lost; the daemon ran the edit's predecessor and said nothing)"""
    real_read, seen = daemon_main.read_config, []

    def read_then_hup(*args):
        cfg = real_read(*args)
        os.kill(os.getpid(), signal.SIGHUP)           # (delivered to this thread before kill returns)
        return cfg

    def run(self):
        self._signals()
        seen.append(self.reload_asked)
        return 0
    monkeypatch.setattr(daemon_main, "read_config", read_then_hup)
    monkeypatch.setattr(lifecycle.Daemon, "run", run)
    _quiet(monkeypatch)
    _run(short_tmp, signal.SIG_IGN)      # as controller.entry leaves SIGHUP for `run`
    assert seen == [True]


def test_no_sighup_no_reload(short_tmp, monkeypatch):
    seen = []

    def run(self):
        self._signals()
        seen.append(self.reload_asked)
        return 0
    monkeypatch.setattr(lifecycle.Daemon, "run", run)
    _quiet(monkeypatch)
    _run(short_tmp)
    assert seen == [False]
