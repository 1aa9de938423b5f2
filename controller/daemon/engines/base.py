"""What the daemon needs from an engine: samples out, a threshold in, health, and a clock."""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable

from ...contract import Sample
from ...numtext import plain

SampleSink = Callable[[Sample], None]


class EngineError(RuntimeError):
    """The engine refused or failed; one line for the operator."""


class EngineNotInstalled(EngineError):
    """What would run the engine lacks it, or holds one this version does not support: a restart meets it again."""


class Engine(ABC):
    name: str = ""
    max_batch_size: int = 256
    spec_steps: int = 3           # K: the most draft steps a speculative batch runs (samples are checked against it)
    probe_s: float = 0.0          # > 0: the daemon calls probe() at this interval
    initial_threshold: int = 0    # what it runs from start() until the first set_threshold (the daemon sets it)
    ready_timeout_s: float = 900.0    # how long the daemon waits for wait_ready (sglang: [sglang] ready_timeout_s)
    own_files: tuple[tuple[str, Path], ...] = ()     # (what, path) of each file start() writes: no --socket or --db

    def prefills_pay_draft(self) -> bool:
        """At thresholds above 0, do prefills joining a batch that will not speculate run the draft's pass over
        their prompts (policies.types.Snapshot)? True unless the engine knows its off path skips it."""
        return True

    def probe(self) -> None:
        """A periodic liveness check whose verdict health() reports (engines that need one)."""

    def check_installed(self) -> None:
        """Raise EngineNotInstalled where what would run the engine is not installed (a restart would meet it again),
        EngineError where that could not be asked (a time-out: a restart may not)."""

    @abstractmethod
    def start(self, on_sample: SampleSink) -> None:
        """Start serving; on_sample is called (from any thread, must not block) per decode batch."""

    @abstractmethod
    def wait_ready(self, timeout: float, cancel: threading.Event | None = None) -> bool:
        """True once the engine is warm and serving; False on timeout, death, or once cancel is set."""

    def not_ready_reason(self, timeout: float) -> str:
        """Why wait_ready(timeout) gave False, in one line for the operator."""
        return f"engine did not become ready within {plain(timeout)} s"

    def not_ready_code(self) -> int:
        """The daemon's exit status for that: 2 where the engine refused its configuration (the unit does not restart
        on 2: the same configuration would be refused again), else 1 (restarted)."""
        return 1

    @abstractmethod
    def set_threshold(self, threshold: int) -> None:
        """Apply a new threshold; raises EngineError if it could not be applied."""

    @abstractmethod
    def now(self) -> float:
        """The clock of the samples' t field (virtual for the simulator)."""

    @abstractmethod
    def health(self) -> dict:
        """{'ok': bool, 'detail': str, ...}; ok False means the engine is gone."""

    @abstractmethod
    def stop(self, timeout: float = 30.0) -> None:
        """Drain and stop."""
