"""helper-120's mutation check of the lines changed since 6188fd5 (bench/results/mutation-today-2026-12-06n.md): a test
for each surviving mutant, named by its id."""
from __future__ import annotations

import contextlib

import json
import time
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_utils

from state.migrations import migrate

ROOT = Path(__file__).resolve().parents[1]


# --- bench/gpu/spec_share.py -------------------------------------------------------------------------------------------
def _share(tmp_path, samples, decisions, rows, *args) -> subprocess.CompletedProcess:
    db = sqlite_utils.Database(tmp_path / "state.db")
    migrate(db)
    if samples:
        db["samples"].insert_all({"tokens": 16, "step_s": 0.01, "decode_only": 1, **s} for s in samples)
    if decisions:
        db["decisions"].insert_all({"t": 1.0, "policy": "bandit", "reason": "r", "exploratory": 0, **d}
                                   for d in decisions)
    db.conn.close()
    (tmp_path / "r.jsonl").write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows))
    return subprocess.run([sys.executable, str(ROOT / "bench/gpu/spec_share.py"), str(tmp_path / "r.jsonl"),
                           str(tmp_path / "state.db"), "--warmup", "5", "--seconds", "10", *args],
                          capture_output=True, text=True, timeout=60)


def _shares(out: str) -> dict:
    return {line.split(":")[0]: json.loads(line.split(": ", 1)[1]) for line in out.splitlines()
            if line.startswith("SHARE ")}


def _run(label="bandit", shape="closed", level=8, repeat=0, t0=1000.0, t1=1020.0) -> dict:
    return {"label": label, "shape": shape, "level": level, "repeat": repeat, "t_start": t0, "t_end": t1}


def test_ss1_a_closed_loop_shape_with_a_suffix_is_read_in_its_measured_window(tmp_path):
    """loads.py writes closed-logprobS and closed-grammarS rows: closed loops, their window after the warm-up."""
    samples = [{"t": 1000 + k * 0.5, "batch_size": 4, "steps": 0 if k < 10 else 3} for k in range(40)]  # off in warm-up
    res = _share(tmp_path, samples, [], [_run(shape="closed-logprob0.5")])
    assert res.returncode == 0, res.stderr
    assert _shares(res.stdout)["SHARE bandit closed-logprob0.5 8 repeat 0"] == {
        "batches": 20, "spec_share": 1.0, "mean_bs": 4.0, "changes": 0}


def test_ss5_a_decision_that_kept_the_threshold_is_no_change(tmp_path):
    samples = [{"t": 1006.0, "batch_size": 4, "steps": 3}]
    decisions = [{"wall": 1007.0, "old": 9, "new": 9}, {"wall": 1008.0, "old": 9, "new": 12}]
    res = _share(tmp_path, samples, decisions, [_run()])
    assert _shares(res.stdout)["SHARE bandit closed 8 repeat 0"]["changes"] == 1, res.stdout + res.stderr


def test_ss6_ss12_the_mean_batch_keeps_a_decimal_and_the_changes_are_summed_over_the_runs(tmp_path):
    samples = [{"t": 1006.0 + k, "batch_size": 8 + k % 2, "steps": 3} for k in range(4)]        # mean 8.5
    samples += [{"t": 1106.0 + k, "batch_size": 8 + k % 2, "steps": 3} for k in range(4)]
    decisions = [{"wall": 1007.5, "old": 1, "new": 2}, {"wall": 1107.5, "old": 2, "new": 3}]
    res = _share(tmp_path, samples, decisions, [_run(), _run(repeat=1, t0=1100.0, t1=1120.0)])
    assert res.returncode == 0, res.stderr
    assert _shares(res.stdout)["SHARE bandit closed 8 repeat 0"]["mean_bs"] == 8.5
    assert ("SHARES closed 8 bandit: speculated 100% of decode batches (runs 100%-100%), mean batch 8.5, changes in the "
            "windows 2") in res.stdout


def test_ss7_ss13_a_failed_run_and_a_line_that_is_not_a_row_are_passed_over(tmp_path):
    samples = [{"t": 1006.0, "batch_size": 4, "steps": 3}]
    rows = ["TIMELINE closed 8: not a row\n", {"label": "bandit", "shape": "closed", "level": 8, "repeat": 1,
                                               "error": "the run failed"}, _run()]
    res = _share(tmp_path, samples, [], rows)
    assert res.returncode == 0, res.stderr
    assert list(_shares(res.stdout)) == ["SHARE bandit closed 8 repeat 0"]


