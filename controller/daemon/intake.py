"""The daemon's one check of every telemetry sample, at its boundary: a sample that fails it reaches
neither a policy, nor the live figures, nor the database, nor a checkpoint. One NaN step time, a
batch of size 0 or a timestamp far in the future used to stop the control loop for good."""
from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import replace
from typing import Callable

from state.logs import RateLimitedLog

from ..contract import Sample

log = logging.getLogger("spec_controller")

# A decode step (the interval between two decode results) outside this band is not a measurement:
# no GPU step takes 10 us, and intervals longer than an hour held an idle server.
MIN_STEP_S = 1e-5
MAX_STEP_S = 3600.0
BACK_S = 1.0           # samples may arrive this much out of order (the plugin batches its sends)
AHEAD_S = 5.0          # ... and this much ahead of the daemon's clock
BEHIND_S = 600.0       # ... and this much behind it
REJECT_KINDS = ("type", "time", "time_order", "batch_size", "steps", "tokens", "step_s")


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_sample(s: Sample, max_batch_size: int, k: int, last_t: float | None, now: float) -> str | None:
    """Why the sample is rejected (one of REJECT_KINDS), or None if it is sound.

    k: the engine's speculative step count; last_t: the newest accepted sample's time; now: the
    engine's clock (the samples' time base)."""
    if not (_int(s.batch_size) and _int(s.steps) and _int(s.tokens) and isinstance(s.decode_only, bool)
            and isinstance(s.t, (int, float)) and isinstance(s.step_s, (int, float))):
        return "type"
    if not (math.isfinite(s.t) and s.t >= 0 and now - BEHIND_S <= s.t <= now + AHEAD_S):
        return "time"
    # (ordered against the clock at most: one sample stamped up to AHEAD_S ahead, a forged one, made every sound one
    # after it "time_order" until the clock caught up)
    if last_t is not None and s.t < min(last_t, now) - BACK_S:
        return "time_order"
    if not 0 < s.batch_size <= max_batch_size:
        return "batch_size"
    if not 0 <= s.steps <= k:
        return "steps"
    if not s.batch_size <= s.tokens <= s.batch_size * (s.steps + 1):
        return "tokens"
    if not (math.isfinite(s.step_s) and MIN_STEP_S <= s.step_s <= MAX_STEP_S):
        return "step_s"
    return None


class SteadyClock:
    """The engine's clock, never going back. SGLang stamps its samples with the host's wall clock, and a
    step back of it (NTP correcting the host, e.g. while the engine loads) would hold everything timed on
    it, the guard's stabilisation window and change budget, the policies' half-lives, for as long as the
    step was. A step back of more than BACK_S adds itself to an offset that now() and every admitted
    sample carry (SampleGate): the loop's time goes on from the newest it had. Shared by the engine's
    thread (samples) and the retune thread (ticks). newest: the newest time the database holds, so that a step back
    while the daemon was down (a host clock corrected, a VM snapshot restored) is carried too: else the restored
    policies' state, stamped ahead, neither decayed nor rolled up until the clock caught up (helper-147)."""

    def __init__(self, raw: Callable[[], float], newest: float | None = None):
        self.raw = raw
        self.offset = 0.0
        self.newest = newest
        self._lock = threading.Lock()

    def read(self) -> tuple[float, float]:
        """(now, the offset it carries), together: the other thread may move the offset in between."""
        with self._lock:
            t = self.raw() + self.offset
            if self.newest is not None and t < self.newest - BACK_S:
                self.offset += self.newest - t
                t = self.newest
            self.newest = t if self.newest is None else max(self.newest, t)
            return t, self.offset

    def now(self) -> float:
        return self.read()[0]


class SampleGate:
    """validate_sample with its memory (the newest accepted time) and the rejects counted by kind, on
    the steady clock's time base. Called by one thread: the engine's, which hands samples over one at a
    time."""

    def __init__(self, max_batch_size: int, k: int, clock: SteadyClock, monotonic: Callable[[], float] = time.monotonic):
        self.max_batch_size = max_batch_size
        self.k = k
        self.clock, self.monotonic = clock, monotonic
        self.last_t: float | None = None
        self.rejected = dict.fromkeys(REJECT_KINDS, 0)
        self.rejects: list | None = None     # since the newest sample let through: [first reject's real time, the
        #                                      newest's, {kind: count}] (None: none since)

    def admit(self, s: Sample) -> tuple[str | None, Sample]:
        """(None, the sample on the steady time base) if it may pass; else (the reject kind, counted, and
        the sample as given). A sample stamped before a step back of the clock and read after it lands
        ahead of the clock by the step and is rejected (time): at most the plugin's last send."""
        now, offset = self.clock.read()
        # checked on the engine's own time base, restamped once it passed
        why = validate_sample(s, self.max_batch_size, self.k, None if self.last_t is None else self.last_t - offset,
                              now - offset)
        if why is None:
            s = replace(s, t=s.t + offset) if offset else s
            self.last_t = s.t if self.last_t is None else max(self.last_t, s.t)
            self.rejects = None
        else:
            self.rejected[why] += 1
            now = self.monotonic()
            self.rejects = self.rejects or [now, now, {}]
            self.rejects[1], self.rejects[2][why] = now, self.rejects[2].get(why, 0) + 1
        return why, s

    def stalled(self, window_s: float = 60.0) -> str | None:
        """Samples still arrive (one within window_s) and every one since window_s ago at least was rejected (a clock
        far off the engine's, a plugin of another version): nothing is learned, which status must not call healthy.
        None otherwise (a few rejects, then an idle engine, are no problem)."""
        now, rejects = self.monotonic(), self.rejects      # (read once: the engine's thread replaces and fills it)
        if rejects is None or now - rejects[0] < window_s or now - rejects[1] > window_s:
            return None
        kinds = ", ".join(f"{k} {n:,}" for k, n in dict(rejects[2]).items())   # (grouped as in status)
        return f"telemetry: every sample rejected for {now - rejects[0]:.0f} s ({kinds}); nothing is learned"

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


