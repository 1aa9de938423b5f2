"""The SGLang general plugin (entry point `sglang.srt.plugins`): runs in every scheduler process.

It owns the speculation decision of SGLang's adaptive EAGLE worker: before each decode
batch, K draft steps iff batch size <= threshold, else 0 (SGLang's EMA is switched off).
The threshold changes only through Scheduler.set_internal_state, which every TP rank
receives in the same order, so all ranks switch on the same batch. TP rank 0 sends one
sample per decode batch to the daemon (batched, non-blocking). No SGLang file is edited.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

from . import fastoff, switches
from .support import (EAGLE_WORKER, RESULT_PROCESSOR, SCHEDULER, parse_version, unsupported_reason,
                      version_unsupported_reason)
from .telemetry import ENV_ADDRESS, ENV_INITIAL_THRESHOLD, encode_stats, pack_sample

log = logging.getLogger("spec_controller.plugin")

THRESHOLD_KEY = "speculative_disable_batch_threshold"
FAST_OFF_KEY = "spec_controller_fast_off"               # run-time switch for the fast off path
SIM_ACC_KEY = "spec_controller_simulate_acc_len"         # experiments only (SPEC_CONTROLLER_EXPERIMENTS=1)
MAX_THRESHOLD = 1 << 20
# Samples leave in messages of up to TELEMETRY_BATCH, or after TELEMETRY_FLUSH_S, or when the
# scheduler goes idle: one zmq send (one GIL release, where a scheduler thread can lose the GIL
# for a switch interval) per 16 decode batches instead of per batch.
TELEMETRY_BATCH = 16
TELEMETRY_FLUSH_S = 0.05


def validate_threshold(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return f"{THRESHOLD_KEY} must be an integer, got {value!r}"
    if not 0 <= value <= MAX_THRESHOLD:
        return f"{THRESHOLD_KEY}={int(value)} out of range (0 .. {MAX_THRESHOLD})"
    return None


class PluginState:
    """Per scheduler process. Routing state is identical on every rank; telemetry is rank 0's."""

    def __init__(self):
        raw = os.environ.get(ENV_INITIAL_THRESHOLD, "0")
        self.threshold = int(raw) if raw.isdigit() else 0
        self.k: int | None = None
        self.inert_reason: str | None = None      # set once: the plugin then passes everything through
        self.checked = False
        self.decisions = 0
        self.decision_ns = 0
        self.switches = 0                          # decisions that switched SGLang's adaptive state
        self.switch_ns = 0
        self.switch_log: switches.SwitchLogTrimmer | None = None
        self.telemetry_calls = 0
        self.telemetry_ns = 0
        self.sender = None                         # telemetry, rank 0 only; False = not this rank
        self.send_flags = 0
        self.again: type[BaseException] = BlockingIOError
        self.sent = 0
        self.dropped = 0
        self.pending: list[bytes] = []             # packed samples not sent yet
        self.pending_since = 0.0
        self.last_result: float | None = None
        self.prefill_since = False
        self.failed: set[str] = set()
        self.fast: fastoff.FastOff | None = None   # built after SGLang's graph capture, if supported
        self.fast_enabled = os.environ.get("SPEC_CONTROLLER_FAST_OFF", "1") != "0"
        self.off_fallbacks = 0                     # off batches that took SGLang's steps-0 path

    def fail_once(self, where: str, exc: BaseException) -> None:
        if where not in self.failed:
            self.failed.add(where)
            log.exception("spec-controller plugin: %s failed (%s); SGLang keeps running", where, exc)


STATE = PluginState()


# --- hooks -------------------------------------------------------------------
def _sglang_version() -> str:
    try:
        import sglang
        return getattr(sglang, "__version__", "0")
    except Exception:
        return "0"


def _check(worker) -> bool:
    """First decode batch: decide once whether this engine is ours."""
    if not STATE.checked:
        STATE.checked = True
        reason = unsupported_reason(worker.server_args, _sglang_version())
        if reason is None and getattr(worker, "adaptive_controller", None) is None:
            reason = "the worker has no adaptive controller"
        if reason is None:
            STATE.k = max(worker.adaptive_controller.candidate_steps)
            STATE.switch_log = switches.SwitchLogTrimmer.for_this_process()
            switches.quiet_switch_lines()
            log.info("spec-controller plugin active: K=%d, threshold %d", STATE.k, STATE.threshold)
        else:
            log.warning("spec-controller plugin inactive: %s", reason)
        STATE.inert_reason = reason
    return STATE.inert_reason is None


