"""The speculation decision inside SGLang's adaptive EAGLE worker, before each decode batch:
K draft steps iff the batch speculates at the current threshold (controller.contract.speculates),
else 0. SGLang's EMA is switched off. The state is identical on every TP rank: the threshold
changes only through Scheduler.set_internal_state, which every rank receives in the same order."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from ..contract import speculates, unsupported_reason
from . import switches
from .failures import Failures
from .support import sglang_version

log = logging.getLogger("spec_controller.plugin")


class Router:
    def __init__(self, threshold: int, failures: Failures, version: Callable[[], str] = sglang_version):
        self.threshold = threshold
        self.failures = failures
        self.version = version
        self.k: int | None = None
        self.checked = False
        self.inert_reason: str | None = None       # set once: the plugin then passes everything through
        self.decisions = 0
        self.decision_ns = 0
        self.last_batch_size = 0                   # the last decode batch's (the same on every TP rank)
        self.switches = 0                          # decisions that switched SGLang's adaptive state
        self.switch_ns = 0
        self.switch_log: switches.SwitchLogTrimmer | None = None

    @property
    def active(self) -> bool:
        """Checked, and this engine is ours."""
        return self.checked and self.inert_reason is None

    def check(self, worker: Any) -> bool:
        """First decode batch: decide once whether this engine is ours."""
        if not self.checked:
            self.checked = True
            reason = unsupported_reason(worker.server_args, self.version())
            if reason is None and getattr(worker, "adaptive_controller", None) is None:
                reason = "the worker has no adaptive controller"
            if reason is None and 0 not in (steps := list(worker.adaptive_controller.candidate_steps)):
                # (_activate(0) raises for it on every off batch, while SGLang's EMA is switched off)
                reason = (f"the adaptive config's candidate steps {sorted(steps)} have no 0 (no off state); "
                          "start the engine with a config holding 0 and K, e.g. {\"1\": {\"candidate_steps\": [0, 3]}}")
            if reason is None:
                self.k = max(steps)
                self.switch_log = switches.SwitchLogTrimmer.for_this_process()
                switches.quiet_switch_lines()
                log.info("spec-controller plugin active: K=%d, threshold %d", self.k, self.threshold)
            else:
                log.warning("spec-controller plugin inactive: %s", reason)
            self.inert_reason = reason
        return self.inert_reason is None

    def speculates(self, batch_size: int) -> bool:
        return speculates(batch_size, self.threshold)

    def activate_step_by_batch(self, original: Callable, worker: Any, batch_size: int) -> Any:
        """AROUND EAGLEWorkerV2.activate_step_by_batch: switch SGLang's state only on a change."""
        if not self.check(worker):
            return original(worker, batch_size)
        t0 = time.perf_counter_ns()
        self.last_batch_size = batch_size
        target = self.k if self.speculates(batch_size) else 0
        if target != worker.speculative_num_steps:
            self._switch(worker, target)
            self.switches += 1               # SGLang's state switch dominates these: counted apart
            self.switch_ns += time.perf_counter_ns() - t0
        self.decisions += 1
        self.decision_ns += time.perf_counter_ns() - t0
        return None

    def _switch(self, worker: Any, steps: int) -> None:
        try:
            worker.adaptive_controller._activate(steps)
        except Exception as e:            # keep the current state (same on every rank), say so once
            self.failures.record("activate", e)
        if self.switch_log is not None:
            try:
                self.switch_log.after_switch()
            except Exception as e:
                self.switch_log = None
                self.failures.record("switch log trim", e)

    def on_verify_complete_cpu(self, original: Callable, worker: Any, *args, **kwargs) -> Any:
        """AROUND: while the plugin routes, SGLang's EMA must not switch states."""
        if self.active:
            return None
        return original(worker, *args, **kwargs)

    def counters(self) -> dict[str, int]:
        return {"decisions": self.decisions, "decision_ns": self.decision_ns, "switches": self.switches,
                "switch_ns": self.switch_ns}
