"""helper-173's mutation pass z over the lines changed since 9b36d41 (bench/results/mutation-today-2026-12-07z.md):
intake's Undecodable.lossy, the engine stop's DropWatch.connected, setpairs, numtext (trimmed, not_a_number, shown),
clients.Slot.writing, migrations.V1_COLUMNS and db.NotOurs, specctl's client (ANSWERS, MAX_HEAD), paths.denied_step,
queries.unstopped_run, configdiff.given_causes and Room.set_floor. A test for each surviving mutant that is not
equivalent, named by its id. No wall-clock timing: clocks are given."""
from __future__ import annotations

import pytest

from controller.daemon.intake import LOSSY_LEAST, LOSSY_WINDOW_S, Undecodable


# --- controller/daemon/intake.py: Undecodable.lossy -------------------------------------------------------------------
def _window(u: Undecodable, clock: list[float], start: float, refused: int, decoded: int) -> None:
    """refused and decoded messages one second apart from `start` (fewer than LOSSY_WINDOW_S of them)."""
    for i in range(refused + decoded):
        clock[0] = start + i
        if i < refused:
            u.refused(None, "over the cap")
        else:
            u.samples_came()


def test_least_le_exactly_the_fewest_refused_messages_make_the_problem():
    # mutant in-least-le: `counts[0] < LOSSY_LEAST` -> `<=`: LOSSY_LEAST refused against none decoded said nothing
    clock = [0.0]
    u = Undecodable(monotonic=lambda: clock[0])
    _window(u, clock, 0.0, LOSSY_LEAST, 0)
    clock[0] = LOSSY_WINDOW_S + 1
    assert u.lossy() is not None and f"{LOSSY_LEAST} messages refused" in u.lossy()
    clock[0] = 0.0
    few = Undecodable(monotonic=lambda: clock[0])
    _window(few, clock, 0.0, LOSSY_LEAST - 1, 0)
    clock[0] = LOSSY_WINDOW_S + 1
    assert few.lossy() is None


def test_tie_lossy_as_many_refused_as_decoded_is_no_problem():
    # mutant in-tie-lossy: `counts[0] <= counts[1]` -> `<`: refused only equal to the decoded was called 'most lost'
    clock = [0.0]
    u = Undecodable(monotonic=lambda: clock[0])
    _window(u, clock, 0.0, LOSSY_LEAST, LOSSY_LEAST)
    clock[0] = LOSSY_WINDOW_S + 1
    assert u.lossy() is None
    u.refused(None, "over the cap")     # (a new window begins: the last whole one, the tie, still speaks)
    assert u.lossy() is None


def test_last_stale_kept_a_window_that_ended_two_windows_before_the_next_message_is_no_current_figure():
    # mutant in-last-stale-kept: `self._last = (r, d) if now - start < 2 * LOSSY_WINDOW_S else None` -> `(r, d)`: a
    # burst of refusals long ago was reported as the last window's once one sample message came again
    clock = [0.0]
    u = Undecodable(monotonic=lambda: clock[0])
    _window(u, clock, 0.0, 3 * LOSSY_LEAST, 0)
    clock[0] = 2 * LOSSY_WINDOW_S + 5         # nothing for two windows, then one sample message
    u.samples_came()
    clock[0] += 1
    assert u.lossy() is None
    clock[0] = 0.0
    fresh = Undecodable(monotonic=lambda: clock[0])   # (the same burst, the next message within two windows: said)
    _window(fresh, clock, 0.0, 3 * LOSSY_LEAST, 0)
    clock[0] = 2 * LOSSY_WINDOW_S - 5
    fresh.samples_came()
    clock[0] += 1
    assert fresh.lossy() is not None and f"{3 * LOSSY_LEAST} messages refused (over the size cap or undecodable) against 0 decoded" in fresh.lossy()


def test_tick_no_reset_each_window_counts_its_own_messages_only():
    # mutant in-tick-no-reset: the new window kept the old one's counts: a burst once was added to every window after
    clock = [0.0]
    u = Undecodable(monotonic=lambda: clock[0])
    _window(u, clock, 0.0, 3 * LOSSY_LEAST, 0)              # a lossy window ...
    _window(u, clock, LOSSY_WINDOW_S + 1, 2, 2 * LOSSY_LEAST)  # ... then a healthy one: 2 refused, 20 decoded
    clock[0] = 2 * LOSSY_WINDOW_S + 5                        # the healthy one whole, nothing after it
    assert u.lossy() is None


