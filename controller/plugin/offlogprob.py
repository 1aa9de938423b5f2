"""Logprobs for the fast off path (fastoff.py): an off batch with return_logprob, laid out and computed
as SGLang's steps-0 verify does.

Steps-0 computes them after its sampling, with its own function (0.5.17 `compute_spec_v2_logprobs`,
0.5.18+ `compute_spec_logprobs`: the release's table, internals.py) over the verify's logits (penalties,
logit bias and vocab mask applied; no temperature), the tokens it chose and an accept index of shape
(bs, 1): log_softmax of the logits (divided by the temperatures unless the batch is all greedy),
clamped, written to the logits output as `next_token_logprobs` of shape (bs, 1), one row of top / token-id
logprobs per request. The scheduler's spec-v2 result processing reads exactly that layout (row i of
next_token_logprobs is request i's list of accepted logprobs; the top logprobs at flat index
i * accept + j).

The fast path calls the same function, with the same arguments, on the plain decode's logits: the
sampler is told not to compute logprobs of its own (it would write the flat (bs,) layout of an engine
without speculation, and for a sampled batch log(softmax) instead of log_softmax). The logits the
function needs are those the sampler chose from: a greedy batch's survive the sampler (argmax); a
sampled batch's are divided and softmaxed in place, so a copy is kept before the sampler runs.

Not covered (steps-0 keeps them): a watermarked batch (0.5.22+: its logprobs come from the logits before
the watermark, which the plain decode alters in place before the sampler).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from .internals import FastOffInternals, _resolve

WATERMARK = "logprobs requested with a watermark"     # counted as fastoff.LOGPROB


def unsupported_reason(batch: Any) -> str | None:
    """Why this logprob batch must keep steps-0 (None: the fast path computes its logprobs)."""
    if getattr(getattr(batch, "sampling_info", None), "has_watermark_candidates", False):   # 0.5.22+
        return WATERMARK
    return None


class Kept:
    """The logits the sampler chose from (set while the plain decode's sampler runs)."""
    logits: Any = None


@contextmanager
def keeping_logits(runner: Any, batch: Any) -> Iterator[Kept | None]:
    """Around the plain decode of `batch`: None unless it returns logprobs; otherwise the target runner's
    sampler is wrapped for the forward (restored after), so that it computes no logprobs and the logits it
    chose from are kept (greedy: the tensor itself, which it leaves as it is; sampled: a copy, since it
    overwrites them with probabilities)."""
    if not getattr(batch, "return_logprob", False):
        yield None
        return
    kept, sampler = Kept(), runner.sampler

    def sample(logits_output, sampling_info, return_logprob, *args, **kwargs):
        logits = logits_output.next_token_logits
        kept.logits = logits if sampling_info.is_all_greedy else logits.clone()
        return sampler(logits_output, sampling_info, False, *args, **kwargs)

    runner.sampler = sample
    try:
        yield kept
    finally:
        runner.sampler = sampler


_fns: dict[str, Any] = {}


def fill(names: FastOffInternals, batch: Any, logits_output: Any, kept: Kept, tokens: Any, torch: Any) -> None:
    """Steps-0's logprobs for this batch (restored after the decode), written to `logits_output` by the
    release's own function: its tokens as the predictions, request i's at accept index (i, 0)."""
    if kept.logits is None:
        raise RuntimeError("the plain decode's sampler did not run: no logits for the logprobs")
    logits_output.next_token_logits = kept.logits
    fn = _fns.get(names.spec_logprobs)
    if fn is None:
        fn = _fns[names.spec_logprobs] = _resolve(names.spec_logprobs)
    bs = tokens.shape[0]
    accept_index = torch.arange(bs, dtype=torch.int32, device=tokens.device).view(bs, 1)
    if "speculative_num_steps" in names.callables[names.spec_logprobs]:     # 0.5.17
        fn(batch, logits_output, tokens, accept_index, 0)
    else:
        fn(batch, logits_output, tokens, accept_index=accept_index)
