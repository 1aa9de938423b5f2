"""Closed-form expectations for the simulator, computed from a profile's numbers alone (none of the
simulator's or the oracle's code): what a static threshold must deliver, which mode is the better one,
and how far a run may land above the oracle by chance (the simulator's noise).

The simulator (controller/sim/core.py) runs a closed loop of C clients: each request has
max(1, round(Normal(output_len_mean, output_len_sd))) output tokens; a step takes the profile's step
time (lognormal noise of mean 1), plus prefill_s + prefill_s_per_request x n when n requests were
admitted since the last step; a speculative step gives each request 1 + the run of accepted draft
tokens, each accepted with p ~ clip(Normal(p0, spread), 0, 1), p0 solving 1 + p0 + ... + p0^K = accept.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr


def step_time(profile, batch_size: int, speculative: bool) -> float:
    """The profile's table, interpolated linearly (the shipped tables reach max_batch_size)."""
    xs = profile.batch_sizes
    ys = profile.step_spec if speculative else profile.step_off
    assert batch_size <= xs[-1], "extrapolation is tested apart"
    return float(np.interp(batch_size, xs, ys))


def chain_p(accept: float, k: int) -> float:
    """p0 with 1 + p0 + ... + p0^k == accept: the real root in [0, 1] of that polynomial."""
    roots = np.roots([1.0] * k + [1.0 - accept])
    return float(next(r.real for r in roots if abs(r.imag) < 1e-9 and -1e-12 <= r.real <= 1 + 1e-12))


def accept_moments(profile, accept: float | None = None) -> tuple[float, float]:
    """E[A] and E[A^2] of one request's accept length A per speculative step, the spread included
    (Gauss-Hermite over p; P(A >= m | p) = p^(m-1) for m = 1 .. K + 1)."""
    accept = profile.mean_accept_length if accept is None else accept
    k = profile.spec_steps
    z, w = np.polynomial.hermite_e.hermegauss(96)
    w = w / w.sum()
    p = np.clip(chain_p(accept, k) + profile.accept_spread * z, 0.0, 1.0)
    tail = np.array([p ** (m - 1) for m in range(1, k + 2)])             # P(A >= m | p)
    ea = float(w @ tail.sum(axis=0))
    odd = 2.0 * np.arange(1, k + 2)[:, None] - 1.0                         # E[A^2] = sum (2m - 1) P(A >= m)
    ea2 = float(w @ (odd * tail).sum(axis=0))
    return ea, ea2


def decode_tok_per_s(profile, batch_size: int, speculative: bool, accept: float | None = None) -> float:
    """Nominal decode tokens/s of one batch (the profile's definition: nominal accept length, no prefill)."""
    accept = profile.mean_accept_length if accept is None else accept
    return batch_size * (accept if speculative else 1.0) / step_time(profile, batch_size, speculative)


def static_throughput(profile, concurrency: int, speculative: bool, seconds: float,
                      accept: float | None = None) -> float:
    """Expected tokens/s of a fresh closed loop of `concurrency` clients held in one mode for `seconds`.

    Per client, requests are a renewal process in steps: a request of l tokens takes l steps off; on,
    about (l + overshoot) / E[A] steps (Wald), with variance l Var(A) / E[A]^3 (first passage). M(n), the
    expected completions by step n, follows from the normal approximation of the k-th renewal; prefill
    time is paid per completion and once per step that follows a completion, and for all clients at the start.
    """
    c = min(concurrency, profile.max_batch_size)
    mu, sd = profile.output_len_mean, profile.output_len_sd
    if speculative:
        ea, ea2 = accept_moments(profile, accept)
    else:
        ea, ea2 = 1.0, 1.0
    overshoot = (ea2 - ea) / (2.0 * ea)            # mean tokens past the request's end (lattice renewal)
    cycle_mean = (mu + overshoot) / ea
    cycle_var = sd ** 2 / ea ** 2 + mu * (ea2 - ea ** 2) / ea ** 3 + 1.0 / 12
    step = step_time(profile, c, speculative)
    n_max = int(seconds / step) + 2
    n = np.arange(n_max + 1, dtype=float)
    k = np.arange(1, int(n_max / cycle_mean) + 8, dtype=float)[:, None]
    renewals = ndtr((n[None, :] + 0.5 - k * cycle_mean) / np.sqrt(k * cycle_var)).sum(axis=0)   # M(n)
    per_step = np.clip(np.diff(renewals), 0.0, 1.0)                                              # h_j
    with_prefill = 1.0 - (1.0 - per_step) ** c
    time_at = (n[1:] * step + profile.prefill_s * (1.0 + np.concatenate([[0.0], np.cumsum(with_prefill)[:-1]]))
               + profile.prefill_s_per_request * c * (1.0 + np.concatenate([[0.0], renewals[1:-1]])))
    last = int(np.searchsorted(time_at, seconds))           # the step that ends at or past `seconds`
    steps = last + 1
    tokens = c * (ea * steps - (overshoot * renewals[steps] if speculative else 0.0))
    return float(tokens / time_at[last])


def spread_bias(profile, accept: float | None = None) -> float:
    """How much the realised mean accept length exceeds the nominal one (the spread, by Jensen): at a
    tie between the modes, the arm the oracle ranks second can be ahead in the simulator by this much."""
    accept = profile.mean_accept_length if accept is None else accept
    return accept_moments(profile, accept)[0] / accept - 1.0


def noise_eps(profile, concurrency: int, seconds: float, accept: float | None = None, z: float = 4.0) -> float:
    """How far above the oracle a segment may land without anything being wrong: the spread's bias
    (never below 0) plus z standard errors of the difference of two independent runs' tokens/s over
    the segment: step-time noise and, speculating, each request's accept length. The runs share their
    random streams, but only until their decisions differ: an off batch draws no acceptance, so from
    then on (in a sweep or a trace: from the first level or segment on) the draws are no longer paired
    (coding-to-chat's 'always' lands 0.47 % above the oracle at C=12, where both speculate)."""
    c = min(concurrency, profile.max_batch_size)
    ea, ea2 = accept_moments(profile, accept)
    cv2 = profile.noise ** 2 + (ea2 - ea ** 2) / ea ** 2 / c
    steps = seconds / max(step_time(profile, c, True), step_time(profile, c, False))
    return max(spread_bias(profile, accept), 0.0) + z * math.sqrt(2.0 * cv2 / steps)


def static_tolerance(profile, concurrency: int, speculative: bool, seconds: float, accept: float | None = None,
                     z: float = 4.0) -> float:
    """How far one static run may land from static_throughput: z standard errors of its tokens/s
    (step-time noise and, on, each request's accept length) plus 0.5 % for the renewal approximation."""
    c = min(concurrency, profile.max_batch_size)
    cv2 = profile.noise ** 2
    if speculative:
        ea, ea2 = accept_moments(profile, accept)
        cv2 += (ea2 - ea ** 2) / ea ** 2 / c
    steps = seconds / step_time(profile, c, speculative)
    return z * math.sqrt(cv2 / steps) + 0.005