def test_stale_current_kept_a_lossy_window_followed_by_a_whole_window_of_nothing_is_no_current_figure():
    # mutant in-stale-current-kept: `(r, d) if age < 2 * LOSSY_WINDOW_S else None` -> `(r, d)`: an engine silent for
    # minutes after a burst of refusals was still said to lose most samples 'in the last 60 s'
    clock = [0.0]
    u = Undecodable(monotonic=lambda: clock[0])
    _window(u, clock, 0.0, 3 * LOSSY_LEAST, 0)
    clock[0] = 2 * LOSSY_WINDOW_S - 1
    assert u.lossy() is not None                # (the window whole, nothing after it yet: said)
    clock[0] = 2 * LOSSY_WINDOW_S + 1
    assert u.lossy() is None


def test_window_30_the_window_is_a_minute_and_ten_refusals_as_the_changelog_says():
    # mutant in-window-30: LOSSY_WINDOW_S 60 -> 30 (the other tests take the constant as it is); CHANGELOG: 'over a
    # minute (10 at least) ... in the last 60 s'
    clock = [0.0]
    u = Undecodable(monotonic=lambda: clock[0])
    _window(u, clock, 0.0, 10, 0)
    clock[0] = 61.0
    assert u.lossy() is not None and u.lossy().startswith(
        "telemetry: 10 messages refused (over the size cap or undecodable) against 0 decoded in the last 60 s: ")


# --- controller/daemon/engines/child.py: DropWatch.connected (the engine stop reads until the sender has gone) --------
def _events_until(drops, done) -> None:
    """Read the monitor's events until done(drops) (a deadline of 30 s only against a hang: no timing asserted)."""
    import time
    deadline = time.monotonic() + 30
    while not done(drops) and time.monotonic() < deadline:
        if drops.monitor.poll(100):
            drops.dropped()
    assert done(drops), (drops.passed, drops.failed, drops.gone)


def test_conn_no_failed_a_probe_that_hung_up_is_no_sender_that_has_gone(short_tmp):
    # mutant dw-conn-no-failed: `max(0, self.gone - self.failed)` -> `max(0, self.gone)`: another daemon's start probing
    # the telemetry socket (a failed handshake, then its disconnect) made the live sender count as gone, and a stop
    # read only until the first quiet: the drain's last samples lost
    import zmq

    from controller.contract import pack_sample
    from controller.daemon.engines.child import DropWatch
    from controller.daemon.sockprobe import LIVE, who_listens
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"ipc://{short_tmp}/t.ipc")
    drops = DropWatch(pull)
    push = ctx.socket(zmq.PUSH)
    try:
        push.connect(f"ipc://{short_tmp}/t.ipc")
        push.send(pack_sample(1.0, 4, 0, 4, 0.01, True))
        assert pull.poll(30_000) and pull.recv()
        _events_until(drops, lambda d: d.passed == 1)
        for _ in range(2):
            assert who_listens(short_tmp / "t.ipc")[0] == LIVE
        _events_until(drops, lambda d: d.failed == 2 and d.gone == 2)
        assert drops.connected() == 1
        push.close(linger=0)                  # the sender's exit: a disconnect no handshake follows
        _events_until(drops, lambda d: d.gone == 3)
        assert drops.connected() == 0
    finally:
        push.close(linger=0)
        drops.close()
        pull.close(linger=0)


def test_conn_clamps_a_failed_handshake_read_before_its_disconnect_is_no_sender(short_tmp):
    # mutants dw-conn-inner-unclamped / dw-conn-outer-unclamped, at the counts alone: a probe's failed handshake read
    # before its disconnect (events come one by one) is no connected sender, nor is a disconnect no handshake preceded
    import zmq

    from controller.daemon.engines.child import DropWatch
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(f"ipc://{short_tmp}/t.ipc")
    drops = DropWatch(pull)
    try:
        for passed, failed, gone, up in ((0, 1, 0, 0), (1, 1, 0, 1), (1, 1, 1, 1), (1, 1, 2, 0), (0, 0, 1, 0)):
            drops.passed, drops.failed, drops.gone = passed, failed, gone
            assert drops.connected() == up, (passed, failed, gone)
    finally:
        drops.close()
        pull.close(linger=0)


