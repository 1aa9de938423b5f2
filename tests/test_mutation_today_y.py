"""helper-165's mutation pass y over the parts changed since dc75f91 that pass x did not take
(bench/results/mutation-today-2026-12-07y.md): the control socket's slot cut (clients.Slot, DeadlineIO,
BoundedClients._room), telemetry's DropWatch, the stop's drain budget, state/room.py and the writer's use of it,
specctl stop's unflushed / queries.exit_of, config's ZERO_OR_AT_LEAST. A test for each surviving mutant that is not
equivalent, named by its id."""
from __future__ import annotations

import json
import socket
import time

import pytest

from controller.daemon import clients
from controller.daemon.clients import BoundedClients, Slot

HOUR = 3600.0


# --- the control socket's slot cut (controller/daemon/clients.py) -----------------------------------------------------
class _Cap(BoundedClients):
    """BoundedClients' bookkeeping alone (no server): the connections it serves are real unix sockets."""
    address_family = socket.AF_UNIX

    def __init__(self, cap: int):
        self.max_clients, self._served, self._peers = cap, {}, []

    def serve(self, since: float | None, cut: bool = False, finishing: bool = False) -> Slot:
        conn, peer = socket.socketpair()
        self._peers += [conn, peer]
        slot = self._served[conn] = Slot()
        slot.since, slot.cut, slot.finishing = since, cut, finishing
        return slot

    def close(self) -> None:
        for s in self._peers:
            s.close()


@pytest.fixture
def cap2(monkeypatch):
    monkeypatch.setattr(clients, "CUT_AFTER_S", 600.0)      # (a request just begun is far from it on any host)
    server = _Cap(2)
    yield server
    server.close()


def test_cut_newest_the_request_arriving_longest_gives_its_slot_not_the_one_just_begun(cap2):
    """cl-cut-newest: every test's holders began together; one an hour old beside one just begun: the old one is cut."""
    old, new = cap2.serve(time.monotonic() - HOUR), cap2.serve(time.monotonic())
    assert cap2._room() is True
    assert old.cut and not new.cut


def test_cut_counted_a_slot_cut_already_is_no_connection_counted_and_no_second_is_cut(cap2):
    """cl-cut-counted: a cut connection whose thread is still on its way out does not count toward the cap; counted, it
    made the next client cut a second request (here the one arriving longest), though a slot was free."""
    cap2.serve(time.monotonic() - 10.0, cut=True)
    other = cap2.serve(time.monotonic() - HOUR)
    assert cap2._room() is True
    assert not other.cut


def _unix(path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(str(path))
    return s


def test_cut_no_shutdown_a_cut_client_is_let_go_at_once_not_at_its_deadline(short_tmp, monkeypatch):
    """cl-cut-no-shutdown: the cut ends the cut connection's waiting read at once (its reading side shut). Without it, a
    kept-alive client marked cut kept its thread, descriptor and (toward the ceiling) its place until its 10 s deadline:
    here 600 s, so a connection not closed within the 60 s the test waits is one left to its deadline. (The holder's
    thread is waiting in its read when it is cut: its answer read, its next request begun; cut before that read, it
    would end at the read's own check of the cut.)"""
    from controller.cli.client import request
    from controller.daemon import api
    from controller.daemon.api import ControlServer
    from tests.test_review_h157 import _Service
    monkeypatch.setattr(api, "MAX_CLIENTS", 1)
    monkeypatch.setattr(clients, "CUT_AFTER_S", 0.0)
    server = ControlServer(short_tmp / "c.sock", _Service(), read_timeout_s=600)
    server.start()
    held = _unix(short_tmp / "c.sock")
    try:
        held.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"}"):                 # (its head and body: two writes)
            answer += held.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 ")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:               # (until its thread has begun its next request)
            with server.server._served_lock:
                if [slot.since is not None for slot in server.server._served.values()] == [True]:
                    break
            time.sleep(0.01)
        time.sleep(0.2)                                  # (and waits in its read; cut before it, the read ends too)
        assert request(short_tmp / "c.sock", "GET", "/status") == {"daemon": {"running": True}}
        assert held.recv(65536) == b""                   # closed unanswered, as at its deadline
    finally:
        held.close()
        server.stop()


