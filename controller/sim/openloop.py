"""Open-loop load: Poisson arrivals, a waiting queue, admission and prefill as SGLang does it.

Requests arrive at a rate (piecewise constant over virtual time), wait in a FIFO queue and
are admitted between decode batches while fewer than max_batch_size run (MAX_WAITING wait at most): the admitted ones
are prefilled in one extend batch (at most max_prefill_tokens prompt tokens, at least one
request), which produces their first token and lengthens the interval of the decode batch
they join (that sample is not decode-only). Batch sizes therefore fluctuate with the load.
A request finishes after its output length; its E2E latency runs from arrival to its last
token and its TPOT is (E2E - TTFT) / (output tokens - 1), as sglang.bench_serving counts.
With `requests` (a finite list, controller.sim.finite) the arrivals and lengths are those instead
of Poisson draws, and the core drains once the last one has arrived and finished.
With the profile's chained_extends, the requests that arrive while an extend batch runs get an extend
batch of their own before the decode, and so on until none arrived during the last one: SGLang's
scheduler takes a new prefill batch over the running decode batch whenever requests wait, and its eager
extend's launch holds the scheduler thread for the batch's whole span (bench/results/h200-2026-12-01c
call 1: 24-51 % of the extends at 12-24 req/s ran right after another one; bench/prefill_chains.py).
"""
from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..contract import Sample
from .core import CoreBase
from .profile import Profile, Segment


# The most requests the simulated queue holds (SGLang's --max-queued-requests): arrivals past it are turned away.
# Without it a rate far above capacity (--arrival-rate up to 1e6, the daemon's looped too) queued every arrival,
# memory without bound (~20 MB a second at 1e6/s).
MAX_WAITING = 100_000


class RateSchedule:
    """Arrival rate over virtual time: steps (start, rate), optionally repeating every `period`."""

    def __init__(self, steps: Sequence[tuple[float, float]], period: float | None = None):
        if not steps or steps[0][0] != 0.0 or any(r <= 0 for _, r in steps):
            raise ValueError("a rate schedule starts at 0 and has rates > 0")
        self.starts = [float(s) for s, _ in steps]
        self.rates = [float(r) for _, r in steps]
        self.period = period

    @classmethod
    def of_segments(cls, segments: Sequence[Segment], loop: bool = False) -> "RateSchedule":
        steps, t = [], 0.0
        for seg in segments:
            steps.append((t, float(seg.rate)))
            t += seg.seconds
        return cls(steps, t if loop else None)

    def _local(self, t: float) -> tuple[float, float]:
        """(offset of t's period, t inside the period)."""
        if self.period is None:
            return 0.0, t
        base = math.floor(t / self.period) * self.period
        return base, t - base

    def rate(self, t: float) -> float:
        _, x = self._local(t)
        return self.rates[bisect.bisect_right(self.starts, x) - 1]

    def next_change(self, t: float) -> float:
        base, x = self._local(t)
        i = bisect.bisect_right(self.starts, x)
        if i < len(self.starts):
            return base + self.starts[i]
        return base + self.period if self.period is not None else math.inf

    def after(self, t: float, unit_exp: float) -> float:
        """The arrival that follows t, given a unit exponential draw (time rescaling: exact for
        piecewise-constant rates, and the same draws give the same arrivals in every run)."""
        while True:
            r, change = self.rate(t), self.next_change(t)
            if t + unit_exp / r <= change:
                return t + unit_exp / r
            unit_exp -= (change - t) * r
            t = change


@dataclass(frozen=True)
class Request:
    """One request of a finite run: when it arrives (virtual s), its prompt and output tokens."""

    arrival: float
    prompt: int
    output: int


@dataclass
class Latency:
    """One finished request: seconds from arrival to first and last token, its length, and
    when it arrived (virtual time)."""

    ttft_s: float
    e2e_s: float
    output_len: int
    arrival_t: float = 0.0

    @property
    def tpot_s(self) -> float | None:
        return (self.e2e_s - self.ttft_s) / (self.output_len - 1) if self.output_len > 1 else None


