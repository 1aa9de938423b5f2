"""The SGLang facts that running an off batch as a non-speculative batch rests on (docs/off-as-plain-batch.md; built
for 0.5.17-0.5.18 as controller/plugin/plainoff.py), checked against every wheel from the first with a fast table: each fact holds exactly in the releases the
study's version table says. When a release moves one, this goes red and the study (and whatever is built on it)
gets read again. Quoted source, as sglang_names' facts; never imports SGLang."""
import pytest

from controller.contract import parse_version
from controller.plugin import internals, plainoff
from controller.plugin.support import PLAIN_OFF_TARGETS
from tests.sglang_wheels import VERSIONS, params, source

FAST = [v for v in VERSIONS if internals.for_version(parse_version(v))]
OU = "sglang.srt.managers.overlap_utils"
SB = "sglang.srt.managers.schedule_batch.ScheduleBatch"
SCH = "sglang.srt.managers.scheduler.Scheduler"
ALL, UP_TO_0_5_18, FROM_0_5_22 = ((0, 5, 0), (9, 9, 9)), ((0, 5, 0), (0, 5, 18)), ((0, 5, 22), (9, 9, 9))

# (function, quoted source, the releases where it is there, why it matters to a plain off batch)
FACTS = (
    (f"{OU}.resolve_forward_inputs", "elif batch.input_ids is None and future_map.spec_algo.is_none():", ALL,
     "the input-id gather is gated on the engine's algorithm: a plain batch in a speculative engine gets none"),
    (f"{SCH}._forward_isolation", "snapshot_v2_full = not batch.spec_algorithm.is_none()", ALL,
     "the batch's own algorithm picks the light isolation"),
    (f"{SCH}.run_batch", "self.future_map.publish(future_indices, batch.seq_lens + 1)", ALL,
     "a plain batch publishes seq_lens + 1, one above the speculative convention"),
    (f"{OU}.FutureMap.stash", "self.topk_p_buf[indices] = payload.topk_p", ALL,
     "the stash writes the draft extras of every payload ..."),
    (f"{OU}.FutureMap.stash", "payload.topk_p is not None", FROM_0_5_22,
     "... unguarded (a payload without extras raises) before 0.5.22"),
    (f"{OU}.FutureMap.resolve_seq_lens_cpu", "if draft_input is None:", ALL,
     "the seq-lens resolve is a no-op for a batch without a draft input"),
    (f"{SB}.prepare_for_decode", "kv_committed_len += 1", UP_TO_0_5_18,
     "the plain prepare commits the step's token up front in the prepare ..."),
    ("sglang.srt.mem_cache.allocation.alloc_for_decode", "req.kv.kv_committed_len += token_per_req", ((0, 5, 19), (0, 5, 21)),
     "... from 0.5.19 in the allocation ..."),
    ("sglang.srt.mem_cache.allocation.alloc_for_decode_default", "req.kv.kv_committed_len += token_per_req",
     FROM_0_5_22, "... and from 0.5.22 in its default implementation"),
    ("sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation", "if batch.spec_info is None:", ALL,
     "the speculative worker builds an idle draft input for a decode batch without one"),
    ("sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter.report_decode_stats",
     "spec_accept_length = self.spec_num_accept_tokens / self.spec_num_forward_ct", ALL,
     "the decode log divides by the speculative forwards (engine-gated): plain results must count as steps 0"),
)


def holds(version: str, span: tuple) -> bool:
    return span[0] <= parse_version(version)[:3] <= span[1]


@pytest.mark.parametrize("version", FAST)
def test_each_fact_holds_in_the_releases_the_study_names_and_only_there(version):
    src, wrong = source(version), []
    for fn, quote, span, why in FACTS:
        try:
            there = quote in src.text(fn).replace('"', "'")
        except AssertionError:         # sglang_wheels.Source: the function itself is absent in this release
            there = False
        if there != holds(version, span):
            wrong.append(f"{fn}: {quote!r} {'present' if there else 'absent'} ({why})")
    assert wrong == [], version


# What plainoff.py's switches rest on besides the study's table, in the releases it is registered for.
PLAIN_OFF_FACTS = (
    ("sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation",
     "batch_output.new_seq_lens = batch.seq_lens",
     "a prefill publishes its lengths as they are: what a plain batch publishes too (its lengths advanced)"),
    (f"{SB}.prepare_for_extend", "req.kv_committed_len = seq_len",
     "straight from its prefill a request's committed length is its KV length ..."),
    ("sglang.srt.mem_cache.allocation.alloc_for_extend", "req.kv.kv_allocated_len = seq_len",
     "... and so is its allocation: the plain preparation may take it over"),
    (f"{SB}.merge_batch", "if self.spec_info:",
     "a plain batch merging a prefill keeps no draft input (and its algorithm: merge never sets it)"),
    (f"{SB}.new_tokens_required_next_decode", "return self._new_tokens_required_next_decode_spec_v2(requests, page_size)",
     "spec-v2's memory estimate, which plainoff.memory asks for a plain batch about to speculate"),
    (f"{OU}.FutureMap.stash", "if not self._forward_buf_initialized:", "the stash hook's guard"),
    ("sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor."
     "process_batch_result_decode", "if not batch.spec_algorithm.is_none():",
     "the accept-length metrics are counted for speculative batches only: plainoff counts plain ones as steps 0"),
    ("sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor."
     "_normalize_decode_outputs", "next_token_ids = [[t] for t in ids]",
     "a plain result's tokens are wrapped one per request (and _resolve_spec_v2_tokens, the telemetry's hook, skipped)"),
)


@pytest.mark.parametrize("version", [v for v in VERSIONS if parse_version(v)[:3] in plainoff.VERSIONS])
def test_plain_off_seams_and_facts_hold_where_it_is_registered(version):
    src = source(version)
    for target, expected in PLAIN_OFF_TARGETS.items():
        names = params(src.function(target))
        assert names[:len(expected)] == list(expected), f"sglang {version}: {target}{tuple(names)}"
    wrong = [f"{fn}: {quote!r} ({why})" for fn, quote, why in PLAIN_OFF_FACTS
             if quote not in src.text(fn).replace('"', "'")]
    assert wrong == [], version
