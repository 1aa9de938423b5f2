"""Batch-size buckets: exact up to 16, then ~12% wide, so every decision stays local."""
from __future__ import annotations

import bisect
from functools import lru_cache


@lru_cache(maxsize=8)
def bucket_edges(max_batch_size: int) -> tuple[int, ...]:
    """Upper edges of the buckets, ascending; the last edge is max_batch_size."""
    edges = list(range(1, min(16, max_batch_size) + 1))
    edge = 16.0
    while edges[-1] < max_batch_size:
        edge *= 1.125
        nxt = min(max_batch_size, max(edges[-1] + 1, round(edge)))
        edges.append(nxt)
    return tuple(edges)


class Buckets:
    """Maps a batch size to a bucket index; index i covers (edges[i-1], edges[i]]."""

    __slots__ = ("edges", "_index")

    def __init__(self, max_batch_size: int):
        self.edges = bucket_edges(max_batch_size)
        lookup = [0] * (self.edges[-1] + 1)
        lo = 1
        for i, hi in enumerate(self.edges):
            for bs in range(lo, hi + 1):
                lookup[bs] = i
            lo = hi + 1
        self._index = lookup

    def __len__(self) -> int:
        return len(self.edges)

    def of(self, batch_size: int) -> int:
        if batch_size < len(self._index):
            return self._index[max(batch_size, 1)]
        return len(self.edges) - 1

    def low(self, i: int) -> int:
        return self.edges[i - 1] + 1 if i > 0 else 1

    def high(self, i: int) -> int:
        return self.edges[i]

    def index_of_threshold(self, threshold: int) -> int:
        """Number of buckets fully at or under the threshold (0 = none speculate)."""
        return bisect.bisect_right(self.edges, threshold)

    def edge_at_or_under(self, threshold: int) -> int:
        """The bucket edge at or under `threshold` (0: none): the threshold that runs the buckets it leaves whole in
        one mode each (one inside a bucket runs its lower batch sizes speculating and the rest not)."""
        k = self.index_of_threshold(threshold)
        return self.edges[k - 1] if k else 0