def test_ss8_a_run_without_decode_batches_is_printed_and_left_out_of_its_level(tmp_path):
    samples = [{"t": 1006.0, "batch_size": 4, "steps": 3}]
    res = _share(tmp_path, samples, [], [_run(), _run(repeat=1, t0=2000.0, t1=2020.0)])
    assert res.returncode == 0, res.stderr
    assert _shares(res.stdout)["SHARE bandit closed 8 repeat 1"] == {"batches": 0, "spec_share": None,
                                                                     "mean_bs": None, "changes": 0}
    assert "SHARES closed 8 bandit: speculated 100% of decode batches (runs 100%-100%)" in res.stdout


def test_ss10_no_daemon_run_with_batches_says_so(tmp_path):
    res = _share(tmp_path, [], [], [_run(label="nospec"), _run()])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "SHARES none: no run of a daemon label had decode batches in the database"
    (tmp_path / "with").mkdir()
    res = _share(tmp_path / "with", [{"t": 1006.0, "batch_size": 4, "steps": 3}], [], [_run()])
    assert res.returncode == 0 and "SHARES closed 8 bandit" in res.stdout and "SHARES none" not in res.stdout


# --- bench/gpu/product_table.py ----------------------------------------------------------------------------------------
def _table(tmp_path, *files: list) -> subprocess.CompletedProcess:
    paths = []
    for i, rows in enumerate(files):
        p = tmp_path / f"{i}.jsonl"
        p.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows))
        paths.append(str(p))
    return subprocess.run([sys.executable, str(ROOT / "bench/gpu/product_table.py"), *paths], capture_output=True,
                          text=True, timeout=60)


def _rows(tok: dict, level=48, repeat=0, **extra) -> list[dict]:
    return [{"label": k, "shape": "closed", "level": level, "repeat": repeat, "tok_s": v, **extra}
            for k, v in tok.items()]


def _lines(out: str) -> dict:
    return {line.split(" | ")[1]: line for line in out.splitlines() if line.startswith("| closed")}


def test_pt3_pt10_a_level_without_one_of_the_three_is_left_out_and_other_lines_passed_over(tmp_path):
    res = _table(tmp_path, ["TIMELINE closed 48: not a row\n"] + _rows({"nospec": 100, "always": 150, "bandit": 147})
                 + _rows({"nospec": 1000, "bandit": 990}, level=16))
    assert res.returncode == 0, res.stderr
    assert list(_lines(res.stdout)) == ["48"]


def test_pt4_a_pair_is_the_same_files_repeat_only(tmp_path):
    """File 1's bandit run of repeat 0 has no no-spec run of repeat 0 in its file: no pair (file 0's is another call's)."""
    res = _table(tmp_path, _rows({"nospec": 1000, "always": 500, "bandit": 990}),
                 _rows({"nospec": 800, "always": 520}, repeat=1) + _rows({"bandit": 700}))
    assert res.returncode == 0, res.stderr
    assert "| 0.990 (0.990-0.990) |" in _lines(res.stdout)["48"]


def test_pt6_a_latency_some_runs_lack_is_a_dash(tmp_path):
    res = _table(tmp_path, _rows({"nospec": 1000, "always": 500, "bandit": 990}, tpot_ms=10.0, e2e_ms=900.0),
                 _rows({"nospec": 1000, "always": 500, "bandit": 990}))
    assert res.returncode == 0, res.stderr
    assert _lines(res.stdout)["48"].endswith("| - / - / - | - / - / - |")


def test_pt7_no_pair_is_a_dash(tmp_path):
    res = _table(tmp_path, _rows({"nospec": 1000, "always": 500}) + _rows({"bandit": 990}, repeat=1))
    assert res.returncode == 0, res.stderr
    assert "| **0.990** | - |" in _lines(res.stdout)["48"]


def test_pt8_the_pairs_range_is_lowest_to_highest(tmp_path):
    res = _table(tmp_path, _rows({"nospec": 1000, "always": 500, "bandit": 1000})
                 + _rows({"nospec": 1000, "always": 500, "bandit": 900}, repeat=1))
    assert res.returncode == 0, res.stderr
    assert "| 0.950 (0.900-1.000) |" in _lines(res.stdout)["48"]


