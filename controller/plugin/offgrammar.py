"""Grammar-constrained requests on the fast off path (fastoff.py): the token of an off batch is sampled
under the vocab mask an engine without speculation samples it under.

Why the mask needs care: under overlap scheduling a batch is launched before the previous batch's result
is processed, so its requests' grammar FSMs have not yet accepted the previous step's tokens. An engine
without speculation delays a grammar batch's sample for that reason (TpModelWorker.forward_batch_generation
hands back `delay_sample_func` unsampled; the scheduler calls it after it processed the previous result:
`launch_batch_sample_if_needed`), and the sample builds the mask from the FSM then
(ModelRunner._preprocess_logits -> SamplingBatchInfo.update_regex_vocab_mask). SGLang's steps-0 verify
gets the same ordering from the scheduler's grammar barrier (`grammar_barrier`, handed to
EAGLEWorkerV2.forward_batch_generation: Scheduler._advance_pending_grammar advances every FSM over the
results still queued), which build_grammar_vocab_mask calls before it builds its mask.

The fast path combines the two seams SGLang already has: around the plain decode of a grammar batch the
target worker is told it does not speculate (`enable_spec`, which only that delay reads), so the decode
comes back unsampled with SGLang's own `delay_sample_func`, exactly as in an engine without speculation;
then the barrier it was handed is called, and then the delayed sample: the mask comes from the FSM after
the previous step's tokens were accepted, built and applied by the same functions as without speculation.
Handed no barrier (SGLang's synchronous loop: the previous result was processed before this batch was
launched), the sample runs on the FSM as it stands, as steps-0's verify does then.

Where this cannot hold the batch keeps SGLang's steps-0 path (counted as off_fallbacks_grammar): a release
whose table (internals.py) lacks the seam, a live target worker without the attributes, a barrier handed
to a target worker that does not overlap (its sample would not be delayed past the barrier), and an engine
started with SPEC_CONTROLLER_FAST_GRAMMAR=0 (the fast path for grammar batches is the default since the GPU
check, bench/gpu/grammar_check.py, found its constrained outputs equal to an engine without speculation's:
bench/results/h200-2026-12-01g).
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..envwords import FAST_GRAMMAR_ENV

log = logging.getLogger("spec_controller.plugin")

# "0": grammar batches keep SGLang's steps-0 path (the fast path for them is the default: on one H200 its
# constrained outputs equalled the no-spec engine's, and steps-0 ran the off engine at 0.50 of it, 12-01g)
ENV = FAST_GRAMMAR_ENV
ATTRIBUTES = ("enable_spec", "enable_overlap")   # TpModelWorker's, read by its delayed-sample condition


def available(names: Any, target_worker: Any, switched_on: bool = True) -> bool:
    """Build time: does this release (its table) and this engine's target worker have the seam? The log
    line says what grammar batches will do (switched_on: the engine was not started with ENV=0)."""
    if not getattr(names, "grammar", False):
        return False
    missing = [a for a in ATTRIBUTES if not hasattr(target_worker, a)]
    if missing:
        log.warning("spec-controller: the target worker has no %s; grammar batches use SGLang's steps-0 state",
                    ", ".join(missing))
    elif switched_on:
        log.info("spec-controller: grammar batches take the fast off path (SGLang's delayed grammar sample)")
    else:
        log.info("spec-controller: grammar batches use SGLang's steps-0 state (%s=0)", ENV)
    return not missing


def served(fast: Any, worker: Any, barrier: Callable[[], None] | None) -> bool:
    """May the fast path take this grammar batch of the EAGLE `worker` (`fast.grammar`: the seam was found
    at build time)?"""
    if not getattr(fast, "grammar", False):
        return False
    # a barrier means the previous result is still queued: the sample must wait for it (overlap's delay)
    return barrier is None or bool(getattr(worker.target_worker, "enable_overlap", False))


@contextmanager
def delaying_sample(target_worker: Any, batch: Any) -> Iterator[None]:
    """Around the plain decode of `batch`: for a grammar batch the target worker is told it does not
    speculate, so that under overlap scheduling its decode comes back unsampled (delay_sample_func), as in
    an engine without speculation; restored after, also when the decode fails."""
    if not getattr(batch, "has_grammar", False):
        yield
        return
    saved = target_worker.enable_spec
    target_worker.enable_spec = False
    try:
        yield
    finally:
        target_worker.enable_spec = saved


def sample(out: Any, batch: Any, barrier: Callable[[], None] | None) -> None:
    """After the plain decode of a grammar batch: the scheduler's grammar barrier (the FSMs accept the
    previous step's tokens), then SGLang's delayed sample, which builds the vocab mask from them and
    samples (out.next_token_ids). Nothing to do for a batch without grammar (the barrier, handed for every
    batch, would only wait for the previous result) or a decode that sampled at once (no overlap)."""
    if not getattr(batch, "has_grammar", False):
        return
    delayed = getattr(out, "delay_sample_func", None)
    if delayed is None:
        if barrier is not None:      # served() only lets such a batch through to an overlapping worker
            raise RuntimeError("the plain decode sampled a grammar batch before its grammar barrier")
        return
    out.delay_sample_func = None     # the closure holds the forward batch and its vocab mask: let them go
    if barrier is not None:
        barrier()
    delayed()
