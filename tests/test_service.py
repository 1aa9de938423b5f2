"""The daemon's Service on a real SQLite store and the real simulator engine (not started: the
samples come from a synthetic stream, so what the policy has learned is known)."""
import pytest

from controller.daemon.config import load_config
from controller.daemon.engines.sim import SimEngine
from controller.daemon.service import Service
from controller.sim.profile import load_profile
from state.db import open_store
from state.writer import Writer
from tests.synthetic import Stream


def make_service(tmp_path):
    cfg = load_config(None, {"storage": {"db": str(tmp_path / "s.db")}, "policy": {"name": "ucb"}})
    writer = Writer(open_store(cfg["storage"]["db"])).start()
    engine = SimEngine(load_profile("crossover-b"), concurrency=4)
    return Service(cfg, engine, writer), writer


def test_switching_policy_params_keeps_what_the_policy_learned_since_the_last_checkpoint(tmp_path):
    svc, writer = make_service(tmp_path)
    stream = Stream(crossover=8)
    for _ in range(300):                         # learned in memory, no checkpoint written yet
        svc.loop.observe(stream.sample(svc.loop.threshold))
    learned = svc.loop.policy.state()
    assert svc.set_policy("ucb", {"c": 1.2})["learned"] == "kept"
    assert svc.loop.policy.params["c"] == 1.2
    assert svc.loop.policy.state() == learned
    writer.stop()


def test_switching_away_and_back_restores_the_newest_state(tmp_path):
    svc, writer = make_service(tmp_path)
    stream = Stream(crossover=8)
    for _ in range(300):
        svc.loop.observe(stream.sample(svc.loop.threshold))
    learned = svc.loop.policy.state()
    assert svc.set_policy("thompson", {})["learned"] == "new"      # never ran here: nothing saved for it
    assert svc.set_policy("ucb", {})["learned"] == "restored"      # at once: the first switch's checkpoint counts
    assert svc.loop.policy.state() == learned
    writer.stop()


def test_a_saved_state_that_is_not_json_is_no_state_not_a_refused_switch(tmp_path):
    """helper-92: a policy_state row whose state is not JSON raised out of set_policy (a ValueError, which the API
    answers 400, so specctl called it a bad argument, exit 2); a state that does not load is no state."""
    import sqlite3
    svc, writer = make_service(tmp_path)
    assert svc.set_policy("thompson", {})["learned"] == "new"          # checkpoints ucb, the policy switched from
    assert writer.flush(10)
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("UPDATE policy_state SET state = '{not json' WHERE policy = 'ucb'")
    conn.commit()
    conn.close()
    answer = svc.set_policy("ucb", {})
    assert answer["learned"] == "new" and svc.loop.policy.name == "ucb"
    writer.stop()


def test_a_trial_kept_as_the_decision_is_recorded_not_applied_again(short_tmp):
    # the loop's tick ends a trial at its own threshold (the guard kept it: it pays): the engine runs it
    # already, and the history gets its row, not a trial's
    import sqlite3
    from controller.control.loop import Tick
    from tests.fakes import FakeEngine, make_service as service_on_fake
    engine = FakeEngine()
    svc, writer = service_on_fake(short_tmp, engine=engine)
    svc.loop.tick = lambda now: Tick(now, 24, 24, "trial over; 24 stays, the trial showed it pays: x", False, True)
    svc.retune()
    svc.loop.tick = lambda now: Tick(now, 24, 24, "best threshold 24", False)      # nothing new: no row
    svc.retune()
    assert writer.flush(10)
    rows = sqlite3.connect(short_tmp / "s.db").execute("SELECT old, new, exploratory, reason FROM decisions").fetchall()
    assert engine.applied == [] and rows == [(24, 24, 0, "trial over; 24 stays, the trial showed it pays: x")]
    assert svc.status()["last_decision"]["reason"].startswith("trial over; 24 stays")
    writer.stop()


def test_a_policy_that_learns_nothing_is_not_said_to_keep_restore_or_start_learning(tmp_path):
    """fixed / always / never have no state: `policy set fixed` said "learning from scratch", setting it again
    "what it learned is kept", and a switch back to it "its saved state restored" (its empty checkpoint)."""
    svc, writer = make_service(tmp_path)
    assert svc.set_policy("fixed", {"threshold": 8})["learned"] == "none"
    assert svc.set_policy("fixed", {"threshold": 9})["learned"] == "none"
    assert svc.set_policy("ucb", {})["learned"] == "restored"
    assert svc.set_policy("fixed", {})["learned"] == "none"
    assert svc.set_policy("bandit", {})["learned"] == "new"
    writer.stop()


