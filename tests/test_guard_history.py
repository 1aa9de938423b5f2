"""What the decision history records over a scripted run: the reason of every change describes the
threshold applied (or says the guard adjusted it), and a trial that shows its threshold pays is not
ended only to come back a tick later. Time comes in as an argument (ticks every 0.5 s); the policy is
a script of decisions, so nothing here depends on a clock or on learning."""
from __future__ import annotations

from controller.contract import Sample
from controller.control.guard_config import GuardConfig
from controller.control.loop import ControlLoop
from policies import Decision
from policies.base import Policy


class Script(Policy):
    """decide() answers from a list of (from_t, Decision): the newest entry at or before now."""
    name = "script"

    def __init__(self, script):
        super().__init__(max_batch_size=256)
        self.script = script

    def decide(self, snap):
        return [d for t, d in self.script if t <= snap.now][-1]


def run(script, initial: int, live: int, until: float, kept: list | None = None, **guard):
    """Ticks every 0.5 s with a decode batch of size `live` before each; the changes made (and into `kept`
    the ticks that ended a trial at its own threshold: the daemon records those too)."""
    cfg = GuardConfig(**{"changes_per_min": 0, **guard})
    loop = ControlLoop(Script(script), cfg, initial)
    loop.threshold = initial
    changes, t = [], 0.0
    while t < until:
        t = round(t + 0.5, 6)
        loop.observe(Sample(t - 0.01, live, 3 if live <= loop.threshold else 0, live, 0.02))
        tick = loop.tick(t)
        if tick.changed:
            changes.append((t, tick.previous, tick.threshold, tick.reason))
        if kept is not None and tick.trial_kept:
            kept.append((t, tick.threshold, tick.reason))
    return loop, changes


def test_a_trial_the_policy_does_not_follow_still_ends_at_once():
    script = [(0.0, Decision(105, 29, "trial", untried=True)),
              (1.0, Decision(29, 29, "best threshold 29: live batch 95-105 is plain decoding"))]
    _, changes = run(script, 29, 96, 5.0)
    assert [(t, old, new) for t, old, new, _ in changes] == [(0.5, 29, 105), (1.0, 105, 29)]
    assert changes[1][3] == "trial over, back to 29; best threshold 29: live batch 95-105 is plain decoding"


def test_a_trial_that_ends_at_a_new_best_threshold_is_not_called_a_return():
    # trial at 94 from 105 (invisible at live 70), then the policy's best moves to 60: "back to" would be a lie
    script = [(0.0, Decision(94, 105, "trial: plain decode at batch 95-105", untried=True)),
              (1.0, Decision(60, 60, "speculate only up to batch 60: it no longer pays at batch 61-105", gain=0.05))]
    _, changes = run(script, 105, 70, 5.0, stabilisation_s=0)
    assert [(old, new, reason) for _, old, new, reason in changes] == [
        (105, 60, "trial over; speculate only up to batch 60: it no longer pays at batch 61-105")]


def test_a_move_held_for_too_small_a_gain_says_so_not_the_policys_move():
    # after a trial at 169, the policy's best is 94, worth +0.1 % (< min_gain 0.3 %): 105 stays
    script = [(0.0, Decision(169, 105, "trial: speculate at batch 151-169")),
              (1.0, Decision(94, 94, "speculate only up to batch 94: it no longer pays at batch 95-105 "
                                     "(speculation -3% tok/s)", gain=0.001))]
    loop, changes = run(script, 105, 160, 3.0, stabilisation_s=0)
    assert [(old, new) for _, old, new, _ in changes] == [(105, 169), (169, 105)]
    reason = changes[1][3]
    # before: "trial over; speculate only up to batch 94: ..." and the threshold went to 105
    assert reason.startswith("trial over, back to 105; guard: 105 held, the move to 94 would gain +0.10% of the current traffic's tok/s (under 0.30%); "
                             "the policy: speculate only up to batch 94"), reason
    assert loop.threshold == 105


def test_every_change_reason_names_the_threshold_it_applied_over_a_scripted_shift():
    # a load shift down then up: each row's text must speak of its own new threshold
    script = [(0.0, Decision(105, 105, "speculate up to batch 105: it pays at batch 95-105", gain=0.06)),
              (5.0, Decision(94, 94, "speculate only up to batch 94: it no longer pays at batch 95-105",
                             gain=0.001)),
              (10.0, Decision(29, 29, "speculate only up to batch 29: it no longer pays at batch 30-32", gain=0.1))]
    _, changes = run(script, 29, 96, 15.0, stabilisation_s=0.5, max_step_buckets=100)
    assert [(old, new) for _, old, new, _ in changes] == [(29, 105), (105, 29)], changes
    for _, _, new, reason in changes:
        assert f"batch {new}:" in reason or f"{new} held" in reason, reason


