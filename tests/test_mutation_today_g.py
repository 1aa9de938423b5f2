"""Tests that kill the survivors of helper-g's mutation pass over policies/, controller/sim/ and controller/control/
(bench/results/mutation-today-2026-12-05g.md: the mutant ids in each test's name), and the gaps L2 and D1 left open
by bench/results/mutation-today-2026-12-05f.md. Scripted samples, time as an argument."""
from __future__ import annotations

import os

import pytest

from controller.contract import Sample, speculates
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from controller.sim.core import SimCore
from controller.sim.finite import request_count
from controller.sim.openloop import OpenLoopCore, RateSchedule
from controller.sim.profile import parse_profile
from policies import Decision, Snapshot, make_policy, staleness, trend
from tests.test_guard_history import Script
from tests.test_stale_accept_probe import (OFF_8, OFF_100, OFF_12, SPEC_8, SPEC_12, SPEC_100, chat_then_probe_at_12,
                                           history, off, spec)
from tests.test_trend_guess import learned

BATCH_100 = make_policy("ucb", max_batch_size=256).buckets.of(100)
BATCH_12 = make_policy("ucb", max_batch_size=256).buckets.of(12)


# --- policies.staleness.stale_gain --------------------------------------------------------------------------------
def test_sg1_a_stale_trial_waits_until_the_accept_estimate_is_stale_and_not_past_its_window():
    """The load moved to batch 100 at t=100 (accept last measured at batch 8 just before): the stale-acceptance gain
    is there from accept_half_life_s (4 s) to HALF_LIVES x that after the last speculative batch, not before, not after."""
    p = make_policy("ucb", seed=0, max_batch_size=256)
    history(p)
    hl = p.params["accept_half_life_s"]
    for age in (0.5, 0.5 * hl, 0.9 * hl):
        assert staleness.stale_gain(p, BATCH_100, p.accept.t + age) is None, age
    for age in (1.1 * hl, 1.5 * hl, 1.9 * hl):
        assert staleness.stale_gain(p, BATCH_100, p.accept.t + age) > p.params["indifference"], age
    assert staleness.stale_gain(p, BATCH_100, p.accept.t + 2.1 * hl) is None


def both_ways(p, t: float, until: float, size: int, spec_s: float, off_s: float, accept, gap: float = 0.05,
              dt: float = 0.1) -> float:
    """Batch `size` speculating (accept: a number, or a function of t) and plain `gap` later, every dt until `until`;
    the time it stopped at."""
    while t < until:
        p.observe(spec(t, size, spec_s, accept(t) if callable(accept) else accept))
        p.observe(off(t + gap, size, off_s))
        t += dt
    return t


def test_sg2_no_stale_trial_where_the_acceptance_was_last_measured_even_with_a_short_half_life():
    """The load stayed at batch 100, where the accept length fell 3.4 -> 2.0: nothing says it came back. With
    half_life_s (5 s) under HALF_LIVES x accept_half_life_s (8 s) only the 'measured in another bucket since'
    check says so (the bucket's last speculative batch is the acceptance's last measurement)."""
    q = make_policy("ucb", {"half_life_s": 5.0}, seed=0, max_batch_size=256)
    both_ways(q, 0.0, 12.0, 100, SPEC_100, OFF_100, lambda t: 3.4 if t < 10 else 2.0)
    assert q.tried[1][BATCH_100] == q.accept.t
    assert q.accept_high(q.accept.t + 6.0) > 3.0        # at the acceptance seen lately speculation would pay
    for age in (5.5, 6.5, 7.5):
        assert staleness.stale_gain(q, BATCH_100, q.accept.t + age) is None, age


def test_sg3_no_stale_trial_in_a_bucket_that_speculated_within_half_life_s():
    """Batch 100 speculated until t=10, the load then at batch 8 until 40 (30 s < half_life_s 60): the bandit's own
    uncertainty decides there, no stale-acceptance trial (open-loop batch sizes wander between buckets)."""
    p = make_policy("ucb", seed=0, max_batch_size=256)
    history(p, move_at=40.0)
    assert p.tried[1][BATCH_100] < p.accept.t         # the acceptance was measured elsewhere since
    for now in (44.5, 46.0):
        assert staleness.stale_gain(p, BATCH_100, now) is None