def test_cut_unflagged_postcut_dropped_a_body_cut_short_by_the_cap_is_told_so_408(short_tmp, monkeypatch):
    """cl-cut-unflagged: a request whose body was still arriving when its slot went to another client is answered 408
    'request body not received within 1 s while the daemon served its most clients at once (its slot went to
    another)'. Unflagged, the cut (its reading side shut) read as the client's own end: 400 'request body of 8 bytes,
    shorter than its Content-Length 16', the client blamed (cl-postcut-dropped: the same, the read the cut
    ended taken for the client's). (The head is read whole first: the server's answer to
    'Expect: 100-continue' says so.)"""
    from controller.daemon import api
    from controller.daemon.api import ControlServer
    from tests.test_review_h157 import PIN, _Service
    monkeypatch.setattr(api, "MAX_CLIENTS", 1)
    monkeypatch.setattr(clients, "CUT_AFTER_S", 0.0)
    service = _Service()
    server = ControlServer(short_tmp / "c.sock", service, read_timeout_s=600)
    server.start()
    held = _unix(short_tmp / "c.sock")
    try:
        held.sendall(PIN.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n"))
        assert held.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n")
        held.sendall(b'{"thresh')
        time.sleep(0.2)             # (its thread waits in the read for the rest; cut before it: a 408 too)
        other = _unix(short_tmp / "c.sock")
        other.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := held.recv(65536):
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), answer
        assert json.loads(body) == {"error": f"request body not received within {clients.CUT_AFTER_S:g} s while the "
                                             "daemon served its most clients at once (its slot went to another)"}
        assert service.calls == []
        other.close()
    finally:
        held.close()
        server.stop()


def test_body_noop_a_body_is_not_counted_against_the_cap_on_the_head(short_tmp):
    """cl-body-noop: MAX_HEAD caps a request's line and headers; its body has its own cap (MAX_BODY, 64 KiB). A head of
    100 KiB and a body of 60 KiB, each under its cap, is a request: counted together, it was refused as headers over
    128 KiB."""
    from controller.daemon.api import ControlServer
    from controller.daemon.apicheck import MAX_BODY
    from controller.daemon.clients import MAX_HEAD
    from tests.test_review_h157 import _answer_to, _Service
    service = _Service()
    server = ControlServer(short_tmp / "c.sock", service, read_timeout_s=60)
    server.start()
    try:
        body = b'{"threshold": 5}' + b" " * (60 * 1024)
        pad = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 10000) for i in range(10))
        head = (b"POST /threshold/pin HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n" % len(body) + pad + b"\r\n")
        assert 96 * 1024 < len(head) < MAX_HEAD and len(body) <= MAX_BODY and len(head) + len(body) > MAX_HEAD + 16384
        answer = _answer_to(_unix(short_tmp / "c.sock"), head + body)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer[:200]
        assert json.loads(answer.partition(b"\r\n\r\n")[2]) == {"pinned": 5} and service.calls == [("pin", 5)]
    finally:
        server.stop()


# --- telemetry's cap on a message (controller/contract.py) ------------------------------------------------------------
def test_cap_1x_cap_samples_only_the_cap_is_twice_the_largest_message_as_the_api_says():
    """ct-cap-1x, ct-cap-samples-only: test_review_h157 checks that every message fits under the cap and that the cap is
    small; the margin for a later plugin's (twice the largest the codec makes: its stats of MAX_STATS_FIELDS counters,
    521 bytes) is what docs/api.md tells an operator reading bad_telemetry, 'the receiver's cap of 1,042 bytes'."""
    import re
    from pathlib import Path

    from controller import contract
    from tests.test_review_h157 import _largest_messages
    assert contract.MAX_TELEMETRY_MESSAGE == 2 * max(map(len, _largest_messages()))
    api = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()
    said = re.findall(r"over the receiver's cap of ([0-9,]+) bytes", api)
    assert said == [f"{contract.MAX_TELEMETRY_MESSAGE:,}"], said


