"""The threshold as the monotone summary of per-bucket spec/no-spec decisions."""
from __future__ import annotations

from typing import Sequence

from .buckets import Buckets


def monotone_threshold(gains: Sequence[float], buckets: Buckets, current: int) -> int:
    """Threshold T maximising the summed gain of the buckets it speculates (those <= T).

    gains[i] > 0 means speculation pays in bucket i, weighted by how much traffic
    the bucket sees; unknown buckets carry 0. Among equally good thresholds the one
    nearest the current threshold wins, so the threshold does not wander where
    nothing is known; if the current one is among the best it is kept exactly.
    """
    cur_k = buckets.index_of_threshold(current)
    prefix = [0.0]
    for g in gains:
        prefix.append(prefix[-1] + g)
    best = max(prefix)
    eps = 1e-12 + 1e-9 * sum(abs(g) for g in gains)
    candidates = [k for k, v in enumerate(prefix) if v >= best - eps]
    k = min(candidates, key=lambda k: (abs(k - cur_k), k))
    if k == cur_k:
        return current
    return 0 if k == 0 else buckets.high(k - 1)


def flip_threshold(threshold: int, buckets: Buckets, bucket: int, speculate: bool) -> int:
    """The threshold nearest `threshold` that puts `bucket` in the wanted mode."""
    if speculate:
        return max(threshold, buckets.high(bucket))
    return min(threshold, buckets.low(bucket) - 1)