# --- controller/daemon/config.py: _file_empty ----------------------------------------------------------------------------
def test_cf4_no_config_file_at_all_is_not_a_file_that_sets_nothing(tmp_path, monkeypatch):
    from controller.daemon import config
    from controller.daemon.main import _empty_note
    monkeypatch.setattr(config, "DEFAULT_CONFIG", tmp_path / "absent.toml")
    cfg = config.load_config(None)
    assert cfg["_path"] == "" and cfg["_file_empty"] is False and _empty_note(cfg) == []
    (tmp_path / "absent.toml").write_text("# nothing\n")
    assert config.load_config(None)["_file_empty"] is True


# --- controller/daemon/apicheck.py: query_int ------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["9" * 19, "-" + "9" * 19, "1" + "0" * 3000])
def test_ac1_a_query_integer_past_18_digits_is_no_integer_and_not_echoed_whole(text):
    """No bignum is read from a query (18 digits at most): the refusal says what an integer is, its echo cut short."""
    from controller.daemon.apicheck import ApiError, query_int
    with pytest.raises(ApiError) as e:
        query_int(text, "limit")
    assert e.value.status == 400 and "limit must be an integer" in str(e.value) and len(str(e.value)) < 300
    assert query_int("9" * 18, "limit") == 10 ** 18 - 1


# --- controller/cli/offline.py: read_offline ---------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["history"], ["policy", "show"]], ids=" ".join)
def test_cm4_a_database_in_a_directory_this_user_may_not_enter_is_not_called_missing(short_tmp, monkeypatch, argv):
    """The service's state directory (0750) as an operator outside its group sees it: exists() raises EACCES there, and
    the read says the permission in one line (as root no mode refuses: the refusal is injected, as test_own_files')."""
    import os

    from click.testing import CliRunner

    from controller.cli.main import cli
    locked = short_tmp / "state"
    locked.mkdir()
    db = locked / "spec-controller.db"
    real = {name: getattr(os, name) for name in ("stat", "lstat", "open")}

    def refused(real):
        def call(path, *a, **k):
            if str(path).startswith(str(locked) + "/"):
                raise PermissionError(13, os.strerror(13), str(path))
            return real(path, *a, **k)
        return call
    for name, call in real.items():
        monkeypatch.setattr(os, name, refused(call))
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), *argv],
                             prog_name="specctl")
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit), (res.exception, res.output)
    assert res.stderr.startswith("specctl: ") and os.strerror(13) in res.stderr and len(res.stderr.splitlines()) == 1, \
        res.stderr


# --- controller/numtext.py ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["1\u0663", "9\u0663\u0663", "-1\u0663", "1\uff10"])
def test_nt4_other_scripts_digits_after_the_first_are_no_integer(text):
    """ASCII digits only, each of them: '1٣' is not 13 (int() reads it so), '1０' (a fullwidth zero) not 10."""
    from controller.numtext import int_text
    assert int_text(text) is None
    from controller.envwords import env_int
    assert env_int(text) is None


# --- controller/daemon/service.py: _command ----------------------------------------------------------------------------
@pytest.mark.parametrize("command, problem", [("pin", False), ("set_policy", False), ("pin", True)])
def test_sv1_sv4_a_command_whose_turn_does_not_come_is_refused_within_the_timeout(short_tmp, command, problem):
    """The lane held by a command that does not get on (here: taken and not given back): the next one is refused once
    command_timeout_s has passed waiting for its turn, whatever holds the lane, and changes nothing."""
    import threading
    import time

    from controller.daemon.commands import CommandRefused
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    svc.command_timeout_s = 0.5
    if problem:                                    # (SV4: why the writer is stuck, where it knows)
        import sqlite3
        writer._note_problem(sqlite3.OperationalError("database is locked"))
    why = writer.problem or "another command is waiting for it"
    got: list = []

    def run():
        began = time.monotonic()
        try:
            svc.pin(3) if command == "pin" else svc.set_policy("ucb", {})
            got.append(("ok", time.monotonic() - began))
        except CommandRefused as e:
            got.append((str(e), time.monotonic() - began))
    assert svc._commands.acquire(timeout=5)
    try:
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(20)
        assert got, "the command still waits for its turn"
    finally:
        svc._commands.release()
    t.join(20)
    (outcome, seconds), = got
    assert outcome == f"the database writer is busy ({why}); nothing changed", outcome
    assert "locked" in why if problem else True
    assert 0.4 < seconds < 10, seconds
    assert svc.loop.pinned is None and svc.policy_info()["name"] == "thompson"
    assert svc.pin(4)["pinned"] is True            # the lane is free again
    writer.stop()