# --- a trial the load's move calls for (Decision.shift) -------------------------------------------------
SPENT_BUDGET = {"changes_per_min": 1.0, "changes_burst": 2.0, "stabilisation_s": 0.5, "explore_share": 1.0}
NOISE_TRIAL = [(0.0, Decision(105, 29, "trial: speculate at batch 95-105 (estimate uncertain)")),  # both tokens
               (0.75, Decision(29, 29, "best threshold 29"))]


def shift_trial(shift: bool) -> Decision:
    return Decision(105, 29, "trial: speculate at batch 95-105 to measure it (accept length 2.00 is stale; "
                             "at 3.40, seen lately, speculation +3% tok/s)", shift=shift)


def test_a_shift_trial_is_not_held_by_a_spent_change_budget_and_its_threshold_stays_when_it_pays():
    # The looped mixed-shift trace's third pass through C=96: exploratory trials had spent the budget and the
    # stale-acceptance trial waited 40-55 engine s (or the whole phase) for tokens; then 29 -> 105 trial,
    # 105 -> 29 trial over, 29 -> 105 a second later: three rows for one move.
    script = NOISE_TRIAL + [(5.0, shift_trial(True)),
                            (5.25, Decision(105, 105, "speculate up to batch 105: it pays at batch 95-105", gain=0.03))]
    loop, changes = run(script, 29, 96, 15.0, **SPENT_BUDGET)
    assert [(t, old, new) for t, old, new, _ in changes] == [(0.5, 29, 105), (1.0, 105, 29), (5.0, 29, 105)], changes
    assert changes[2][3].startswith("trial: speculate at batch 95-105")
    assert loop.threshold == 105 and loop.guard.exploit == 105 and not loop._exploring


def test_an_ordinary_trial_still_waits_for_the_change_budget():
    script = NOISE_TRIAL + [(5.0, shift_trial(False))]
    loop, changes = run(script, 29, 96, 15.0, **SPENT_BUDGET)
    assert [(old, new) for _, old, new, _ in changes] == [(29, 105), (105, 29)]
    assert loop.threshold == 29


def test_the_move_a_shift_trial_calls_for_is_free_once_within_learning_s():
    # the policy does not follow at once (the trial ends), then wants 105 at a gain under urgent_gain
    # with the budget spent: that move is made; the next discretionary one waits again
    script = NOISE_TRIAL + [(5.0, shift_trial(True)),
                            (5.25, Decision(29, 29, "best threshold 29")),
                            (8.0, Decision(105, 105, "speculate up to batch 105", gain=0.03)),
                            (12.0, Decision(94, 94, "speculate only up to batch 94", gain=0.01))]
    loop, changes = run(script, 29, 96, 20.0, **SPENT_BUDGET)
    assert [(t, old, new) for t, old, new, _ in changes] == [
        (0.5, 29, 105), (1.0, 105, 29), (5.0, 29, 105), (5.5, 105, 29), (9.0, 29, 105)], changes
    assert loop.threshold == 105
    # too late: the grant lasts learning_s after the trial
    script[-2] = (30.0, script[-2][1])
    script[-1] = (40.0, script[-1][1])
    loop, changes = run(script, 29, 96, 35.0, **SPENT_BUDGET)
    assert [(old, new) for _, old, new, _ in changes][-1] == (105, 29) and loop.threshold == 29


def test_the_shift_trials_grant_is_used_by_the_first_move_it_covers_even_an_urgent_one():
    # an urgent move to the trial's threshold needed no grant but uses it: a later discretionary move in
    # the same direction within learning_s waits for the budget like any other
    script = NOISE_TRIAL + [(5.0, shift_trial(True)),
                            (5.25, Decision(29, 29, "best threshold 29")),
                            (8.0, Decision(105, 105, "speculate up to batch 105", gain=0.5)),
                            (10.0, Decision(94, 94, "speculate only up to batch 94", gain=0.5)),
                            (12.0, Decision(105, 105, "speculate up to batch 105", gain=0.03))]
    loop, changes = run(script, 29, 96, 20.0, **SPENT_BUDGET)
    moves = [(old, new) for _, old, new, _ in changes]
    assert moves[-2:] == [(29, 105), (105, 94)] and loop.threshold == 94, changes


