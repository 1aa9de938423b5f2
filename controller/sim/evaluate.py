"""Evaluation in virtual time: a policy (or the oracle, or a static threshold) on a profile.

The oracle speculates, at each batch size, iff that mode has the higher expected
tokens/s there (the upper envelope of the two curves, at the current acceptance).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from policies import make_policy

from ..contract import Sample, speculates
from ..control.guard_config import GuardConfig
from ..control.loop import ControlLoop
from .core import SimCore
from .openloop import Latency, OpenLoopCore, RateSchedule
from .profile import Profile, Segment

DEFAULT_TICK_S = 0.5
OPEN_LOOP_TOLERANCE = 0.01     # re-convergence (open loop): exploit loss on the live batch sizes under 1 % ...
OPEN_LOOP_WINDOW_S = 5.0       # ... over the batches of the last 5 s


@dataclass
class SegmentResult:
    segment: str
    concurrency: int
    accept_length: float
    seconds: float
    tokens: int = 0
    batches: int = 0
    spec_batches: int = 0
    final_threshold: int | None = None
    reconverge_s: float | None = None
    rate: float | None = None
    batch_size_sum: int = 0
    latencies: list[Latency] = field(default_factory=list)    # open loop: requests finished here

    @property
    def throughput(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def mean_batch_size(self) -> float:
        return self.batch_size_sum / self.batches if self.batches else 0.0


class Runner:
    """Decides the mode of each batch; subclasses: threshold, oracle, control loop."""

    threshold: int | None = None

    def speculate(self, batch_size: int) -> bool:
        raise NotImplementedError

    def after_batch(self, sample: Sample, measured: bool = True) -> None:
        pass

    def tick(self, now: float) -> None:
        pass

    def exploit_speculates(self, batch_size: int) -> bool | None:
        return None


class StaticRunner(Runner):
    def __init__(self, threshold: int):
        self.threshold = threshold

    def speculate(self, batch_size: int) -> bool:
        return speculates(batch_size, self.threshold)


class OracleRunner(Runner):
    def __init__(self, profile: Profile, core: SimCore):
        self.profile, self.core = profile, core
        self._summary = (None, 0)        # (accept length, threshold) last computed

    def speculate(self, batch_size: int) -> bool:
        return self.profile.better_mode(batch_size, self.core.delivered_accept)   # (the spread's mean, not nominal)

    @property
    def threshold(self) -> int:
        """The largest batch size it speculates at (0: none), for the lean-prefill rule (contract.prefill_skips_draft)."""
        if self._summary[0] != self.core.accept_length:
            wins = [bs for bs in range(1, self.profile.max_batch_size + 1) if self.speculate(bs)]
            self._summary = (self.core.accept_length, max(wins, default=0))
        return self._summary[1]


class LoopRunner(Runner):
    def __init__(self, loop: ControlLoop):
        self.loop = loop
        self.ticks: list[tuple[float, int, bool]] = []    # (t, threshold, trial) at every change (and kept trial)
        self.changes: list[float] = []      # when the applied threshold changed (the decision history)

    @property
    def threshold(self) -> int:
        return self.loop.threshold

    def speculate(self, batch_size: int) -> bool:
        return speculates(batch_size, self.loop.threshold)

    def after_batch(self, sample: Sample, measured: bool = True) -> None:
        if measured:    # (core.measured) the loop sees what the plugin sends: no sample after an idle pass
            self.loop.observe(sample)

    def tick(self, now: float) -> None:
        tick = self.loop.tick(now)
        if tick.changed:
            self.changes.append(now)
        if tick.changed or tick.trial_kept or not self.ticks:      # a kept trial: its row ends the trial
            self.ticks.append((now, tick.threshold, tick.exploratory))

    def exploit_speculates(self, batch_size: int) -> bool:
        return speculates(batch_size, self.loop.guard.exploit)


def make_core(profile: Profile, segments: Sequence[Segment], seed: int) -> SimCore | OpenLoopCore:
    """The closed loop for concurrency segments, the open loop for rate segments."""
    if segments and segments[0].open_loop:
        return OpenLoopCore(profile, seed, RateSchedule.of_segments(segments))
    return SimCore(profile, seed)


def exploit_loss(profile: Profile, accept: float, seen: Mapping[int, int], runner: Runner) -> float | None:
    """Share of throughput the runner's exploit threshold loses against the oracle over the
    batch sizes seen (counts); None for runners without a learned threshold."""
    total = lost = 0.0
    for bs, n in seen.items():
        spec = runner.exploit_speculates(bs)
        if spec is None:
            return None
        best = max(profile.tok_per_s(bs, True, accept), profile.tok_per_s(bs, False, accept))
        lost += n * (best - profile.tok_per_s(bs, spec, accept)) / best
        total += n
    return lost / total if total else 0.0


class LiveSizes:
    """The batch sizes a tick judges the exploit threshold on: with no span, those run since the
    tick before (or the tick before's, if none ran since); with a span, those of the last span s."""

    def __init__(self, span_s: float | None):
        self.span_s = span_s
        self.batches: deque[tuple[float, int]] = deque()
        self.counts: dict[int, int] = {}
        self.fresh = False           # (no span) a batch ran since the last tick

    def add(self, t: float, bs: int) -> None:
        if self.span_s is None and not self.fresh:
            self.batches.clear()
            self.counts.clear()
            self.fresh = True
        self.batches.append((t, bs))
        self.counts[bs] = self.counts.get(bs, 0) + 1

    def at_tick(self, now: float) -> dict[int, int]:
        self.fresh = False
        while self.span_s is not None and self.batches and self.batches[0][0] < now - self.span_s:
            _, bs = self.batches.popleft()
            self.counts[bs] -= 1
            if not self.counts[bs]:
                del self.counts[bs]
        return self.counts


def _start(core: SimCore | OpenLoopCore, seg: Segment) -> None:
    """A segment's load: clients (closed loop) or its acceptance (the open loop's rate is scheduled)."""
    if isinstance(core, OpenLoopCore):
        core.set_accept(seg.mean_accept_length)
    else:
        core.set_load(seg.concurrency, seg.mean_accept_length)


def run_segments(profile: Profile, segments: Sequence[Segment], make_runner: Callable[[SimCore], Runner],
                 seed: int = 0, tick_s: float = DEFAULT_TICK_S, keep: list | None = None) -> list[SegmentResult]:
    """One continuous virtual-time run through the segments (the load changes, the runner stays).
    keep: a list the runner is appended to (to read its record afterwards).

    Re-convergence: the time from a segment's start to the end of the last tick whose exploit
    threshold lost throughput against the oracle on the batch sizes run lately (closed loop: those
    since the tick before, any loss; open loop, where batch sizes wander: those of the last 5 s,
    more than 1 %)."""
    core = make_core(profile, segments, seed)
    runner = make_runner(core)
    if keep is not None:
        keep.append(runner)
    is_open = isinstance(core, OpenLoopCore)
    tolerance = OPEN_LOOP_TOLERANCE if is_open else 0.0
    results = []
    next_tick = tick_s
    for i, seg in enumerate(segments):
        _start(core, seg)
        start, end, tokens0 = core.t, core.t + seg.seconds, core.output_tokens
        res = SegmentResult(seg.label or str(i), core.concurrency if isinstance(core, SimCore) else 0,
                            core.accept_length, seg.seconds, rate=seg.rate)
        last_wrong = None          # time of the last tick whose exploit mode was wrong
        lately = LiveSizes(OPEN_LOOP_WINDOW_S if is_open else None)
        while core.t < end:
            core.threshold = runner.threshold
            bs = core.batch_size
            sample = core.step(runner.speculate(bs))
            res.batches += 1
            res.batch_size_sum += bs
            res.spec_batches += sample.steps > 0
            lately.add(sample.t, bs)
            runner.after_batch(sample, core.measured)
            while next_tick <= core.t:
                runner.tick(next_tick)
                loss = exploit_loss(profile, core.delivered_accept, lately.at_tick(next_tick), runner)
                if loss is not None and loss > tolerance:
                    last_wrong = next_tick
                next_tick += tick_s
        res.seconds = core.t - start
        res.tokens = core.output_tokens - tokens0
        res.final_threshold = runner.threshold
        if isinstance(core, OpenLoopCore):
            res.latencies = core.take_finished()
        if isinstance(runner, LoopRunner):
            res.reconverge_s = 0.0 if last_wrong is None else last_wrong + tick_s - start
            if last_wrong is not None and last_wrong + tick_s >= core.t:
                res.reconverge_s = None           # still wrong at the segment's end
        results.append(res)
    return results


def sweep_segments(levels: Sequence[int], seconds: float) -> list[Segment]:
    return [Segment(seconds, c, None, f"C={c}") for c in levels]


def policy_runner(name: str, params: Mapping[str, Any] | None, profile: Profile, seed: int,
                  guard: GuardConfig | None = None, initial_threshold: int = 0) -> Callable[[SimCore], Runner]:
    policy = make_policy(name, params, seed=seed, max_batch_size=profile.max_batch_size)   # validates now
    # the loop knows the off path as the daemon's does from its engine
    pays = profile.prefills_pay_draft
    return lambda core: LoopRunner(ControlLoop(policy, guard, initial_threshold, prefills_pay_draft=pays))


def static_throughputs(profile: Profile, segments: Sequence[Segment], threshold: int, seed: int = 0,
                       tick_s: float = DEFAULT_TICK_S) -> list[float]:
    """tok/s per segment of a fixed threshold (0: never speculate; max batch size: always)."""
    res = run_segments(profile, segments, lambda core: StaticRunner(threshold), seed, tick_s)
    return [r.throughput for r in res]


def evaluate(profile: Profile, segments: Sequence[Segment], policy: str, params: Mapping[str, Any] | None = None,
             seed: int = 0, tick_s: float = DEFAULT_TICK_S, guard: GuardConfig | None = None,
             with_static: bool = False, baselines: bool = False) -> dict:
    """Policy vs oracle per segment (and, for traces, vs the best static threshold in hindsight).
    baselines: also never/always speculating per segment (never_tok_s, always_tok_s) and the
    policy's threshold at every change ("timeline": t, threshold, trial; segment starts).
    Closed loop only: rate segments go to controller.sim.openeval.evaluate_open."""
    if any(seg.open_loop for seg in segments):
        raise ValueError("evaluate() is the closed loop: give rate segments to openeval.evaluate_open()")
    kept: list = []
    mine = run_segments(profile, segments, policy_runner(policy, params, profile, seed, guard), seed, tick_s, kept)
    oracle = run_segments(profile, segments, lambda core: OracleRunner(profile, core), seed, tick_s)
    rows = []
    for m, o in zip(mine, oracle):
        rows.append({
            "segment": m.segment, "concurrency": m.concurrency, "accept_length": round(m.accept_length, 3),
            "seconds": round(m.seconds, 2),
            "throughput_tok_s": round(m.throughput, 2), "oracle_tok_s": round(o.throughput, 2),
            "ratio": round(m.throughput / o.throughput, 4) if o.throughput else None,
            "spec_share": round(m.spec_batches / m.batches, 4) if m.batches else 0.0,
            "oracle_spec": o.spec_batches > o.batches / 2,
            "final_threshold": m.final_threshold, "reconverge_s": m.reconverge_s and round(m.reconverge_s, 2),
        })
    total = sum(r.tokens for r in mine) / sum(r.seconds for r in mine)
    total_oracle = sum(r.tokens for r in oracle) / sum(r.seconds for r in oracle)
    out = {
        "profile": profile.name, "policy": policy, "params": dict(params or {}), "seed": seed, "tick_s": tick_s,
        "rows": rows,
        "overall": {"throughput_tok_s": round(total, 2), "oracle_tok_s": round(total_oracle, 2),
                    "ratio": round(total / total_oracle, 4), "min_ratio": min(r["ratio"] for r in rows)},
    }
    if baselines:
        _add_baselines(out, profile, segments, seed, tick_s, kept[0].ticks)
    if with_static:
        out["best_static"] = best_static(profile, segments, seed, tick_s)
        out["best_static"]["ratio"] = round(out["best_static"]["throughput_tok_s"] / total_oracle, 4)
    return out


def _add_baselines(out: dict, profile: Profile, segments: Sequence[Segment], seed: int, tick_s: float,
                   ticks: list[tuple[float, int, bool]]) -> None:
    for name, threshold in (("never", 0), ("always", profile.max_batch_size)):
        for row, tput in zip(out["rows"], static_throughputs(profile, segments, threshold, seed, tick_s)):
            row[f"{name}_tok_s"] = round(tput, 2)
    starts = [0.0]
    for row in out["rows"][:-1]:
        starts.append(starts[-1] + row["seconds"])
    out["timeline"] = {"ticks": [list(t) for t in ticks], "segment_starts": [round(s, 2) for s in starts]}


def best_static(profile: Profile, segments: Sequence[Segment], seed: int = 0, tick_s: float = DEFAULT_TICK_S) -> dict:
    """The best fixed threshold in hindsight. Batch size equals the (capped) concurrency in
    the simulator, so only thresholds at 0 and at each segment's concurrency differ."""
    candidates = sorted({0} | {min(s.concurrency, profile.max_batch_size) for s in segments})
    best_t, best_tput = None, 0.0
    for t in candidates:
        res = run_segments(profile, segments, lambda core, t=t: StaticRunner(t), seed, tick_s)
        tput = sum(r.tokens for r in res) / sum(r.seconds for r in res)
        if best_t is None or tput > best_tput:      # unrounded: rounding is for the report only
            best_t, best_tput = t, tput
    return {"threshold": best_t, "throughput_tok_s": round(best_tput, 2)}


def changes_per_min(profile: Profile, segments: Sequence[Segment], policy: str, params: Mapping[str, Any] | None = None,
                    seed: int = 0, guard: GuardConfig | None = None, warm_s: float = 0.0) -> float:
    """Applied threshold changes (rows of the decision history) per minute after warm_s."""
    make = policy_runner(policy, params, profile, seed, guard)
    made: list[Runner] = []
    res = run_segments(profile, segments, lambda core: made.append(make(core)) or made[-1], seed)
    changes = [t for t in made[0].changes if t >= warm_s]
    return len(changes) / ((sum(r.seconds for r in res) - warm_s) / 60.0)
