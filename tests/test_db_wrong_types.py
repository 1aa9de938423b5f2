"""A database edited by hand to hold a text or a blob where a number goes (SQLite keeps whatever is stored, whatever the
column's declared type): every read leaves such a row out, as a damaged settings row is. It was a traceback out of
specctl status, threshold, history and plot, the daemon's start (float('abc'), exit 1) and, for good, its rollups
(helper-151)."""
import json

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from state import queries, timeline
from state.db import open_store
from state.items import INSERTS, decision_item, event_item, policy_state_item, setting_item
from state.retention import Rollups


def _store(path, tamper: str):
    store = open_store(path)
    rows = [("samples", (10.0 + i, 8, 4, 20, 0.01, 1)) for i in range(30)]
    rows += [decision_item(12.0, 0, 5, "bandit", "why", False), decision_item(20.0, 5, 6, "bandit", "why", True),
             policy_state_item("thompson", {}, {}), setting_item("policy", {"name": "bandit", "params": {}}),
             setting_item("threshold", 6),
             event_item("start", "engine=sim policy=bandit threshold=0 pinned=None pid=1 max_batch=256 socket=/x")]
    for kind, row in rows:
        store.conn.execute(INSERTS[kind], row)
    store.conn.execute(tamper)
    store.conn.commit()
    return store


TAMPERED = {
    "sample time text": "UPDATE samples SET t = 'abc' WHERE rowid = (SELECT max(rowid) FROM samples)",
    "sample time blob": "UPDATE samples SET t = x'00' WHERE rowid = (SELECT max(rowid) FROM samples)",
    "decision time text": "UPDATE decisions SET t = 'x' WHERE id = (SELECT max(id) FROM decisions)",
    "decision wall text": "UPDATE decisions SET wall = 'x'",
    "decision policy blob": "UPDATE decisions SET policy = x'00ff'",
    "decision new blob": "UPDATE decisions SET new = x'01'",
    "checkpoint wall text": "UPDATE policy_state SET wall = 'x'",
    "start's max_batch not ASCII": "UPDATE events SET detail = 'engine=sim max_batch=\u00b2 socket=/x'",
    "an error's wall text": "INSERT INTO events (wall, kind, detail) VALUES ('x', 'error', 'boom')",
    "sample time infinite": "UPDATE samples SET t = 9e999 WHERE rowid = (SELECT max(rowid) FROM samples)",
    "decision wall infinite": "UPDATE decisions SET wall = -9e999",
    "settings not finite": "UPDATE settings SET value = CASE key WHEN 'threshold' THEN 'NaN' WHEN 'policy' THEN "
                           "'{\"name\": \"ucb\", \"params\": {\"c\": Infinity}}' ELSE value END",
}


@pytest.mark.parametrize("tamper", TAMPERED.values(), ids=TAMPERED.keys())
@pytest.mark.parametrize("command", [["status"], ["threshold"], ["history"], ["history", "--json"], ["plot", "p.png"],
                                     ["threshold", "pin", "3"]], ids=" ".join)
def test_specctl_reads_a_database_with_a_wrong_type_in_a_row(short_tmp, tamper, command):
    db = short_tmp / "s.db"
    _store(db, tamper).conn.close()
    if command[0] == "plot":
        command = ["plot", str(short_tmp / "p.png")]
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), *command])
    assert res.exit_code in (0, 3) and "Traceback" not in res.output, (res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)


def _strict(text: str):
    def refuse(word):
        raise ValueError(f"{word} is no JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("tamper", ["sample time infinite", "decision wall infinite", "settings not finite"])
@pytest.mark.parametrize("command", [["status", "--json"], ["history", "--json"]], ids=" ".join)
def test_json_from_a_database_with_an_infinity_in_a_row_is_json(short_tmp, tamper, command):
    """(a decision's wall time or a saved threshold of 9e999 / NaN was written out as Infinity / NaN: no JSON)"""
    db = short_tmp / "s.db"
    store = _store(db, TAMPERED[tamper])
    store.conn.execute("INSERT OR REPLACE INTO settings (key, value, wall) VALUES ('clock', '{\"speed\": 1e999}', 0)")
    store.conn.commit()
    store.conn.close()
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), *command])
    assert res.exit_code in (0, 3), res.output
    _strict(res.stdout)


@pytest.mark.parametrize("t", ["9e999", "1e300", "9e12"])
def test_an_infinite_or_absurd_sample_time_is_not_the_starts_clock(short_tmp, t):
    """(the daemon's clock resumed from it: at 9e999 every sample after it was rejected, 'time', nothing learned, every
    start; at 1e300 a float's step is far over the simulator's, and its clock stood still)"""
    store = _store(short_tmp / "s.db", f"UPDATE samples SET t = {t} WHERE rowid = (SELECT max(rowid) FROM samples)")
    assert queries.last_engine_time(store) == 38.0
    assert queries.settings(store)["threshold"] == 6


def test_a_setting_saved_as_nan_or_infinity_is_read_as_its_text(short_tmp):
    """(text: a start says 'the saved one is not a batch size', as for any other value that is not one)"""
    store = _store(short_tmp / "s.db", TAMPERED["settings not finite"])
    store.conn.execute("INSERT OR REPLACE INTO settings (key, value, wall) VALUES ('clock', '{\"speed\": 1e999}', 0)")
    saved = queries.settings(store)
    assert saved["threshold"] == "NaN" and saved["policy"]["params"] == {"c": "Infinity"}
    assert saved["clock"] == {"speed": "1e999"}


def test_the_daemons_reads_take_the_numbers_and_leave_the_damaged_rows_out(short_tmp):
    store = _store(short_tmp / "s.db", TAMPERED["sample time text"])
    store.conn.execute(TAMPERED["decision time text"])
    store.conn.execute("INSERT INTO aggregates VALUES ('x', 10.0, 8, 'spec', 5, 5, 5.0, 5.0)")
    store.conn.execute(TAMPERED["start's max_batch not ASCII"])
    assert queries.last_engine_time(store) == 38.0          # (the start's clock: float('abc') was its traceback)
    assert timeline.newest_t(store) == 38.0 and timeline.oldest_t(store) == 10.0
    assert Rollups(10.0, (8, 256))(store) > 0               # (a rollup failed on every run, for good)
    assert queries.sample_sums(store)["batches"] == 29
    assert [d["new"] for d in queries.recent_decisions(store)] == [5]
    assert queries.started_max_batch(store) is None