# --- controller/daemon/setpairs.py: --set SECTION.KEY=VALUE -----------------------------------------------------------
@pytest.mark.parametrize("pair", ["policy.params.c.d=1", "sim.=3", ".speed=3", "policy..c=1", "sim.speed"])
def test_len_4_empty_key_a_pair_not_section_key_value_is_refused_as_such(pair):
    # mutants sp-len-4 (`len(keys) not in (2, 3)` -> `(2, 3, 4)`) and sp-empty-key (`or not all(keys)` dropped): a
    # fourth key was set as the third's ({'policy': {'d': 1}}), an empty key as '' ({'sim': {'': 3}}), each refused
    # later, if at all, as something else
    from controller.daemon.config import ConfigError
    from controller.daemon.setpairs import parse_set
    with pytest.raises(ConfigError) as e:
        parse_set([pair])
    assert str(e.value) == f"--set {pair!r}: expected SECTION.KEY=VALUE (e.g. guard.explore_share=0.1)"


def test_int_as_decimal_an_integer_past_64_bits_stays_an_integer_refused_as_out_of_range():
    # mutant sp-int-as-decimal: `number = decimal_text(raw) if number is None else number` -> `decimal_text(raw)`: an
    # integer TOML does not hold (past 64 bits) was read as a float, and refused as 'must be an integer'
    from controller.daemon.config import ConfigError, load_config
    from controller.daemon.setpairs import parse_set
    big = 10 ** 20
    assert parse_set([f"sim.seed={big}"]) == {"sim": {"seed": big}}
    assert type(parse_set([f"sim.seed={big}"])["sim"]["seed"]) is int
    with pytest.raises(ConfigError, match=r"^config: \[sim\] seed=100000000000000000000 out of range \(allowed 0 \.\. "):
        load_config(None, parse_set([f"sim.seed={big}"]))


# --- controller/numtext.py: not_a_number, trimmed, shown ----------------------------------------------------------------
def _refusal(*pairs: str) -> str:
    from controller.daemon.config import ConfigError, load_config
    from controller.daemon.setpairs import parse_set
    with pytest.raises(ConfigError) as e:
        load_config(None, parse_set(list(pairs)))
    return str(e.value)


def test_no_misread_rule_text_int_reads_and_the_rule_does_not_is_told_the_rule():
    # mutant nt-no-misread-rule: `why + (f" ({written(kind)})" if misread(raw) else "")` -> `why`: `--set
    # sim.concurrency=+5` was told 'must be an integer' and not how one is written
    from controller.numtext import not_a_number, written
    assert not_a_number("concurrency", "+5", int) == f"must be an integer ({written(int)})"
    assert _refusal("sim.concurrency=+5") == f"config: [sim] concurrency='+5' must be an integer ({written(int)})"
    assert not_a_number("concurrency", "many", int) == "must be an integer"     # (no number at all: no rule)


def test_unq_inf_a_quoted_number_past_a_floats_range_is_not_told_to_be_written_unquoted():
    # mutant nt-unq-inf: `not math.isfinite(number) or` dropped: '"1e999"' was told 'write it unquoted (arrival_rate =
    # inf)', TOML's inf, which is refused in its turn; for an integer setting int(inf) raised OverflowError, a traceback
    assert _refusal('sim.arrival_rate="1e999"') == "config: [sim] arrival_rate='1e999' must be a number"
    assert _refusal('guard.min_threshold="1e999"') == "config: [guard] setting min_threshold='1e999' must be an integer"


