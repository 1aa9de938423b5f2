"""The future map's gather of the draft's extras, skipped for a batch the fast off path takes (run-time switch
spec_controller_lean_resolve; SGLang's spec-v2 overlap scheduler).

Before every decode batch SGLang's scheduler gathers each request's last draft extras (topk_p, topk_index, the
draft's hidden state) beside its bonus token, in one Triton launch whose Python launch path was the largest item of
the off engine's extra decode-launch CPU in 12-04e's cProfile at closed 128 (~185 us a batch, profiled). An off batch
reads only the bonus tokens (fastoff.run), and its result carries new extras (the stubs). So for a batch the fast path
will take, only the bonus tokens are gathered, as SGLang does itself where a draft has no topk. Should that batch end
up on SGLang's own path after all (a fallback, a failed fast step), restore() runs SGLang's gather first. Runs in the
scheduler process, once per decode batch.

The same batch gets a light forward isolation (isolation()): for a speculative batch SGLang snapshots and restores
every ScheduleBatch field around the forward (~90 us profiled at batch 128), because its worker rebinds fields
mid-forward; the fast path rebinds only FAST_FIELDS. So such a batch gets SGLang's non-speculative isolation (the
sampling info's forward-only copy, the two-iteration pin) plus FAST_FIELDS restored, and, should SGLang's worker take
it after all, the full snapshot around that (guard()).
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from . import fastoff
from .fastoff import FAST_FIELDS    # what the fast off path sets on the ScheduleBatch

log = logging.getLogger("spec_controller.plugin")


class LeanResolve:
    """One engine's AROUND hooks on FutureMap._resolve_spec_extras (around) and Scheduler._forward_isolation
    (isolation), both registered only where the engine was started with SPEC_CONTROLLER_LEAN_RESOLVE=1."""

    def __init__(self, takes: Callable[[Any], bool], enabled: bool = False) -> None:
        self.takes = takes           # the fast path will take this batch (OffPath.takes_resolved)
        self.enabled = enabled       # run-time switch ...
        self.registered = enabled    # ... where the hooks were registered: engines started with it
        self.batches = 0             # gathers skipped (status; less `restored`: the saving)
        self.restored = 0            # ... of which SGLang's path took the batch after all: gathered then
        self._pending: tuple | None = None        # (draft input, SGLang's function, future map) of the last skip
        self.light: Any = None                    # the batch inside a light isolation now
        self._map: tuple[Any, bool] = (None, False)   # the engine's future map and whether _plain_map holds for it

    def around(self, original: Callable, future_map: Any, batch: Any, *args, **kwargs) -> Any:
        self._pending = None
        draft = getattr(batch, "spec_info", None)
        if not (self.enabled and draft is not None):
            return original(future_map, batch, *args, **kwargs)
        if self._map[0] is not future_map or not self._map[1]:
            # read again until it holds: SGLang sets need_topk and the draft-probs buffer at the map's first stash
            # (_lazy_init_forward_buf), after the first batch's resolve. Kept once it holds: a later DSA buffer is
            # each batch's own flag (below); a draft-probs buffer made later (0.5.20+) comes with rejection
            # sampling, which keeps every batch off the fast path (OffPath.rejection), so takes() is False
            self._map = (future_map, self._plain_map(future_map))
        if not (self._map[1] and self.takes(batch)):
            return original(future_map, batch, *args, **kwargs)
        indices = getattr(draft, "future_indices", None)
        if indices is None or indices.shape[0] == 0 or getattr(draft, "future_dsa_topk_indices_available", False):
            return original(future_map, batch, *args, **kwargs)
        if indices.device.type != "cpu":   # as SGLang's own (0.5.22+: record_stream rejects CPU tensors)
            # (torch as the fast path bound it at build: takes() holds only where it was built)
            indices.record_stream(fastoff._sg["torch"].get_device_module(future_map.device).current_stream())
        draft.bonus_tokens = future_map.output_tokens_buf[indices]
        if hasattr(draft, "dsa_topk_indices"):
            draft.dsa_topk_indices = None        # SGLang's value where the batch has none relayed
        self._pending = (draft, original, future_map)
        self.batches += 1
        if self.batches == 1:       # the engine's log says it engaged (status counts it where a daemon runs)
            log.info("spec-controller: fast-path batches get their bonus tokens alone and a light forward isolation "
                     "(SPEC_CONTROLLER_LEAN_RESOLVE)")
        return None

    def _skipped(self, batch: Any) -> bool:
        """Was the last gather skipped for this batch (its draft input)?"""
        return self._pending is not None and self._pending[0] is getattr(batch, "spec_info", None)

    def restore(self, batch: Any) -> None:
        """Before SGLang's own path takes `batch`: the gather skipped for it, now (nothing if none was)."""
        skipped, pending, self._pending = self._skipped(batch), self._pending, None
        if skipped:
            pending[1](pending[2], batch)
            self.restored += 1

    def isolation(self, original: Callable, scheduler: Any, batch: Any, *args, **kwargs) -> Any:
        """AROUND Scheduler._forward_isolation (a context manager): the light one for a batch whose gather was
        skipped (it goes to the fast path), SGLang's own otherwise."""
        if not (self.enabled and self._skipped(batch)):
            return original(scheduler, batch, *args, **kwargs)
        return self._light(scheduler, batch, bool(kwargs.get("overlap", args[0] if args else False)))

    @contextmanager
    def _light(self, scheduler: Any, batch: Any, overlap: bool) -> Iterator[None]:
        """SGLang's non-speculative branch of _forward_isolation (its lines: sglang_names.LEAN_RESOLVE_FACTS), and
        FAST_FIELDS put back after the forward."""
        kept = [getattr(batch, name) for name in FAST_FIELDS]
        info = batch.sampling_info
        if info is not None:
            batch.sampling_info = info.copy_for_forward()
        if overlap:
            scheduler.record_batch_in_overlap(batch)
        self.light = batch
        try:
            yield
        finally:
            self.light = None
            batch.sampling_info = info
            for name, value in zip(FAST_FIELDS, kept):
                setattr(batch, name, value)

    def guard(self, batch: Any, call: Callable[[], Any]) -> Any:
        """SGLang's own path for `batch` (call): its extras gathered first where they were skipped, and inside a
        light isolation the snapshot of every field that SGLang's own isolation would have taken, put back after."""
        self.restore(batch)
        if self.light is not batch:
            return call()
        snapshot = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
        try:
            return call()
        finally:
            for name, value in snapshot.items():
                setattr(batch, name, value)

    def _plain_map(self, future_map: Any) -> bool:
        """A future map whose extras are topk and hidden states only (no DSA indices, draft probs, verified ids or
        n-gram relay) and whose module does not assert on what it gathers (SGLang's debug asserts)."""
        debug = getattr(sys.modules.get(type(future_map).__module__), "_DEBUG_ASSERT", True)
        return bool(not debug and getattr(future_map, "need_topk", False)
                and not getattr(future_map, "need_verified_id", False)         # (0.5.14-0.5.15 relay)
                and getattr(future_map, "dsa_topk_indices_buf", None) is None
                and getattr(future_map, "draft_probs_buf", None) is None
                and not future_map.spec_algo.is_ngram())
