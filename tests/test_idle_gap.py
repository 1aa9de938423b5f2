"""An interval that held an idle period is not a step (the H200, 2026-12-03, a closed loop of 24 clients from a
fresh database): the bandit's first trial ran at batch 1 while the engine idled before the load began, so the
first speculative interval was 4.92 s. Rewarded as a step, it made speculation ~90 % worse at batch 1, and the
dominance rule then settled speculation as a loss at every larger batch size without a trial: the threshold stayed
at 0 for the whole minute at batch 24, where speculation paid +38 %. The samples below are that run's (times,
batch sizes, tokens and steps from its database; the batch-24 steps are its means)."""
from __future__ import annotations

import pytest

from controller.contract import speculates
from controller.control.loop import ControlLoop
from policies import Sample, make_policy
from policies.reward import usual_rate

PLAIN_1, PLAIN_24 = 0.0047, 0.00573     # plain decode steps at batch 1 and 24 (the run's means)
SPEC_24 = 2.0 * PLAIN_24 / 1.38         # accept length 2.0 and +38 % at batch 24 (12-02f: "+38 % at batch 21-23")
PREFILL_EVERY, PREFILL_S = 13, 0.008    # ~7 % of the intervals held a prefill


def start(loop: ControlLoop, idle_gap: bool) -> float:
    """The engine's warm-up at batch 1, then the trial's two speculative results, the first after the idle wait."""
    t = 0.0
    for _ in range(7):
        t += PLAIN_1
        loop.observe(Sample(t, 1, 0, 1, PLAIN_1, True))
    loop.tick(t)
    t += 4.92
    if idle_gap:                         # the plugin before the fix: the interval over the idle wait was a sample
        loop.observe(Sample(t, 1, 3, 1, 4.92, False))
    t += 0.011
    loop.observe(Sample(t, 1, 3, 2, 0.011, True))
    return t


def closed_24(loop: ControlLoop, t: float, seconds: float) -> list[int]:
    """24 clients for `seconds`, the daemon ticking every 0.5 s: each applied threshold."""
    applied, tick, i, end = [], t + 0.5, 0, t + seconds
    while t < end:
        spec = speculates(24, loop.threshold)
        step = (SPEC_24 if spec else PLAIN_24) + (PREFILL_S if i % PREFILL_EVERY == PREFILL_EVERY - 1 else 0.0)
        t += step
        loop.observe(Sample(t, 24, 3 if spec else 0, 48 if spec else 24, step, i % PREFILL_EVERY != PREFILL_EVERY - 1))
        i += 1
        while tick <= t:
            applied.append(loop.tick(tick).threshold)
            tick += 0.5
    return applied


@pytest.mark.parametrize("idle_gap", [True, False])
def test_speculation_is_tried_and_kept_at_batch_24_after_a_first_trial_over_an_idle_wait(idle_gap):
    loop = ControlLoop(make_policy("bandit", seed=0), initial_threshold=0)
    applied = closed_24(loop, start(loop, idle_gap), 60.0)
    assert any(speculates(24, a) for a in applied[:40]), "speculation never tried at batch 24 in 20 s"
    late = applied[-40:]                                  # the last 20 s: speculating, where it pays
    assert sum(speculates(24, a) for a in late) >= 0.9 * len(late)


def test_an_arm_without_an_estimate_checks_its_interval_against_the_other_modes():
    p = make_policy("bandit", seed=0)
    for k in range(7):
        p.observe(Sample(PLAIN_1 * (k + 1), 1, 0, 1, PLAIN_1, True))
    b = p.buckets.of(1)
    assert usual_rate(p, 1, b, 3) == pytest.approx(1 / PLAIN_1 / 4)          # K + 1 plain steps at the most
    assert p.reward(1, b, Sample(5.0, 1, 3, 1, 4.92, False)) is None         # an idle wait: no reward
    assert p.reward(1, b, Sample(5.0, 1, 3, 2, 0.011, False)) == pytest.approx(1 / 0.011)
    assert usual_rate(p, 0, p.buckets.of(24), 0) == 0.0                       # nothing to check against
    assert p.reward(0, p.buckets.of(24), Sample(5.0, 24, 0, 24, 4.0, False)) == pytest.approx(6.0)
    for k in range(5):                                                       # batch 24: speculation measured, plain not
        p.observe(Sample(6.0 + k * SPEC_24, 24, 3, 48, SPEC_24, True))
    b = p.buckets.of(24)
    assert usual_rate(p, 0, b, 0) == pytest.approx(24 / SPEC_24)              # a plain step no longer than a spec one
    assert p.reward(0, b, Sample(7.0, 24, 0, 24, 5 * SPEC_24, False)) is None            # 5 spec steps: an idle gap
    assert p.reward(0, b, Sample(7.0, 24, 0, 24, 2 * SPEC_24, False)) == pytest.approx(12 / SPEC_24)
