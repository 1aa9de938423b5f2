"""Open-loop evaluation: a policy against never, always and the oracle at arrival rates.

At a rate below saturation every mode delivers the offered tokens, so throughput alone
cannot rank them: each row also gives what a client sees (mean and median TPOT, median
E2E and TTFT), as sglang.bench_serving reports them. The oracle still decides per batch
size (Profile.better_mode at the current acceptance).
"""
from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from ..control.guard_config import GuardConfig
from ..numtext import plain
from .evaluate import (
    DEFAULT_TICK_S,
    OracleRunner,
    SegmentResult,
    StaticRunner,
    policy_runner,
    run_segments,
)
from .openloop import Latency
from .profile import Profile, Segment

BASELINES = ("never", "always", "oracle")


def rate_segments(rates: Sequence[float], seconds: float) -> list[Segment]:
    return [Segment(seconds, 0, None, f"rate={plain(r)}", float(r)) for r in rates]


def latency_figures(latencies: Sequence[Latency]) -> dict:
    """The latencies clients saw, as bench_serving reports them (ms): TPOT mean and median, E2E and
    TTFT medians, and how many requests finished."""
    tpot = [x.tpot_s for x in latencies if x.tpot_s is not None]
    e2e = [x.e2e_s for x in latencies]
    ms = lambda values, f: round(1000 * f(values), 3) if values else None   # noqa: E731
    return {"tpot_ms_mean": ms(tpot, statistics.fmean), "tpot_ms_median": ms(tpot, statistics.median),
            "e2e_ms_median": ms(e2e, statistics.median),
            "ttft_ms_median": ms([x.ttft_s for x in latencies], statistics.median), "requests": len(e2e)}


def summary(res: SegmentResult) -> dict:
    """What one mode delivered in one segment: tok/s and the latencies clients saw."""
    return {"tok_s": round(res.throughput, 2), **latency_figures(res.latencies),
            "mean_batch_size": round(res.mean_batch_size, 2),
            "spec_share": round(res.spec_batches / res.batches, 4) if res.batches else 0.0}


def mode_makers(profile: Profile, policy: str | None, params: Mapping[str, Any] | None, seed: int,
                guard: GuardConfig | None = None, thresholds: Mapping[str, int] | None = None) -> dict:
    """name -> runner maker: the policy (if any), fixed thresholds (default never and always), the oracle."""
    fixed = dict(thresholds) if thresholds is not None else {"never": 0, "always": profile.max_batch_size}
    makers = {"policy": policy_runner(policy, params, profile, seed, guard)} if policy else {}
    makers.update({name: (lambda core, t=t: StaticRunner(t)) for name, t in fixed.items()})
    makers["oracle"] = lambda core: OracleRunner(profile, core)
    return makers


def runs(profile: Profile, segments: Sequence[Segment], policy: str, params: Mapping[str, Any] | None,
         seed: int, tick_s: float, guard: GuardConfig | None) -> dict[str, list[SegmentResult]]:
    """The policy and each baseline through the same segments (common random numbers)."""
    return {name: run_segments(profile, segments, make, seed, tick_s)
            for name, make in mode_makers(profile, policy, params, seed, guard).items()}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a and b else None


def row(mine: SegmentResult, base: Mapping[str, SegmentResult]) -> dict:
    out = {"segment": mine.segment, "rate": mine.rate, "accept_length": round(mine.accept_length, 3),
           "seconds": round(mine.seconds, 2), **summary(mine),
           "final_threshold": mine.final_threshold, "reconverge_s": mine.reconverge_s}
    out.update({name: summary(base[name]) for name in BASELINES})
    out["throughput_tok_s"], out["oracle_tok_s"] = out["tok_s"], out["oracle"]["tok_s"]
    out["ratio"] = _ratio(out["tok_s"], out["oracle_tok_s"])
    fixed = [out["never"], out["always"]]
    out["tok_s_vs_best_fixed"] = _ratio(out["tok_s"], max(f["tok_s"] for f in fixed))
    tpots = [f["tpot_ms_median"] for f in fixed if f["tpot_ms_median"]]
    # < 1 is better here: the policy's median TPOT over the better fixed mode's
    out["tpot_vs_best_fixed"] = _ratio(out["tpot_ms_median"], min(tpots) if tpots else None)
    return out


def evaluate_open(profile: Profile, segments: Sequence[Segment], policy: str,
                  params: Mapping[str, Any] | None = None, seed: int = 0, tick_s: float = DEFAULT_TICK_S,
                  guard: GuardConfig | None = None) -> dict:
    """Per rate segment: the policy's tok/s and latencies next to never, always and the oracle."""
    if not segments or not all(s.open_loop for s in segments):
        raise ValueError("evaluate_open needs rate segments")
    res = runs(profile, segments, policy, params, seed, tick_s, guard)
    rows = [row(m, {name: res[name][i] for name in BASELINES}) for i, m in enumerate(res["policy"])]
    total = lambda rs: sum(r.tokens for r in rs) / sum(r.seconds for r in rs)   # noqa: E731
    return {"profile": profile.name, "policy": policy, "params": dict(params or {}), "seed": seed,
            "tick_s": tick_s, "load": "open", "rows": rows,
            "overall": {"throughput_tok_s": round(total(res["policy"]), 2),
                        "oracle_tok_s": round(total(res["oracle"]), 2),
                        "ratio": round(total(res["policy"]) / total(res["oracle"]), 4),
                        "min_ratio": min(r["ratio"] for r in rows if r["ratio"] is not None)}}