def test_shown_depth_ignored_a_value_nested_past_eight_levels_is_cut_not_spelled_as_python():
    # mutant nt-shown-depth-ignored (`if depth and isinstance(...)` -> `if isinstance(...)`) survived, and showed a
    # defect: past its 8 levels shown() fell back to repr(), Python's spelling (None, True) of what the client wrote as
    # null / true; now cut with '...' there, as a list past 20 items is
    from controller.numtext import shown
    from policies import PolicyError, make_policy
    assert shown({"c": [[[[[[[None]]]]]]]}) == "{'c': [[[[[[[null]]]]]]]}"      # (8 levels: spelled whole)
    assert shown({"c": [[[[[[[[[None]]]]]]]]]}) == "{'c': [[[[[[[[...]]]]]]]]}"
    assert shown([[[[[[[[[True, {"k": None}]]]]]]]]]) == "[[[[[[[[[...]]]]]]]]]"
    with pytest.raises(PolicyError) as e:
        make_policy("ucb", {"c": [[[[[[[[[None]]]]]]]]]})
    assert "None" not in str(e.value) and "c=[[[[[[[[[...]]]]]]]]] is not a number" in str(e.value)


def test_shown_list_19_more_ge_twenty_items_are_shown_whole_and_the_21st_is_the_ellipsis():
    # mutants nt-shown-list-19 (`value[:20]` -> `value[:19]`: an item of twenty lost without the '...') and
    # nt-shown-list-more-ge (`len(value) > 20` -> `>= 20`: '...' after a list shown whole); the cut of echoed() (80
    # characters) is left out of it by items of one character
    from controller.numtext import _spelled
    assert _spelled([1] * 20, 8) == "[" + ", ".join(["1"] * 20) + "]"
    assert _spelled([1] * 21, 8) == "[" + ", ".join(["1"] * 20) + ", ...]"
    assert _spelled({str(i): 1 for i in range(20)}, 8).endswith("'19': 1}")
    assert _spelled({str(i): 1 for i in range(21)}, 8).endswith("'19': 1, ...}")


# --- controller/daemon/clients.py: Slot.writing (an answer its client does not read gives its slot up) -----------------
def test_writing_rd_an_answer_cut_for_taking_too_long_has_its_write_ended_too(monkeypatch):
    # mutant cl-writing-rd: `(slot.writing, socket.SHUT_RDWR)` -> `(slot.writing, socket.SHUT_RD)`: the slot was given
    # to the next client but the cut answer's thread stayed blocked in its write until its deadline (10 s); shut both
    # ways, the write ends at once (the client sees the end of the stream); a request cut while arriving keeps its
    # writing side (its answer, 408, may still be written)
    import socket
    import time

    from controller.daemon import clients
    from tests.test_mutation_today_y import HOUR, _Cap
    monkeypatch.setattr(clients, "CUT_AFTER_S", 600.0)
    for writing, ended in ((True, True), (False, False)):
        cap = _Cap(1)
        try:
            slot = cap.serve(None if writing else time.monotonic() - HOUR)
            slot.writing = time.monotonic() - HOUR if writing else None
            conn, peer = cap._peers
            assert cap._room() is True and slot.cut
            peer.setblocking(False)
            if ended:
                assert peer.recv(1) == b""                   # (its writing side shut: the end of the stream)
                with pytest.raises(OSError):
                    conn.sendall(b"x" * 65536)
            else:
                with pytest.raises(BlockingIOError):
                    peer.recv(1)
                conn.sendall(b"408")
                assert peer.recv(3) == b"408"
        finally:
            cap.close()


# --- controller/cli/client.py: ANSWERS (an answer that is not a spec-controller daemon's) -----------------------------
@pytest.mark.parametrize("path, body, why", [
    ("/history?limit=3", b'[{"wall": 1, "old": 2, "new": 3, "policy": "x"}]', "lacks 'reason'"),
    ("/history?limit=3", b'{"wall": 1}', "is not a JSON list"),
    ("/stop", b'{"stopped": true}', "lacks 'stopping'"),
    ("/policies", b'[{"name": "x"}]', "lacks 'params'"),
])
def test_answer_shapes_each_endpoints_keys_are_asked_of_every_answer(short_tmp, path, body, why):
    # mutants cli-answer-history-short (/history's keys cut to 'wall'), cli-answer-query-kept (`ANSWERS.get(path...`:
    # /history?limit=N looked up with its query, so never checked), cli-answer-stop-dropped (/stop unchecked): an
    # answer of another shape went on into specctl's formatting, a traceback there (KeyError)
    from controller.cli.client import DaemonError, request
    from tests.test_review_h166 import _foreign_http
    sock = short_tmp / "other.sock"
    listener = _foreign_http(sock, "200 OK", body)
    try:
        with pytest.raises(DaemonError) as e:
            request(sock, "POST" if path == "/stop" else "GET", path, {} if path == "/stop" else None)
    finally:
        listener.close()
    assert str(e.value).startswith(f"the program on {sock} is not a spec-controller daemon")
    assert str(e.value).endswith(why)