# --- the stop's drain budget (controller/daemon/drain.py) -------------------------------------------------------------
def _drain_with(short_tmp, hung: set[str], flushed: bool = False, sched=None) -> tuple[dict, float]:
    """The daemon's drain where the parts in `hung` take every second they are given (on the drain's clock): 'retune',
    'engine' (SGLang's exit), 'ingest', 'flush' (returning `flushed`), 'writer' (its stop). -> (the timeout each was
    given, by name; the seconds the drain took on its clock). sched: the scheduler (else one that stops at once)."""
    from controller.daemon.lifecycle import Daemon
    from tests.fakes import make_service
    from tests.test_review_h114 import _Stops
    from tests.test_review_h157 import _Clock
    from tests.test_review_h162 import _Waits
    svc, writer = make_service(short_tmp)
    clock = _Clock()
    waits = _Waits(clock)

    def part(name: str, result=None):
        return waits.wait(name, result) if name in hung else (lambda *args, **kwargs: result)
    ingest = type("Ingest", (), {"join": staticmethod(part("ingest"))})()
    retune = type("Retune", (), {"stop": staticmethod(part("retune"))})()
    svc.engine.stop = part("engine")
    flush, stop = svc.writer.flush, svc.writer.stop
    if "flush" in hung:
        svc.writer.flush = part("flush", flushed)
    if "writer" in hung:
        svc.writer.stop = part("writer")
    daemon = Daemon(svc.cfg)
    daemon.stop_reason, daemon.monotonic = "SIGTERM", clock
    try:
        daemon._drain(svc.engine, svc, (_Stops(), sched or _Stops(), ingest, retune), svc.writer.db, _Stops())
    finally:
        svc.writer.flush, svc.writer.stop = flush, stop
        writer.stop()
    return waits.given, clock.t - 1000.0


def test_engine_keeps_writes_each_later_step_keeps_its_share_when_every_part_hangs(short_tmp):
    """dr-engine-keeps-writes, dr-ingest-keeps-sockets, dr-flush-keeps-nothing, dr-fold-10-to-0: the tests hung one part
    at a time (or SGLang's waits alone), where what is left covers every later step. With every part hung, each wait
    takes only what is left less what the later steps are promised: SGLang's exit 30 s after the retune's 30, the
    ingest's fold 10 s, the final flush 20 s, the sockets' stops the last 10 s of the 100 (the writer's stop, after a
    flush that failed, none)."""
    from controller.daemon.drain import STOP_BUDGET_S
    given, took = _drain_with(short_tmp, {"retune", "engine", "ingest", "flush", "writer"})
    assert given == {"retune": [30.0], "engine": [30.0], "ingest": [10.0], "flush": [20.0], "writer": [0.0]}, given
    assert took <= STOP_BUDGET_S - 10.0


def test_jobs_no_budget_the_scheduler_jobs_running_end_before_the_final_writes(short_tmp, monkeypatch):
    """dr-jobs-no-budget: the scheduler's running jobs (a checkpoint, retention, a health probe) are waited for, within
    the budget, before the final checkpoint and flush: not waited for, a job still writing raced the writer's stop."""
    order = []

    class Sched:
        def shutdown(self, wait: bool = True) -> None:
            time.sleep(0.5)                     # (a job finishing: the drain waits for it, up to 30 s)
            order.append("jobs done")
    from state.writer import Writer
    real = Writer.flush
    monkeypatch.setattr(Writer, "flush", lambda self, timeout=10.0: order.append("flush") or real(self, timeout))
    _drain_with(short_tmp, set(), sched=Sched())
    assert order[:2] == ["jobs done", "flush"], order


def test_lost_before_counted_writes_lost_before_the_stop_are_not_the_drains(short_tmp):
    """dr-lost-before-counted: a daemon whose writer lost writes earlier (a full disk an hour ago, said then) and whose
    drain stored everything exits 0 with 'flushed', its stop event 'exit 0': counted whole, every such stop exited 5."""
    import sqlite3

    from tests.fakes import make_service
    from tests.test_review_h114 import drained
    svc, writer = make_service(short_tmp)
    writer.errors = 3                           # (lost before the stop)
    daemon = drained(svc)
    assert daemon.exit_code == 0
    conn = sqlite3.connect(short_tmp / "s.db")
    assert [d for (d,) in conn.execute("SELECT detail FROM events WHERE kind = 'stop'")] == ["SIGTERM: exit 0"]
    conn.close()


