"""The SGLang facts that running an off batch as a non-speculative batch would rest on (docs/off-as-plain-batch.md,
not built), checked against every wheel from the first with a fast table: each fact holds exactly in the releases the
study's version table says. When a release moves one, this goes red and the study (and whatever is built on it)
gets read again. Quoted source, as sglang_names' facts; never imports SGLang."""
import pytest

from controller.contract import parse_version
from controller.plugin import internals
from tests.sglang_wheels import VERSIONS, source

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