# --- controller/daemon/configdiff.py: given_causes ----------------------------------------------------------------------
def test_given_causes_a_dotted_key_and_the_overrides_left_whole():
    # mutants cd-walk-one (`for key in without[:-1]` -> `without[:1]`: policy.params.scale looked for in [policy], not
    # in its params, so never named), cd-pop-first (`table.pop(without[-1])` -> `without[0]`: nothing taken away, no
    # cause named) and cd-shallow-copy (`copy.deepcopy` -> `copy.copy`: each trial took its key out of the command
    # line's own overrides, and the next trials, and then the caller, ran without it)
    import copy

    from controller.daemon.config import ConfigError, load_config
    from controller.daemon.configdiff import given_causes
    from controller.daemon.setpairs import parse_set, set_keys
    pairs = ['policy.name="ucb"', "policy.params.c=1000", "policy.params.scale=1", "sim.seed=2"]
    overrides = parse_set(pairs)
    before = copy.deepcopy(overrides)
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert "unknown parameter 'scale'" in str(e.value)
    given = [(f"--set {p}", set_keys(p)) for p in pairs]
    assert given_causes(str(e.value), None, overrides, given) == ['--set policy.name="ucb"', "--set policy.params.scale=1"]
    assert overrides == before


def test_writing_kept_a_command_on_a_kept_alive_connection_keeps_its_slot_after_an_earlier_answer(short_tmp, monkeypatch):
    # mutant api-writing-kept (`finally: slot.writing = None` -> `pass`): an answer written whole left its time on the
    # slot, and the same connection's next command, still being worked on, was taken for an answer its client did not
    # read: at the cap its slot went to the next client and its answer was never written
    from controller.daemon import api, clients
    from controller.daemon.api import ControlServer
    from tests.test_review_h157 import _Service, _unix
    monkeypatch.setattr(api, "MAX_CLIENTS", 1)
    monkeypatch.setattr(clients, "CUT_AFTER_S", 0.0)
    import threading

    class Service(_Service):
        entered = threading.Event()

        def status(self):
            self.entered.set()          # (the second request read whole: its command is being worked on)
            return super().status()
    service = Service()
    server = ControlServer(short_tmp / "c.sock", service, read_timeout_s=60)
    server.start()
    busy = _unix(short_tmp / "c.sock")
    try:
        busy.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"}"):                 # (its head and body: two writes)
            answer += busy.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200 ")
        service.hold.clear()
        busy.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        assert service.entered.wait(30)
        other = _unix(short_tmp / "c.sock")
        assert other.recv(65536).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        other.close()
        service.hold.set()
        assert busy.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
    finally:
        service.hold.set()
        busy.close()
        server.stop()


# --- state/db.py: a table of ours without its columns (migrations.V1_COLUMNS) -------------------------------------------
def test_columns_plural_ge_a_table_lacking_one_column_names_it_in_the_singular(short_tmp):
    # mutant db-columns-plural-ge (`'s' if len(lacks) > 1` -> `>= 1`): one column lacking read 'lacks the columns reason'
    import sqlite3

    from state.db import NotOurs, open_store
    db = short_tmp / "d.db"
    open_store(db).conn.close()
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE decisions DROP COLUMN reason")
    conn.commit()
    conn.close()
    with pytest.raises(NotOurs) as e:
        open_store(db, readonly=True)
    assert str(e.value) == (f"{db} is not a spec-controller database, or a damaged one: its table decisions lacks the "
                            "column reason; refusing it")


