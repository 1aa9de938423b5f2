"""`specctl threshold pin N` names one range: where a daemon answers, its engine's (the daemon judges the pin, the CLI
no longer refuses by the contract's cap first: `pin 100000` said 'allowed 0 .. 65536', then `pin 300` 'allowed
0 .. 256'); where none does, the contract's, what an offline pin may save (taken as the engine's largest batch at
the next start)."""
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.contract import MAX_BATCH
from controller.numtext import written
from tests.daemon_proc import DaemonProc


@pytest.fixture(scope="module")
def daemon():
    d = Path(tempfile.mkdtemp(prefix="sc-pin-", dir="/tmp"))
    proc = DaemonProc(d, "--concurrency", "4", "--profile", "crossover-b")
    proc.wait_socket()
    yield proc
    assert proc.stop() == 0
    shutil.rmtree(d, ignore_errors=True)


def _pin(daemon, value: str):
    return CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(daemon.db), "threshold", "pin", value],
                              prog_name="specctl")


@pytest.mark.parametrize("value", ["100000", str(MAX_BATCH), "300", "257", "-1"])
def test_a_running_daemon_names_its_engines_range_whatever_the_value(daemon, value):
    before = daemon.call("GET", "/policy")
    res = _pin(daemon, value)
    assert res.exit_code == 2 and res.output == (
        f"specctl: threshold {value} out of range (allowed 0 .. the engine's largest batch, 256)\n"), res.output
    assert daemon.call("GET", "/policy") == before


def test_the_engines_largest_batch_itself_is_taken(daemon):
    try:
        assert _pin(daemon, "256").output == "threshold pinned at 256\n"
    finally:
        assert _pin(daemon, "0").exit_code == 0 and daemon.call("POST", "/threshold/unpin")["pinned"] is False


def test_a_huge_pin_is_echoed_cut_short(daemon):
    res = _pin(daemon, "9" * 300)
    line = res.output.rstrip("\n")
    assert res.exit_code == 2 and "\n" not in line and len(line) < 200, res.output[:400]
    assert line.startswith("specctl: threshold 999") and "..." in line
    assert line.endswith("out of range (allowed 0 .. the engine's largest batch, 256)"), line


def test_the_api_says_the_same_line(daemon):
    from controller.cli.client import DaemonError
    with pytest.raises(DaemonError) as e:
        daemon.call("POST", "/threshold/pin", {"threshold": 300})
    assert e.value.status == 400 and str(e.value) == "threshold 300 out of range (allowed 0 .. the engine's largest batch, 256)"


@pytest.mark.parametrize("value", ["100000", "-1"])
def test_with_no_daemon_the_contracts_range_is_named_and_nothing_saved(short_tmp, value):
    from state import queries
    from state.db import open_store
    db = short_tmp / "off.db"
    open_store(db).conn.close()
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), "threshold", "pin", value],
                             prog_name="specctl")
    assert res.exit_code == 2 and res.output == f"specctl: threshold {value} out of range (allowed 0 .. {MAX_BATCH})\n"
    store = open_store(db, readonly=True)
    try:
        assert queries.settings(store).get("pinned") is None
    finally:
        store.conn.close()


def test_with_no_daemon_and_no_database_it_is_still_a_usage_error(short_tmp):
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "threshold", "pin", "100000"],
                             prog_name="specctl")
    assert res.exit_code == 2 and res.output == f"specctl: threshold 100000 out of range (allowed 0 .. {MAX_BATCH})\n"
    assert not json.dumps(res.output).count("Traceback")


@pytest.mark.parametrize("value, says", [("9" * 4000, "out of range (allowed 0 .. 65536)"),
                                         ("x" * 5000, f"is not an integer ({written(int, 0)})")])
def test_with_no_daemon_a_huge_value_is_echoed_cut_short_as_the_daemon_does(short_tmp, value, says):
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "threshold", "pin", value],
                             prog_name="specctl")
    line = res.output.rstrip("\n")
    assert res.exit_code == 2 and "\n" not in line and len(line) < 200, res.output[:400]
    assert line.startswith("specctl: threshold ") and value[:20] in line and "..." in line and line.endswith(says), line