def test_sg5_a_smaller_bucket_where_speculation_lost_at_the_acceptance_seen_lately_settles_it():
    """As test_sg1's history, plus batch 50 measured both ways (speculation -50 % at 3.4): a loss below at the highest
    accept length seen lately carries over to batch 100 (dominated), and no stale-acceptance trial is made."""
    off_50, spec_50 = 0.015, 0.06
    p = make_policy("ucb", seed=0, max_batch_size=256)
    t = both_ways(p, 0.0, 10.0, 100, SPEC_100, OFF_100, 3.4)
    t = both_ways(p, t, 20.0, 50, spec_50, off_50, 3.4)
    both_ways(p, t, 100.0, 8, SPEC_8, OFF_8, 2.0, gap=0.02, dt=0.05)
    assert p.dominated(1, BATCH_100, 105.0)
    assert staleness.stale_gain(p, BATCH_100, 105.0) is None


# --- policies.staleness.probe_goes_on -----------------------------------------------------------------------------
def _probe_at_12(params=None):
    p = make_policy("ucb", params, seed=0, max_batch_size=256)
    chat_then_probe_at_12(p, 2.6)         # one tick of the probe at batch 12: accept 2.58 measured since, estimate 2.28
    return p


def test_pg1_a_plain_batch_in_the_bucket_ends_the_probe():
    p = _probe_at_12()
    assert staleness.probe_goes_on(p, BATCH_12, 104.5) > p.params["indifference"]
    p.observe(off(104.52, 12, OFF_12))
    assert staleness.probe_goes_on(p, BATCH_12, 104.6) is None


def test_pg2_the_probe_ends_once_the_estimate_is_within_the_indifference_margin_of_what_it_measured():
    p = _probe_at_12()
    t = 104.5
    while p.accept.mean * (1.0 + p.params["indifference"]) < p.run.accept:
        p.observe(spec(t, 12, SPEC_12, 2.6))
        t += SPEC_12
    assert p.accept.mean < p.run.accept                  # still under it, but by less than the margin
    assert staleness.probe_goes_on(p, BATCH_12, t) is None


def test_pg3_a_probe_goes_on_for_half_lives_x_accept_half_life_s_at_most():
    p = _probe_at_12()
    limit = p.run.since + staleness.HALF_LIVES * p.params["accept_half_life_s"]
    assert staleness.probe_goes_on(p, BATCH_12, limit - 0.1) is not None
    assert staleness.probe_goes_on(p, BATCH_12, limit + 0.1) is None


def test_pg4_a_probe_whose_gain_is_under_the_indifference_margin_ends():
    """+3.3 % at the acceptance measured since: it goes on at the default margin (2 %), not at 5 %."""
    assert staleness.probe_goes_on(_probe_at_12(), BATCH_12, 104.5) == pytest.approx(0.0333, abs=1e-3)
    assert staleness.probe_goes_on(_probe_at_12({"indifference": 0.05}), BATCH_12, 104.5) is None


# --- policies.trend / learner ---------------------------------------------------------------------------------------
def test_tr6_no_win_is_guessed_on_a_stale_accept_length():
    """A plain guess measures no acceptance: once the accept estimate is stale (no speculative batch for
    accept_half_life_s) the trend's win at batch 14 is no longer guessed."""
    p = learned((0.01, 0.0001), (0.012, 0.0003), 3.0, range(1, 11))
    b = p.buckets.of(14)
    p.refit(4.0)
    assert not p.accept_stale(4.0) and trend.guessed_gain(p, p.lines, b, 4.0) > 1.0
    p.refit(4.2)
    assert p.accept_stale(4.2) and trend.guessed_gain(p, p.lines, b, 4.2) is None


def test_ln2_a_plain_batch_in_a_bucket_left_for_half_life_s_does_not_end_a_probe_elsewhere():
    """FreshRun starts when *speculation* comes back to a bucket; an open loop's plain batch at a batch size not seen
    for a minute (here 40) leaves the probe at 12 and what it measured."""
    p = _probe_at_12()
    gain = staleness.probe_goes_on(p, BATCH_12, 104.5)
    p.observe(off(104.52, 40, 0.02))
    assert p.run.bucket == BATCH_12
    assert staleness.probe_goes_on(p, BATCH_12, 104.6) == pytest.approx(gain)


def test_ln8_with_min_samples_0_an_arm_without_data_is_still_untried():
    p = make_policy("ucb", {"min_samples": 0}, seed=0, max_batch_size=256)
    for i in range(20):
        p.observe(off(i * 0.01, 8, 0.01))
    b = p.buckets.of(8)
    assert p.known(0, b, 0.5) and not p.known(1, b, 0.5)
    d = p.decide(Snapshot(0.5, 0, 256, 8))
    assert d.untried and speculates(8, d.threshold), d