def test_noschema_storeerror_a_damaged_sqlite_file_never_migrated_is_not_ours(short_tmp):
    # mutant db-noschema-storeerror: _damaged's 'an SQLite file without its schema' raised as StoreError, not NotOurs:
    # the daemon's start exited 1 (the unit restarted it every 5 s for good), not 2, as for the other files not ours
    from state.db import SQLITE_MAGIC, NotOurs, open_store
    db = short_tmp / "d.db"
    db.write_bytes(SQLITE_MAGIC + bytes(84) + b"\xa5" * 4000)     # (SQLite's header, user_version 0, then no pages)
    for readonly in (False, True):
        with pytest.raises(NotOurs, match="an SQLite file without its schema"):
            open_store(db, readonly=readonly)


def test_create_exists_dropped_a_file_there_that_refuses_is_not_said_to_be_uncreatable(short_tmp):
    # mutant db-create-exists-dropped (`and not os.path.lexists(path)` dropped): a lock file or database there that
    # this user may not open was said to be one that 'cannot be created in' its folder
    import os

    from state.db import StoreError, open_nofollow
    os.chmod(short_tmp, 0o755)
    lock = short_tmp / "d.db.lock"
    lock.write_text("")
    os.chmod(lock, 0)
    root = os.geteuid() == 0
    if root:            # (root passes any mode: the file stays root's and the test acts as nobody)
        os.setegid(65534)
        os.seteuid(65534)
    try:
        with pytest.raises(StoreError) as e:
            open_nofollow(lock, os.O_RDWR | os.O_CREAT, "lock file")
    finally:
        if root:
            os.seteuid(0)
            os.setegid(0)
    assert str(e.value) == f"lock file {lock}: Permission denied"


def test_create_no_creat_a_read_refused_by_its_folder_is_not_said_to_be_a_create(short_tmp):
    # mutant db-create-no-creat (`flags & os.O_CREAT and` dropped): a read-only open (specctl's) of a database whose
    # folder this user may not pass was told the database 'cannot be created in' that folder: it was not being created
    import os

    from state.db import StoreError, open_nofollow
    os.chmod(short_tmp, 0o755)
    folder = short_tmp / "state"
    folder.mkdir(mode=0o700)
    (folder / "d.db").write_text("")
    if os.geteuid() != 0:
        os.chmod(folder, 0)
    root = os.geteuid() == 0
    if root:            # (the folder stays root's and the test acts as nobody)
        os.setegid(65534)
        os.seteuid(65534)
    try:
        with pytest.raises(StoreError) as e:
            open_nofollow(folder / "d.db", os.O_RDONLY, "database")
    finally:
        if root:
            os.seteuid(0)
            os.setegid(0)
        os.chmod(folder, 0o700)
    assert str(e.value) == f"database {folder / 'd.db'}: Permission denied"


# --- state/queries.py: unstopped_run ------------------------------------------------------------------------------------
def test_error_ignored_no_pid_none_the_run_a_start_begins_and_nothing_ends(tmp_path):
    # mutants q-error-ignored (`or after_newest_start(db, "error")` dropped: a start that failed with its error on
    # record was also said to have ended unrecorded, where the function is asked alone; status asks it only where no
    # error is on record) and q-no-pid-none (`or "?"` dropped: a start recorded without its pid, an older release's,
    # gave None: no problem said after a SIGKILL)
    from click.testing import CliRunner

    from controller.cli.main import cli
    from state import queries
    from state.db import open_store
    from tests.test_status_unstopped import KILLED, _events
    for name, rows, pid in (("error", [("start", "engine=sim pid=7"), ("error", "SGLang exited 1")], None),
                            ("no pid", [("start", "engine=sim")], "?"), ("pid", [("start", "engine=sim pid=7")], "7")):
        db = tmp_path / f"{name}.db"
        _events(db, rows)
        store = open_store(db, readonly=True)
        try:
            assert queries.unstopped_run(store) == pid, name
        finally:
            store.conn.close()
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "no pid.db"), "--socket", str(tmp_path / "none.sock"),
                                   "status"])
    assert res.exit_code == 3 and f"the last run (pid ?) {KILLED}" in res.output, res.output