def test_sv2_a_command_that_waited_for_its_turn_gets_only_the_rest_of_its_timeout(short_tmp):
    """Its write may wait command_timeout_s less the wait for its turn: refused at ~2 s, not 1.8 + 2 s."""
    import threading
    import time

    from controller.daemon.commands import CommandRefused
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    svc.command_timeout_s = 2.0
    release = threading.Event()
    writer.call(lambda db: release.wait(60))               # a writer that does not get on
    got: list = []

    def run():
        began = time.monotonic()
        try:
            svc.pin(3)
            got.append(("ok", time.monotonic() - began))
        except CommandRefused as e:
            got.append((str(e), time.monotonic() - began))
    assert svc._commands.acquire(timeout=5)
    t = threading.Thread(target=run, daemon=True)
    try:
        t.start()
        time.sleep(1.8)
    finally:
        svc._commands.release()                            # its turn, 0.2 s before its deadline
    t.join(30)
    release.set()
    (outcome, seconds), = got
    assert "busy" in outcome and outcome.endswith("nothing changed"), outcome
    assert 1.7 < seconds < 3.0, seconds
    assert writer.flush(10) and svc.loop.pinned is None
    writer.stop()


# --- controller/daemon/metrics.py ------------------------------------------------------------------------------------------
def _metrics_status(port: int, timeout: float = 10) -> int:
    from tests.test_review_h119 import _ask
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        return _ask(s, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")


def test_mt4_the_metrics_server_holds_its_own_cap(monkeypatch):
    """METRICS_CLIENTS, not the control API's 64: with that many scrapers connected and silent, one more is a 503."""
    import socket

    from controller.daemon import clients, metrics
    from tests.test_review_h119 import _Service
    monkeypatch.setattr(metrics, "METRICS_CLIENTS", 3)
    monkeypatch.setattr(clients, "CUT_AFTER_S", float("inf"))     # (the silent ones keep their slots however slow)
    httpd = metrics.start_metrics(_Service(), 0)
    port = httpd.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
    try:
        assert _metrics_status(port) == 503
    finally:
        for s in idle:
            s.close()
        httpd.stop()


def test_mt2_a_scrape_whose_answer_is_being_made_still_holds_its_slot(monkeypatch):
    """The slot is freed once the answer is ready, not before: a scrape waiting on the service counts."""
    import socket
    import threading

    from controller.daemon import metrics
    from tests.test_review_h119 import _Service
    monkeypatch.setattr(metrics, "METRICS_CLIENTS", 1)
    service = _Service()
    service.hold = threading.Event()
    httpd = metrics.start_metrics(service, 0)
    port = httpd.server_address[1]
    slow = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")       # its answer waits on the service's status
        time.sleep(0.3)
        assert _metrics_status(port, timeout=5) == 503
        service.hold.set()
        first = slow.recv(65536).split(b"\r\n")[0]
        assert first.startswith(b"HTTP/1.") and first.split()[1] == b"200", first
    finally:
        service.hold.set()
        slow.close()
        httpd.stop()


def test_sv8_one_command_at_a_time_the_second_waits_for_the_firsts_turn_to_end(short_tmp):
    """A command inside the lane (here held up on the service's lock) keeps it: the next is refused at its timeout as
    waiting for its turn, not run beside the first."""
    import threading

    from controller.daemon.commands import CommandRefused
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    svc.command_timeout_s = 0.5
    got: dict = {}

    def run(name, threshold):
        try:
            svc.pin(threshold)
            got[name] = "ok"
        except CommandRefused as e:
            got[name] = str(e)
    first = threading.Thread(target=run, args=("first", 3), daemon=True)
    second = threading.Thread(target=run, args=("second", 4), daemon=True)
    with svc.lock:                                    # the first command gets into the lane and stops at the lock
        first.start()
        time.sleep(0.2)
        second.start()
        second.join(10)
        assert got.get("second") == "the database writer is busy (another command is waiting for it); nothing changed", got
    first.join(20)
    # (the first got the lock past its deadline: refused, or taken where the idle writer was quicker than its 0 s)
    assert (got["first"], svc.loop.pinned) == ("ok", 3) or \
        (got["first"].endswith("nothing changed") and svc.loop.pinned is None), got
    writer.stop()


# --- bench/gpu/loads.py: '@' engine states ----------------------------------------------------------------------------------
def _loads():
    sys.path.insert(0, str(ROOT / "bench/gpu"))
    import loads
    return loads


def test_ld3_a_daemon_state_written_with_a_space_after_the_colon_is_still_specctl(tmp_path):
    assert _loads().parse_configs(None, None, None, "nospec=30001; always=30000: @threshold pin 7 ;bandit=30000: ") == [
        ("nospec", None, 30001), ("always", "threshold pin 7", 30000), ("bandit", None, 30000)]


def test_ld4_a_specctl_command_refused_stops_the_run_saying_why(short_tmp):
    """A state that did not take (here a pin that is no integer) is not measured as if it had."""
    import argparse
    args = argparse.Namespace(socket=str(short_tmp / "none.sock"))
    with pytest.raises(SystemExit) as e:
        _loads().apply(args, "threshold pin x7")
    assert str(e.value).startswith("specctl threshold pin x7 refused: ") and "is not an integer" in str(e.value)


def test_mt1_mt3_each_scrape_marks_its_connection_finishing_once_its_answer_is_ready():
    """The mark that frees a scrape's slot before its hang-up reaches the server (on loopback the hang-up is quick:
    the reconnect test passes without it), seen on the server: one mark per scrape, for that scrape's connection."""
    from controller.daemon import metrics
    from tests.test_review_h119 import _Service
    httpd = metrics.start_metrics(_Service(), 0)
    marked: list = []
    real = httpd.finishing
    httpd.finishing = lambda request: (marked.append(request in httpd._served), real(request))
    try:
        assert [_metrics_status(httpd.server_address[1]) for _ in range(3)] == [200] * 3
    finally:
        httpd.stop()
    assert marked == [True] * 3


def test_ld7_commands_joined_by_and_are_run_one_by_one(short_tmp):
    """'policy set fixed && threshold pin 0': two specctl calls; the first refused stops there, named alone."""
    import argparse
    args = argparse.Namespace(socket=str(short_tmp / "none.sock"))
    with pytest.raises(SystemExit) as e:
        _loads().apply(args, "threshold pin x1 && threshold pin x2")
    assert str(e.value).startswith("specctl threshold pin x1 refused: ") and "x2" not in str(e.value)


# --- controller/daemon/clients.py: the mutants run after the pass (helper-122) ---------------------------------------
def test_cl7_a_connection_whose_answer_is_on_its_way_leaves_its_slot_to_the_next(monkeypatch):
    """A scrape marked finishing whose answer is not yet written (its thread held between the mark and the write,
    its client still connected) no longer counts: at a cap of 1 the next scraper is served, not sent a 503."""
    import socket
    import threading

    from controller.daemon import metrics
    from tests.test_review_h119 import _Service
    monkeypatch.setattr(metrics, "METRICS_CLIENTS", 1)
    httpd = metrics.start_metrics(_Service(), 0)
    port = httpd.server_address[1]
    marked, hold = threading.Event(), threading.Event()
    real, calls = httpd.finishing, []

    def finishing(request):
        real(request)
        calls.append(request)
        if len(calls) == 1:                    # the first scrape's answer held after its mark
            marked.set()
            hold.wait(30)
    httpd.finishing = finishing
    first = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        first.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert marked.wait(20)
        assert _metrics_status(port) == 200
        hold.set()
        line = first.recv(65536).split(b"\r\n")[0]
        assert line.startswith(b"HTTP/1.") and line.split()[1] == b"200", line
    finally:
        hold.set()
        first.close()
        httpd.stop()


class _FirstHeld:
    """The test_review_h119 service whose first /status waits (`entered` set) until `hold` is set; the rest at once."""

    def __init__(self):
        import threading

        from tests.test_review_h119 import _Service
        self.inner, self.entered, self.hold, self.calls = _Service(), threading.Event(), threading.Event(), 0
        self.engine = self.inner.engine

    def status(self):
        import threading
        self.calls += 1
        if self.calls == 1:
            self.thread = threading.current_thread()            # the connection's own thread
            self.entered.set()
            self.hold.wait(30)
        return self.inner.status()


def test_cl9_a_tcp_client_that_hung_up_while_its_scrape_is_made_leaves_its_slot(monkeypatch):
    """Over TCP a peer's close shows only as POLLRDHUP (no POLLHUP): a scraper that hung up while its answer was being
    made (not yet marked finishing) is gone at the cap of 1, and the next scraper is served, not sent a 503."""
    import socket

    from controller.daemon import metrics
    monkeypatch.setattr(metrics, "METRICS_CLIENTS", 1)
    service = _FirstHeld()
    httpd = metrics.start_metrics(service, 0)
    port = httpd.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as first:
            first.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert service.entered.wait(20)
        time.sleep(0.2)                             # (its hang-up reached the server; its thread still held)
        assert _metrics_status(port) == 200
    finally:
        service.hold.set()
        httpd.stop()


_FD0 = """
import os, socket, sys, time
sys.path.insert(0, sys.argv[1])
from controller.daemon import metrics
from tests.test_mutation_today_n import _FirstHeld, _metrics_status
metrics.METRICS_CLIENTS = 1
service = _FirstHeld()
httpd = metrics.start_metrics(service, 0)
port = httpd.server_address[1]
first = socket.socket()
os.close(0)                                   # a daemon started with its stdin closed: 0 is the next descriptor
first.connect(("127.0.0.1", port))
first.sendall(b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
assert service.entered.wait(20)
with httpd._served_lock:
    print("fds", sorted(conn.fileno() for conn in httpd._served))
first.close()
time.sleep(0.2)
print("status", _metrics_status(port))
service.hold.set()
httpd.stop()
"""


def test_cl11_a_connection_on_descriptor_0_that_hung_up_leaves_its_slot():
    """A daemon whose stdin is closed accepts a connection on descriptor 0: that one's hang-up is seen too."""
    res = subprocess.run([sys.executable, "-c", _FD0, str(ROOT)], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["fds [0]", "status 200"], res.stdout + res.stderr


def test_cl20_cl22_cl25_stop_lets_an_answer_being_made_be_written_and_its_thread_end(monkeypatch, caplog):
    """stop() while a scrape's answer is being made: the answer still reaches its client whole (the connection's
    reading side cut, not its writing one), stop returns once that thread has ended, and warns of none."""
    import logging
    import threading

    with _scrape_held() as (service, httpd, first):
        httpd.shutdown()                           # (serve_forever ended first: its up to 0.5 s poll not in the wait)
        threading.Timer(0.5, service.hold.set).start()          # the answer made once stop is under way
        with caplog.at_level(logging.WARNING, logger="spec_controller.api"):
            httpd.stop()
        assert not service.thread.is_alive()
        assert not [r for r in caplog.records if "still being answered" in r.getMessage()], caplog.text
        assert _ask_read(first) == 200


def _ask_read(s) -> int:
    from tests.test_review_h119 import _ask
    return _ask(s, b"")


@contextlib.contextmanager
def _scrape_held():
    """The metrics server with one scrape inside its service's read, held there until the service's hold is set (at
    the latest on the way out); -> (service, server, the scraper's connection)."""
    import socket

    from controller.daemon import metrics
    service = _FirstHeld()
    httpd = metrics.start_metrics(service, 0)
    first = socket.create_connection(("127.0.0.1", httpd.server_address[1]), timeout=30)
    try:
        first.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert service.entered.wait(20)
        yield service, httpd, first
    finally:
        service.hold.set()
        first.close()


def test_cl22_stop_warns_of_an_answer_not_made_within_its_wait(monkeypatch, caplog):
    import logging

    from controller.daemon import clients
    monkeypatch.setattr(clients, "STOP_WAIT_S", 0.5)
    with _scrape_held() as (_, httpd, _first):
        with caplog.at_level(logging.WARNING, logger="spec_controller.api"):
            httpd.stop()
        assert [r.getMessage() for r in caplog.records if "still being answered" in r.getMessage()] == [
            "metrics: 1 client still being answered at stop"], caplog.text


def test_cl18_stop_ends_a_connection_still_being_read_at_once(caplog):
    """A scraper connected and silent (its read deadline READ_TIMEOUT_S away, past STOP_WAIT_S): stop cuts its
    reading, its thread ends within stop's wait, with no warning."""
    import logging
    import socket

    from controller.daemon import clients, metrics
    assert metrics.READ_TIMEOUT_S > clients.STOP_WAIT_S
    httpd = metrics.start_metrics(_FirstHeld(), 0)
    silent = socket.create_connection(("127.0.0.1", httpd.server_address[1]), timeout=30)
    try:
        deadline = time.monotonic() + 20
        while not httpd._connection_threads and time.monotonic() < deadline:
            time.sleep(0.02)
        with httpd._served_lock:
            threads = list(httpd._connection_threads.values())
        assert len(threads) == 1
        with caplog.at_level(logging.WARNING, logger="spec_controller.api"):
            httpd.stop()
        assert not threads[0].is_alive()
        assert not [r for r in caplog.records if "still being answered" in r.getMessage()], caplog.text
    finally:
        silent.close()
