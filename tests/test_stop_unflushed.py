"""specctl stop said 'daemon pid N stopped', exit 0, where the daemon exited 5 (its final writes not all stored) or
never recorded its stop (helper-159): it reads the daemon's stop event in the database now, exit 5 and one line."""
import pytest
from click.testing import CliRunner

from controller.cli import stop as stop_mod
from controller.cli.main import cli
from state.db import open_store


def _store(path, *events):
    db = open_store(path)
    for kind, detail in events:
        db.execute("INSERT INTO events (wall, kind, detail) VALUES (1, ?, ?)", [kind, detail])
    db.conn.commit()
    db.conn.close()
    return path


START = ("start", "engine=sim policy=bandit threshold=0 pinned=False pid=4242 max_batch=256 socket=/x y.sock")


@pytest.mark.parametrize("events,why", [
    ([START, ("stop", "SIGTERM: exit 0")], None),
    ([START, ("stop", "SIGTERM: exit 5")], "its final writes were not all stored"),
    ([START], "its stop was not recorded: the database writer did not finish"),
    ([("start", START[1].replace("pid=4242", "pid=7")), ("stop", "SIGTERM: exit 5")], None),    # another daemon's run
    ([START, ("stop", "SIGTERM: exit 5"), ("start", START[1].replace("pid=4242", "pid=7"))], None),
])
def test_the_stopped_daemons_own_stop_event_is_read(tmp_path, events, why):
    assert stop_mod.unflushed(_store(tmp_path / "s.db", *events), 4242) == why


def test_an_unreadable_database_tells_nothing(tmp_path):
    assert stop_mod.unflushed(tmp_path / "none.db", 4242) is None


@pytest.mark.parametrize("detail,code,line", [
    ("SIGTERM: exit 0", 0, "daemon pid 4242 stopped\n"),
    ("SIGTERM: exit 5", 5, "specctl: daemon pid 4242 stopped, but its final writes were not all stored (its log says "
                           "which; it exited 5)\n"),
])
def test_stop_says_a_stop_whose_writes_were_lost_and_exits_5(tmp_path, monkeypatch, detail, code, line):
    db = _store(tmp_path / "s.db", START, ("stop", detail))
    monkeypatch.setattr(stop_mod, "call", lambda *a, **k: {"pid": 4242, "db": str(db)})
    monkeypatch.setattr(stop_mod, "wait_gone", lambda *a, **k: True)
    res = CliRunner().invoke(cli, ["--db", str(db), "stop"], prog_name="specctl")
    assert res.exit_code == code and res.output == line, (res.exit_code, res.output)