def test_section_ignored_a_db_flag_that_makes_the_socket_the_databases_path_is_named(short_tmp, monkeypatch):
    # mutant cd-section-ignored (`f"[{at[0]}]" in message and` dropped) survived, and showed a defect: the one refusal
    # that a value of another section causes, '[control] socket S is the database's own path', named [control] only:
    # `--db S` against a config file's socket S said nothing of the --db (the operator was sent to the file's socket),
    # and `--db S --socket S` named the --socket alone. The refusal names [storage] db now
    from click.testing import CliRunner

    from controller.daemon.main import main
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(short_tmp))
    path = short_tmp / "x"
    config = short_tmp / "c.toml"
    config.write_text(f'[control]\nsocket = "{path}"\n')
    said = f"spec-controller: config: [control] socket {path} is the database's own path ([storage] db); give another"
    for args, given in ((["--config", str(config), "--db", str(path)], "--db"),
                        (["--db", str(path), "--socket", str(path)], "--db, --socket")):
        res = CliRunner().invoke(main, ["config", "check", *args])
        assert res.exit_code == 2 and res.output.strip() == f"{said} (given on the command line: {given})", res.output


def test_reload_no_floor_a_changed_min_free_mb_is_applied_by_a_reload_not_said_to_need_a_restart():
    # mutant cd-reload-no-floor (min_free_mb dropped from reloadable): the writer's floor was set anew, but the
    # reload's warning said '[storage] min_free_mb 64.0 -> 128.0' needs a restart, and the running config kept 64
    import copy

    from controller.daemon.config import load_config
    from controller.daemon.configdiff import reloadable, restart_needed
    running = load_config(None)
    fresh = copy.deepcopy(running)
    fresh["storage"]["min_free_mb"] = running["storage"]["min_free_mb"] * 2
    assert reloadable("storage", "min_free_mb")
    assert restart_needed(running, fresh) == []
    fresh["storage"]["db"] = "/elsewhere.db"            # (beside a key that does take a restart)
    assert restart_needed(running, fresh) == ["[storage] db '' -> '/elsewhere.db'"]


def test_error_http_an_error_status_with_a_body_that_is_no_object_is_another_programs(short_tmp):
    # mutant cli-error-http (`... else None` -> `else f"HTTP {status}"`: the error line of an answer that is no JSON
    # object): another program's '404' with a JSON list was printed as the daemon's error, 'specctl: HTTP 404'
    from controller.cli.client import DaemonError, request
    from tests.test_review_h166 import _foreign_http
    sock = short_tmp / "other.sock"
    listener = _foreign_http(sock, "404 Not Found", b"[1, 2]")
    try:
        with pytest.raises(DaemonError) as e:
            request(sock, "GET", "/status")
    finally:
        listener.close()
    assert str(e.value) == (f"the program on {sock} is not a spec-controller daemon (or one of another release): it "
                            "answered GET /status with HTTP 404 and no error line of the daemon's")


# --- controller/paths.py: denied_step / denied_note -------------------------------------------------------------------
@pytest.fixture
def as_nobody(short_tmp):
    """The test's user owns what it makes under short_tmp/own; as root (whom no mode refuses) that user is nobody."""
    import contextlib
    import os
    os.chmod(short_tmp, 0o755)
    own = short_tmp / "own"
    own.mkdir()
    root = os.geteuid() == 0

    @contextlib.contextmanager
    def acting(*paths):
        if root:
            for p in paths:
                os.chown(p, 65534, 65534)
            os.setegid(65534)
            os.seteuid(65534)
        try:
            yield
        finally:
            if root:
                os.seteuid(0)
                os.setegid(0)
    yield own, acting
    for p in [own, *own.rglob("*")]:
        try:
            os.chmod(p, 0o700)
        except OSError:
            pass