def test_ln11_a_win_above_does_not_settle_plain_decoding_below_on_a_stale_accept_length():
    """Batch 20 measured both ways (speculation +150 %), batch 8 speculating only: plain is settled at 8 while the
    accept length is fresh, and tried once it is stale (the acceptance may have fallen since)."""
    p = make_policy("ucb", seed=0, max_batch_size=256)
    for i in range(100):
        t = i * 0.01
        p.observe(spec(t, 20, 0.012, 3.0))
        p.observe(off(t, 20, 0.01))
        p.observe(spec(t, 8, 0.011, 3.0))
    b = p.buckets.of(8)
    assert p.dominated(0, b, 1.5) and "not measured" in p.decide(Snapshot(1.5, 20, 256, 8)).reason
    assert p.accept_stale(6.0) and not p.dominated(0, b, 6.0)
    d = p.decide(Snapshot(6.0, 20, 256, 8))
    assert d.untried and not speculates(8, d.threshold), d


def test_ln16_the_trend_settles_an_unmeasured_mode_only_for_half_life_s_after_the_load_came():
    """Plain measured at batch 25 only (the trend: speculation -25 % there): the bucket stays plain on the guess for
    half_life_s (60 s) after the load came to it; then speculation is measured there (a probe of the untried arm)."""
    p = make_policy("bandit", seed=0)
    t, seen = 0.0, {}
    while t < 66.0:
        for bs in range(1, 11):
            p.observe(Sample(t, bs, 0, bs, 0.01 + 0.00005 * bs, True))
            p.observe(Sample(t, bs, 3, 2 * bs, 0.010 + 0.0008 * bs, True))
        p.observe(Sample(t, 25, 0, 25, 0.01 + 0.00005 * 25, True))
        t += 0.5
        if t in (30.0, 59.0, 61.0, 65.0):
            seen[t] = p.decide(Snapshot(t, 10, 256, 25))
    for at in (30.0, 59.0):
        assert not speculates(25, seen[at].threshold) and "the trend says speculation -25%" in seen[at].reason
    for at in (61.0, 65.0):
        assert seen[at].untried and speculates(25, seen[at].threshold), seen[at]


# --- controller.sim -------------------------------------------------------------------------------------------------
GOOD = {"spec_steps": 2, "step_time": {"batch_size": [1, 64], "off": [0.01, 0.03], "spec": [0.015, 0.08]},
        "acceptance": {"mean_accept_length": 2.2}}


def test_sc10_an_accept_length_above_k_plus_1_is_taken_as_k_plus_1():
    """A trace's accept length is checked against its own bound (17), not the profile's K: the core caps it at
    spec_steps + 1, what a speculative step can deliver (the oracle ranks the modes by it)."""
    core = SimCore(parse_profile(GOOD, "t"), 0)
    core.set_load(4, accept_length=6.0)
    assert core.accept_length == 3.0 and core.delivered_accept <= 3.0


def test_ol2_ol3_an_arrival_across_a_rate_change_rescales_the_rest_of_its_draw():
    """Time rescaling: the draw left at a change is spent at the next rate; a looped schedule goes back to its first
    rate at the end of each period (the same arrivals in every run)."""
    assert RateSchedule([(0.0, 2.0), (10.0, 5.0)]).after(9.0, 4.0) == pytest.approx(10.4)
    looped = RateSchedule([(0.0, 1.0), (10.0, 100.0)], period=20.0)
    assert looped.next_change(15.0) == 20.0
    # 1 s at 100/s (100), 10 s at 1/s (10), then 90 / 100/s
    assert looped.after(19.0, 200.0) == pytest.approx(30.9)


def test_ol11_the_intervals_of_the_samples_add_up_to_the_clock():
    """Every second passes into some sample's interval: idle time, prefills, and the prefills of requests that
    finished at their prefill (one output token) while nothing decoded."""
    prof = parse_profile({**GOOD, "noise": 0.0, "prefill_s": 0.004, "prefill_s_per_request": 0.001,
                          "load": {"prompt_len_range": [100, 100], "output_len_range": [1, 3]}}, "t")
    core = OpenLoopCore(prof, 5, RateSchedule([(0.0, 1.0)]))
    total, ones = 0.0, 0
    while core.t < 300:
        sample = core.step(False)
        total += sample.step_s
        ones += sum(lat.output_len == 1 for lat in core.take_finished())
        assert total == pytest.approx(sample.t, rel=1e-9)     # (the time after it, idle or prefill, is the next one's)
    assert ones > 10