LOSSY_WINDOW_S = 60.0     # Undecodable.lossy's window ...
LOSSY_LEAST = 10         # ... and the fewest refused messages in it that make a problem


class Undecodable:
    """Telemetry messages the contract's decode() refused (a plugin of another release whose sample layout differs,
    anything else on the socket): counted, logged at most once a minute, and a problem once nothing else has come for
    window_s while they keep coming. They never reach the gate, so SampleGate.stalled() never saw them: 14,000 such
    messages in 70 s left status 'healthy' with '0 dropped', no log line, while nothing was learned (helper-153).
    Written by the engine's receiver thread, read by status."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic):
        self.count = 0
        self.monotonic = monotonic
        self.run: tuple[float, float] | None = None    # since the newest sample message: (the first's real time, newest's)
        # (refused, decoded) messages per LOSSY_WINDOW_S: the current window (its start first) and the last whole one.
        # Samples still coming reset `run`: 2,000 oversized messages a second, each dropping the sender's connection,
        # let 142 sample messages through in 20 s, and status said healthy (helper-170)
        self._window: tuple[float, int, int] = (monotonic(), 0, 0)
        self._last: tuple[int, int] | None = None
        self._logs = RateLimitedLog(log)

    def _tick(self, now: float, refused: int = 0, decoded: int = 0) -> None:
        start, r, d = self._window
        if now - start >= LOSSY_WINDOW_S:        # (a window with no message after it is no current figure)
            self._last = (r, d) if now - start < 2 * LOSSY_WINDOW_S else None
            start, r, d = now, 0, 0
        self._window = (start, r + refused, d + decoded)

    def refused(self, msg: bytes | None, why: str) -> None:
        """msg: the message refused; None where zmq dropped it unread (over the contract's size cap)."""
        self.count += 1
        now = self.monotonic()
        self._tick(now, refused=1)
        self.run = (self.run[0] if self.run else now, now)
        self._logs.warning("undecodable", "telemetry: %s%s: not read (a plugin of another release?)", why,
                           "" if msg is None else f", first byte {msg[0]:#04x}" if msg else ", first byte none")

    def samples_came(self) -> None:
        self.run = None
        self._tick(self.monotonic(), decoded=1)

    def lossy(self) -> str | None:
        """A problem where, over the last whole LOSSY_WINDOW_S, refused messages (at least LOSSY_LEAST) outnumbered the
        sample messages decoded: learning goes on from the few that pass."""
        now, (start, r, d), last = self.monotonic(), self._window, self._last     # (each read once: swapped whole)
        age = now - start           # (the current window once whole; the last one while it is not; none if stale)
        counts = last if age < LOSSY_WINDOW_S else (r, d) if age < 2 * LOSSY_WINDOW_S else None
        if counts is None or counts[0] < LOSSY_LEAST or counts[0] <= counts[1]:
            return None
        return (f"telemetry: {counts[0]:,} messages refused (over the size cap or undecodable) against {counts[1]:,} "
                f"decoded in the last {LOSSY_WINDOW_S:g} s: most samples are lost; is the engine's plugin ([sglang] "
                "python's spec-controller) of another release than the daemon?")

    def stalled(self, window_s: float = 60.0) -> str | None:
        """As SampleGate.stalled, for messages that are not samples at all; else lossy()."""
        now, run = self.monotonic(), self.run          # (read once: the receiver replaces it)
        if run is None or now - run[0] < window_s or now - run[1] > window_s:
            return self.lossy()
        return (f"telemetry: no sample decoded for {now - run[0]:.0f} s, only undecodable messages ({self.count:,} this "
                "run); nothing is learned: is the engine's plugin ([sglang] python's spec-controller) of another release "
                "than the daemon?")
