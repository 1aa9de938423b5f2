"""The lean off step (switch `spec_controller_lean_off`): an off batch's steps-0-shaped result built from
per-engine tensors instead of new ones, so that the off step launches what plain decoding launches plus as
little as it can. Runs inside SGLang's scheduler, on every off batch.

Why: an off decode step cost a constant ~50-70 us of GPU time more than an engine without speculation at every
batch size (docs/off-step-cost.md): a dozen small eager kernels around the target's graph. Of those, the plugin's
own are: accept lengths of ones, three zero-filled draft extras (SGLang's _stub_skipped_draft_extend: top-k
probabilities, top-k ids, the draft's hidden state [bs, hidden]), and the new tokens cast to int32 which the
scheduler's FutureMap.stash casts back to int64. The lean step points the result at read-only slices of tensors
made once (grown to the largest batch seen) and keeps the sampler's int64 tokens.

Only where that is safe (`applies`): the overlap scheduler (spec-v2 passes on_publish only there), whose
FutureMap gathers the next step's inputs from its own buffers and whose draft input filters and merges future
indices only, so nothing downstream writes these tensors or reads the tokens' dtype (sglang_names.LEAN_OFF_FACTS,
checked against every wheel); never with logprobs (offlogprob lays out steps-0's int32 tokens) nor with the draft
synced (its extend writes real extras); not for grammar batches until grcheck has run with it on a GPU.

On by default since the eighteenth session (SPEC_CONTROLLER_LEAN_OFF=0 at start or the run-time switch turn it off).
Measured on the H200 (bench/results/h200-2026-12-03e): the off step's GPU span unchanged (within 12 us; the removed
kernels were not what its constant +50-70 us is made of), its launch CPU 0.15-0.20 ms lower at batch 16-128; steady
decode lean / not lean per rotation block, medians of 3: 0.996 / 1.023 / 1.006 / 1.023 at 1 / 16 / 48 / 128;
closed loop 1.006 / 1.011 at 48 / 128; greedy outputs equal (200 prompts, the threshold flipped every 5 ms)."""
from __future__ import annotations

from typing import Any

MIN_ROWS = 64          # first allocation; grown to the next power of two above a larger batch


def applies(on_publish: Any, sync_draft: bool, logprobs: bool, grammar: bool) -> bool:
    """May this off batch take the lean step? (The module docstring says why each condition.)"""
    return on_publish is not None and not (sync_draft or logprobs or grammar)


class OffStubs:
    """Read-only accept lengths (ones) and zero draft extras, sliced to each batch. Never written after they
    are made: a result still in flight (the copy stream, the future map) keeps its slice of an old set alive
    when a larger batch makes a new one."""

    def __init__(self, torch: Any, draft_worker: Any, hidden_spec: tuple[int | None, Any]):
        self.torch, self.topk = torch, draft_worker.topk
        self.hidden_size, self.hidden_dtype = hidden_spec
        self.rows = 0
        self.ones = self.topk_p = self.topk_index = self.hidden = None

    def _grow(self, bs: int, device: Any) -> None:
        torch, rows = self.torch, max(MIN_ROWS, 1 << (bs - 1).bit_length())
        self.ones = torch.ones(rows, dtype=torch.int32, device=device)
        self.topk_p = torch.zeros((rows, self.topk), dtype=torch.float32, device=device)
        self.topk_index = torch.zeros((rows, self.topk), dtype=torch.int64, device=device)
        self.hidden = (None if self.hidden_size is None else
                       torch.zeros((rows, self.hidden_size), dtype=self.hidden_dtype, device=device))
        self.rows = rows

    def fields(self, bs: int, device: Any) -> tuple[Any, dict[str, Any]]:
        """(accept lengths [bs] int32, the EagleDraftInput extras SGLang's stub would zero-fill) for bs requests."""
        if bs > self.rows:
            self._grow(bs, device)
        extras = dict(topk_p=self.topk_p[:bs], topk_index=self.topk_index[:bs],
                      hidden_states=None if self.hidden is None else self.hidden[:bs])
        return self.ones[:bs], extras
