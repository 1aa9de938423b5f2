"""Mechanism around every policy: bounds, stabilisation, rate cap, exploration budget, fallback.

Like Kubernetes' HPA and Ray Serve's autoscaler, the policy only recommends;
this wrapper decides how far and how fast the applied threshold may follow.
"""
from __future__ import annotations

from collections import deque
from typing import Collection

from policies.buckets import Buckets
from policies.types import Decision, PolicyError

from ..numtext import plain
from .changes import ChangeBudget
from .guard_config import HOLD, GuardConfig
from .shift import LoadLevel


def moves_any(a: int, b: int, batch_sizes: Collection[int]) -> bool:
    """Do thresholds a and b route any of these batch sizes differently?"""
    lo, hi = min(a, b), max(a, b)
    return any(lo < bs <= hi for bs in batch_sizes)


class Guard:
    """Turns a policy's Decision into the threshold actually applied."""

    def __init__(self, config: GuardConfig, buckets: Buckets, initial: int):
        if isinstance(initial, bool) or not isinstance(initial, int) or initial < 0:
            raise PolicyError(f"guard: initial threshold {initial!r} is not a batch size")   # e.g. a NaN restored
        self.cfg = config
        self.buckets = buckets
        self.hi = min(config.max_threshold, buckets.edges[-1])
        self.exploit = self.clamp(initial)
        self._proposals: deque[tuple[float, int]] = deque()
        self._batches = 0.0          # discounted batch counts, for the exploration budget
        self._explored = 0.0
        self._t = None
        self.changes = ChangeBudget(config.changes_per_min, config.changes_burst)
        # Probes of an untried arm have their own small bucket: free of the change budget (which a real
        # shift needs: spending it on probes left the looped mixed-shift trace's C=96 phase with 0.58
        # tokens and its correcting probe skipped), but not unlimited at constant load (h200-2b6 at
        # 40 req/s probed the same never-caught arm several times a minute).
        self.probes = ChangeBudget(config.untried_per_min, config.untried_burst)
        self.level = LoadLevel(config.shift_ratio, config.learning_s)   # ... unless the load moves
        self._moving = False
        self._settled = (self.exploit, -1e9, 0)   # the last non-trial threshold applied, when, direction
        self._trial_visible = True       # the trial in force was a visible change: its end is free
        self._trial_whole = False        # the trial in force was a Decision.whole one (a trial at 0): its end is not coalesced
        self._untried: dict[int, float] = {}      # threshold of a probe of an untried arm -> when
        self._learning_until = -1.0      # the policy probed an untried arm: changes are not held until then
        # the last shift trial (exploit threshold then, its threshold, until when the move it calls for is free)
        self._shift_trial: tuple[int, int, float] | None = None

    def clamp(self, t: int) -> int:
        # (a min_threshold above the engine's largest batch is that batch: 300 on a 256 engine was applied as 300, out of
        # the range a pin may take, and each start warned of the saved threshold 'above the engine's largest batch')
        return max(min(self.cfg.min_threshold, self.hi), min(self.hi, int(t)))

    def account(self, now: float, batches: int, exploratory: bool = False, explored: int | None = None) -> None:
        """Count the batches run since the last decision and how many of them were exploratory:
        `explored` of them (those whose mode the exploit threshold would not have chosen), or
        all of them when `exploratory` and no count is given."""
        if self._t is not None and now > self._t:
            f = 0.5 ** ((now - self._t) / self.cfg.explore_window_s)
            self._batches *= f
            self._explored *= f
        self._t = now
        self._batches += batches
        self._explored += (batches if exploratory else 0) if explored is None else explored

    @property
    def explore_used(self) -> float:
        return self._explored / self._batches if self._batches else 0.0

    def forget_proposals(self) -> None:
        """After a pin or unpin: proposals from before it back nothing (nor a shift trial)."""
        self._proposals.clear()
        self._shift_trial = None

    def _stabilised(self, now: float, proposal: int) -> int:
        self._proposals.append((now, proposal))
        # Keep the newest proposal at or before the window's start: the window is then covered
        # however late the ticks come (the daemon's are not exact; when the one older proposal
        # was dropped, a lone new one moved the threshold at once, and it flapped tick by tick).
        while len(self._proposals) > 1 and self._proposals[1][0] <= now - self.cfg.stabilisation_s:
            self._proposals.popleft()
        values = [p for _, p in self._proposals]
        if all(v > self.exploit for v in values):
            return min(values)
        if all(v < self.exploit for v in values):
            return max(values)
        return self.exploit

    def _rate_capped(self, target: int, whole: bool = False) -> int:
        if whole and target == 0:      # a move to 0 for the prefills (Decision.whole): no threshold on the way pays
            return 0
        cur_k = self.buckets.index_of_threshold(self.exploit)
        tgt_k = self.buckets.index_of_threshold(target)
        step = self.cfg.max_step_buckets
        if abs(tgt_k - cur_k) <= step:
            return target
        k = cur_k + step if tgt_k > cur_k else cur_k - step
        return 0 if k <= 0 else self.buckets.high(k - 1)

    def apply(self, now: float, decision: Decision, last_sample_t: float | None, applied: int | None = None,
              live: Collection[int] = (), exploring: bool = False) -> tuple[int, str, bool]:
        """(threshold to apply, reason, exploratory?) for this decision tick.

        With `applied` (the threshold in force, `exploring` if it is exploratory) and `live`
        (the batch sizes seen in the coalescing window), a change that would move none of
        those batch sizes keeps `applied`: it would change nothing an operator or a request
        could see (with no batch size in the window there is nothing to compare: the change
        is made). A visible change then needs the change budget (token bucket), except the
        end of an exploration, a probe of an untried arm (within the probes' own bucket,
        untried_per_min / untried_burst, or any while the load moves: shift_ratio, LoadLevel;
        a probe repeating one within flap_s is charged), a trial the load's move calls for
        (decision.shift) and, within learning_s of it, the move to that trial's threshold, and
        exploit moves worth `urgent_gain` (and, within learning_s of an untried probe, any move but
        one reversing the last within flap_s). The end of a trial is free only when the trial was a visible change (or a shift trial):
        a trial whose threshold was the one in force already cost nothing, and its "end" was a
        free flap of the exploit threshold (h200-2b6 at 40 req/s: 16 -> 23 -> 16 -> 23 in 4 s)."""
        self._moving = self.level.update(now, live)
        out = self._apply(now, decision, last_sample_t, applied, live, exploring)
        if not out[2] and out[0] != self._settled[0]:
            self._settled = (out[0], now, 1 if out[0] > self._settled[0] else -1)
        if out[2]:
            self._trial_visible = ((exploring and self._trial_visible) or decision.shift
                                   or applied is None or out[0] != applied)
            self._trial_whole = decision.whole or (exploring and self._trial_whole)
        return out

    def _apply(self, now: float, decision: Decision, last_sample_t: float | None, applied: int | None,
               live: Collection[int], exploring: bool) -> tuple[int, str, bool]:
        if last_sample_t is None or now - last_sample_t > self.cfg.fallback_after_s:
            quiet = "no samples yet" if last_sample_t is None else f"no samples for {now - last_sample_t:.1f} s"
            if self.cfg.fallback_threshold == HOLD:      # the learned threshold routes the next batches; no trial
                return self.exploit, f"hold {self.exploit}: {quiet}", False
            # (one outside the bounds is applied clamped, and said so: the row read 'fallback to 2' beside a 4 applied)
            fallback, given = self.clamp(self.cfg.fallback_threshold), self.cfg.fallback_threshold
            said = f"{fallback}" if fallback == given else \
                f"{fallback} (fallback_threshold {given}, within the bounds {self.clamp(0)} .. {self.hi})"
            return fallback, f"fallback to {said}: {quiet}", False
        if decision.command:      # the operator's own threshold (fixed / always / never): as it is, within the bounds
            self.exploit = self.clamp(decision.threshold)   # (said: `fixed threshold 200` read beside the 128 applied)
            within = "" if self.exploit == decision.threshold else \
                f"; guard: {self.exploit}, within the bounds {self.clamp(0)} .. {self.hi}"
            return self.exploit, decision.reason + within, False
        threshold, reason, exploratory = self._guarded(now, decision)
        if exploring and not exploratory and applied is not None and threshold != applied \
                and self._shift_trial_pays(now, decision, applied, live):
            return applied, f"{applied} stays, the trial showed it pays (the policy's own estimate: {decision.reason})", False
        if applied is None or threshold == applied:
            trial = self._live_shift_trial(now)
            if exploratory and decision.shift and (trial is None or trial[1] != threshold):
                # a trial already in force (a probe) goes on as a shift trial: its threshold may stay when it pays
                self._note_shift_trial(now, threshold)
            return threshold, reason, exploratory
        # A move to 0 for the prefills, and the end of a trial at 0, change every prefill (Decision.whole)
        whole = decision.whole or (exploring and self._trial_whole)
        if live and not whole and not moves_any(applied, threshold, live):
            return applied, reason + f"; guard: kept {applied} (coalesced: {threshold} moves no live batch size)", exploratory
        if exploratory and decision.shift:
            self._note_shift_trial(now, threshold)
        if self.cfg.changes_per_min == 0 or (exploring and not exploratory and self._trial_visible):
            return threshold, reason, exploratory
        untried = decision.untried and exploratory and not self._repeats(now, threshold) \
            and (decision.shift or self._moving or self.probes.take(now, 1.0))
        if untried:
            self._learning_until = now + self.cfg.learning_s
        if exploratory:
            # Two tokens: the trial and the way back. A shift trial takes none: the load moved, and
            # the change budget, there for the noise at constant load, held it back for 40-50 engine s
            # or a whole phase once exploratory trials had spent it (the looped mixed-shift trace's
            # third pass through C=96). Its way back and the move it calls for are free too.
            # A charged trial leaves trial_reserve over: the exploit move it (or the load) calls for must
            # not wait behind trials (h200-7b-open-tl2-kv seed 3 in the simulator: 26 -> 15 held 14 s)
            if self.changes.take(now, 2.0, force=untried or decision.shift, reserve=self.cfg.trial_reserve_used):
                return threshold, reason, True
            threshold, reason = self.exploit, f"best threshold {self.exploit}; trial skipped: change budget spent"
            if threshold == applied or not (whole or moves_any(applied, threshold, live or (threshold,))):
                return applied, reason, False
            if exploring and self._trial_visible:     # the end of the trial in force, free as above (charged, the
                return threshold, reason, False       # trial's threshold became the exploit one when it was spent)
        learning = now < self._learning_until and not self._reverses(now, threshold)    # the move made, not the trial
        urgent = learning or decision.gain is None or abs(decision.gain) >= self.cfg.urgent_gain
        follows = self._follows_shift_trial(now, threshold)     # first: the grant is used by this move, urgent or not
        if self.changes.take(now, 1.0, force=urgent or follows):
            return threshold, reason, False
        self.exploit = applied
        return applied, reason + f"; guard: change budget spent, {threshold} waits", False

    def _note_shift_trial(self, now: float, threshold: int) -> None:
        self._shift_trial = (self.exploit, threshold, now + self.cfg.learning_s)

    def _live_shift_trial(self, now: float) -> tuple[int, int, float] | None:
        """The shift trial on record (exploit threshold then, its threshold, until), unless learning_s is over."""
        trial = self._shift_trial
        return trial if trial is not None and now <= trial[2] else None

    def _reverses(self, now: float, threshold: int) -> bool:
        """Would applying `threshold` reverse the last move, made within flap_s (A -> B -> A)?"""
        last, at, direction = self._settled
        return now - at < self.cfg.flap_s and (threshold - last) * direction < 0

    def _repeats(self, now: float, threshold: int) -> bool:
        """Does a probe of an untried arm at `threshold` repeat one made within flap_s? (Then it
        caught no batch of that arm, and trying again is the policy's wish, not a new load.)"""
        self._untried = {t: at for t, at in self._untried.items() if now - at < self.cfg.flap_s}
        if threshold in self._untried:
            return True
        self._untried[threshold] = now
        return False

    def _shift_trial_pays(self, now: float, decision: Decision, applied: int, live: Collection[int] = ()) -> bool:
        """The shift trial in force at `applied` showed that its threshold pays: the policy now
        proposes it as its best, worth min_gain. It becomes the exploit threshold at once, the trial's
        measurement standing in for the stabilisation window (and the rate cap: it already runs).
        Before, the trial ended and the move came a tick or two later: three rows for one move
        (29 -> 105 trial, 105 -> 29 trial over, 29 -> 105). Only after a shift trial: done after every
        trial (and, in 165fc8e, keeping any trial on until the move stabilised, backed out in 9df7a0a)
        it slowed re-convergence on the traces (mixed-shift seed 3: 6.0 -> 50.5 s, coding-to-chat seeds
        3/4: 8.0/6.5 -> 22.4/22.5 s): a probe of a never-measured arm comes 0.5 s after the load moved,
        and the plain batches of the way back are then most of what its bucket knows of the other mode.
        A proposal that differs from the trial's threshold only where no batch size of the coalescing window
        (`live`) lies counts as the trial's: a trial the policy guessed ahead of a climbing load (policies.trend)
        covers buckets never measured, whose guessed edge moves a bucket or two from tick to tick."""
        trial = self._live_shift_trial(now)
        if trial is None or trial[1] != applied:
            return False
        proposed = self.clamp(decision.exploit_threshold)
        if decision.exploratory or (proposed != applied and (not live or self._trial_whole or moves_any(applied, proposed, live))):
            return False
        if decision.gain is not None and decision.gain < self.cfg.min_gain:
            return False
        self.exploit = applied
        self._proposals.clear()
        self._proposals.append((now, applied))
        self._shift_trial = None
        return True

    def _follows_shift_trial(self, now: float, threshold: int) -> bool:
        """Is this move the one a shift trial called for (at least as far as the trial's threshold,
        on its side, within learning_s)? Once: the grant is used up by it."""
        if self._live_shift_trial(now) is None:
            self._shift_trial = None
            return False
        before, trial, _ = self._shift_trial
        if (trial > before and threshold >= trial) or (trial < before and threshold <= trial):
            self._shift_trial = None
            return True
        return False

    def _guarded(self, now: float, decision: Decision) -> tuple[int, str, bool]:
        wanted = proposed = self.clamp(decision.exploit_threshold)
        if wanted != self.exploit and decision.gain is not None and decision.gain < self.cfg.min_gain:
            wanted = self.exploit         # hysteresis: not worth a change
        stable = self._stabilised(now, wanted)
        self.exploit = self.clamp(self._rate_capped(stable, decision.whole))
        if decision.exploratory:
            if self.explore_used < self.cfg.explore_share:
                return self.clamp(decision.threshold), decision.reason, True
            return self.exploit, (f"best threshold {self.exploit}; trial skipped: exploration budget "
                                  f"({self.cfg.explore_share:.0%} of batches) spent"), False
        if self.exploit == wanted != proposed:
            # The policy's reason describes its move, which is not made: say what is applied first.
            # the gain is over the whole current traffic (policies.learner.move_gain), not the moved buckets' own
            # edge, which the policy's reason quotes: a big edge on rarely seen batch sizes gains little
            return self.exploit, (f"guard: {self.exploit} held, the move to {proposed} would gain "
                                  f"{decision.gain:+.2%} of the current traffic's tok/s (under {self.cfg.min_gain:.2%});"
                                  f" the policy: "
                                  f"{decision.reason}"), False
        if self.exploit == wanted:
            return self.exploit, decision.reason, False
        if stable != self.exploit:
            held = f"guard: at most {self.cfg.max_step_buckets} buckets per decision, heading for {wanted}"
            return self.exploit, f"{decision.reason}; {held}", False
        # The threshold stays (or goes back) where it was: say so first, the policy's wish second.
        return self.exploit, (f"guard: {self.exploit} held, {wanted} not yet proposed for "
                              f"{plain(self.cfg.stabilisation_s)} s; the policy: {decision.reason}"), False
