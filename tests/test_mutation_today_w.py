"""helper-155's mutation check of the lines changed on 12-07 (bench/results/mutation-today-2026-12-07w.md): the store's
number / text filters, a restored state's numbers, the fallback's heard time, undecodable telemetry, the drain, the
SIGHUP at import. A test for each surviving mutant that is not equivalent, named by its id. No wall-clock
assertions."""
from __future__ import annotations

import logging
import signal
import sys

import pytest

from controller.contract import Sample
from controller.daemon.intake import Undecodable
from state import queries, timeline
from state.retention import Rollups
from tests.test_db_wrong_types import _store


# --- state/queries.py: SOUND_SAMPLE, the text filters -----------------------------------------------------------------
@pytest.mark.parametrize("column", ["steps", "step_s", "batch_size"])
def test_sound_sample_a_sample_row_with_text_in_a_number_column_is_left_out_of_every_sum(short_tmp, column):
    """q-sound-no-steps / q-sound-no-stepsecs, r-rollup-unsound, t-bins-unsound: the filters tested a text time only; a
    text step count is read as speculative (text > 0), a text step time summed as 0."""
    store = _store(short_tmp / "s.db", f"UPDATE samples SET {column} = 'x' WHERE t = 11.0")
    sums = queries.sample_sums(store, since_t=0.0)
    assert sums["batches"] == 29 and sums["spec_batches"] == 29, sums
    assert sum(row["batches"] for row in timeline.bins(store, 10.0, 40.0, 10.0)) == 29
    Rollups(10.0, (8, 256))(store)
    first = store.conn.execute("SELECT sum(batches) FROM aggregates WHERE window_start = 10.0").fetchone()[0]
    assert first == 9


def test_latest_policy_any_a_checkpoint_whose_policy_is_no_text_is_not_the_newest_policy(short_tmp):
    """q-latest-policy-any: with no policy setting saved, the newest checkpoint's policy names it; a blob there was returned
    as bytes."""
    store = _store(short_tmp / "s.db", "DELETE FROM settings WHERE key = 'policy'")
    store.conn.execute("INSERT INTO policy_state (wall, policy, params, state) VALUES (5.0, x'00ff', '{}', '{}')")
    assert queries.latest_policy(store) == "thompson"


def test_recent_old_any_a_decision_whose_old_threshold_is_no_integer_is_left_out(short_tmp):
    """q-recent-old-any: (history's 'old -> new' of a blob)"""
    store = _store(short_tmp / "s.db", "UPDATE decisions SET old = x'01' WHERE new = 6")
    assert [d["new"] for d in queries.recent_decisions(store)] == [5]


@pytest.mark.parametrize("detail", ["x'00'", "NULL", "5"])
def test_start_not_text_a_start_event_whose_detail_is_no_text_says_nothing(short_tmp, detail):
    """q-start-not-text: a blob detail made newest_start's partition a TypeError (a number's an AttributeError); NULL
    says nothing either."""
    store = _store(short_tmp / "s.db", f"UPDATE events SET detail = {detail} WHERE kind = 'start'")
    assert queries.newest_start(store) == {} and queries.started_max_batch(store) is None


# --- state/retention.py, state/timeline.py: the ranges' other end -----------------------------------------------------
def test_first_min_any_a_minus_infinite_sample_time_is_not_where_the_rollups_start(short_tmp):
    """r-first-min-any: min(t) took -9e999 (a hand edit): the first window began at -inf."""
    store = _store(short_tmp / "s.db", "UPDATE samples SET t = -9e999 WHERE t = 11.0")
    rollups = Rollups(10.0, (8, 256))
    assert rollups._first(store) == 10.0
    assert rollups(store) > 0


def test_newest_window_any_and_oldest_decisions_any_timelines_ends_are_finite(short_tmp):
    """t-newest-window-any / t-oldest-decisions-any: an aggregate of an infinite window, a decision at -inf"""
    store = _store(short_tmp / "s.db", "UPDATE decisions SET t = -9e999 WHERE new = 5")
    store.conn.execute("INSERT INTO aggregates VALUES (10.0, 9e999, 8, 'spec', 5, 5, 5.0, 5.0)")
    assert timeline.newest_t(store) == 39.0 and timeline.oldest_t(store) == 10.0


