"""Tests from the 2026-12-05h mutation pass (bench/results/mutation-today-2026-12-05h.md) over the lines changed
since 088cb3f in controller/, policies/ and state/: each kills a mutant that the suite let live."""
import http.client
import json
import os
import socket
import threading
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from controller import contract
from controller.cli.main import cli
from controller.daemon.config import ConfigError, load_config
from controller.daemon.engines.sglang import SGLangEngine
from controller.plugin import allocloop, fastoff, offgrammar, telemetry, warmsizes
from controller.plugin.instance import Plugin


def _one_answer(path, status: str, body: dict) -> threading.Thread:
    """A stand-in daemon on a unix socket that answers one request with status and a JSON body."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def serve():
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                data = json.dumps(body).encode()
                conn.sendall(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                             b"Connection: close\r\n\r\n%s" % (status.encode(), len(data), data))
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


# --- CL2: only a request refused as given (400) is a usage error -------------------------------------------------
@pytest.mark.parametrize("status, code", [("400 Bad Request", 2), ("503 Service Unavailable", 1),
                                          ("500 Internal Server Error", 1)])
def test_cl2_only_a_request_refused_as_given_exits_2(short_tmp, status, code):
    """A 503 (a change the database could not save: CommandRefused) or a 500 is the daemon's failure, exit 1; only a
    400 (the request refused as given) is a bad argument, exit 2 as the options' own checks."""
    server = _one_answer(short_tmp / "d.sock", status, {"error": "database or disk is full; nothing changed"})
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "d.sock"), "threshold", "pin", "5"])
    server.join(10)
    assert res.exit_code == code, (res.exit_code, res.output)
    assert "database or disk is full; nothing changed" in res.output


# --- Q1-Q3: the engine's largest batch at its newest start --------------------------------------------------------
def _started(db_path, *details):
    from state.db import open_store
    db = open_store(db_path)
    for i, detail in enumerate(details):
        db["events"].insert({"wall": 1000.0 + i, "kind": "start", "detail": detail})
    db.conn.close()


def _started_max_batch(db_path):
    from state import queries
    from state.db import open_store
    db = open_store(db_path, readonly=True)
    try:
        return queries.started_max_batch(db)
    finally:
        db.conn.close()


def test_q1_the_newest_start_says_the_engines_largest_batch(short_tmp):
    """A restart with another max_running_requests: the offline pin's note follows the newest start, not the first."""
    db = short_tmp / "s.db"
    _started(db, "engine=sim policy=bandit threshold=4 pinned=None pid=1 max_batch=64 socket=/tmp/a.sock",
             "engine=sim policy=bandit threshold=4 pinned=None pid=2 max_batch=16 socket=/tmp/a.sock")
    assert _started_max_batch(db) == 16
    base = ["--socket", str(short_tmp / "none.sock"), "--db", str(db)]
    res = CliRunner().invoke(cli, [*base, "threshold", "pin", "20"])
    assert res.exit_code == 0 and res.output.strip().endswith(
        "(above the engine's largest batch at its last start, 16: taken as 16 if it is so then)"), res.output
    again = CliRunner().invoke(cli, [*base, "threshold", "pin", "20"])     # (helper-142: the repeat dropped the note)
    assert again.exit_code == 0 and again.output.strip().endswith(
        "already pinned at 20 in " + str(db) + " (above the engine's largest batch at its last start, 16: taken as 16 "
        "if it is so then); nothing changed"), again.output


def test_q2_a_start_without_max_batch_whose_socket_path_holds_the_word_says_nothing(short_tmp):
    """A start from before max_batch was written: the socket, a path that may hold spaces, is the event's last word;
    a path holding ' max_batch=8 ' is not the engine's largest batch."""
    db = short_tmp / "s.db"
    _started(db, "engine=sim policy=bandit threshold=4 pinned=None pid=2 socket=/tmp/odd max_batch=8 dir/c.sock")
    assert _started_max_batch(db) is None
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), "threshold", "pin", "20"])
    assert res.exit_code == 0 and res.output.strip().endswith("applied at next start"), res.output