def activate_step_by_batch(original: Callable, worker, batch_size: int):
    if not _check(worker):
        return original(worker, batch_size)
    t0 = time.perf_counter_ns()
    target = STATE.k if batch_size <= STATE.threshold else 0
    if target != worker.speculative_num_steps:
        try:
            worker.adaptive_controller._activate(target)
        except Exception as e:            # keep the current state (same on every rank), say so once
            STATE.fail_once("activate", e)
        if STATE.switch_log is not None:
            try:
                STATE.switch_log.after_switch()
            except Exception as e:
                STATE.switch_log = None
                STATE.fail_once("switch log trim", e)
        STATE.switches += 1               # SGLang's state switch dominates these: counted apart
        STATE.switch_ns += time.perf_counter_ns() - t0
    STATE.decisions += 1
    STATE.decision_ns += time.perf_counter_ns() - t0
    return None


def after_init_cuda_graphs(result, worker, *args, **kwargs):
    """Every rank, once: capture the target's decode graphs for the fast off path."""
    if not STATE.fast_enabled or not _check(worker):
        return None
    version = _sglang_version()
    if not fastoff.version_supported(parse_version(version)):
        log.warning("spec-controller: fast off path not available on sglang %s; off batches use "
                    "SGLang's steps-0 state", version)
        return None
    fast = None
    try:
        fast = fastoff.build(worker)
    except Exception as e:
        STATE.fail_once("fast off capture", e)
    try:
        agreed = fastoff.all_ranks_agree(fast is not None)
    except Exception as e:
        STATE.fail_once("fast off agreement", e)
        agreed = False
    if fast is not None and not agreed:
        log.warning("spec-controller: another TP rank could not build the fast off path; all ranks use steps-0")
    STATE.fast = fast if agreed else None
    return None


def forward_batch_generation(original: Callable, worker, batch, *args, **kwargs):
    """Off decode batches go through the fast off path; everything else through SGLang."""
    fast = STATE.fast
    if (fast is None or not STATE.fast_enabled or batch.forward_mode.is_extend()
            or batch.is_extend_in_batch or batch.forward_mode.is_idle() or not _check(worker)):
        return original(worker, batch, *args, **kwargs)
    batch_size = batch.seq_lens.shape[0]
    if batch_size <= STATE.threshold:
        return original(worker, batch, *args, **kwargs)
    if fastoff.batch_unsupported_reason(batch) is not None:
        STATE.off_fallbacks += 1
        return original(worker, batch, *args, **kwargs)
    worker.activate_step_by_batch(batch_size)      # steps-0 state: allocation and stride as SGLang's off
    on_publish = kwargs.get("on_publish", args[0] if args else None)
    t0 = time.perf_counter_ns()
    try:
        result = fastoff.run(worker, fast, batch, on_publish)
    except Exception as e:      # restored batch fields: SGLang's own path can still take this batch
        STATE.fail_once("fast off", e)
        STATE.fast = None
        return original(worker, batch, *args, **kwargs)
    fast.cpu_ns += time.perf_counter_ns() - t0        # CPU time to launch it (the GPU runs on, overlapped)
    if fast.batches % 20000 == 1:
        log.info("spec-controller fast off: %d batches (%d on CUDA graphs), %d fell back to steps-0",
                 fast.batches, fast.graph_batches, STATE.off_fallbacks)
    return result


def on_verify_complete_cpu(original: Callable, worker, *args, **kwargs):
    if STATE.checked and STATE.inert_reason is None:
        return None                    # the threshold routes; SGLang's EMA must not switch states
    return original(worker, *args, **kwargs)


def state_output(output_cls, updated: bool):
    """SetInternalStateReqOutput across versions (0.5.14 also requires server_args)."""
    try:
        return output_cls(updated=updated)
    except TypeError:
        return output_cls(updated=updated, server_args={})