# --- policies: a restored state's numbers -----------------------------------------------------------------------------
def test_max_lt_a_number_at_max_state_number_is_restored_one_past_it_is_not():
    """y-max-lt: 'past MAX_STATE_NUMBER' is refused, the number itself is not (check_finite's line says 'past')."""
    from policies import PolicyError
    from policies.types import MAX_STATE_NUMBER, check_finite
    check_finite("p", {"row": [MAX_STATE_NUMBER, -MAX_STATE_NUMBER]})
    with pytest.raises(PolicyError, match="past 1e"):
        check_finite("p", {"row": [MAX_STATE_NUMBER * (1 + 1e-15)]})


# --- policies/prefill_cost.py: decode_gain ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["thompson", "model"])
def test_finite_any_a_restored_step_mean_so_small_the_gain_overflows_gives_no_gain(name):
    """pc-finite-any: a speculative decode step of 5e-324 s (a hand edit: weight 1, sum the least float) passes the mean's
    `> 0`, and the plain step divided by it is infinite: a gain of inf went to the verdict. The existing tests' sums of
    0 and 5e-324 over the learned weight make a mean of 0, the other guard's case."""
    from policies import make_policy
    from policies.prefill_cost import decode_gain
    from tests.test_restored_state_numbers import _learned, _runs
    state = _learned(name)
    b = next(b for b, row in enumerate(state["prefill_cost"]["steps"][1]) if row[0] > 0 and
             state["prefill_cost"]["steps"][0][b][0] > 0)
    state["prefill_cost"]["steps"][1][b][:2] = [1.0, 5e-324]
    policy = make_policy(name, {})
    policy.load_state(state)
    assert policy.prefill.steps[1][b].mean > 0.0 and decode_gain(policy, b) is None
    _runs(policy, 40.0)


# --- controller/control/loop.py: heard(); controller/daemon/ingest.py: heard_t ----------------------------------------
def _fast_service(tmp_path):
    from tests.test_fast_clock import _service
    return _service(tmp_path)


def test_heard_folded_only_samples_received_before_any_was_folded_in_are_no_silence(tmp_path):
    """l-heard-folded-only: heard() gave the folded time alone while nothing was folded in yet: the first retune after
    the start, samples queued, fell back ('no samples yet')."""
    service, engine, writer = _fast_service(tmp_path)
    try:
        for i in range(5):
            service.ingest.on_sample(Sample(100.0 + i, 4, 3, 12, 0.02, True))
        assert service.loop.last_sample_t is None and service.loop.heard() == 104.0
        engine.t = 104.5
        service.retune()
        assert service.loop.threshold == engine.max_batch_size, "fell back as if nothing had come"
    finally:
        writer.stop()


def test_heard_rejected_too_samples_that_are_all_rejected_are_silence(tmp_path):
    """i-heard-rejected-too: a rejected sample is no sign the engine sends sound ones (one stamped ahead would have
    held the fallback off for as long as it is ahead)."""
    service, engine, writer = _fast_service(tmp_path)
    try:
        from tests.fakes import feed, good
        feed(service, [good(100.0)])
        service.retune()
        engine.t = 111.0
        for t in (110.0, 111.0, 114.0):
            service.ingest.on_sample(Sample(t, 0, 0, 0, 0.01, True))      # batch size 0: rejected
        assert service.ingest.gate.rejected["batch_size"] == 3
        service.retune()
        assert service.loop.threshold == 0 and engine.applied[-1] == 0
    finally:
        writer.stop()


# --- controller/daemon/intake.py: Undecodable -------------------------------------------------------------------------
def _undecodable(first: float, newest: float, now: float) -> Undecodable:
    u = Undecodable(monotonic=lambda: now)
    u.run = (first, newest)
    return u


def test_stalled_le_ge_a_minute_of_nothing_but_undecodable_messages_is_a_problem_at_the_minute():
    """u-stalled-le / u-stalled-ge: as SampleGate.stalled, the window is inclusive at both ends."""
    assert _undecodable(1000.0, 1000.0, 1060.0).stalled() == (
        "telemetry: no sample decoded for 60 s, only undecodable messages (0 this run); nothing is learned: is the engine's plugin "
        "([sglang] python's spec-controller) of another release than the daemon?")
    assert _undecodable(1000.0, 1000.0, 1059.9).stalled() is None
    assert _undecodable(1000.0, 1000.0, 1060.1).stalled() is None


