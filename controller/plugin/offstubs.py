"""The lean off step (switch `spec_controller_lean_off`): an off batch's steps-0-shaped result built from
per-engine tensors instead of new ones, so that the off step launches what plain decoding launches plus as
little as it can. Runs inside SGLang's scheduler, on every off batch.

Why: every tensor op costs launch CPU on the scheduler's thread, which under continuous arrivals is on the critical
path (and a source reading blamed them for the off step's constant ~50-70 us of extra GPU time, docs/off-step-cost.md;
on the H200 the GPU time did not move, the launch CPU fell 0.15-0.23 ms per off batch). The plugin's own are: accept
lengths of ones, three zero-filled draft extras (SGLang's _stub_skipped_draft_extend: top-k
probabilities, top-k ids, the draft's hidden state [bs, hidden]), and the new tokens cast to int32 which the
scheduler's FutureMap.stash casts back to int64. The lean step points the result at read-only slices of tensors
made once (grown to the largest batch seen) and keeps the sampler's tokens as they are (no int32 cast: the future
map casts to its own int64 and the result processor reads Python ints).

Only where that is safe (`applies`): the overlap scheduler (spec-v2 passes on_publish only there), whose
FutureMap gathers the next step's inputs from its own buffers and whose draft input filters and merges future
indices only, so nothing downstream writes these tensors or reads the tokens' dtype (sglang_names.LEAN_OFF_FACTS,
checked against every wheel); never with logprobs (offlogprob lays out steps-0's int32 tokens) nor with the draft
synced (its extend writes real extras). Grammar batches take it too: the lengths an off step publishes do not depend
on which token the delayed sample picks, and the barrier and the sample still run after the forward. On by default
(SPEC_CONTROLLER_LEAN_OFF=0 at start or the run-time switch turn it off); what it saved on the H200: docs/sglang.md.
A lean prefill's draft input (fastoff.stub_draft_input) takes the same stubs where the step would (for_prefill:
three zero fills fewer inside each prefill's CPU-bound launch; not yet run on a GPU).
"""
from __future__ import annotations

from typing import Any

MIN_ROWS = 64          # first allocation; grown to the next power of two above a larger batch


def applies(overlap: Any, sync_draft: bool, logprobs: bool) -> bool:
    """May this batch's draft input point at the stubs? overlap: true under the overlap scheduler (an off step's
    on_publish, a prefill batch's enable_overlap). (The module docstring says why each condition.)"""
    return bool(overlap) and not (sync_draft or logprobs)


def for_prefill(off: Any, batch: Any) -> Any:
    """The fast path (an OffPath's) whose stubs a lean prefill's draft input may point at, or None (fresh zeros):
    where the lean step may (applies; a prefill's extras are stashed and gathered by copy and its draft input merges
    and filters future indices only, LEAN_OFF_FACTS) and the lean step is switched on."""
    if off.lean_off and off.fast is not None and applies(getattr(batch, "enable_overlap", False), off.sync_draft, False):
        return off.fast
    return None


def zero_extras(torch: Any, rows: int, topk: int, hidden_spec: tuple[int | None, Any], device: Any) -> dict[str, Any]:
    """The draft extras SGLang's _stub_skipped_draft_extend zero-fills, for `rows` requests: top-k probabilities
    (float32), top-k ids (int64), the draft's recurrent hidden state (its width and dtype; None for a draft without)."""
    hidden_size, hidden_dtype = hidden_spec
    return dict(topk_p=torch.zeros((rows, topk), dtype=torch.float32, device=device),
                topk_index=torch.zeros((rows, topk), dtype=torch.int64, device=device),
                hidden_states=None if hidden_size is None else
                torch.zeros((rows, hidden_size), dtype=hidden_dtype, device=device))


class OffStubs:
    """Read-only accept lengths (ones) and zero draft extras, sliced to each batch. Never written after they
    are made: a result still in flight (the copy stream, the future map) keeps its slice of an old set alive
    when a larger batch makes a new one."""

    def __init__(self, torch: Any, draft_worker: Any, hidden_spec: tuple[int | None, Any]):
        self.torch, self.topk, self.hidden_spec = torch, draft_worker.topk, hidden_spec
        self.rows = 0
        self.ones: Any = None
        self.extras: dict[str, Any] = {}

    def _grow(self, bs: int, device: Any) -> None:
        rows = max(MIN_ROWS, 1 << (bs - 1).bit_length())
        self.ones = self.torch.ones(rows, dtype=self.torch.int32, device=device)
        self.extras = zero_extras(self.torch, rows, self.topk, self.hidden_spec, device)
        self.rows = rows

    def fields(self, bs: int, device: Any) -> tuple[Any, dict[str, Any]]:
        """(accept lengths [bs] int32, the EagleDraftInput extras SGLang's stub would zero-fill) for bs requests."""
        if bs > self.rows:
            self._grow(bs, device)
        return self.ones[:bs], {k: None if v is None else v[:bs] for k, v in self.extras.items()}