def validate_own_keys(ours: dict) -> str | None:
    """The plugin's set_internal_state keys: all valid, or the first problem (nothing applied)."""
    if THRESHOLD_KEY in ours and (problem := validate_threshold(ours[THRESHOLD_KEY])):
        return problem
    if FAST_OFF_KEY in ours:
        if ours[FAST_OFF_KEY] not in (True, False):    # SGLang's request path turns JSON booleans into 0/1
            return f"{FAST_OFF_KEY} must be true or false, got {ours[FAST_OFF_KEY]!r}"
        if ours[FAST_OFF_KEY] and STATE.checked and STATE.fast is None:
            return f"{FAST_OFF_KEY}: the fast off path is not available in this engine (see its log)"
    if SIM_ACC_KEY in ours:
        if os.environ.get("SPEC_CONTROLLER_EXPERIMENTS") != "1":
            return f"{SIM_ACC_KEY} is an experiment knob (start the engine with SPEC_CONTROLLER_EXPERIMENTS=1)"
        value = ours[SIM_ACC_KEY]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value <= 0 or 1 <= value <= 64):
            return f"{SIM_ACC_KEY} must be a mean accept length in 1 .. 64 (or <= 0: off), got {value!r}"
    if STATE.checked and STATE.inert_reason is not None:
        return f"spec-controller plugin inactive: {STATE.inert_reason}"
    return None


def apply_own_keys(ours: dict) -> None:
    if THRESHOLD_KEY in ours:
        STATE.threshold = int(ours[THRESHOLD_KEY])
    if FAST_OFF_KEY in ours:
        STATE.fast_enabled = bool(ours[FAST_OFF_KEY])
    if SIM_ACC_KEY in ours:   # SGLang's benchmark knob, read by every verify (spec_utils.SIMULATE_ACC_LEN)
        from sglang.srt.speculative import spec_utils
        spec_utils.SIMULATE_ACC_LEN = float(ours[SIM_ACC_KEY])


def set_internal_state(original: Callable, scheduler, recv_req):
    args = getattr(recv_req, "server_args", None)
    ours = {k: v for k, v in args.items() if k in (THRESHOLD_KEY, FAST_OFF_KEY, SIM_ACC_KEY)} \
        if isinstance(args, dict) else {}
    if not ours:
        return original(scheduler, recv_req)
    from sglang.srt.managers.io_struct import SetInternalStateReqOutput
    problem = validate_own_keys(ours)
    if problem is not None:
        log.warning("set_internal_state refused: %s", problem)
        return state_output(SetInternalStateReqOutput, False)
    rest = {k: v for k, v in args.items() if k not in ours}
    if rest:
        recv_req.server_args = rest
        out = original(scheduler, recv_req)
        if not out.updated:
            return out
    apply_own_keys(ours)
    return state_output(SetInternalStateReqOutput, True)


def before_prefill_result(*args, **kwargs):
    STATE.prefill_since = True
    return None


def after_spec_result(result_tokens, processor, *args, **kwargs):
    """Rank 0: one sample per decode batch, stamped when its result reaches the CPU."""
    t0 = time.perf_counter_ns()
    try:
        result = kwargs["result"] if "result" in kwargs else args[0]
        batch = kwargs["batch"] if "batch" in kwargs else args[1]
        _emit(result, batch)
    except Exception as e:                      # never raise into the scheduler
        STATE.fail_once("telemetry", e)
    STATE.telemetry_calls += 1
    STATE.telemetry_ns += time.perf_counter_ns() - t0
    return None


def _rank() -> int:
    """This process's global rank: with TP, every rank runs the hooks; only rank 0 reports."""
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    return 0


def _sender():
    """The rank-0 PUSH socket, made on first use (False on other ranks or without an address)."""
    if STATE.sender is None:
        STATE.sender = False
        address = os.environ.get(ENV_ADDRESS)
        if address and _rank() == 0:
            import zmq
            sock = zmq.Context.instance().socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 10000)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(address)
            STATE.sender = sock
            STATE.send_flags = zmq.NOBLOCK
            STATE.again = zmq.Again
    return STATE.sender