@pytest.mark.parametrize("word", ["max_batch=", "max_batch=big", "max_batch=-1"])
def test_q3_a_start_event_with_no_number_for_max_batch_is_no_crash(short_tmp, word):
    db = short_tmp / "s.db"
    _started(db, f"engine=sim policy=bandit threshold=4 pinned=None pid=2 {word} socket=/tmp/a.sock")
    assert _started_max_batch(db) is None
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), "threshold", "pin", "20"])
    assert res.exit_code == 0 and res.output.strip().endswith("applied at next start"), res.output


# --- CF1, CF3-CF7: [control] metrics_port on SGLang's port (12-05's tests, lost in 2d9455d, and more) --------------
@pytest.mark.parametrize("sglang, metrics", [({}, "127.0.0.1"), ({"port": 9100}, "127.0.0.1"),
                                             ({"port": 9100, "host": "0.0.0.0"}, "127.0.0.1"),
                                             ({"port": 9100}, "0.0.0.0"),
                                             ({"port": 9100, "host": "::"}, "127.0.0.1"),
                                             ({"port": 9100, "host": "::1"}, "::")])
def test_cf_a_metrics_port_sglang_serves_on_is_refused_before_anything_starts(sglang, metrics):
    """[control] metrics_port = SGLang's port passed the config and the preflight (nothing listens there yet), SGLang
    then took the port, and start_metrics failed after the engine had loaded: exit 1, restarted, loaded, failed, ...
    (The same port on the same address, or where either side is the wildcard, IPv4's or IPv6's.)"""
    port = sglang.get("port", 30000)
    with pytest.raises(ConfigError, match=f"metrics_port={port} is SGLang's port"):
        load_config(None, {"engine": {"kind": "sglang"}, "sglang": {"model_path": "/m", **sglang},
                           "control": {"metrics_port": port, "metrics_addr": metrics}})


def test_cf_a_metrics_port_beside_sglangs_on_another_address_or_engine_is_taken():
    load_config(None, {"engine": {"kind": "sglang"}, "sglang": {"model_path": "/m", "port": 9100, "host": "10.1.2.3"},
                       "control": {"metrics_port": 9100, "metrics_addr": "127.0.0.1"}})
    load_config(None, {"engine": {"kind": "sglang"}, "sglang": {"model_path": "/m", "port": 9100},
                       "control": {"metrics_port": 9101, "metrics_addr": "0.0.0.0"}})
    load_config(None, {"engine": {"kind": "sim"}, "control": {"metrics_port": 30000}})   # no SGLang: nothing to share


# --- CH1: a path nothing answers on is no running daemon, whatever connect says -----------------------------------
def test_ch1_a_socket_path_that_cannot_be_connected_is_no_running_daemon(short_tmp):
    from controller.daemon.sockprobe import LIVE, NOBODY, who_listens
    stale = short_tmp / "stale.ipc"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))                          # a crashed run's socket file: nothing listens
    assert who_listens(stale) == (NOBODY, None)                        # ECONNREFUSED
    assert who_listens(short_tmp / "gone.ipc") == (NOBODY, None)       # ENOENT (removed in between)
    assert who_listens(short_tmp / ("x" * 200)) == (NOBODY, None)     # a path too long for AF_UNIX
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:
        live.bind(str(short_tmp / "live.ipc"))
        live.listen(1)
        assert who_listens(short_tmp / "live.ipc") == (LIVE, os.getpid())


# --- SG5, SG9: an answer cut short, in the probe's words and while waiting for ready -------------------------------
def test_sg5_a_failed_probe_whose_error_says_nothing_is_named_by_its_kind(monkeypatch):
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})

    def cut(path, timeout):
        raise http.client.HTTPException()           # (str() of it is empty)
    monkeypatch.setattr(eng, "_get", cut)
    monkeypatch.setattr(eng, "proc", SimpleNamespace(poll=lambda: None, returncode=None))
    assert eng.probe(now=100.0) is False and eng.probe(now=130.0) is False
    detail = eng.health()["detail"]
    assert "(last: HTTPException;" in detail, detail


def test_sg9_a_health_answer_cut_short_while_starting_is_waited_past(monkeypatch):
    """wait_ready: an SGLang whose first /health answer is cut short (a bad status line) is asked again; the
    HTTPException escaped lifecycle's wait before."""
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    answers = [http.client.BadStatusLine("NOT HTTP"), http.client.IncompleteRead(b"sh", 10), (200, b"")]

    def get(path, timeout):
        got = answers.pop(0)
        if isinstance(got, Exception):
            raise got
        return got
    monkeypatch.setattr(eng, "_get", get)
    monkeypatch.setattr(eng, "proc", SimpleNamespace(poll=lambda: None, returncode=None))
    cancel = threading.Event()
    monkeypatch.setattr(cancel, "wait", lambda s: False)       # (no second between the tries)
    assert eng.wait_ready(30.0, cancel) is True and answers == []