def test_stalled_newest_dropped_undecodable_messages_that_stopped_coming_are_no_problem():
    """u-stalled-newest-dropped: the engine gone quiet after them (stopped, idle) is no plugin of another release now."""
    assert _undecodable(1000.0, 1030.0, 1089.0).stalled() is not None
    assert _undecodable(1000.0, 1030.0, 1091.0).stalled() is None


def test_empty_byte_an_empty_message_is_logged_as_having_no_first_byte(caplog):
    """u-empty-byte: (an empty message has none: the line says so)"""
    u = Undecodable(monotonic=lambda: 5.0)
    with caplog.at_level(logging.WARNING, "spec_controller"):
        u.refused(b"", "unknown telemetry message (0 bytes)")
    assert [r.getMessage() for r in caplog.records] == [
        "telemetry: unknown telemetry message (0 bytes), first byte none: not read (a plugin of another release?)"]
    assert u.count == 1 and u.run == (5.0, 5.0)


# --- controller/daemon/metrics.py ------------------------------------------------------------------------------------
def test_undecodable_0_the_metrics_count_the_undecodable_telemetry_messages(short_tmp):
    """mt-undecodable-0: specctl_telemetry_undecodable_total is the engine's bad_telemetry (0 where it has none)."""
    from prometheus_client.registry import CollectorRegistry

    from controller.daemon.metrics import ServiceCollector
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    try:
        health = svc.engine.health
        registry = CollectorRegistry()
        registry.register(ServiceCollector(svc))
        assert registry.get_sample_value("specctl_telemetry_undecodable_total") == 0.0
        svc.engine.health = lambda: {**health(), "bad_telemetry": 14000}
        assert registry.get_sample_value("specctl_telemetry_undecodable_total") == 14000.0
    finally:
        writer.stop()


# --- controller/daemon/lifecycle.py: the drain, the metrics bind ---------------------------------------------------
def test_event_unflushed_stop_30_a_writer_not_flushed_in_time_gets_no_stop_event_and_one_second(short_tmp):
    """lc-event-unflushed / lc-stop-30: where the flush before the stop event did not finish (a writer stuck past 30 s:
    a hung disk), no stop event is queued behind it (it would name an exit code the unfinished writes may still
    change) and the writer's stop waits 1 s, not another 30."""
    import sqlite3

    from tests.fakes import make_service
    from tests.test_review_h114 import drained
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)
    stops, stop = [], writer.stop
    writer.flush = lambda timeout=None: False                    # (as a writer stuck past the 30 s answers)
    writer.stop = lambda timeout=30.0: stops.append(timeout) or stop(timeout)
    drained(svc)
    assert stops == [1]
    conn = sqlite3.connect(short_tmp / "s.db")
    kinds = [k for (k,) in conn.execute("SELECT kind FROM events")]
    conn.close()
    assert "stop" not in kinds, kinds