def test_a_restart_resumes_the_learned_threshold_not_a_trials_or_a_pins(tmp_path):
    svc, writer = make_service(tmp_path)
    svc.loop.guard.exploit = 12                  # learned
    svc._record(40, 12, "a trial", True, 1.0)    # the engine runs a trial when the daemon dies
    assert writer.flush(10)
    svc.pin(5)                                   # then an operator pins (saved as its own setting)
    writer.stop()
    again, writer = make_service(tmp_path)
    assert again.loop.threshold == 5 and again.loop.pinned == 5          # the engine starts with the pin ...
    assert again.loop.guard.exploit == 12                                # ... and an unpin goes back to 12
    writer.stop()


def test_each_retune_tells_the_loop_what_the_engine_says_of_its_prefills(short_tmp):
    from tests.fakes import FakeEngine, make_service as service_on_fake
    engine = FakeEngine()
    svc, writer = service_on_fake(short_tmp, engine=engine)
    assert svc.loop.prefills_pay_draft is True
    engine.prefills_pay_draft = lambda: False            # e.g. the plugin's stats say: off path kv
    svc.retune()
    assert svc.loop.prefills_pay_draft is False
    engine.prefills_pay_draft = lambda: True             # its writer failed: back to fast
    svc.retune()
    assert svc.loop.prefills_pay_draft is True
    writer.stop()


def test_the_simulated_engine_and_the_simulators_loop_follow_the_profiles_off_path():
    from dataclasses import replace
    from controller.sim.evaluate import policy_runner
    kv = load_profile("crossover-b")
    fast = replace(kv, draft_kv=False)
    assert kv.draft_kv
    assert SimEngine(kv, concurrency=4).prefills_pay_draft() is False
    assert SimEngine(fast, concurrency=4).prefills_pay_draft() is True
    assert policy_runner("bandit", None, fast, 0)(None).loop.prefills_pay_draft is True
    assert policy_runner("bandit", None, kv, 0)(None).loop.prefills_pay_draft is False


def test_status_and_the_pin_reply_say_whether_the_threshold_is_a_trial(tmp_path):
    """status's threshold note tells a trial from the guard holding the way to the best: the daemon says which."""
    svc, writer = make_service(tmp_path)
    try:
        assert svc.status()["trial"] is False and svc.pin(None)["trial"] is False
        svc.loop._exploring = True                   # as a tick that applied a policy's trial leaves it
        assert svc.status()["trial"] is True and svc.loop.exploring
    finally:
        writer.stop()


def test_the_pin_reply_says_whether_the_threshold_in_force_is_a_trial(tmp_path):
    """specctl threshold pin / unpin print the reply's note (steer._trial_note): a trial in force is called one
    there too, not only in status."""
    svc, writer = make_service(tmp_path)
    try:
        svc.loop._exploring = True                   # as a tick that applied a policy's trial leaves it
        reply = svc.pin(None)                        # an unpin of nothing: the trial goes on
        assert reply["trial"] is True and not reply["changed"] and reply["trial"] == svc.status()["trial"]
    finally:
        writer.stop()


def test_a_pin_saved_before_anything_was_learned_is_not_taken_as_learned(tmp_path):
    """newcomer-52: an offline pin on a database with nothing learned was taken as the learned threshold at the next
    start: an unpin then went back to the pin ('the policy's best so far is 256'), and the pin was saved as learned."""
    svc, writer = make_service(tmp_path)
    writer.setting("pinned", 7)
    writer.stop()
    again, writer = make_service(tmp_path)
    assert again.loop.threshold == 7 and again.loop.pinned == 7
    assert again.start_reason == "restored at start: pinned at 7 by an operator"
    assert again.loop.guard.exploit == again.cfg["policy"]["initial_threshold"] == 0     # where a fresh start goes
    again._record(7, 7, again.start_reason, False, 1.0)     # the start's row (apply_initial's): the learned one saved
    assert writer.flush(10)
    writer.stop()
    from state import queries
    store = open_store(tmp_path / "s.db")
    assert queries.settings(store)["threshold"] == 0 and queries.settings(store)["pinned"] == 7
    store.conn.close()


