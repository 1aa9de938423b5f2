"""A static threshold: the operator's guess, and the always/never baselines."""
from __future__ import annotations

from controller.contract import MAX_BATCH

from .base import Policy
from .params import ParamSpec
from .types import Decision, PolicyError, Snapshot


class FixedPolicy(Policy):
    name = "fixed"
    summary = "a static threshold (0 = never speculate, >= max batch size = always)"
    PARAMS = (ParamSpec("threshold", int, 5, 0, MAX_BATCH, "speculate iff batch size <= threshold"),)

    def check_engine(self) -> None:
        """A live `policy set` of it is refused, as a pin above that batch is (it was accepted, and ran as the largest
        batch unsaid); one saved while no daemon ran, or the config's, is taken as that batch at start (decide)."""
        if (t := int(self.params.get("threshold", 0))) > self.max_batch_size:
            raise PolicyError(f"policy {self.name}: parameter threshold={t} out of range (allowed 0 .. the engine's "
                              f"largest batch, {self.max_batch_size})")

    def decide(self, snap: Snapshot) -> Decision:
        t = int(self.params["threshold"])
        if t > self.max_batch_size:        # (the contract's bound is every engine's; said, so history shows what ran)
            top = self.max_batch_size
            return Decision(top, top, f"fixed threshold {t}, taken as {top}, the engine's largest batch (every batch "
                                      "speculates)", command=True)
        return Decision(t, t, f"fixed threshold {t}", command=True)


class AlwaysPolicy(FixedPolicy):
    name = "always"
    summary = "always speculate (threshold = max batch size)"
    PARAMS = ()

    def decide(self, snap: Snapshot) -> Decision:
        return Decision(self.max_batch_size, self.max_batch_size, "always speculate", command=True)


class NeverPolicy(FixedPolicy):
    name = "never"
    summary = "never speculate (threshold 0)"
    PARAMS = ()

    def decide(self, snap: Snapshot) -> Decision:
        return Decision(0, 0, "never speculate", command=True)