def test_left_negative_what_is_left_of_a_budget_is_never_below_0():
    """dr-left-negative: a budget overrun (a wait that took longer than it was given) leaves 0 s to each later wait,
    not a negative timeout (subprocess's wait raises at once on one, a queue's get refuses it)."""
    from controller.daemon.drain import Budget
    t = [50.0]
    budget = Budget(10.0, lambda: t[0])
    assert budget.left() == 10.0 and budget.left(4.0) == 6.0 and budget.left(4.0, 2.0) == 2.0
    t[0] += 25.0
    assert budget.left() == 0.0 and budget.left(4.0) == 0.0 and budget.left(4.0, 2.0) == 0.0


# --- the room kept free on the database's disk (state/room.py) and the writer's use of it ----------------------------
def _statvfs(monkeypatch, avail_mb: float, free_mb: float) -> list:
    """os.statvfs reporting `avail_mb` MiB to this user (f_bavail) and `free_mb` MiB in all (f_bfree: the root-reserved
    blocks too); -> the paths it was asked about."""
    from types import SimpleNamespace

    from state.room import MIB
    asked = []

    def statvfs(path):
        asked.append(path)
        return SimpleNamespace(f_bavail=int(avail_mb * MIB) // 4096, f_bfree=int(free_mb * MIB) // 4096, f_frsize=4096)
    monkeypatch.setattr("os.statvfs", statvfs)
    return asked


def test_bfree_floor_whole_mb_short_le_the_floor_is_against_what_the_daemon_may_take(tmp_path, monkeypatch):
    """rm-bfree: the free space is what a user other than root may still take (df's Avail), not the blocks kept for root
    (5 % of an ext4 disk: the service's user meets a full disk with them free). rm-floor-whole-mb: a floor of 16.5 MiB
    is 16.5, not 16. rm-short-le: at the floor exactly, the floor is kept: not short."""
    from state.room import MIB, Room
    _statvfs(monkeypatch, avail_mb=16.25, free_mb=40.0)
    room = Room(tmp_path / "s.db", 16.5)
    assert room.short() == int(16.25 * MIB)
    assert room.problem().startswith(f"database disk nearly full: 16.2 MiB free in {tmp_path}, under the 16.5 MiB kept "
                                     "free ([storage] min_free_mb)"), room.problem()
    assert Room(tmp_path / "s.db", 16.25).short() is None


def test_no_cache_the_disk_is_asked_at_most_once_in_every_s(tmp_path, monkeypatch):
    """rm-no-cache: the writer asks for room before each batch of samples (hundreds a second); statvfs is called at most
    once in every_s, and again once that has passed."""
    from state.room import Room
    asked = _statvfs(monkeypatch, avail_mb=100.0, free_mb=100.0)
    room = Room(tmp_path / "s.db", 64.0, every_s=3600)
    assert [room.short(), room.short(), room.free()] == [None, None, 100 * 2 ** 20]
    assert asked == [str(tmp_path)]
    assert Room(tmp_path / "s.db", 64.0, every_s=0).free() and len(asked) == 2


def _rows(t0: float, n: int) -> list[tuple]:
    return [(t0 + i * 0.5, 4, 0, 4, 0.01, 1) for i in range(n)]


def test_budget_not_spent_groups_in_one_batch_share_the_freed_pages(short_tmp):
    """wr-budget-not-spent: under the floor, the samples of one batch go into the database's freed pages only as far
    as those hold them all: each group was measured against the whole of them, so two groups that fitted one at a time
    both went in and grew the file on a disk with no room."""
    from state.items import INSERTS
    from state.room import ROW_BYTES, freed_bytes
    from tests.fakes import make_service
    from tests.test_store_room import NO_ROOM_MB, _count, _held
    _, writer = make_service(short_tmp, min_free_mb=NO_ROOM_MB)
    writer.call(lambda db: db.conn.executemany(INSERTS["samples"], _rows(0.0, 4000)))
    writer.call(lambda db: db.execute("DELETE FROM samples"))
    assert writer.flush(10)
    fits = freed_bytes(writer.db) // ROW_BYTES
    half = fits // 2 + 1                       # one such group fits, two do not
    assert fits >= 4 and half <= fits < 2 * half
    release = _held(writer)
    writer.samples(_rows(100000.0, half))
    writer.samples(_rows(200000.0, half))      # (queued behind the first: one batch)
    release.set()
    assert writer.flush(10)
    assert (_count(writer, "t >= 100000"), writer.turned_away) == (half, half)
    writer.stop()


def test_fit_ge_a_group_that_fills_the_freed_pages_exactly_is_stored(short_tmp):
    """wr-fit-ge: samples that take exactly the room the freed pages hold are stored, not turned away."""
    from state.items import INSERTS
    from state.room import ROW_BYTES, freed_bytes
    from tests.fakes import make_service
    from tests.test_store_room import NO_ROOM_MB, _count
    _, writer = make_service(short_tmp, min_free_mb=NO_ROOM_MB)
    writer.call(lambda db: db.conn.executemany(INSERTS["samples"], _rows(0.0, 4000)))
    writer.call(lambda db: db.execute("DELETE FROM samples"))
    assert writer.flush(10)
    freed = freed_bytes(writer.db)
    assert freed % ROW_BYTES == 0 and freed > 0
    writer.samples(_rows(100000.0, freed // ROW_BYTES))
    assert writer.flush(10)
    assert (_count(writer, "t >= 100000"), writer.turned_away) == (freed // ROW_BYTES, 0)
    writer.stop()


def test_recovered_stays_short_no_reset_room_again_is_said_once_and_the_next_shortage_at_once(short_tmp, caplog):
    """wr-recovered-stays-short: 'room on disk again' is said once when room is back, not for every batch after it.
    wr-recovered-no-reset: a shortage after room came back is logged at once, not held back for the minute after the
    last shortage's line (the log said nothing of samples turned away again)."""
    import logging

    from state.db import open_store
    from state.room import Room
    from state.writer import Writer

    class _Room(Room):
        """Short of room while `short_by` is set (free bytes then), as the test says."""
        short_by: int | None = None

        def short(self) -> int | None:
            return self.short_by
    room = _Room()
    writer = Writer(open_store(short_tmp / "s.db"), room=room).start()
    caplog.set_level(logging.WARNING, logger="spec_controller.state")

    def batch(t0: float) -> list[str]:
        caplog.clear()
        writer.samples(_rows(t0, 10))
        assert writer.flush(10)
        return [r.getMessage().split(":")[1].strip() for r in caplog.records if r.name == "spec_controller.state"]
    room.short_by = 1024
    assert batch(100.0) == ["database disk nearly full"]
    room.short_by = None
    assert batch(200.0) == ["room on disk again"]
    assert batch(300.0) == []
    room.short_by = 1024
    assert batch(400.0) == ["database disk nearly full"]
    assert writer.turned_away == 20
    writer.stop()


# --- specctl stop's unflushed, queries.exit_of ------------------------------------------------------------------------
@pytest.mark.parametrize("detail,code", [
    ("SIGTERM: exit 5", 5), ("specctl stop: exit 0", 0), ("error: exit 1", 1),
    ("SIGTERM: exit \uff15", None),         # a fullwidth 5: str.isdigit's, int()'s 5, no exit code the drain writes
    ("SIGTERM: exit 5 (an older release's words)", None), ("SIGTERM", None), ("", None),
])
def test_no_ascii_no_digit_no_len_a_stop_events_words_are_read_as_the_drain_writes_them_or_not_at_all(detail, code):
    """eo-no-ascii, eo-no-digit (eo-no-len: killed by test_faults_cli): exit_of reads the database, another boundary:
    words the drain did not write (an older release's, another tool's) are no exit code, never a ValueError or
    IndexError out of specctl stop and status."""
    from state.queries import exit_of
    assert exit_of({"wall": 1.0, "detail": detail}) == code


def test_any_nonzero_a_daemon_that_stopped_with_an_error_left_no_writes_unstored(tmp_path):
    """uf-any-nonzero: only the drain's exit 5 (EXIT_UNFLUSHED) says the final writes were not all stored; a stop that
    ended with exit 1 (a condition the daemon could not go on under) stored them."""
    from controller.cli import stop as stop_mod
    from tests.test_stop_unflushed import START, _store
    assert stop_mod.unflushed(_store(tmp_path / "s.db", START, ("stop", "engine: exit 1")), 4242) is None


def test_catch_storeerror_only_a_database_sqlite_cannot_read_tells_nothing(tmp_path):
    """uf-catch-storeerror-only: the database the daemon leaves behind is read after its exit; one that cannot be read
    (another's garbage after a valid header, a directory, a damaged events table SQLite refuses to query) tells
    nothing: 'stopped', not a traceback."""
    import sqlite3

    from controller.cli import stop as stop_mod
    from tests.test_stop_unflushed import START, _store
    bad = tmp_path / "s.db"
    bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4080)
    assert stop_mod.unflushed(bad, 4242) is None
    (tmp_path / "dir.db").mkdir()
    assert stop_mod.unflushed(tmp_path / "dir.db", 4242) is None
    damaged = _store(tmp_path / "d.db", START, ("stop", "SIGTERM: exit 5"))     # its events table without its columns
    conn = sqlite3.connect(damaged)
    conn.executescript("DROP TABLE events; CREATE TABLE events (x)")
    conn.close()
    assert stop_mod.unflushed(damaged, 4242) is None


# --- config: min_free_mb's range; [sglang] speculative_num_steps' bound, MAX_SPEC_STEPS ------------------------------
def test_floor_upper_1e10_a_floor_past_1e9_mib_is_refused_as_the_range_says():
    """cf-floor-upper-1e10: the refusal of a floor under 16 says 'or 16 .. 1000000000': past that it is refused too (a
    petabyte kept free turns every sample away), one line."""
    from controller.daemon.config import ConfigError, load_config
    assert load_config(None, {"storage": {"min_free_mb": 1e9}})["storage"]["min_free_mb"] == 1e9
    with pytest.raises(ConfigError, match=r"^config: \[storage\] min_free_mb=2000000000 out of range \(allowed 0 .. "
                                          r"1000000000\)$"):
        load_config(None, {"storage": {"min_free_mb": 2e9}})


def test_steps_bound_63_none_sglangs_steps_run_up_to_max_spec_steps_the_saved_states_bound():
    """ss-steps-bound-63, ss-steps-bound-none: [sglang] speculative_num_steps takes 1 .. MAX_SPEC_STEPS (64), the bound
    a saved learner's max_steps is checked against: an engine run at 64 steps leaves states the next start loads, and
    65 is refused before anything is launched."""
    from controller.daemon.engines.base import EngineError
    from controller.daemon.engines.sglang import SGLangEngine
    from policies.types import MAX_SPEC_STEPS
    from tests.test_review_h157 import BASE
    assert SGLangEngine({**BASE, "speculative_num_steps": MAX_SPEC_STEPS}).k == MAX_SPEC_STEPS == 64
    with pytest.raises(EngineError, match=r"^sglang engine: \[sglang\] speculative_num_steps must be an integer in "
                                          r"1 .. 64, got 65$"):
        SGLangEngine({**BASE, "speculative_num_steps": MAX_SPEC_STEPS + 1})


def test_a_slot_picked_for_its_request_keeps_its_write_where_its_handler_began_one_since(cap2):
    """helper-169: the shutdown was chosen by reading Slot.writing again after the pick, so a request picked as the one
    arriving longest whose handler began writing its answer in between had the write cut too (a command applied, its
    acknowledgement lost). The slot below is that moment's state: picked by its request's age, writing just begun."""
    picked = cap2.serve(time.monotonic() - HOUR)
    picked.writing = time.monotonic()
    cap2.serve(time.monotonic())
    assert cap2._room() is True and picked.cut
    conn = next(c for c, s in cap2._served.items() if s is picked)
    peer = cap2._peers[cap2._peers.index(conn) + 1]
    conn.sendall(b"acknowledged")           # (SHUT_RDWR: BrokenPipeError)
    assert peer.recv(64) == b"acknowledged"
