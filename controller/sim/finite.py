"""Finite open-loop runs, as `sglang.bench_serving --request-rate R --num-prompts N` makes them.

bench_serving (dataset random / random-ids) seeds numpy's global generator with --seed, draws N
prompt lengths, N output lengths (uniform integers, range ratio applied) and N token offsets, then
sends request 0 at once and after every request sleeps an exponential gap of mean 1/R (after the
last one too, before it waits for the answers). Its numbers: output throughput = output tokens /
the whole duration (the drain after the last arrival included), median TPOT over requests with
TPOT = (E2E - TTFT) / (output tokens - 1), median E2E.

bench_serving_requests() draws the same requests (same seed, same lengths and gaps);
run_finite() plays them through the open-loop core until drained; evaluate_finite() does so per
rate and mode, over several seeds.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .evaluate import DEFAULT_TICK_S, Runner
from .openeval import latency_figures, mode_makers
from .openloop import Latency, OpenLoopCore, Request
from .profile import Profile

TOKENIZER_VOCAB = 32000      # bench/gpu/mkmodel.py's tokenizer: bench_serving draws one offset per prompt below it


def request_count(rate: float, seconds: float, at_least: int = 1) -> int:
    """bench_serving's --num-prompts for rate x seconds of arrivals (bench/gpu/loads.py asks for at least 8)."""
    return max(at_least, int(rate * seconds))


def bench_serving_requests(rate: float, n: int, seed: int, prompt_range: tuple[int, int],
                           output_range: tuple[int, int], vocab: int = TOKENIZER_VOCAB) -> tuple[list[Request], float]:
    """bench_serving's N requests for --seed (lengths uniform in the inclusive ranges) and the end of
    its arrival loop (the last arrival plus the gap it sleeps after it): (requests, loop end s)."""
    if rate <= 0 or n < 1:
        raise ValueError("a finite run needs a rate > 0 and at least one request")
    rng = np.random.RandomState(seed)        # np.random.seed(seed): the legacy global generator
    prompts = rng.randint(prompt_range[0], prompt_range[1] + 1, size=n)
    outputs = rng.randint(output_range[0], output_range[1] + 1, size=n)
    rng.randint(0, vocab, size=n)            # the prompts' token offsets: drawn, unused here
    gaps = rng.exponential(1.0 / rate, size=n)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    reqs = [Request(float(a), int(p), int(o)) for a, p, o in zip(arrivals, prompts, outputs)]
    return reqs, float(arrivals[-1] + gaps[-1])


@dataclass
class FiniteRun:
    """One finite run: its duration (first arrival to the last answer, or to the end of the
    arrival loop if later), the output tokens of all requests, and each request's latencies."""

    duration_s: float
    output_tokens: int
    latencies: list[Latency] = field(default_factory=list)
    batches: int = 0
    spec_batches: int = 0
    batch_size_sum: int = 0

    @property
    def tok_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0

    def summary(self) -> dict:
        return {"tok_s": round(self.tok_s, 2), **latency_figures(self.latencies), "duration_s": round(self.duration_s, 3),
                "mean_batch_size": round(self.batch_size_sum / self.batches, 2) if self.batches else 0.0,
                "spec_share": round(self.spec_batches / self.batches, 4) if self.batches else 0.0}


def run_finite(profile: Profile, requests: Sequence[Request], make_runner: Callable[[OpenLoopCore], Runner],
               seed: int = 0, tick_s: float = DEFAULT_TICK_S, loop_end_s: float = 0.0,
               threshold: int | None = None) -> FiniteRun:
    """Play `requests` (arrivals from 0) through the open-loop core until all have finished.
    threshold: the one in force for the first request's prefill (a fixed mode's; None: not known, it runs
    the draft); from then on the runner's."""
    if not requests:
        raise ValueError("a finite run needs at least one request")
    core = OpenLoopCore(profile, seed, requests=requests, threshold=threshold)
    runner = make_runner(core)
    run = FiniteRun(0.0, 0)
    next_tick = tick_s
    while not core.drained:
        core.threshold = runner.threshold
        bs = core.batch_size
        sample = core.step(runner.speculate(bs))
        run.batches += 1
        run.batch_size_sum += bs
        run.spec_batches += sample.steps > 0
        runner.after_batch(sample, core.measured)
        while next_tick <= core.t:
            runner.tick(next_tick)
            next_tick += tick_s
    run.latencies = core.take_finished()
    run.output_tokens = sum(x.output_len for x in run.latencies)
    run.duration_s = max(core.t, loop_end_s) - min(r.arrival for r in requests)
    return run


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def evaluate_finite(profile: Profile, rates: Sequence[float], seconds: float, policy: str | None = None,
                    params: Mapping[str, Any] | None = None, seeds: Sequence[int] = (0,),
                    tick_s: float = DEFAULT_TICK_S, thresholds: Mapping[str, int] | None = None,
                    seed_of: Callable[[float, int], int] | None = None, at_least: int = 1) -> dict:
    """Per rate and mode, bench_serving's numbers for each seed (a fresh run each) and their median.
    seed_of(rate, seed) gives the seed bench_serving was run with (default: the seed itself)."""
    if not rates or any(r <= 0 for r in rates) or not seeds:
        raise ValueError("evaluate_finite needs rates > 0 and at least one seed")
    rows = []
    for rate in rates:
        n = request_count(rate, seconds, at_least)
        row: dict = {"rate": rate, "requests": n, "modes": {}}
        for s in seeds:
            bench_seed = seed_of(rate, s) if seed_of else s
            reqs, loop_end = bench_serving_requests(rate, n, bench_seed, profile.prompt_len_range,
                                                    profile.output_len_range or _normal_range(profile))
            for name, make in mode_makers(profile, policy, params, bench_seed, thresholds=thresholds).items():
                fixed = (thresholds or {"never": 0}).get(name)          # mode_makers' fixed thresholds
                res = run_finite(profile, reqs, make, bench_seed, tick_s, loop_end, fixed).summary()
                row["modes"].setdefault(name, {"runs": []})["runs"].append({"seed": bench_seed, **res})
        for m in row["modes"].values():
            for key in ("tok_s", "tpot_ms_median", "e2e_ms_median", "ttft_ms_median", "duration_s"):
                m[key] = _median([r[key] for r in m["runs"]])
        rows.append(row)
    return {"profile": profile.name, "policy": policy, "params": dict(params or {}), "seeds": list(seeds),
            "tick_s": tick_s, "load": "finite", "seconds": seconds, "rows": rows}


def _normal_range(profile: Profile) -> tuple[int, int]:
    """A profile with normal output lengths: mean +- 2 sd as a uniform range (at least 1 token)."""
    lo = max(1, round(profile.output_len_mean - 2 * profile.output_len_sd))
    return lo, max(lo, round(profile.output_len_mean + 2 * profile.output_len_sd))