def test_denied_step_the_part_that_refuses_and_what_is_yours(as_nobody, short_tmp):
    # mutants pa-blocker-deepest (`reversed(target.parents)` -> `target.parents`: the deepest folder without x was
    # taken, which cannot even be looked at through the one above: None, no advice), pa-missing-not-parent (a file to
    # be made: its folder not judged, None), pa-folder-w-only (a folder target judged for w alone: mode 600 passed),
    # pa-other-user (another user's folder was told to chmod), pa-note-any-error (denied_note's advice on an error
    # that is no refusal: ENOENT), cli-denied-group-only (specctl's connect said 'run as root or a member of its
    # group' where its own folder refuses it; reached through client.request, which the commands' own checks precede)
    import os
    import socket

    from controller.cli.client import DaemonDenied, request
    from controller.paths import denied_note, denied_step
    own, acting = as_nobody
    (own / "deep").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(own / "deep" / "c.sock"))
    sock.listen(1)
    try:
        with acting(own, own / "deep", own / "deep" / "c.sock"):
            os.chmod(own / "deep", 0)
            os.chmod(own, 0)
            assert denied_step(own / "deep" / "c.sock") == \
                f"the folder {own} is yours but its mode 0 refuses you: chmod u+rwx {own}"
            assert denied_note(own / "deep" / "c.sock", FileNotFoundError()) == ""
            assert denied_note(own / "deep" / "c.sock", PermissionError()).startswith(f" (the folder {own} is yours")
            with pytest.raises(DaemonDenied) as e:
                request(own / "deep" / "c.sock", "GET", "/status")
            assert f"chmod u+rwx {own})" in str(e.value)
            os.chmod(own, 0o500)
            os.chmod(own / "deep", 0o700)
            assert denied_step(own / "new.db") == \
                f"the folder {own} is yours but its mode 500 refuses you: chmod u+rwx {own}"
            os.chmod(own, 0o600)
            assert denied_step(own) == f"the folder {own} is yours but its mode 600 refuses you: chmod u+rwx {own}"
            os.chmod(own, 0o700)
        if os.geteuid() == 0:               # (a folder of another user: root's, acting as nobody)
            theirs = short_tmp / "theirs"
            theirs.mkdir(mode=0)          # (its mode refuses its owner too: still none of this user's to chmod)
            with acting():
                assert denied_step(theirs / "c.sock") is None
    finally:
        sock.close()


# --- the rest: envwords, [guard] numbers, the metrics address -----------------------------------------------------------
def test_plugin_unicode_strip_the_plugin_switch_with_another_space_is_refused():
    # mutant env-plugin-unicode-strip (`value.strip(ASCII_SPACE)` -> `value.strip()` for SPEC_CONTROLLER_PLUGIN): the
    # daemon took '\u00a0on', which the plugin's switch_on (ASCII spaces only) does not read as on
    from controller.envwords import PLUGIN_ENV, operator_value_problem, switch_on
    assert operator_value_problem(PLUGIN_ENV, " on ") is None
    assert operator_value_problem(PLUGIN_ENV, "\u00a0on") is not None
    assert switch_on({PLUGIN_ENV: "\u00a0off"}, PLUGIN_ENV) is True        # (not read: its default)


def test_overflow_ok_a_guard_number_past_a_floats_range_is_refused_not_a_traceback():
    # mutant gc-overflow-ok (`except OverflowError: why = ...` -> `raise`): --set takes an integer TOML does not hold
    # (past 64 bits) as a number; a [guard] float setting of 10**400 raised OverflowError out of run and config check
    big = "1" + "0" * 400
    said = _refusal(f"guard.stabilisation_s={big}")
    assert said.startswith("config: [guard] setting stabilisation_s=") and said.endswith(" must be a number")


def test_scope_always_only_an_address_with_a_scope_is_told_of_scopes():
    # mutants pf-scope-always (the '%' scope's note on every address no bind takes) and pf-port-gai-only (EINVAL, what
    # bind says of '::1%lo' where getaddrinfo took it, fell through to 'metrics port N: Invalid argument', exit 1)
    import socket

    from controller.daemon.preflight import port_taken
    import errno

    from controller.daemon.preflight import Fatal
    refused = port_taken(9500, OSError(errno.EINVAL, "Invalid argument"), "::1%lo")    # (mutant pf-port-gai-only)
    assert isinstance(refused, Fatal) and str(refused).startswith("metrics address ::1%lo ([control] metrics_addr) "
                                                                 "cannot be bound: Invalid argument")
    error = socket.gaierror(-2, "Name or service not known")
    assert str(port_taken(9500, error, "::1%lo")).endswith("(the metrics server binds an address without a '%' scope)")
    assert str(port_taken(9500, error, "fe80::1")) == ("metrics address fe80::1 ([control] metrics_addr) cannot be bound: "
                                                        "Name or service not known")
