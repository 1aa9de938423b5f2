"""What the plugin supports: SGLang versions, the hook targets it names (checked against released
wheels by the contract tests), and the engine configurations it refuses, with the reason."""
from __future__ import annotations

from typing import Any

SUPPORTED = ((0, 5, 14), (0, 5, 23))

EAGLE_WORKER = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2"
SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
RESULT_PROCESSOR = "sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"
# target -> the parameters the hook expects (checked against released wheels by the contract tests)
HOOK_TARGETS: dict[str, tuple[str, ...]] = {
    f"{EAGLE_WORKER}.forward_batch_generation": ("self", "batch", "on_publish"),
    f"{EAGLE_WORKER}.init_cuda_graphs": ("self",),
    f"{EAGLE_WORKER}.activate_step_by_batch": ("self", "batch_size"),
    f"{EAGLE_WORKER}.on_verify_complete_cpu": ("self", "num_correct_drafts_per_req", "batch_size"),
    f"{RESULT_PROCESSOR}._resolve_spec_v2_tokens": ("self", "result", "batch"),
    f"{RESULT_PROCESSOR}.process_batch_result_prefill": ("self", "batch", "result"),
    f"{SCHEDULER}.set_internal_state": ("self", "recv_req"),
    f"{SCHEDULER}.on_idle": ("self",),
}
# called, not hooked
USED_CALLABLES: dict[str, tuple[str, ...]] = {
    "sglang.srt.speculative.adaptive_runtime_state.AdaptiveController._activate": ("self", "speculative_num_steps"),
}


def parse_version(text: str) -> tuple[int, int, int] | None:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            return None
        parts.append(int(digits))
    return tuple(parts) if len(parts) == 3 else None


def version_unsupported_reason(version: str) -> str | None:
    parsed = parse_version(version)
    lo, hi = SUPPORTED
    if parsed is None or not lo <= parsed <= hi:
        return (f"sglang {version} is outside the supported range "
                f"{'.'.join(map(str, lo))} .. {'.'.join(map(str, hi))}")
    return None


def unsupported_reason(server_args: Any, version: str | None = None) -> str | None:
    """Why the plugin must stay out of this engine, or None. Takes ServerArgs or a dict."""
    get = (lambda k, d=None: server_args.get(k, d)) if isinstance(server_args, dict) \
        else (lambda k, d=None: getattr(server_args, k, d))
    if version is not None and (reason := version_unsupported_reason(version)):
        return reason
    algo = get("speculative_algorithm")
    if algo not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    if get("speculative_eagle_topk") not in (None, 1):
        return f"speculative_eagle_topk={get('speculative_eagle_topk')} (only topk=1 is supported)"
    for flag, why in (("enable_dp_attention", "DP attention"), ("enable_two_batch_overlap", "two-batch overlap"),
                      ("enable_pdmux", "pdmux"), ("enable_multi_layer_eagle", "multi-layer EAGLE")):
        if get(flag):
            return f"{flag}=True: SGLang's adaptive speculation does not support {why}"
    if not get("speculative_adaptive"):
        return "speculative_adaptive is off: the engine must start with it (the daemon does this)"
    return None