class OpenLoopCore(CoreBase):
    """Poisson arrivals at `schedule`'s rate; batch_size is the size of the next decode batch
    (after admission); step(speculate) runs it."""

    STREAMS = 5          # lengths, noise, acceptance (as the closed loop), arrivals, prompts

    def __init__(self, profile: Profile, seed: int = 0, schedule: RateSchedule | None = None, start_t: float = 0.0,
                 requests: Sequence[Request] | None = None, threshold: int | None = None):
        super().__init__(profile, seed)
        self.threshold = threshold                 # for the first admission, before a runner sets it
        self.t = float(start_t)
        self._rng_arrival = np.random.default_rng(self._extra_streams[0])
        self._rng_prompt = np.random.default_rng(self._extra_streams[1])
        self.schedule = schedule or RateSchedule([(0.0, 1.0)])
        self.waiting: deque[tuple[float, int, int]] = deque()     # (arrival, prompt, output length)
        self._remaining = np.zeros(0, dtype=np.int64)
        self._arrival = np.zeros(0)
        self._first = np.zeros(0)
        self._length = np.zeros(0, dtype=np.int64)
        self._fixed = None if requests is None else deque(sorted(requests, key=lambda r: r.arrival))
        self._next_arrival = self._fixed_next() if self._fixed is not None else \
            self.schedule.after(self.t, self._rng_arrival.exponential())
        self._pending_s = 0.0          # prefill seconds the next interval holds
        self._idle_s = 0.0             # idle seconds before it (already passed: t moved on)
        self._idled = True             # an idle pass came before it (the start too: the plugin's clock starts unset)
        self._pending_n = 0
        self.extend_batches = 0        # extend batches run so far
        self.finished: list[Latency] = []
        self._admit()

    @property
    def batch_size(self) -> int:
        return len(self._remaining)

    @property
    def queue_len(self) -> int:
        return len(self.waiting)

    @property
    def drained(self) -> bool:
        """Nothing runs, waits or is still to arrive (a finite list of requests is done)."""
        return not len(self._remaining) and not self.waiting and math.isinf(self._next_arrival)

    def _fixed_next(self) -> float:
        return self._fixed[0].arrival if self._fixed else math.inf

    def take_finished(self) -> list[Latency]:
        out, self.finished = self.finished, []
        return out

    def _arrive_until(self, t: float) -> None:
        while self._fixed is not None and self._next_arrival <= t:
            r = self._fixed.popleft()
            self.waiting.append((r.arrival, r.prompt, r.output))
            self._next_arrival = self._fixed_next()
        while self._fixed is None and self._next_arrival <= t:
            if len(self.waiting) >= MAX_WAITING:
                # full: the arrivals up to t are turned away at once, and the next one is drawn afresh after t
                # (Poisson arrivals have no memory), so a full queue costs one draw, not one per arrival
                self._next_arrival = self.schedule.after(t, self._rng_arrival.exponential())
                break
            prompt = int(self._rng_prompt.integers(self.profile.prompt_len_range[0],
                                                   self.profile.prompt_len_range[1] + 1))
            self.waiting.append((self._next_arrival, prompt, int(self._output_lengths(1)[0])))
            self._next_arrival = self.schedule.after(self._next_arrival, self._rng_arrival.exponential())

    def _admit(self) -> None:
        """Queue what arrived; idle until the next arrival when nothing runs; then prefill
        the requests that fit (SGLang: an extend batch before the next decode batch)."""
        while True:
            self._arrive_until(self.t)
            if not len(self._remaining) and not self.waiting:
                if math.isinf(self._next_arrival):
                    return                                         # drained: nothing more comes
                self._idle_s += self._next_arrival - self.t
                self._idled = True                               # an idle pass: the next step is not measured
                self.t = self._next_arrival
                self._arrive_until(self.t)
            taken = self._extend()
            while taken and self.profile.chained_extends and self._extend(chained=True):
                pass
            if len(self._remaining) or not taken:
                return
            # Every request admitted finished at its prefill (one output token) and nothing decodes:
            # the prefill's time passes before anything else runs (the next interval holds it).
            self.t += self._pending_s
            self._idle_s += self._pending_s
            self._pending_s = 0.0

    def _extend(self, chained: bool = False) -> int:
        """Prefill the waiting requests that fit in one extend batch; chained: first queue those that
        arrived while the extends before it ran (it starts when they end). Returns how many it took."""
        if chained:
            self._arrive_until(self.t + self._pending_s)
        room = self.profile.max_batch_size - len(self._remaining)
        taken: list[tuple[float, int, int]] = []
        tokens = 0
        while self.waiting and len(taken) < room:
            if taken and tokens + self.waiting[0][1] > self.profile.max_prefill_tokens:
                break
            taken.append(self.waiting.popleft())
            tokens += taken[-1][1]
        if taken:
            self._prefill(taken, tokens)
        return len(taken)

    def _prefill(self, taken: list[tuple[float, int, int]], tokens: int) -> None:
        cost = self.profile.prefill_seconds(len(taken), tokens, draft=self.prefill_runs_draft(len(taken)))
        first_t = self.t + self._pending_s + cost        # after the extends already queued for this interval
        self.extend_batches += 1
        self._pending_s += cost
        self._pending_n += len(taken)
        self.output_tokens += len(taken)                 # the prefill samples each one's first token
        arrival = np.array([a for a, _, _ in taken])
        length = np.array([n for _, _, n in taken], dtype=np.int64)
        one = length <= 1
        for a in arrival[one]:
            self.finished.append(Latency(first_t - a, first_t - a, 1, float(a)))
        keep = ~one
        self._remaining = np.concatenate([self._remaining, length[keep] - 1])
        self._arrival = np.concatenate([self._arrival, arrival[keep]])
        self._first = np.concatenate([self._first, np.full(int(keep.sum()), first_t)])
        self._length = np.concatenate([self._length, length[keep]])

    def step(self, speculate: bool) -> Sample:
        bs = len(self._remaining)
        if bs == 0:
            raise RuntimeError("step() with nothing running")
        decode_s = self._decode_seconds(bs, speculate)
        interval = self._idle_s + self._pending_s + decode_s
        self.measured, self._idled = not self._idled, False
        decode_only = self._pending_n == 0
        self.t += self._pending_s + decode_s
        self._idle_s = self._pending_s = 0.0
        self._pending_n = 0
        delivered, tokens = self._deliver(self._remaining, speculate)
        self._remaining = self._remaining - delivered
        self.output_tokens += tokens
        self._finish()
        sample = Sample(self.t, bs, self.profile.spec_steps if speculate else 0, tokens, interval, decode_only)
        self.last_batch_size = bs
        self._admit()
        return sample

    def _finish(self) -> None:
        done = self._remaining <= 0
        if not done.any():
            return
        for a, f, n in zip(self._arrival[done], self._first[done], self._length[done]):
            self.finished.append(Latency(float(f - a), float(self.t - a), int(n), float(a)))
        keep = ~done
        self._remaining, self._arrival = self._remaining[keep], self._arrival[keep]
        self._first, self._length = self._first[keep], self._length[keep]