@pytest.mark.parametrize("key", ["pinned", "threshold"])
def test_a_saved_threshold_above_the_engines_largest_batch_is_taken_as_that_batch(tmp_path, key):
    """helper-81: `specctl threshold pin 1000` offline said "applied at next start"; the start then dropped it (not a
    batch size) and ran unpinned, the pin it replaced lost. Above the largest batch every batch speculates, as at it."""
    svc, writer = make_service(tmp_path)
    top = svc.engine.max_batch_size
    writer.setting(key, top + 744)
    writer.stop()
    again, writer2 = make_service(tmp_path)
    assert again.loop.threshold == top and (again.loop.pinned == top) == (key == "pinned")
    assert again.start_reason == ("restored at start" if key == "threshold" else
                                  f"restored at start: pinned at {top} by an operator")
    writer2.stop()


def test_a_checkpoint_beside_a_policy_switch_never_leaves_the_older_state_newest(tmp_path):
    """helper-138: checkpoint() took the state under the lock and queued it after letting go: a switch in between
    (more learned, then its newer state saved) was followed by the checkpoint's older row, which a switch back
    restored. Here the switch starts inside the checkpoint's queueing, in the gap that had no lock."""
    import threading
    svc, writer = make_service(tmp_path)
    stream = Stream(crossover=8)
    for _ in range(300):
        svc.loop.observe(stream.sample(svc.loop.threshold))
    newest = {}

    def learn_more_then_switch():
        with svc.lock:
            for _ in range(200):
                svc.loop.observe(stream.sample(svc.loop.threshold))
            newest.update(svc.loop.policy.state())
        svc.set_policy("thompson", {})
    queue_it = writer.policy_state
    switch = threading.Thread(target=learn_more_then_switch)

    def checkpoint_put(*args):
        switch.start()
        switch.join(1.0)               # (with the fix it waits for the lock the checkpoint holds: the timeout passes)
        return queue_it(*args)
    writer.policy_state = checkpoint_put
    svc.checkpoint()
    switch.join(10)
    assert writer.flush(10)            # (the checkpoint's row on disk before the switch back reads it)
    assert svc.set_policy("ucb", {})["learned"] == "restored"
    assert svc.loop.policy.state() == newest
    writer.stop()


def test_status_names_the_engines_largest_batch(tmp_path):
    svc, writer = make_service(tmp_path)
    assert svc.status()["engine"]["max_batch_size"] == svc.engine.max_batch_size == 256
    writer.stop()


def test_a_pin_during_the_drain_is_saved_for_the_next_start_and_said_so(short_tmp):
    """helper-138: a pin while the daemon drained (retunes stopped, the engine going) was answered 'the engine has not
    taken it ... the daemon tries again at every retune', and no retune was to come. Now saved, not applied, and
    specctl says the next start applies it (through the real control socket)."""
    import sqlite3

    from click.testing import CliRunner

    from controller.cli.main import cli
    from controller.daemon.api import ControlServer
    from tests.fakes import FakeEngine, make_service as service_on_fake
    engine = FakeEngine()
    svc, writer = service_on_fake(short_tmp, engine=engine)
    svc.stopping = True
    server = ControlServer(short_tmp / "c.sock", svc)
    server.start()
    try:
        res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "c.sock"), "threshold", "pin", "5"])
    finally:
        server.stop()
    assert res.exit_code == 0 and res.output.strip() == \
        "threshold pinned at 5 (saved); the daemon is stopping: its next start applies it", res.output
    assert engine.applied == []
    assert writer.flush(10)
    saved = sqlite3.connect(short_tmp / "s.db").execute("SELECT value FROM settings WHERE key = 'pinned'").fetchone()
    assert saved == ("5",)
    writer.stop()


def test_a_checkpoint_between_the_switchs_snapshot_and_its_write_is_not_followed_by_that_older_snapshot(tmp_path):
    """helper-145: the other order of the race above. set_policy took the old policy's state, looked for the new one's
    (the loop learning on meanwhile), then queued that state: a checkpoint in between (newer) was followed by it, and a
    switch back restored the older."""
    svc, writer = make_service(tmp_path)
    stream = Stream(crossover=8)
    for _ in range(300):
        svc.loop.observe(stream.sample(svc.loop.threshold))
    restore, newest = svc._restore, {}

    def restore_while_the_loop_learns_on(*args):
        with svc.lock:
            for _ in range(200):
                svc.loop.observe(stream.sample(svc.loop.threshold))
        svc.checkpoint()                             # the checkpoint job, in the switch's window
        newest.update(svc.loop.policy.state())
        return restore(*args)
    svc._restore = restore_while_the_loop_learns_on
    svc.set_policy("thompson", {})
    del svc._restore
    assert writer.flush(10)
    assert svc.set_policy("ucb", {})["learned"] == "restored"
    assert svc.loop.policy.state() == newest
    writer.stop()
