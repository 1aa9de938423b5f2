"""What must not be lost or ignored: a threshold SGLang refuses (updated: false) is an error that the
service counts and does not record as a decision; the writer's essential writes are queued whatever
the queue holds (never dropped like samples, never a wait for the caller)."""
from __future__ import annotations

import contextlib
import http.server
import json
import threading

import pytest

from controller.daemon.engines.base import EngineError
from controller.daemon.engines.sglang import SGLangEngine
from state import queries
from state.db import open_store
from state.writer import Writer
from tests.test_service import make_service


@contextlib.contextmanager
def post_server(answer_for):
    """A local HTTP server answering each POST with answer_for(path, headers, body) -> (status, JSON-able answer)."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, answer = answer_for(self.path, self.headers, body)
            out = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def set_state_server():
    """A local HTTP server standing for SGLang's POST /set_internal_state, answering a settable body."""
    answer = {"body": {"updated": True}}
    bodies = []

    def answer_for(path, headers, body):
        bodies.append(body)
        return (200 if path == "/set_internal_state" else 404), answer["body"]
    with post_server(answer_for) as port:
        yield SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": port}), answer, bodies


# SGLang 0.5.14 ... 0.5.23 answer one bool per DP rank: [true]; a dict {"updated": ...} is accepted too.
@pytest.mark.parametrize("body", [[True], [True, True], {"updated": True}])
def test_an_accepted_threshold_returns(set_state_server, body):
    eng, answer, bodies = set_state_server
    answer["body"] = body
    eng.set_threshold(7)
    assert bodies == [{"server_args": {"speculative_disable_batch_threshold": 7}}]


@pytest.mark.parametrize("body", [[False], [True, False], {"updated": False}, [], {}, None])
def test_a_refused_threshold_raises(set_state_server, body):
    eng, answer, _ = set_state_server
    answer["body"] = body
    with pytest.raises(EngineError, match="SGLang refused threshold 7"):
        eng.set_threshold(7)


def test_service_counts_a_refused_actuation_and_records_no_decision(tmp_path):
    svc, writer = make_service(tmp_path)

    def refuse(threshold):
        raise EngineError(f"SGLang refused threshold {threshold}")
    svc.engine.set_threshold = refuse
    svc.pin(3)                                       # the loop moves 0 -> 3; the engine refuses it
    assert svc.engine_errors == 1 and svc.decisions == 0 and svc.last_decision is None
    assert svc.status()["engine_errors"] == 1
    assert writer.flush(10)
    db = open_store(tmp_path / "s.db", readonly=True, check=False)
    assert queries.recent_decisions(db, 5) == []
    events = [(r["kind"], r["detail"]) for r in db["events"].rows]
    assert ("error", "set_threshold(3) failed: SGLang refused threshold 3") in events
    writer.stop()


def sglang_admin_optional(authorization: str | None, api_key: str | None, admin_api_key: str | None) -> bool:
    """SGLang's rule for /set_internal_state (AuthLevel.ADMIN_OPTIONAL, utils/auth.py decide_request_auth, 0.5.17 ...
    0.5.23): the admin key where one is set (the API key then refused), else the API key, else open."""
    expected = admin_api_key or api_key
    return expected is None or authorization == f"Bearer {expected}"


@pytest.mark.parametrize("keys,extra", [({}, []), ({"api_key": "sk-a"}, []), ({"admin_api_key": "adm"}, []),
                                        ({"api_key": "sk-a", "admin_api_key": "adm"}, []),
                                        ({"api_key": "sk-a"}, ["--api-key", "sk-a"]),
                                        ({"admin_api_key": "adm"}, ["--admin-api-key=adm"])])
def test_a_server_started_with_api_keys_accepts_the_daemons_threshold(keys, extra):
    """An operator's --api-key / --admin-api-key (kept by config from-launch) guards /set_internal_state: the
    daemon's request carries the key SGLang asks for, or every threshold would be refused with 401."""
    seen = []

    def answer_for(path, headers, body):
        seen.append(headers.get("Authorization"))
        ok = sglang_admin_optional(headers.get("Authorization"), keys.get("api_key"), keys.get("admin_api_key"))
        return (200, [True]) if ok else (401, {"error": "Unauthorized"})
    with post_server(answer_for) as port:
        given = {"extra_args": extra} if extra else keys     # in [sglang] or in its extra_args
        eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": port, **given})
        eng.set_threshold(5)
        assert len(seen) == 1
        if keys:                                        # the stand-in refuses what SGLang would: a wrong key
            wrong = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": port,
                                  **{k: "wrong" for k in keys}})
            with pytest.raises(EngineError, match="set_internal_state failed.*401.*SGLang refused the key the daemon sends"):
                wrong.set_threshold(5)


# --- the writer ------------------------------------------------------------------------------------
ESSENTIAL = {
    "decision": lambda w: w.decision(1.0, 0, 7, "ucb", "exploit", False),
    "setting": lambda w: w.setting("pinned", 3),
    "policy_state": lambda w: w.policy_state("ucb", {}, {"k": 1}),
    "event": lambda w: w.event("pin", "3"),
}