def test_fn1_a_finite_run_has_at_least_the_requests_asked_for():
    assert request_count(0.1, 5.0) == 1
    assert request_count(0.1, 5.0, at_least=8) == 8
    assert request_count(4.0, 60.0, at_least=8) == 240


# --- controller.control.loop (12-05f's gap L2) ----------------------------------------------------------------------
def test_l2_a_refused_move_of_a_shift_trial_at_the_threshold_in_force_has_no_kept_row():
    """A shift trial at the threshold in force (105, held by the guard: no row), then a move to another trial
    threshold the engine refuses (revert), then the trial ends at 105 as the decision: no 'kept trial' row, since
    no row ever said 105 was a trial. The guard's answers are scripted (its own logic is tested elsewhere)."""
    loop = ControlLoop(Script([(0.0, Decision(29, 29, "best threshold 29"))]), GuardConfig(changes_per_min=0), 105)
    loop.threshold, loop.guard.exploit = 105, 29
    answers = iter([(105, "trial: accept length stale", True), (60, "trial: the probe goes on", True),
                    (105, "105 stays, the trial showed it pays", False)])

    def apply(*args, **kwargs):
        answer = next(answers)
        if not answer[2]:
            loop.guard.exploit = 105          # the end of the trial: 105 is the decision
        return answer
    loop.guard.apply = apply
    first = loop.tick(1.0)
    assert first.exploratory and not first.changed          # a trial, and no row for it
    moved = loop.tick(2.0)
    assert moved.changed and moved.threshold == 60
    loop.revert(105)                           # the engine did not take 60: the trial at 105 (no row) still runs
    assert loop.exploring
    end = loop.tick(3.0)
    assert end.reason.startswith("trial over") and not end.changed
    assert not end.trial_kept


# --- state.db (12-05f's gap D1) -------------------------------------------------------------------------------------
def test_d1_a_write_refused_to_a_member_who_may_only_read_says_cannot_be_opened_for_writing(short_tmp):
    """A member of the service's group may read the database (0640) but not write it: an offline pin is refused as
    a write ('cannot be opened for writing'), not with the WAL wording meant for a read. As root, acted out as nobody
    in the database's group; as a user not root, who can become no one else, with its own database made read-only
    (0440 in a 0550 directory). (It passed as root only: the access check asked for the real uid, root's, and SQLite's
    own refusal said it; a real member got 'database ...: Permission denied', as one who may not even read it.)"""
    import contextlib

    from click.testing import CliRunner

    from controller.cli.main import cli
    from state.db import leave_wal, open_store
    from tests.test_group_access import GROUP, NOBODY, acting_as
    db = short_tmp / "s.db"
    store = open_store(db)
    leave_wal(store)
    store.conn.close()
    flags = ["--socket", str(short_tmp / "sock"), "--db", str(db)]
    assert CliRunner().invoke(cli, [*flags, "status"]).exit_code == 3       # (imports cached before acting)
    if os.geteuid() == 0:
        os.chown(short_tmp, 0, GROUP)
        os.chown(db, 0, GROUP)
        os.chmod(short_tmp, 0o750)
        member = acting_as(NOBODY, [GROUP])
    else:
        os.chmod(db, 0o440)
        os.chmod(short_tmp, 0o550)
        member = contextlib.nullcontext()
    try:
        with member:
            pin = CliRunner().invoke(cli, [*flags, "threshold", "pin", "5"])
            status = CliRunner().invoke(cli, [*flags, "status"])
    finally:
        os.chmod(short_tmp, 0o750)
    assert pin.exit_code == 1
    assert pin.output == f"specctl: database {db} cannot be opened for writing (Permission denied)\n", pin.output
    assert status.exit_code == 3 and "NOT RUNNING" in status.stdout, status.output      # reads still work


def test_ev3_a_trial_kept_as_the_decision_is_a_row_of_the_simulators_timeline():
    """The guard keeps a shift trial that pays (test_guard_history's probe that goes on): the simulator's timeline
    (the plot's best-known line) gets the row that ends the trial, as the daemon's history does."""
    from controller.sim.evaluate import LoopRunner
    script = [(0.0, Decision(105, 29, "trial: speculate at batch 95-105 (never measured)", untried=True)),
              (0.75, Decision(105, 29, "trial: speculate at batch 95-105 (the probe goes on)", shift=True)),
              (1.25, Decision(105, 105, "speculate up to batch 105: it pays at batch 95-105", gain=0.03))]
    loop = ControlLoop(Script(script), GuardConfig(changes_per_min=0, stabilisation_s=0.5, explore_share=1.0), 29)
    runner = LoopRunner(loop)
    t = 0.0
    while t < 5.0:
        t = round(t + 0.5, 6)
        runner.after_batch(Sample(t - 0.01, 96, 3 if 96 <= loop.threshold else 0, 96, 0.02))
        runner.tick(t)
    assert runner.ticks == [(0.5, 105, True), (1.5, 105, False)], runner.ticks      # the trial, then its end


