"""Speculation that came back to a bucket, and the acceptance measured since."""
from __future__ import annotations

import math


class FreshRun:
    """The spec batches since speculation came back to `bucket` after half_life_s without it (a probe,
    mostly): the requests and tokens measured since, in any bucket. Their accept length is the traffic's
    now; the accept estimate, one for every bucket and forgetting by accept_half_life_s, still holds the
    traffic before the run for a while."""

    __slots__ = ("bucket", "since", "requests", "tokens")

    def __init__(self) -> None:
        self.start(-1, -math.inf)

    def start(self, b: int, t: float) -> None:
        self.bucket, self.since, self.requests, self.tokens = b, t, 0.0, 0.0

    def add(self, requests: float, tokens: float) -> None:
        self.requests += requests
        self.tokens += tokens

    @property
    def accept(self) -> float:
        return self.tokens / self.requests if self.requests else 0.0
