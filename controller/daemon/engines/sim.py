"""The simulated engine in real time (scaled by `speed`), for the live daemon without a GPU."""
from __future__ import annotations

import threading
import time

from ...contract import speculates
from ...numtext import plain
from ...sim.core import SimCore
from ...sim.openloop import OpenLoopCore, RateSchedule
from ...sim.profile import Profile, Segment, Trace
from .base import Engine, EngineError, SampleSink


class SimEngine(Engine):
    """Runs SimCore on its own thread, sleeping each step's duration / speed.

    Load: a fixed concurrency, a fixed arrival rate (open loop: Poisson arrivals), or a
    trace replayed in a loop (the default demo; its segments give clients or rates).
    """

    name = "sim"

    def __init__(self, profile: Profile, trace: Trace | None = None, concurrency: int = 0,
                 speed: float = 1.0, seed: int = 0, start_t: float = 0.0, arrival_rate: float = 0.0):
        if trace is None and concurrency <= 0 and arrival_rate <= 0:
            raise EngineError("sim engine: give a trace, a concurrency > 0 or an arrival rate > 0")
        self.profile = profile
        self.trace = trace
        self.concurrency = concurrency
        self.speed = speed
        self.max_batch_size = profile.max_batch_size
        self.arrival_rate = arrival_rate
        self.spec_steps = profile.spec_steps
        # A restarted daemon resumes virtual time where its database left off, so samples,
        # decisions and rollup windows of the previous run are continued, never overwritten.
        start_t = max(0.0, float(start_t))
        if trace is None and concurrency <= 0:
            self.trace = trace = Trace("rate", "", None, (Segment(3600.0, 0, None, f"rate={plain(arrival_rate)}/s",
                                                                  arrival_rate),))
        self.core: SimCore | OpenLoopCore
        if trace is not None and concurrency <= 0 and trace.segments[0].open_loop:
            self.core = OpenLoopCore(profile, seed, RateSchedule.of_segments(trace.segments, loop=True), start_t)
        else:
            self.core = SimCore(profile, seed)
            self.core.t = start_t
        self._threshold = 0
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0_real = 0.0
        self._error: str | None = None
        self.segment = ""

    def start(self, on_sample: SampleSink) -> None:
        self._thread = threading.Thread(target=self._run, args=(on_sample,), name="sim-engine", daemon=True)
        self._threshold = int(self.initial_threshold)
        self._t0_real = time.monotonic() - self.core.t / self.speed
        self._thread.start()

    def _load_at(self, t: float) -> tuple[int, float | None, str]:
        if self.trace is None or self.concurrency > 0:
            return self.concurrency, None, f"C={self.concurrency}"
        period = sum(s.seconds for s in self.trace.segments)
        x = t % period
        seg = self.trace.segments[-1]
        for s in self.trace.segments:
            if x < s.seconds:
                seg = s
                break
            x -= s.seconds
        label = seg.label or (f"rate={plain(seg.rate)}/s" if seg.open_loop else f"C={seg.concurrency}")
        return seg.concurrency, seg.mean_accept_length, label

    def _run(self, on_sample: SampleSink) -> None:
        try:
            self._ready.set()
            while not self._stop.is_set():
                c, accept, self.segment = self._load_at(self.core.t)
                if isinstance(self.core, OpenLoopCore):
                    self.core.set_accept(accept)        # the arrival rate follows the core's schedule
                elif c != self.core.concurrency or (accept is not None and accept != self.core.accept_length):
                    self.core.set_load(c, accept)
                self.core.threshold = self._threshold
                sample = self.core.step(speculates(self.core.batch_size, self._threshold))
                # Pace virtual time against the real clock so the sample arrives when its step ends.
                lag = sample.t / self.speed - (time.monotonic() - self._t0_real)
                if lag > 0 and self._stop.wait(lag):
                    break
                if self.core.measured:           # as the plugin: no sample for a step after an idle pass
                    on_sample(sample)
        except Exception as e:        # a crash here is the engine dying: health reports it
            self._error = f"{type(e).__name__}: {e}"

    def wait_ready(self, timeout: float, cancel: threading.Event | None = None) -> bool:
        return self._ready.wait(timeout)          # set as soon as the thread runs

    def set_threshold(self, threshold: int) -> None:
        if self._error or self._thread is None or not self._thread.is_alive():
            raise EngineError(f"sim engine is not running ({self._error or 'stopped'})")
        self._threshold = int(threshold)

    @property
    def threshold(self) -> int:
        return self._threshold

    def now(self) -> float:
        return self.core.t

    def prefills_pay_draft(self) -> bool:
        return self.profile.prefills_pay_draft

    def health(self) -> dict:
        alive = self._thread is not None and self._thread.is_alive()
        return {"ok": alive and self._error is None, "engine": "sim", "profile": self.profile.name,
                "load": self.segment, "speed": self.speed,
                "detail": self._error or ("running" if alive else "stopped")}

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
