"""The policy interface, the two arms, and the gain of speculating."""
from __future__ import annotations

from typing import Any, ClassVar, Mapping

from controller.contract import MAX_BATCH

from .buckets import Buckets
from .params import ParamSpec, resolve_params
from .types import Decision, PolicyError, Sample, Snapshot

OFF, SPEC = 0, 1


def relative_gain(spec: float, off: float) -> float:
    """How much more the speculative mode delivers than the plain one, relative to plain."""
    return (spec - off) / off if off > 0 else 0.0


class Policy:
    """Decision logic: samples in, a Decision out; its state is JSON it can load back.

    No I/O, no clock reads (time arrives in samples and snapshots), and any randomness comes
    from the seed given at construction. What a policy keeps, exactly: observe() folds each
    sample into its learned statistics (state()); decide() reads them and the snapshot, and
    changes nothing but a seeded random generator (Thompson), a cache derived from the
    statistics (the model policy's fit) or the spacing of its own trials (the learners'
    TrialHold: when each bucket's last trial of a clear loss was proposed). The loop, not
    the policy, tracks which batch sizes are live; the guard outside applies bounds,
    stabilisation and rate limits.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    PARAMS: ClassVar[tuple[ParamSpec, ...]] = ()

    def __init__(self, params: Mapping[str, Any] | None = None, *, seed: int = 0, max_batch_size: int = 256):
        if not 1 <= int(max_batch_size) <= MAX_BATCH:
            raise PolicyError(f"max_batch_size={max_batch_size!r} out of range (allowed 1 .. {MAX_BATCH})")
        self.params = resolve_params(self.name, self.PARAMS, params)
        self.seed = int(seed)
        self.max_batch_size = int(max_batch_size)
        self.buckets = Buckets(self.max_batch_size)

    def check_engine(self) -> None:
        """PolicyError where a threshold this policy was given (the operator's own rule, fixed, has one) is above the
        largest batch of the engine it was built for."""

    def observe(self, sample: Sample) -> None:
        """Take one decode batch into account (cheap: called for every batch)."""

    def in_force(self, threshold: int) -> None:
        """The threshold the engine runs from now on (the loop's, after the guard): an observation, like a
        sample (the samples that follow ran under it)."""

    def decide(self, snap: Snapshot) -> Decision:
        raise NotImplementedError

    def state(self) -> dict:
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what state() returned; raises PolicyError on a mismatched state."""