def test_a_probe_that_goes_on_as_a_shift_trial_keeps_its_threshold_when_it_pays():
    # coding-to-chat's last segment: the probe of an untried arm goes on (the accept estimate still mostly the
    # traffic's before, policies.staleness probe_goes_on), then the policy proposes its threshold as the best.
    # The trial was in force before it was a shift trial: before, it ended and came back a tick later
    # (29 -> 105, 105 -> 29 trial over, 29 -> 105).
    script = [(0.0, Decision(105, 29, "trial: speculate at batch 95-105 to measure it (never measured)", untried=True)),
              (0.75, Decision(105, 29, "trial: speculate at batch 95-105 to measure it (accept length 2.19 is "
                                       "still mostly older traffic's; ...)", shift=True)),
              (1.25, Decision(105, 105, "speculate up to batch 105: it pays at batch 95-105", gain=0.03))]
    kept = []
    loop, changes = run(script, 29, 96, 5.0, kept, stabilisation_s=0.5, explore_share=1.0)
    assert [(t, old, new) for t, old, new, _ in changes] == [(0.5, 29, 105)], changes
    assert loop.threshold == 105 and loop.guard.exploit == 105 and not loop._exploring
    # the trial's end is a row of its own (newcomer run, 12-02: the history's last word on 105 was "trial:",
    # and the plot's best-known line stayed at 29 while 105 was the decision)
    assert [(t, thr) for t, thr, _ in kept] == [(1.5, 105)], kept
    assert kept[0][2].startswith("trial over; 105 stays, the trial showed it pays")


def test_a_trial_that_ends_back_at_the_exploit_threshold_is_a_change_not_a_kept_trial():
    kept = []
    loop, changes = run(NOISE_TRIAL, 29, 96, 5.0, kept, stabilisation_s=0.5, explore_share=1.0)
    assert [(old, new) for _, old, new, _ in changes] == [(29, 105), (105, 29)] and kept == []


def test_an_expired_shift_trial_at_the_same_threshold_does_not_block_a_later_probes():
    # review (helper-37): a shift trial at 105 whose grant went unused left its record behind; a probe going on at
    # 105 twenty seconds later was not recorded as a shift trial, and its threshold ended and came back
    script = [(0.0, Decision(105, 29, "trial: accept length stale", shift=True)),
              (1.0, Decision(29, 29, "best threshold 29: live batch 95-105 is plain decoding")),
              (20.0, Decision(105, 29, "trial: speculate at batch 95-105 to measure it", untried=True)),
              (20.5, Decision(105, 29, "trial: the probe goes on", shift=True)),
              (21.0, Decision(105, 105, "speculate up to batch 105: it pays at batch 95-105", gain=0.03))]
    loop, changes = run(script, 29, 96, 24.0, stabilisation_s=0.5, explore_share=1.0, learning_s=4)
    assert [(t, old, new) for t, old, new, _ in changes if t >= 20.0] == [(20.0, 29, 105)], changes
    assert loop.threshold == 105


def test_a_trial_the_guard_leaves_in_force_without_making_it_the_decision_is_no_kept_trial():
    # the trial ends at the policy's 29, but the guard keeps 105 applied (coalesced: the move would change no
    # live batch size): 29 is the decision, and 105 must not enter the history as one
    loop = ControlLoop(Script([(0.0, Decision(29, 29, "best threshold 29"))]), GuardConfig(changes_per_min=0), 105)
    loop.threshold, loop._exploring, loop.guard.exploit = 105, True, 29
    loop.guard.apply = lambda *a, **k: (105, "best threshold 29; guard: kept 105 (coalesced)", False)
    tick = loop.tick(1.0)
    assert tick.reason.startswith("trial over") and not tick.changed and not tick.trial_kept
    loop.threshold, loop._exploring, loop.guard.exploit = 105, True, 105     # kept as the decision, but this
    assert not loop.tick(2.0).trial_kept                # trial changed nothing (its threshold was in force): no row
    loop.threshold, loop._exploring, loop._trial_shown = 105, True, True    # one that was a change: its row
    assert loop.tick(3.0).trial_kept


def test_a_trial_the_engine_refused_never_ran_and_has_no_end():
    """helper-81: SGLang refusing a trial's threshold (Service._actuate reverts the loop) left the loop thinking the
    trial in force, and the next tick's row said 'trial over, back to 29' for a trial no batch ran."""
    script = [(0.0, Decision(105, 29, "trial", untried=True)),
              (1.0, Decision(29, 29, "best threshold 29: live batch 95-105 is plain decoding"))]
    loop = ControlLoop(Script(script), GuardConfig(changes_per_min=0), 29)
    loop.observe(Sample(0.49, 96, 0, 96, 0.02))
    tick = loop.tick(0.5)
    assert tick.threshold == 105 and tick.exploratory and loop.exploring
    loop.revert(29)                                          # the engine did not take 105
    assert not loop.exploring
    loop.observe(Sample(0.99, 96, 0, 96, 0.02))
    tick = loop.tick(1.0)
    assert tick.threshold == 29 and not tick.changed and not tick.trial_kept
    assert not tick.reason.startswith("trial over"), tick.reason