@pytest.mark.parametrize("kind", sorted(ESSENTIAL))
def test_essential_writes_are_queued_past_a_full_sample_queue(tmp_path, kind):
    w = Writer(open_store(tmp_path / "w.db"), maxsize=1)     # not started: nothing drains yet
    assert w.samples([(0.5, 2, 2, 5, 0.01, 1)])               # the queue is full now
    assert not w.samples([(0.6, 2, 2, 5, 0.01, 1)]) and w.dropped == 1     # samples: dropped, counted
    result = []
    producer = threading.Thread(target=lambda: result.append(ESSENTIAL[kind](w)))
    producer.start()
    producer.join(10)                                         # it returns at once: no caller waits here
    assert not producer.is_alive() and result == [True] and w.q.qsize() == 2
    assert not w.samples([(0.7, 2, 2, 5, 0.01, 1)]) and w.dropped == 2      # still full for samples
    w.start()
    assert w.flush(10) and w.dropped == 2 and w.errors == 0
    counts = {t: w.db[t].count for t in ("decisions", "settings", "policy_state", "events", "samples")}
    assert counts["samples"] == 1 and sum(counts.values()) == 2, counts
    w.stop()


def test_every_write_lands_in_its_columns(tmp_path):
    w = Writer(open_store(tmp_path / "c.db"))
    w.decision(1.5, 4, 9, "ucb", "exploit", True)
    w.policy_state("ucb", {"c": 1.2}, {"k": [1, 2]})
    w.event("start")
    w.call(lambda db: db.execute("INSERT INTO events (wall, kind, detail) VALUES (1, 'rollup', 'by call')"))
    w.start()
    assert w.flush(10)
    db = w.db
    assert [(r["t"], r["old"], r["new"], r["policy"], r["reason"], r["exploratory"]) for r in db["decisions"].rows] \
        == [(1.5, 4, 9, "ucb", "exploit", 1)]
    assert [(r["policy"], json.loads(r["params"]), json.loads(r["state"])) for r in db["policy_state"].rows] \
        == [("ucb", {"c": 1.2}, {"k": [1, 2]})]
    assert [(r["kind"], r["detail"]) for r in db["events"].rows] == [("start", ""), ("rollup", "by call")]
    assert all(r["wall"] > 0 for t in ("decisions", "policy_state", "events") for r in db[t].rows)
    w.stop()


def test_flush_gives_up_after_its_timeout_when_nothing_drains(tmp_path):
    w = Writer(open_store(tmp_path / "f.db"), maxsize=1)            # not started
    assert not w.flush(0.05)                                       # queued, never committed
    assert not w.flush(0.05)                                       # the queue is full: not even queued


def test_stop_gives_up_after_its_timeout_when_the_writer_is_stuck(tmp_path):
    w = Writer(open_store(tmp_path / "s.db"), maxsize=1).start()
    inside, release = threading.Event(), threading.Event()
    w.call(lambda db: (inside.set(), release.wait(30)))
    assert inside.wait(10)                                         # the writer thread is stuck in that call
    w.samples([(0.5, 2, 2, 5, 0.01, 1)])                           # and the queue is full
    w.stop(timeout=0.05)                                           # returns: neither the put nor the join waits on
    assert w._thread.is_alive()
    release.set()
    w.stop()                                                       # unstuck: now it stops
    assert not w._thread.is_alive()


def test_stop_commits_what_was_queued_and_ends_the_thread_cleanly(tmp_path, monkeypatch):
    crashed = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    w = Writer(open_store(tmp_path / "e.db")).start()
    w.event("stop")
    w.stop()
    assert not w._thread.is_alive() and crashed == []
    assert [r["kind"] for r in w.db["events"].rows] == ["stop"]


@pytest.mark.parametrize("message,kind", [
    ("database is locked", "locked"), ("database table is locked", "locked"), ("database is busy", "locked"),
    ("database or disk is full", "disk full"), ("attempt to write a readonly database", "read-only"),
    ("unable to open database file", "read-only"), ("disk I/O error", "I/O error"),
    ("database disk image is malformed", "corrupt"), ("file is not a database", "corrupt"),
    ("no such table: x", "error")])
def test_write_errors_are_classified_and_only_a_lock_is_retried(tmp_path, message, kind):
    import sqlite3

    from state.db import classify
    from state.writer import LOCKED_RETRIES
    assert classify(sqlite3.OperationalError(message)) == kind
    w = Writer(open_store(tmp_path / "e.db"))
    calls = []
    w._commit = lambda items: calls.append(len(items)) or sqlite3.OperationalError(message)
    w.decision(1.0, 0, 4, "ucb", "x", False)
    w.event("pin", "3")
    w.start()
    assert w.flush(10)
    w.stop()
    if kind == "locked":                          # the batch is kept and retried, then lost whole
        assert calls == [2] * LOCKED_RETRIES == [2] * 6 and w.errors == 2 and w.problem.startswith("database locked")
    elif kind == "error":                         # one bad write: the batch is retried one by one
        assert calls == [2, 1, 1] and w.errors == 2 and w.problem is None
    else:                                         # every write would fail alike: lost whole, no retry
        assert calls == [2] and w.errors == 2 and w.problem == f"database {kind}: {message}"
