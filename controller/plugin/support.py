"""The SGLang internals the plugin names: the hook targets it registers and the callables it calls,
each with the parameters it expects (checked against every released wheel by the contract tests); the
fast off path's own internals, per version, are in internals.py.
The supported versions and refused configurations are shared with the daemon: controller.contract."""
from __future__ import annotations

from ..envwords import switch_on  # noqa: F401  (the plugin's modules take it from here)


EAGLE_WORKER = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2"
DRAFT_WORKER = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker"
SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
RESULT_PROCESSOR = "sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"
FUTURE_MAP = "sglang.srt.managers.overlap_utils.FutureMap"
SCHEDULE_BATCH = "sglang.srt.managers.schedule_batch.ScheduleBatch"
# target -> the parameters the hook expects
HOOK_TARGETS: dict[str, tuple[str, ...]] = {
    f"{EAGLE_WORKER}.forward_batch_generation": ("self", "batch", "on_publish"),
    f"{EAGLE_WORKER}.init_cuda_graphs": ("self",),
    f"{EAGLE_WORKER}.activate_step_by_batch": ("self", "batch_size"),
    f"{EAGLE_WORKER}.on_verify_complete_cpu": ("self", "num_correct_drafts_per_req", "batch_size"),
    f"{DRAFT_WORKER}._draft_extend_for_prefill": ("self", "batch", "target_hidden_states", "next_token_ids"),
    f"{RESULT_PROCESSOR}._resolve_spec_v2_tokens": ("self", "result", "batch"),
    f"{RESULT_PROCESSOR}.process_batch_result_prefill": ("self", "batch", "result"),
    f"{SCHEDULER}.set_internal_state": ("self", "recv_req"),
    f"{SCHEDULER}.on_idle": ("self",),
    f"{FUTURE_MAP}._resolve_spec_extras": ("self", "batch"),
    f"{SCHEDULER}._forward_isolation": ("self", "batch", "overlap"),
}
# registered only where off batches run as plain ones (plainoff.py; SGLang 0.5.17-0.5.18)
PLAIN_OFF_TARGETS: dict[str, tuple[str, ...]] = {
    f"{SCHEDULE_BATCH}.prepare_for_decode": ("self",),
    f"{SCHEDULE_BATCH}.new_tokens_required_next_decode": ("self", "selected_indices"),
    f"{FUTURE_MAP}.publish": ("self", "future_indices", "new_seq_lens"),
    f"{FUTURE_MAP}.stash": ("self", "future_indices", "payload"),
    f"{RESULT_PROCESSOR}._normalize_decode_outputs": ("self", "batch", "result", "logits_output", "next_token_ids"),
}
# called, not hooked
USED_CALLABLES: dict[str, tuple[str, ...]] = {
    "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController._activate": ("self", "speculative_num_steps"),
}


def sglang_version() -> str:
    """The running SGLang's version ("0" when it cannot be read)."""
    try:
        import sglang
        return getattr(sglang, "__version__", "0")
    except Exception:
        return "0"