def test_lp1_batches_run_under_a_pin_are_no_exploration():
    """A pin at 0 while the learned threshold is 29: the batches at 8 run plain because an operator said so, not as
    a trial. They spend none of the exploration share, and the policy's trial after the unpin is let through."""
    loop = ControlLoop(Script([(0.0, Decision(105, 29, "trial: speculate at batch 95-105 (estimate uncertain)"))]),
                       GuardConfig(changes_per_min=0), 29)
    loop.pin(0)
    for i in range(100):
        loop.observe(Sample(i * 0.01, 8, 0, 8, 0.01))
    assert loop.tick(1.0).threshold == 0
    assert loop.guard.explore_used == 0.0
    loop.pin(None)
    loop.observe(Sample(1.5, 96, 0, 96, 0.02))
    tick = loop.tick(2.0)
    assert tick.threshold == 105 and tick.exploratory, tick


def test_lp11_after_an_unpin_the_policys_threshold_is_applied_as_it_is():
    """Pinned at 50, the live batch size 8: the policy's 60 moves no live batch size from 50, which the guard would
    coalesce. But the pinned value was the operator's, not the loop's, so after the unpin the policy's threshold
    holds at once."""
    loop = ControlLoop(Script([(0.0, Decision(60, 60, "speculate up to batch 60", gain=0.5))]),
                       GuardConfig(changes_per_min=0), 50)
    loop.pin(50)
    for i in range(10):
        loop.observe(Sample(i * 0.05, 8, 3, 20, 0.02))
    assert loop.tick(0.5).threshold == 50
    loop.pin(None)
    for i in range(10):
        loop.observe(Sample(0.5 + i * 0.05, 8, 3, 20, 0.02))
    tick = loop.tick(1.0)
    assert tick.threshold == 60 and tick.reason == "unpinned by an operator; speculate up to batch 60", tick


class Told(Script):
    """A scripted policy that records the thresholds it is told are in force and the snapshots it is asked with."""

    def __init__(self, script):
        super().__init__(script)
        self.told, self.snaps = [], []

    def in_force(self, threshold):
        self.told.append(threshold)

    def decide(self, snap):
        self.snaps.append(snap)
        return super().decide(snap)


def test_lp5_lp6_a_policy_switched_in_during_a_trial_is_told_the_threshold_in_force_and_asked_from_the_exploit():
    loop = ControlLoop(Script([(0.0, Decision(105, 29, "trial: speculate at batch 95-105", untried=True))]),
                       GuardConfig(changes_per_min=0, explore_share=1.0), 29)
    loop.observe(Sample(0.49, 96, 0, 96, 0.02))
    assert loop.tick(0.5).threshold == 105 and loop.exploring     # a trial in force, the exploit threshold 29
    new = Told([(0.0, Decision(29, 29, "best threshold 29"))])
    loop.set_policy(new)
    assert new.told == [105]                   # the engine runs 105 (its prefills are priced from it: prefill_cost)
    loop.observe(Sample(0.99, 96, 3, 200, 0.05))
    loop.tick(1.0)
    assert new.snaps[0].exploit_threshold == 29     # the learned threshold carries over, not the trial's


def test_lp7_a_trial_that_ends_where_the_threshold_stayed_is_no_return():
    """A trial the guard granted at the threshold in force (29, also its exploit threshold) ends: nothing moved, so
    the history's row says 'trial over', not 'trial over, back to 29'. The guard's answers are scripted."""
    loop = ControlLoop(Script([(0.0, Decision(29, 10, "trial"))]), GuardConfig(changes_per_min=0), 29)
    loop.guard.exploit = 29
    answers = iter([(29, "trial: plain decode at batch 11-29", True), (29, "best threshold 29", False)])
    loop.guard.apply = lambda *a, **k: next(answers)
    assert loop.tick(1.0).exploratory
    end = loop.tick(2.0)
    assert not end.changed and end.reason == "trial over; best threshold 29", end.reason
