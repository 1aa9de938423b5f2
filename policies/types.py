"""Records that flow into and out of a policy. Immutable, cheap, JSON-friendly."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Sample:
    """One decode batch, as the SGLang plugin and the simulator both report it.

    steps == 0 means speculation was off for this batch; tokens is the sum of
    accept lengths (== batch_size when off); step_s is the interval between
    consecutive decode results; decode_only is False when that interval also
    held a prefill/extend batch (such samples are not used as rewards).
    """

    t: float
    batch_size: int
    steps: int
    tokens: int
    step_s: float
    decode_only: bool = True

    @property
    def speculative(self) -> bool:
        return self.steps > 0

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.step_s if self.step_s > 0 else 0.0

    def as_tuple(self) -> tuple:
        return (self.t, self.batch_size, self.steps, self.tokens, self.step_s, int(self.decode_only))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a policy is told at decision time (time is injected, never read)."""

    now: float
    threshold: int          # threshold currently applied by the engine
    max_batch_size: int


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer: the threshold to apply now and the one it believes best.

    threshold != exploit_threshold marks an exploratory decision; the guard
    outside the policy may veto it when the exploration budget is spent.
    """

    threshold: int
    exploit_threshold: int
    reason: str

    @property
    def exploratory(self) -> bool:
        return self.threshold != self.exploit_threshold


class PolicyError(ValueError):
    """A bad policy name, parameter or state; the message is one line for the operator."""
