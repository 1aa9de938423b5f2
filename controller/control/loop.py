"""The control loop shared by the daemon (real time) and the simulator (virtual time)."""
from __future__ import annotations

from dataclasses import dataclass

from policies import Decision, Policy, Sample, Snapshot

from ..contract import speculates

from .guard import Guard
from .guard_config import GuardConfig


@dataclass(frozen=True)
class Tick:
    now: float
    threshold: int
    previous: int
    reason: str
    exploratory: bool
    # a trial ended at its own threshold, which is now the decision (the guard kept it: it pays): nothing to
    # apply, but a row to record, or the history and the plot's best-known line would go on calling it a trial
    trial_kept: bool = False

    @property
    def changed(self) -> bool:
        return self.threshold != self.previous


def pinned_reason(threshold: int) -> str:
    """A pin's history row, as the tick that applies it writes it and a start that restores it says it."""
    return f"pinned at {threshold} by an operator"


class ControlLoop:
    """Feeds samples to the policy; on each tick asks it, guards it, and returns the threshold.

    Not thread-safe by itself: the daemon serialises observe() and tick().
    """

    def __init__(self, policy: Policy, guard: GuardConfig | None = None, initial_threshold: int = 0,
                 prefills_pay_draft: bool = True):
        self.policy = policy
        self.guard_config = guard or GuardConfig()
        self.guard = Guard(self.guard_config, policy.buckets, initial_threshold)
        self._threshold = 0
        self.threshold = self.guard.clamp(initial_threshold)
        self.pinned: int | None = None
        self._was_pinned = False
        self.last_sample_t: float | None = None
        # the newest sample the daemon has received, folded in or still queued (Ingest.on_sample, the engine's thread):
        # the fallback's "no samples" is the engine's silence, not the ingest thread's 50 ms between folds (at --speed
        # 1000 that is 50 engine s: every tick held "no samples for 20 s" and nothing was ever decided)
        self.heard_t: float | None = None
        self._since_tick = 0
        self._explored = 0                       # batches since the last tick run in a non-exploit mode
        self._exploring = False
        # the trial in force changed the threshold (the history has its row). Not the guard's _trial_visible:
        # that one also counts a shift trial at the threshold in force (its end is free), which has no row
        self._trial_shown = False
        self._in_force = (False, False)          # (_exploring, _trial_shown) as the engine ran them before a tick
        self._live: dict[int, int] = {}          # bucket -> decode-only batches since the last tick
        self._recent: dict[int, float] = {}      # batch size -> when it last ran (the coalescing window)
        self.live_batch_size: int | None = None  # the bucket most of them fell in (its upper edge)
        # the engine's off path (Snapshot.prefills_pay_draft); the daemon sets it from its engine at each tick
        self.prefills_pay_draft = prefills_pay_draft

    @property
    def threshold(self) -> int:
        return self._threshold

    @property
    def exploring(self) -> bool:
        """Is the threshold in force a policy's trial (not its best, not the guard holding the way to it)?"""
        return self._exploring

    @threshold.setter
    def threshold(self, value: int) -> None:
        """Every threshold the engine is to run, the policy is told (Policy.in_force)."""
        self._threshold = value
        self.policy.in_force(value)

    def observe(self, sample: Sample) -> None:
        self.policy.observe(sample)
        self.last_sample_t = sample.t
        self._since_tick += 1
        if self.pinned is None and sample.speculative != speculates(sample.batch_size, self.guard.exploit):
            self._explored += 1
        self._recent[sample.batch_size] = sample.t
        if sample.decode_only and sample.batch_size > 0:
            b = self.policy.buckets.of(sample.batch_size)
            self._live[b] = self._live.get(b, 0) + 1

    def heard(self) -> float | None:
        """When the engine last sent a sample: the newest folded in or received (read once: another thread sets it)."""
        heard, folded = self.heard_t, self.last_sample_t
        return folded if heard is None else heard if folded is None else max(heard, folded)

    def _take_live(self) -> int | None:
        if self._live:
            self.live_batch_size = self.policy.buckets.high(max(self._live, key=self._live.__getitem__))
            self._live.clear()
        return self.live_batch_size

    def recent_batch_sizes(self, now: float) -> list[int]:
        """Batch sizes run within the guard's coalescing window (all of them when it is 0: off)."""
        window = self.guard_config.coalesce_window_s
        if not window:
            return list(range(1, self.guard.hi + 2))
        for bs in [bs for bs, t in self._recent.items() if t < now - window]:
            del self._recent[bs]
        return list(self._recent)

    def set_policy(self, policy: Policy) -> None:
        self.policy = policy
        policy.in_force(self.threshold)
        self.guard = Guard(self.guard_config, policy.buckets, self.guard.exploit)

    def set_guard_config(self, config: GuardConfig) -> None:
        """New bounds/limits (SIGHUP); the learned exploit threshold carries over."""
        self.guard_config = config
        self.guard = Guard(config, self.policy.buckets, self.guard.exploit)

    def pin(self, threshold: int | None) -> None:
        self.pinned = threshold
        self.guard.forget_proposals()

    def revert(self, threshold: int) -> None:
        """The engine did not take the last threshold and still runs this one: the next tick sees
        its decision as a change again, and retries it. A trial it refused never ran (its end is no 'trial over'
        row); one in force before stays so."""
        self.threshold = threshold
        self._exploring, self._trial_shown = self._in_force

    def tick(self, now: float) -> Tick:
        self.guard.account(now, self._since_tick, explored=self._explored)
        self._since_tick = self._explored = 0
        previous, self._in_force = self.threshold, (self._exploring, self._trial_shown)
        if self.pinned is not None:
            self.threshold, reason, self._exploring = self.pinned, pinned_reason(self.pinned), False
            self._was_pinned, self._trial_shown = True, False
            return Tick(now, self.threshold, previous, reason, False)
        # The policy breaks ties toward the exploit threshold, never toward an exploratory one.
        snap = Snapshot(now, self.guard.exploit, self.policy.max_batch_size, self._take_live(), self.prefills_pay_draft)
        decision: Decision = self.policy.decide(snap)
        # Right after an unpin the policy's threshold is applied as it is (nothing to coalesce with).
        applied = None if self._was_pinned else self.threshold
        unpinned, self._was_pinned = self._was_pinned, False
        was_trial, exploit_before = self._exploring, self.guard.exploit
        self.threshold, reason, self._exploring = self.guard.apply(
            now, decision, self.heard(), applied, self.recent_batch_sizes(now), self._exploring)
        ended = was_trial and not self._exploring
        if ended:       # "back to": the guard's "N held" then reads as what it is, a return from the trial
            back = self.threshold != previous and self.threshold == exploit_before == self.guard.exploit
            reason = f"trial over, back to {self.threshold}; {reason}" if back else f"trial over; {reason}"
        if unpinned:                      # the history says why the pinned value gave way
            reason = f"unpinned by an operator; {reason}"
        kept = ended and self._trial_shown and self.threshold == previous == self.guard.exploit
        self._trial_shown = self._exploring and (self._trial_shown or self.threshold != previous)
        return Tick(now, self.threshold, previous, reason, self._exploring, kept)
