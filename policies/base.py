"""The policy interface and the per-bucket learner the bandit policies share."""
from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

from controller.contract import speculates

from .buckets import Buckets
from .params import ParamSpec, resolve_params
from .stats import Discounted
from .summary import flip_threshold, monotone_threshold
from .types import Decision, PolicyError, Sample, Snapshot, check_finite

OFF, SPEC = 0, 1


def relative_gain(spec: float, off: float) -> float:
    """How much more the speculative mode delivers than the plain one, relative to plain."""
    return (spec - off) / off if off > 0 else 0.0


class Policy:
    """Decision logic: samples in, a Decision out; its state is JSON it can load back.

    No I/O, no clock reads (time arrives in samples and snapshots), and any randomness comes
    from the seed given at construction. What a policy keeps, exactly: observe() folds each
    sample into its learned statistics (state()); decide() reads them and the snapshot, and
    changes nothing but a seeded random generator (Thompson) or a cache derived from the
    statistics (the model policy's fit). The loop, not the policy, tracks which batch sizes
    are live; the guard outside applies bounds, stabilisation and rate limits.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = ()

    def __init__(self, params: Mapping[str, Any] | None = None, *, seed: int = 0, max_batch_size: int = 256):
        if not 1 <= int(max_batch_size) <= 65536:
            raise PolicyError(f"max_batch_size={max_batch_size!r} out of range (allowed 1 .. 65536)")
        self.params = resolve_params(self.name, self.PARAMS, params)
        self.seed = int(seed)
        self.max_batch_size = int(max_batch_size)
        self.buckets = Buckets(self.max_batch_size)

    def observe(self, sample: Sample) -> None:
        """Take one decode batch into account (cheap: called for every batch)."""

    def decide(self, snap: Snapshot) -> Decision:
        raise NotImplementedError

    def state(self) -> dict:
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what state() returned; raises PolicyError on a mismatched state."""



def _check_state(policy: str, state: Mapping[str, Any], n_buckets: int) -> None:
    check_finite(policy, state)
    for key in ("q_off", "q_spec"):
        rows = state.get(key)
        if not isinstance(rows, list) or len(rows) != n_buckets or any(not _stat_row(r) for r in rows):
            raise PolicyError(f"policy {policy}: saved state does not match {n_buckets} buckets ({key})")
    if not _stat_row(state.get("accept")):
        raise PolicyError(f"policy {policy}: saved state has no acceptance record")


def _stat_row(row: Any) -> bool:
    """A Discounted's [weight, sum, sum of squares, time]: numbers, the weight not negative."""
    return (isinstance(row, list) and len(row) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                            for v in row) and row[0] >= 0)