def test_metrics_no_addr_an_address_gone_before_the_metrics_bind_is_named_as_the_addresss(short_tmp):
    """lc-metrics-no-addr: the bind once the engine is ready (minutes after the preflight's check with SGLang: an
    interface may go meanwhile) named the port for an address this host no longer has, as the check did before
    64f725b. The bind is made to fail so; the sim engine starts, and the daemon ends with the address's line."""
    import os
    import subprocess
    from pathlib import Path

    from tests.conftest import unheld_port
    port = unheld_port()
    code = ("import errno, sys\nfrom controller.daemon import metrics\n"
            "def refused(*a, **k):\n    raise OSError(errno.EADDRNOTAVAIL, 'Cannot assign requested address')\n"
            "metrics.start_metrics = refused\nfrom controller.daemon.main import main\nsys.argv[0] = 'spec-controller'\n"
            "main()")
    (short_tmp / "e.toml").write_text("")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "XDG_STATE_HOME": str(short_tmp / "x")}
    env.pop("INVOCATION_ID", None)
    res = subprocess.run([sys.executable, "-c", code, "run", "--config", str(short_tmp / "e.toml"), "--concurrency", "2",
                          "--db", str(short_tmp / "v.db"), "--socket", str(short_tmp / "c.sock"),
                          "--metrics-port", str(port)], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 1 and (f"spec-controller: metrics address 127.0.0.1 ([control] metrics_addr), port {port}: "
                                    "Cannot assign requested address (no interface of this host has it)"
                                    ) in res.stderr.splitlines(), res.stderr


# --- controller/entry.py ----------------------------------------------------------------------------------------------
def test_argv_whole_any_command_run_with_its_flags_ignores_a_sighup_while_it_imports_no_other_command_does(monkeypatch):
    """en-argv-whole: the unit's command line is `spec-controller run --config ...`: its flags follow the command.
    en-any-command: the other commands keep SIGHUP's default. (test_review_h153's check of that compares with the
    disposition the test process had: under nohup, SIG_IGN already, so it held whatever the entry point did; here the
    default is set first.)"""
    from controller import entry
    from controller.daemon import main as daemon_main
    seen = []
    monkeypatch.setattr(daemon_main, "main", lambda: seen.append(signal.getsignal(signal.SIGHUP)))
    before = signal.getsignal(signal.SIGHUP)
    try:
        for argv, want in ((["spec-controller", "run", "--config", "/etc/spec-controller/config.toml"], signal.SIG_IGN),
                           (["spec-controller", "config", "check", "run"], signal.SIG_DFL),
                           (["spec-controller"], signal.SIG_DFL)):
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            monkeypatch.setattr(sys, "argv", argv)
            entry.daemon()
            assert seen.pop() == want, argv
    finally:
        signal.signal(signal.SIGHUP, before)



# --- beside them: the telemetry problems' counts --------------------------------------------------------------------
def test_the_telemetry_problems_group_their_counts_as_the_samples_line_does():
    """(5aa6b14 grouped every count of status's samples line, '14,000 undecodable telemetry messages'; the problem
    beside it said '(14000 this run)', and the gate's '(time 12345)')"""
    from controller.daemon.intake import SampleGate, SteadyClock
    u = _undecodable(1000.0, 1070.0, 1070.0)
    u.count = 14000
    assert "(14,000 this run)" in u.stalled()
    real = [1000.0]
    gate = SampleGate(64, 3, SteadyClock(lambda: 100.0), monotonic=lambda: real[0])
    for _ in range(12345):
        gate.admit(Sample(100.0, 0, 0, 0, 0.01, True))
    real[0] = 1060.0
    gate.admit(Sample(100.0, 0, 0, 0, 0.01, True))
    assert gate.stalled() == "telemetry: every sample rejected for 60 s (batch_size 12,346); nothing is learned"


def test_refused_messages_outnumbering_the_decoded_over_a_window_are_a_problem():
    """helper-170: oversized messages at 2,000/s (each dropping the sender's connection) let a few sample messages
    through, which reset the 'only undecodable' run: status said healthy while most samples were lost."""
    from controller.daemon.intake import LOSSY_LEAST, LOSSY_WINDOW_S
    clock = [0.0]
    u = Undecodable(monotonic=lambda: clock[0])
    for i in range(3 * LOSSY_LEAST):               # a window: 30 refused, 5 decoded, interleaved
        clock[0] = i
        u.refused(None, "over the cap")
        if i % 6 == 0:
            u.samples_came()
    assert u.stalled() is None                      # (the window not yet whole: no verdict)
    clock[0] = LOSSY_WINDOW_S + 1                   # whole, nothing after it
    assert u.stalled() == (f"telemetry: {3 * LOSSY_LEAST} messages refused (over the size cap or undecodable) against 5 "
                           f"decoded in the last {LOSSY_WINDOW_S:g} s: most samples are lost; is the engine's plugin "
                           "([sglang] python's spec-controller) of another release than the daemon?")
    u.samples_came()                                # a new window begins: the last whole one still speaks
    assert "30 messages refused" in u.stalled()
    clock[0] = 3 * LOSSY_WINDOW_S + 2               # two windows later, nothing came: no current figure
    assert u.stalled() is None
    fine = Undecodable(monotonic=lambda: clock[0])
    for _ in range(LOSSY_LEAST):                    # refused, but fewer than the decoded: no problem
        fine.refused(None, "over the cap")
        fine.samples_came()
        fine.samples_came()
    clock[0] += LOSSY_WINDOW_S
    assert fine.stalled() is None