# --- AL1, IN2, IN3: every on-by-default switch reads the operator's words, each its own ---------------------------
@pytest.mark.parametrize("word", ["false", "Off", " no "])
def test_al1_the_alloc_loop_hook_is_off_for_the_words_an_operator_writes(word):
    assert allocloop.wanted({}, allocloop.RELEASES[0]) is True
    assert allocloop.wanted({allocloop.ENV: word}, allocloop.RELEASES[0]) is False


@pytest.mark.parametrize("word, runs", [("off", False), ("False", False), ("on", True)])
def test_in2_the_start_up_warm_up_is_off_for_the_words_an_operator_writes(monkeypatch, word, runs):
    monkeypatch.setattr(fastoff, "build", lambda *a, **k: None)
    monkeypatch.setattr(warmsizes, "unsupported_reason", lambda: None)
    got = []
    monkeypatch.setattr(warmsizes, "warm", lambda worker, max_bs: got.append(max_bs) or 1)
    plug = Plugin({warmsizes.ENV: word})
    plug.after_init_cuda_graphs(None, SimpleNamespace(server_args=SimpleNamespace(max_running_requests=48)))
    assert got == ([48] if runs else [])


def test_in3_each_switch_is_read_from_its_own_variable():
    """The graph writer, the side stream, the lean prefill and the grammar path each follow their own variable."""
    graph_off = Plugin({contract.ENV_DRAFT_KV_GRAPH: "false"}).off_path
    assert not graph_off.want_kv_graph and graph_off.draft_kv
    kv_off = Plugin({contract.ENV_DRAFT_KV: "false"}).off_path
    assert kv_off.want_kv_graph and not kv_off.draft_kv
    off = Plugin({contract.ENV_DRAFT_KV_SIDE: "off", contract.ENV_LEAN_PREFILL: "no", offgrammar.ENV: "FALSE"}).off_path
    assert not off.kv_side and not off.lean_prefill and not off.fast_grammar and off.want_kv_graph and off.draft_kv
    on = Plugin({}).off_path
    assert on.kv_side and on.lean_prefill and on.fast_grammar and on.want_kv_graph and on.draft_kv


# --- TE1: a telemetry socket that cannot connect is closed, not left to the GC -------------------------------------
def test_te1_a_push_socket_whose_connect_fails_is_closed(monkeypatch):
    import zmq
    made = []

    class Sock:
        closed = None

        def setsockopt(self, *a):
            pass

        def connect(self, address):
            raise zmq.ZMQError(zmq.EPROTONOSUPPORT)

        def close(self, linger=None):
            self.closed = linger
    monkeypatch.setattr(zmq.Context, "instance", classmethod(lambda cls: SimpleNamespace(
        socket=lambda kind: made.append(Sock()) or made[-1])))
    with pytest.raises(zmq.ZMQError):
        telemetry.connect_push("nonsense://x")
    assert len(made) == 1 and made[0].closed == 0


# --- a product bug found beside CF3: an SGLang host written as a name -----------------------------------------------
@pytest.mark.parametrize("host", ["localhost", "LocalHost"])
def test_a_metrics_port_on_the_address_sglangs_host_name_binds_is_refused(host):
    """[sglang] host = "localhost" (as `--host localhost` in a launch command reads): SGLang's server binds the name's
    address, 127.0.0.1, so [control] metrics_port on that port and 127.0.0.1 fails only after the engine has loaded,
    exit 1, restarted, for ever (the failure the check was written for); the names were compared as text."""
    with pytest.raises(ConfigError, match="metrics_port=9100 is SGLang's port"):
        load_config(None, {"engine": {"kind": "sglang"}, "sglang": {"model_path": "/m", "port": 9100, "host": host},
                           "control": {"metrics_port": 9100, "metrics_addr": "127.0.0.1"}})
    load_config(None, {"engine": {"kind": "sglang"}, "sglang": {"model_path": "/m", "port": 9100, "host": host},
                       "control": {"metrics_port": 9101, "metrics_addr": "127.0.0.1"}})