class BucketLearner(Policy):
    """Learns, per batch-size bucket, the tokens/s of each mode *at that batch size*.

    Spec throughput is factored as (requests per second of a spec step in this
    bucket) x (current accept length): step time depends on the batch size,
    acceptance on the traffic, so an acceptance shift seen in any bucket moves
    every bucket's estimate at once. Subclasses choose the arm for the live bucket.
    """

    BASE_PARAMS: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("half_life_s", float, 20.0, 0.5, 3600.0, "forgetting of step-time statistics"),
        ParamSpec("accept_half_life_s", float, 4.0, 0.1, 3600.0, "forgetting of the accept-length estimate"),
        ParamSpec("min_samples", float, 0.01, 0.0, 1000.0, "an arm with less weight than this is tried"),
        ParamSpec("dominance", float, 0.1, 0.0, 10.0,
                  "skip trying spec above (off below) a bucket where it lost (won) by this relative margin"),
    )

    def __init__(self, params=None, *, seed: int = 0, max_batch_size: int = 256):
        super().__init__(params, seed=seed, max_batch_size=max_batch_size)
        n = len(self.buckets)
        hl = self.params["half_life_s"]
        self.q = ([Discounted(hl) for _ in range(n)], [Discounted(hl) for _ in range(n)])
        # Acceptance moves with the traffic: weighted by requests, its estimate never
        # outweighs the last ~256 requests' accept lengths.
        self.accept = Discounted(self.params["accept_half_life_s"], max_weight=256.0)
        self.tried = ([-math.inf] * n, [-math.inf] * n)   # last time each arm ran in each bucket
        self.max_steps = 1          # K, learned from the samples

    def observe(self, sample: Sample) -> None:
        if sample.step_s <= 0 or sample.batch_size <= 0:
            return
        b = self.buckets.of(sample.batch_size)
        # An interval that held a prefill is no reward (DESIGN §4), but it shows the arm was
        # tried: at high load such intervals are the rule, and re-trying costs a whole batch.
        self.tried[int(sample.steps > 0)][b] = sample.t
        if not sample.decode_only:
            return
        rate = sample.batch_size / sample.step_s
        if sample.steps > 0:
            self.q[SPEC][b].add(sample.t, rate)
            self.accept.add(sample.t, sample.tokens / sample.batch_size, sample.batch_size)
            if sample.steps > self.max_steps:
                self.max_steps = sample.steps
        else:
            self.q[OFF][b].add(sample.t, rate)

    # --- estimates -------------------------------------------------------
    def mean(self, arm: int, b: int) -> float:
        q = self.q[arm][b].mean
        return q * self.accept.mean if arm == SPEC else q

    def rel_uncertainty(self, arm: int, b: int, now: float) -> float:
        """Relative sd of the arm's mean estimate. For spec it adds the accept-length
        estimate's own uncertainty, which grows as that estimate goes stale."""
        q = self.q[arm][b]
        var = max(q.rel_sd, 0.02) ** 2 / max(q.weight(now), 1e-9)
        if arm == SPEC:
            var += max(self.accept.rel_sd, 0.02) ** 2 / max(self.accept.weight(now), 1e-9)
        return math.sqrt(var)

    def known(self, arm: int, b: int, now: float) -> bool:
        """Has data, or was tried recently (its samples may all have held a prefill)."""
        return (self.q[arm][b].weight(now) >= max(self.params["min_samples"], 1e-9)
                or now - self.tried[arm][b] < self.params["half_life_s"])

    def estimable(self, b: int) -> bool:
        """Both modes have an estimate in bucket b."""
        return bool(self.q[OFF][b].w and self.q[SPEC][b].w and self.accept.w)

    def gains(self, now: float) -> list[float]:
        """Traffic-weighted relative gain of speculating, per bucket (0 where unknown)."""
        out = []
        for b in range(len(self.buckets)):
            if not self.estimable(b):
                out.append(0.0)
                continue
            traffic = self.q[OFF][b].weight(now) + self.q[SPEC][b].weight(now)
            out.append(traffic * relative_gain(self.mean(SPEC, b), self.mean(OFF, b)))
        return out

    def dominated(self, arm: int, b: int, now: float) -> bool:
        """True when a neighbouring bucket already settles an untried arm: the gain of
        speculating falls as batches grow, so a clear loss below (a clear win above)
        carries over without paying for the trial."""
        margin = self.params["dominance"]
        # A stale accept length may have risen since: then only a loss that would hold even
        # at the longest possible accept length (K + 1) settles it.
        stale = now - self.accept.t > self.params["accept_half_life_s"]
        accept = self.accept.mean
        if stale and arm == SPEC:
            accept = self.max_steps + 1.0
        others = range(b) if arm == SPEC else range(b + 1, len(self.buckets))
        for o in others:
            if self.q[OFF][o].weight(now) < 1e-3 or self.q[SPEC][o].weight(now) < 1e-3:
                continue
            gain = relative_gain(self.q[SPEC][o].mean * accept, self.mean(OFF, o))
            if (arm == SPEC and gain < -margin) or (arm == OFF and gain > margin and not stale):
                return True
        return False

    # --- decision --------------------------------------------------------
    def choose_arm(self, b: int, now: float) -> int:
        raise NotImplementedError

    def decide(self, snap: Snapshot) -> Decision:
        exploit = monotone_threshold(self.gains(snap.now), self.buckets, snap.exploit_threshold)
        b = self.buckets.of(snap.live_batch_size or 1)
        untried = [a for a in (OFF, SPEC) if not self.known(a, b, snap.now)]
        if len(untried) == 1 and self.dominated(untried[0], b, snap.now):
            want, why = 1 - untried[0], "dominated"
        elif untried:
            want, why = untried[0], "untried"
        else:
            want, why = self.choose_arm(b, snap.now), "index"
        in_spec = speculates(self.buckets.high(b), exploit)
        if (want == SPEC) == in_spec:
            return Decision(exploit, exploit, f"exploit: bucket {self.buckets.low(b)}-{self.buckets.high(b)} "
                            f"{'spec' if in_spec else 'off'}")
        explore = flip_threshold(exploit, self.buckets, b, want == SPEC)
        return Decision(explore, exploit, f"explore {'spec' if want == SPEC else 'off'} at batch "
                        f"{self.buckets.low(b)}-{self.buckets.high(b)} ({why})")

    def state(self) -> dict:
        return {
            "q_off": [d.to_list() for d in self.q[OFF]],
            "q_spec": [d.to_list() for d in self.q[SPEC]],
            "accept": self.accept.to_list(),
            "max_steps": self.max_steps,
            "tried": [[None if t == -math.inf else t for t in arm] for arm in self.tried],
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        _check_state(self.name, state, len(self.buckets))
        for arm, key in ((OFF, "q_off"), (SPEC, "q_spec")):
            for d, row in zip(self.q[arm], state[key]):
                d.load(row)
        self.accept.load(state["accept"])
        self.max_steps = int(state.get("max_steps", 1))
        tried = state.get("tried")
        if isinstance(tried, list) and len(tried) == 2 and all(len(a) == len(self.buckets) for a in tried):
            self.tried = tuple([-math.inf if t is None else float(t) for t in arm] for arm in tried)
