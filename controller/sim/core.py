"""The simulated engine's step: one decode batch.

`SimCore` is a closed loop of C clients (every running request is in every batch);
`controller.sim.openloop.OpenLoopCore` is the open loop (Poisson arrivals, a queue,
admission and prefill). Both advance virtual time by one decode step (plus the prefill
of any requests admitted) per call to step() and return the Sample the SGLang plugin
would emit.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..contract import Sample, prefill_skips_draft
from .profile import Profile


@lru_cache(maxsize=256)
def chain_probability(accept_length: float, steps: int) -> float:
    """Per-token acceptance p with 1 + p + ... + p^steps == accept_length (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        if sum(p ** k for k in range(steps + 1)) < accept_length:
            lo = p
        else:
            hi = p
    return (lo + hi) / 2


@lru_cache(maxsize=256)
def delivered_accept(accept_length: float, steps: int, spread: float) -> float:
    """The mean accept length a speculative step delivers: each request's p is drawn around chain_probability's with
    `spread` (CoreBase._accepted), and P(A >= m | p) = p^(m-1) is convex in p, so the mean lands above accept_length
    (+2 % at 3.2 with K = 4 and spread 0.1). Gauss-Hermite over the draw, clipped to [0, 1] as the draw is."""
    if not spread:
        return accept_length        # (set_accept caps it at steps + 1)
    z, w = np.polynomial.hermite_e.hermegauss(96)
    p = np.clip(chain_probability(accept_length, steps) + spread * z, 0.0, 1.0)
    return float((w / w.sum()) @ sum(p ** m for m in range(steps + 1)))


@lru_cache(maxsize=16)
def _leading_run_table(steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(bit weights, accept length per hit pattern): 1 + the number of leading accepted drafts, looked up
    instead of computed per request (the simulator's hottest line; the same numbers as a cumulative product)."""
    lengths = [1 + next((j for j in range(steps) if not (m >> j) & 1), steps) for m in range(1 << steps)]
    return 1 << np.arange(steps), np.array(lengths, dtype=np.int64)


class CoreBase:
    """What both load models share: random streams, acceptance, step noise, lengths.

    Separate streams (common random numbers): the same requests arrive with the same
    lengths whatever the modes chosen, so two runs differ only by their decisions.
    """

    STREAMS = 3

    def __init__(self, profile: Profile, seed: int = 0):
        self.profile = profile
        streams = np.random.SeedSequence(seed).spawn(self.STREAMS)
        self._rng_len = np.random.default_rng(streams[0])
        self._rng_noise = np.random.default_rng(streams[1])
        self._rng_accept = np.random.default_rng(streams[2])
        self._extra_streams = streams[3:]
        self.t = 0.0
        self.output_tokens = 0             # every output token so far (decode and first tokens)
        self.accept_length = profile.mean_accept_length
        self._p = chain_probability(self.accept_length, profile.spec_steps)
        self._step_s: dict[tuple[int, bool], float] = {}   # the profile is frozen: its step times per batch size
        # The runner's threshold (the runner loop sets it before each step; None: not known, prefills run
        # the draft): prefills skip the draft's pass over the prompt (profile.prefill_s_draft) where the
        # plugin's lean prefill would (contract.prefill_skips_draft; profile.draft_kv: the off path kv).
        self.threshold: int | None = None
        self.last_batch_size = 0           # the last decode step's, as the plugin's router keeps it
        # Would the plugin have sent the last step's sample? Not after an idle pass: its telemetry restarts its
        # clock there (controller/plugin/telemetry.py flush), so no runner of the simulator may learn from that
        # step either. A closed loop never idles.
        self.measured = True
        self._spoke: bool | None = None     # did the last decode step speculate (None: no step yet)

    def prefill_runs_draft(self, joining: int) -> bool:
        """Does a prefill of `joining` requests run the draft's pass over their prompts now?"""
        return self.threshold is None or not prefill_skips_draft(self.threshold, self.last_batch_size, joining,
                                                                 self.profile.draft_kv)

    def set_accept(self, accept_length: float | None) -> None:
        if accept_length is not None:
            self.accept_length = min(accept_length, self.profile.spec_steps + 1.0)
            self._p = chain_probability(self.accept_length, self.profile.spec_steps)

    @property
    def delivered_accept(self) -> float:
        """The mean accept length its speculative steps deliver (above accept_length with a spread): what the
        oracle ranks the modes by."""
        return delivered_accept(self.accept_length, self.profile.spec_steps, self.profile.accept_spread)

    def _output_lengths(self, n: int) -> np.ndarray:
        p = self.profile
        if p.output_len_range:
            lo, hi = p.output_len_range
            return self._rng_len.integers(lo, hi + 1, n).astype(np.int64)
        return np.maximum(1, self._rng_len.normal(p.output_len_mean, p.output_len_sd, n).round()).astype(np.int64)

    def _accepted(self, bs: int) -> np.ndarray:
        """Accept length per request: 1 + the run of accepted draft tokens (chain, topk 1)."""
        k = self.profile.spec_steps
        p = self._p
        if self.profile.accept_spread:
            p = np.clip(p + self.profile.accept_spread * self._rng_accept.standard_normal(bs), 0.0, 1.0)[:, None]
        hits = self._rng_accept.random((bs, k)) < p
        if k > 12:
            return 1 + np.cumprod(hits, axis=1).sum(axis=1)
        weights, lengths = _leading_run_table(k)
        return lengths[hits @ weights]

    def _decode_seconds(self, bs: int, speculate: bool) -> float:
        prof = self.profile
        step_s = self._step_s.get((bs, speculate))
        if step_s is None:
            step_s = self._step_s[(bs, speculate)] = prof.step_seconds(bs, speculate)
        if prof.noise:
            step_s *= float(np.exp(prof.noise * self._rng_noise.standard_normal() - prof.noise ** 2 / 2))
        return step_s

    def _deliver(self, remaining: np.ndarray, speculate: bool) -> tuple[np.ndarray, int]:
        """Tokens each running request gets from one decode step (capped at what it still needs)."""
        # profile.first_step_stub: a speculative step right after an off one drafts from SGLang's zeroed stub (the
        # off path keeps the draft's KV, not its next proposal): the bonus token only (H100 12-06g: 1.00 vs 2.00)
        stub = speculate and self._spoke is False and self.profile.first_step_stub
        self._spoke = speculate
        per_req = self._accepted(len(remaining)) if speculate and not stub else 1
        delivered = np.minimum(per_req, remaining)
        return delivered, int(delivered.sum()) if speculate else len(remaining)


class SimCore(CoreBase):
    """Closed loop: C clients, each with one request in flight; a finished request is
    replaced at once by a new one, whose prefill lengthens the next interval
    (that sample is then not decode-only, as on the real engine)."""

    def __init__(self, profile: Profile, seed: int = 0):
        super().__init__(profile, seed)
        self.concurrency = 0
        self._remaining = np.zeros(0, dtype=np.int64)
        self._pending_prefill = 0

    @property
    def batch_size(self) -> int:
        """The size of the next decode batch."""
        return len(self._remaining)

    def set_load(self, concurrency: int, accept_length: float | None = None) -> None:
        """Change the number of clients (new ones arrive with a prefill) and the acceptance."""
        c = min(int(concurrency), self.profile.max_batch_size)
        if c > len(self._remaining):
            new = self._output_lengths(c - len(self._remaining))
            self._remaining = np.concatenate([self._remaining, new])
            self._pending_prefill += len(new)
        else:
            self._remaining = self._remaining[:c]
        self.concurrency = c
        self.set_accept(accept_length)

    def step(self, speculate: bool) -> Sample:
        prof = self.profile
        bs = len(self._remaining)
        if bs == 0:
            raise RuntimeError("step() with no load: call set_load() first")
        step_s = self._decode_seconds(bs, speculate)
        decode_only = self._pending_prefill == 0
        if not decode_only:
            step_s += prof.prefill_seconds(self._pending_prefill, self._pending_prefill * prof.prompt_len_mean,
                                           draft=self.prefill_runs_draft(self._pending_prefill))
            self._pending_prefill = 0
        delivered, tokens = self._deliver(self._remaining, speculate)
        self._remaining -= delivered
        done = self._remaining <= 0
        n_done = int(done.sum())
        if n_done:
            self._remaining[done] = self._output_lengths(n_done)
            self._pending_prefill += n_done
        self.t += step_s
        self.output_tokens += tokens
        self.last_batch_size = bs
        return Sample(self.t, bs, prof.spec_steps if speculate else 0, tokens, step_s, decode_only)
