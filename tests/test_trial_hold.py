"""Uncertainty trials of a mode measured clearly worse are spaced out (policies.staleness.TrialHold).

Above the crossover at constant load nothing speculates: the accept estimate goes stale and its growing uncertainty
drew a trial of speculation at the live bucket about once a minute, even at -26 % (H200 12-03d call 3). Scripted
samples and snapshots, time as an argument."""
from __future__ import annotations

import pytest

from controller.contract import speculates
from policies import Sample, Snapshot, make_policy, staleness
from policies.staleness import HOLD_FIRST_S, HOLD_MAX_S, TrialHold

OFF_64 = 0.02          # step seconds at batch 64: 3,200 tok/s plain
SPEC_64 = 0.057        # ... at accept 2.0: 2,246 tok/s speculating, -30 %


def test_a_clear_loss_waits_twice_as_long_each_time_and_a_near_tie_never():
    h = TrialHold(4)
    assert h.allows(1, 0.0, -0.30, True)                     # the first trial of the loss
    assert not h.allows(1, HOLD_FIRST_S - 1, -0.30, True)
    assert h.allows(1, HOLD_FIRST_S, -0.30, True)
    assert not h.allows(1, 3 * HOLD_FIRST_S - 1, -0.30, True)  # then twice as long
    assert h.allows(1, 3 * HOLD_FIRST_S, -0.30, True)
    assert h.allows(2, 1.0, -0.30, True)                     # per bucket
    assert all(h.allows(0, t, -0.05, True) for t in (0.0, 0.1, 0.2))      # a near tie: the open loop's learning
    assert all(h.allows(1, 100.0 + t, -0.30, False) for t in (0.0, 0.1))  # plain where speculation loses: no trial
    assert all(h.allows(3, t, None, True) for t in (0.0, 0.1))            # nothing measured
    assert h.allows(3, 0.0, 0.30, False) and not h.allows(3, 1.0, 0.30, False)   # plain where speculation wins
    h.start_over(1)
    assert h.allows(1, 3 * HOLD_FIRST_S + 1, -0.30, True)
    late = TrialHold(1)
    t = 0.0
    for _ in range(12):
        assert late.allows(0, t, -0.30, True)
        t += late.wait[0] / 2 if late.wait[0] < HOLD_MAX_S else HOLD_MAX_S   # the wait before this one's successor
    assert late.wait[0] == HOLD_MAX_S


def test_a_loss_that_changes_sides_starts_the_spacing_over():
    h = TrialHold(1)
    assert h.allows(0, 0.0, -0.30, True) and h.allows(0, 60.0, -0.30, True)     # speculation trials: next at >= 180
    assert h.allows(0, 70.0, 0.30, False)                                      # now plain loses: its first trial
    assert not h.allows(0, 71.0, 0.30, False) and h.allows(0, 130.0, 0.30, False)


def trials_at_64(seed: int, phases: list[tuple[int, float, float]]) -> list[float]:
    """Batch 64 measured both ways (speculation -30 %) for 10 s, then plain decoding in phases (batch, step seconds,
    until), the threshold at 0, a decision every 0.5 s: the times of the decisions that speculate at 64."""
    p = make_policy("thompson", seed=seed, max_batch_size=256)
    t = 0.0
    while t < 10.0:
        p.observe(Sample(t, 64, 3, 128, SPEC_64, True))
        p.observe(Sample(t + 0.05, 64, 0, 64, OFF_64, True))
        t += 0.1
    trials, next_tick = [], t + 0.5
    for batch, step_s, until in phases:
        while t < until:
            p.observe(Sample(t, batch, 0, batch, step_s, True))
            t += step_s
            if t >= next_tick:
                d = p.decide(Snapshot(next_tick, 0, 256, batch, False))
                if batch == 64 and speculates(64, d.threshold):
                    trials.append(next_tick)
                next_tick += 0.5
    return trials


def trials_at_constant_load(seconds: float, seed: int = 0) -> list[float]:
    return trials_at_64(seed, [(64, OFF_64, 10.0 + seconds)])


@pytest.mark.parametrize("seed", [0, 1])
def test_at_constant_load_above_the_crossover_trials_thin_out(seed):
    got = trials_at_constant_load(600.0, seed)
    assert 1 <= len(got) <= 5, got                           # at 60, >= 120, >= 240, >= 480 s after the one before
    gaps = [b - a for a, b in zip(got, got[1:])]
    assert all(g >= HOLD_FIRST_S * 2 ** i for i, g in enumerate(gaps)), gaps


def test_without_the_hold_the_stale_estimate_keeps_drawing_trials(monkeypatch):
    monkeypatch.setattr(staleness, "CLEAR_LOSS", 100.0)      # nothing counts as a clear loss: never held
    assert len(trials_at_constant_load(600.0)) > 5


def trials_after_a_return(away_s: float, seed: int) -> tuple[float, list[float]]:
    """Plain at 64 until 310 s (trials held: the last at about 250 s, the next not before about 490 s), plain at
    batch 8 for `away_s`, then at 64 again for 120 s: when the load came back, and the trials at 64 since."""
    back = 310.0 + away_s
    trials = trials_at_64(seed, [(64, OFF_64, 310.0), (8, 0.01, back), (64, OFF_64, back + 120.0)])
    return back, [x for x in trials if x >= back]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_loads_return_after_half_life_s_away_starts_the_spacing_over(seed):
    back, got = trials_after_a_return(61.0, seed)           # away for longer than half_life_s (60 s)
    assert got and got[0] - back < 5.0, (back, got)           # the first trial at once, not at about 490 s
    assert len(got) >= 2 and HOLD_FIRST_S <= got[1] - got[0] < 2 * HOLD_FIRST_S, got   # then 60 s, not 480 s
    back, got = trials_after_a_return(30.0, seed)           # away for less: the spacing goes on
    assert not got, (back, got)                               # held until about 490 s
