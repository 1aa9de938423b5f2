"""The operator's commands on the running daemon (`policy set`, `threshold pin` / `unpin`, `policy show`): one lane,
each command's durable write first, then its effect in memory; CommandRefused where the write could not be made
durable. A part of Service (a mixin): it steers the loop that Service owns."""
from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from policies import PolicyError, resolve_name
from policies.params import shown      # (a value in a refusal, cut short)
from state.items import event_item, policy_state_item, setting_item
from state.writer import WriteFailed

if TYPE_CHECKING:
    from controller.control.loop import ControlLoop
    from state.writer import Writer

    from .engines.base import Engine

log = logging.getLogger("spec_controller")


class CommandRefused(Exception):
    """An operator command that could not be made durable: nothing changed (HTTP 503, one line)."""


class Commands:
    """The commands' lane: `_commands` runs one operator command at a time, its durable write first, then its effect in
    memory; a command waits for its turn and its write's start within command_timeout_s in all (_command). Of Service
    it takes the attributes below, and _build_policy, _restore, guarded, checkpoint and retune."""
    lock: threading.RLock
    loop: ControlLoop
    writer: Writer
    engine: Engine
    policy_name: str
    stopping: bool
    refused: tuple[int, str] | None

    def __init__(self) -> None:
        self._commands = threading.Lock()
        self.command_timeout_s = 5.0       # a command whose write has not started by then is refused (its turn included)
        self._unsettled = False     # a command's write may yet land (maybe_saved): the next pin is written even as a no-op

    @contextmanager
    def _command(self) -> Iterator[float]:
        """The operator commands' one lane; its deadline. The wait for a turn counts toward command_timeout_s: behind a
        stuck writer each command waited out the one before it first, so the Nth of N at once was answered after N x 5 s
        (specctl gave up at 10 s without knowing whether its pin was applied; helper-119)."""
        deadline = time.monotonic() + self.command_timeout_s
        if not self._commands.acquire(timeout=self.command_timeout_s):
            why = self.writer.problem or "another command is waiting for it"
            raise CommandRefused(f"the database writer is busy ({why}); nothing changed")
        try:
            yield deadline
        finally:
            self._commands.release()

    def _durable(self, items: list[tuple], deadline: float) -> None:
        try:
            self.writer.transaction(items, timeout=max(0.0, deadline - time.monotonic()))
        except WriteFailed as e:
            self._unsettled |= e.maybe_saved
            raise CommandRefused(str(e) if e.maybe_saved else f"{e}; nothing changed") from None
        self._unsettled = False       # (the writer commits in queue order: whatever was under way has landed)

    def set_policy(self, name: str, params: Mapping[str, Any]) -> dict:
        """Validate, save, switch; PolicyError or CommandRefused (nothing changed) on failure."""
        policy = self._build_policy(name, params)
        policy.check_engine()       # (a threshold judged by the engine that runs it, as a pin is)
        with self._command() as deadline:
            with self.lock:
                old, old_state = self.loop.policy, self.loop.policy.state()
            same = resolve_name(name) == old.name
            learned = "new"         # what the policy now in force knows: told to the operator
            if not same:
                policy, restored = self._restore(policy, name, params)
                learned = "restored" if restored else "new"
            items = [setting_item("policy", {"name": name, "params": dict(params)}), event_item("policy", f"{name} "
                     f"{dict(params)}")]
            try:        # the current policy's state, saved with the switch: a switch back resumes from it
                items.insert(0, policy_state_item(old.name, dict(old.params), old_state))
            except ValueError:
                log.error("policy %s: its state holds a non-finite number; not saved", old.name)
            self._durable(items, deadline)
            with self.lock:
                if same:     # the same policy with new params keeps what it learned up to this instant
                    try:
                        policy.load_state(self.loop.policy.state())
                        learned = "kept"
                    except PolicyError as e:
                        log.warning(f"policy {name}: learned state not carried over: {e}")
                else:       # its state now, queued after any checkpoint taken since old_state (helper-145: a switch
                    self.guarded("checkpoint", self.checkpoint)()       # back restored old_state, the older of the two)
                self.loop.set_policy(policy)
                self.policy_name = name
                if not policy.state():      # fixed, always, never: nothing learned to keep, restore or start on
                    learned = "none"
        return {**self.policy_info(), "learned": learned}

    def policy_info(self) -> dict:
        with self.lock:
            p = self.loop.policy
            return {"name": self.policy_name, "policy": p.name, "params": dict(p.params), "seed": p.seed,
                    "state_keys": sorted(p.state()), "pinned": self.loop.pinned}

    def pin(self, threshold: int | None) -> dict:
        if threshold is not None and not 0 <= threshold <= self.engine.max_batch_size:
            raise ValueError(f"threshold {shown(threshold)} out of range (allowed 0 .. the engine's largest batch, "
                             f"{self.engine.max_batch_size})")
        with self._command() as deadline:
            with self.lock:
                changed = self.loop.pinned != threshold      # a pin where it is pinned, an unpin of nothing: no-ops
            if changed or self._unsettled:      # (else an unpin after a pin that may yet land left it on disk)
                self._durable([setting_item("pinned", threshold),
                               event_item("pin" if threshold is not None else "unpin", str(threshold))], deadline)
                with self.lock:
                    self.loop.pin(threshold)
        if changed and not self.stopping:      # (draining: its next start applies the saved pin; no retune runs now)
            self.retune()
        # a pin's answer names only a refusal of the pin itself (a retune that failed before it actuated leaves an
        # older refusal of another threshold); an unpin's, the policy's
        refused = self.refused if self.refused and threshold in (None, self.refused[0]) else None
        with self.lock:
            loop = self.loop
            return {"threshold": loop.threshold, "pinned": loop.pinned is not None, "exploit_threshold": loop.guard.exploit,
                    "trial": loop.exploring, "changed": changed, "pinned_at": loop.pinned, "stopping": self.stopping,
                    "refused": refused[1] if refused else None, "refused_threshold": refused[0] if refused else None}
