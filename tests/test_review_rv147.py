"""rv147's review of the daemon side: what it found, each test red before its fix."""
import json
import logging
import time

import pytest

from state.db import open_store
from tests.daemon_proc import DaemonProc


def _saved_state(db_path, policy: str, state: dict, active: str) -> None:
    """A database whose active policy is `active` and whose newest saved state of `policy` is `state`."""
    db = open_store(db_path)
    db.conn.execute("INSERT INTO policy_state (wall, policy, params, state) VALUES (?, ?, '{}', ?)",
                    (time.time(), policy, json.dumps(state)))
    db.conn.execute("INSERT INTO settings (key, value, wall) VALUES ('policy', ?, ?)",
                    (json.dumps({"name": active, "params": {}}), time.time()))
    db.conn.close()


def _learned_state(policy: str, max_batch_size: int = 256) -> dict:
    """A state the policy itself wrote, after a few samples (the simulator's profile: largest batch 256)."""
    from policies import make_policy
    from tests.fakes import good
    p = make_policy(policy, {}, max_batch_size=max_batch_size)
    for i in range(50):
        p.observe(good(1.0 + i * 0.01, bs=4 + i % 8, spec=bool(i % 2)))
    return p.state()


def _rng_word_out_of_range() -> dict:
    state = _learned_state("thompson")
    state["rng"][1][0] = -1            # (a Mersenne Twister word is 0 .. 2**32-1)
    return state


def _weight_past_float(policy: str = "thompson", max_batch_size: int = 256) -> dict:
    state = _learned_state(policy, max_batch_size)
    state["q_off"][0][1] = 10 ** 400   # (a JSON integer: finite, and too large for a float)
    return state


@pytest.mark.parametrize("state", [_rng_word_out_of_range, _weight_past_float], ids=["rng-word", "huge-integer"])
def test_a_saved_state_that_overflows_on_load_is_not_restored_and_the_daemon_starts(short_tmp, state):
    """load_state raised OverflowError ('can't convert negative value to unsigned int', 'int too large to convert to
    float'), which Service._restore did not catch: every start ended in a 30-line traceback, exit 1, and systemd
    restarted it for ever. A state that does not load is 'not restored', as one that is not JSON."""
    _saved_state(short_tmp / "state.db", "thompson", state(), "bandit")
    d = DaemonProc(short_tmp, "--concurrency", "4")
    try:
        d.wait_socket()
        assert d.call("GET", "/policy")["name"] == "bandit"
        assert "saved state of bandit not restored" in d.log_text()
    finally:
        assert d.stop() == 0


def test_a_switch_to_a_policy_whose_saved_state_overflows_starts_it_fresh(short_tmp, caplog):
    """The same at `policy set`: it was a 500 (internal error: OverflowError), the switch refused."""
    from tests.fakes import FakeEngine, make_service
    _saved_state(short_tmp / "s.db", "ucb", _weight_past_float("ucb", FakeEngine.max_batch_size), "thompson")
    with caplog.at_level(logging.WARNING, "spec_controller"):
        svc, writer = make_service(short_tmp)
        try:
            assert svc.set_policy("ucb", {})["learned"] == "new"
            assert svc.loop.policy.name == "ucb"
        finally:
            writer.stop()
    # (refused by the state's check since helper-151, before any float() of it: a number past 1e50 is no measurement)
    assert any("saved state of ucb not restored: policy ucb: saved state.q_off[0][1] holds a number past 1e+50"
               in r.getMessage() for r in caplog.records)


def test_a_sighup_while_the_daemon_winds_down_does_not_kill_it(short_tmp):
    """SIGTERM, then SIGHUPs (reloads) until it exits: once run() had returned, the interpreter's shutdown put SIGHUP's
    default action back and the daemon died of it (returncode -1) after logging 'drained and flushed; exit 0'."""
    import signal
    d = DaemonProc(short_tmp, "--concurrency", "4")
    try:
        d.wait_socket()
        d.proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + 30
        while d.proc.poll() is None and time.monotonic() < end:
            try:
                d.proc.send_signal(signal.SIGHUP)
            except ProcessLookupError:
                break
            time.sleep(0.002)
    finally:
        code = d.stop()
    assert code == 0, d.log_text()
    assert "drained and flushed" in d.log_text()


def test_a_min_threshold_above_the_engines_largest_batch_applies_that_batch(short_tmp):
    """[guard] min_threshold = 300 on the simulator's 256: the daemon ran threshold 300 (a pin of 300 is refused as out
    of range), saved it, and every later start warned 'saved threshold=300 is above the engine's largest batch'."""
    d = DaemonProc(short_tmp, "--concurrency", "4", "--set", "guard.min_threshold=300")
    try:
        d.wait_socket()
        st = d.call("GET", "/status")
        assert st["threshold"] == st["engine"]["max_batch_size"] == 256
    finally:
        assert d.stop() == 0
    assert "above the engine's largest batch" not in d.log_text()


def test_a_clock_stepped_back_while_the_daemon_was_down_goes_on_from_the_databases_newest_time(tmp_path):
    """rv147 #4: SteadyClock carried a step back within one run only. The engine's clock (SGLang's: the host's)
    stepped back while the daemon was down, a restart began its time at the stepped-back clock, and the restored
    policy state, stamped ahead, neither decayed nor rolled up until that clock caught up."""
    from tests.fakes import FakeEngine, feed, good, make_service
    before = FakeEngine()
    before.t = 5000.2
    first, writer = make_service(tmp_path, engine=before)
    feed(first, [good(5000.0 + i * 0.01) for i in range(20)])
    writer.stop()
    from state import queries
    assert queries.last_engine_time(open_store(tmp_path / "s.db", readonly=True)) >= 5000.19
    engine = FakeEngine()                          # its clock at 100: stepped back by ~4,900 s while down
    again, writer = make_service(tmp_path, engine=engine)
    try:
        assert again.clock.now() >= 5000.19
        engine.t = 101.0                           # and its time goes on from there
        assert 5001.1 <= again.clock.now() <= 5001.3
    finally:
        writer.stop()