def stats_message() -> bytes:
    fast = STATE.fast
    counters = {k: getattr(STATE, k) for k in ("decisions", "decision_ns", "switches", "switch_ns", "sent",
                                               "dropped", "telemetry_calls", "telemetry_ns", "off_fallbacks")}
    if fast is not None:
        counters.update(fast_off_batches=fast.batches, fast_off_graph_batches=fast.graph_batches,
                        fast_off_cpu_ns=fast.cpu_ns)
    return encode_stats(counters, 0 if fast is None else (1 if STATE.fast_enabled else 2))


def _emit(result, batch) -> None:
    sock = STATE.sender if STATE.sender is not None else _sender()
    if not sock:
        return
    now = time.perf_counter()
    bs = len(batch.reqs)
    draft_tokens = getattr(result, "speculative_num_draft_tokens", None)
    steps = int(draft_tokens) - 1 if draft_tokens else 0
    tokens = int(getattr(result, "num_correct_drafts", 0)) + bs
    last, STATE.last_result = STATE.last_result, now
    decode_only, STATE.prefill_since = not STATE.prefill_since, False
    if last is None or bs == 0:
        return
    step_s = now - last
    pending = STATE.pending
    if not pending:
        STATE.pending_since = now
    pending.append(pack_sample(time.time(), bs, steps, tokens, step_s, decode_only and step_s < 5.0))
    if len(pending) >= TELEMETRY_BATCH or now - STATE.pending_since >= TELEMETRY_FLUSH_S:
        _send_pending(sock)


def _send_pending(sock) -> None:
    pending = STATE.pending
    n = len(pending)
    try:
        sock.send(b"".join(pending), STATE.send_flags)
    except STATE.again:                  # the daemon is not draining: drop and count
        STATE.dropped += n
        return
    except Exception:                    # a broken socket: counted, and nothing piles up behind it
        STATE.dropped += n
        raise
    finally:
        pending.clear()
    STATE.sent += n
    if STATE.sent // 256 != (STATE.sent - n) // 256:      # the counters, every 256 samples
        try:
            sock.send(stats_message(), STATE.send_flags)
        except STATE.again:
            pass                         # the next ones carry the same counters


def flush_telemetry(*_args, **_kwargs) -> None:
    """BEFORE Scheduler.on_idle (every idle loop pass: one list check when nothing waits)."""
    if STATE.pending:
        try:
            _send_pending(STATE.sender)
        except Exception as e:                  # never raise into the scheduler (pending is cleared)
            STATE.fail_once("telemetry flush", e)
    return None


# --- entry point ---------------------------------------------------------------
# What load() registers; the contract tests check these targets (support.HOOK_TARGETS) in each wheel.
HOOKS: dict[str, tuple[Callable, str]] = {
    f"{EAGLE_WORKER}.activate_step_by_batch": (activate_step_by_batch, "AROUND"),
    f"{EAGLE_WORKER}.forward_batch_generation": (forward_batch_generation, "AROUND"),
    f"{EAGLE_WORKER}.init_cuda_graphs": (after_init_cuda_graphs, "AFTER"),
    f"{EAGLE_WORKER}.on_verify_complete_cpu": (on_verify_complete_cpu, "AROUND"),
    f"{SCHEDULER}.set_internal_state": (set_internal_state, "AROUND"),
    f"{RESULT_PROCESSOR}.process_batch_result_prefill": (before_prefill_result, "BEFORE"),
    f"{RESULT_PROCESSOR}._resolve_spec_v2_tokens": (after_spec_result, "AFTER"),
    f"{SCHEDULER}.on_idle": (flush_telemetry, "BEFORE"),
}
_LOADED = False


def load() -> None:
    """Entry point: register the hooks (idempotent; a refusal leaves SGLang untouched)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    if os.environ.get("SPEC_CONTROLLER_PLUGIN", "1") == "0":
        return
    try:
        reason = version_unsupported_reason(_sglang_version())
        if reason:
            log.warning("spec-controller plugin not loaded: %s", reason)
            return
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except Exception as e:
        log.warning("spec-controller plugin not loaded: %s", e)
        return
    for target, (hook, kind) in HOOKS.items():
        HookRegistry.register(target, hook, getattr(HookType, kind))
