"""One plugin per SGLang scheduler process: the router, the off path and the telemetry sender,
the set_internal_state keys that steer them, and the table of hooks bound to their methods."""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Mapping

from ..contract import (ALLOC_LOOP_KEY, BOOL_KEYS, DEFER_PROMPT_KV_KEY, DRAFT_KV_COALESCE_KEY, DRAFT_KV_GRAPH_KEY, DRAFT_KV_KEY,
                        DRAFT_KV_SIDE_KEY, ENV_ADDRESS, ENV_DRAFT_KV, ENV_DRAFT_KV_COALESCE, ENV_DRAFT_KV_GRAPH,
                        ENV_DEFER_PROMPT_KV, ENV_DRAFT_KV_SIDE, ENV_FAST_OFF,
                        ENV_INITIAL_THRESHOLD, ENV_LEAN_OFF, ENV_LEAN_PREFILL, ENV_LEAN_RESOLVE, ENV_SYNC_DRAFT,
                        EXPERIMENT_KEYS, FAST_OFF_KEY, LEAN_OFF_KEY, LEAN_PREFILL_KEY, LEAN_RESOLVE_KEY, OWN_KEYS, PLAIN_OFF_KEY,
                        REASON_INACTIVE, SIM_ACC_KEY,
                        SYNC_DRAFT_KEY, THRESHOLD_KEY, parse_version, validate_threshold)
from ..envwords import COALESCE_RANGE, EXPERIMENTS_ENV, env_int
from . import allocloop, offgrammar, plainoff, warmsizes
from .draftkv_graph import DEFAULT_COALESCE as DEFAULT_GRAPH_COALESCE
from .failures import Failures
from .offpath import OffPath
from .router import Router
from .support import DRAFT_WORKER, EAGLE_WORKER, FUTURE_MAP, RESULT_PROCESSOR, SCHEDULER, sglang_version, switch_on
from .telemetry import TelemetrySender

log = logging.getLogger("spec_controller.plugin")


def shown(raw: str) -> str:
    """An environment value for a log line: repr, cut at 40 characters."""
    return repr(raw) if len(raw) <= 40 else repr(raw[:40]) + f"... ({len(raw)} characters)"


def coalesce_batches(raw: str) -> int | None:
    """ENV_DRAFT_KV_COALESCE: draft-KV writes per write (1, or 0 as every other switch's "off": each its own); None
    where unset or not an integer 0 .. 64 (logged): the default (OffPath: the graphs coalesce, the eager writer not)."""
    n = env_int(raw)
    valid = n is not None and COALESCE_RANGE[0] <= n <= COALESCE_RANGE[1]
    if raw.strip() and not valid:
        log.warning("spec-controller: %s=%s is not an integer %d .. %d; ignored (the default: %d writes per graph "
                    "replay where the writes are graphed)", ENV_DRAFT_KV_COALESCE, shown(raw), *COALESCE_RANGE,
                    DEFAULT_GRAPH_COALESCE)
    return max(n, 1) if valid else None


def initial_threshold(raw: str) -> int:
    """ENV_INITIAL_THRESHOLD (the daemon sets it from its validated state): 0, speculation never on, where it is
    not an integer 0 .. MAX_BATCH (logged) - a wrong value must not stop the engine from starting."""
    value = env_int(raw)
    problem = "not a non-negative integer" if value is None else validate_threshold(value)
    if problem:
        log.warning("spec-controller: %s=%s: %s; starting at 0 (speculation off until the daemon sets it)",
                    ENV_INITIAL_THRESHOLD, shown(raw), problem)
        return 0
    return value


def state_output(output_cls: type, updated: bool) -> Any:
    """SetInternalStateReqOutput across versions (0.5.14 also requires server_args)."""
    try:
        return output_cls(updated=updated)
    except TypeError:
        return output_cls(updated=updated, server_args={})


class Plugin:
    def __init__(self, env: Mapping[str, str] = os.environ, **telemetry_options: Any):
        self.env = env
        self.failures = Failures()
        self.router = Router(initial_threshold(env.get(ENV_INITIAL_THRESHOLD, "0")), self.failures)
        self.off_path = OffPath(self.router, self.failures, enabled=switch_on(env, ENV_FAST_OFF),
                                sync_draft=switch_on(env, ENV_SYNC_DRAFT, False),
                                lean_prefill=switch_on(env, ENV_LEAN_PREFILL),
                                draft_kv=switch_on(env, ENV_DRAFT_KV),   # the default: consistent, cheap
                                draft_kv_graph=switch_on(env, ENV_DRAFT_KV_GRAPH),   # the default since 2026-12-02e
                                draft_kv_coalesce=coalesce_batches(env.get(ENV_DRAFT_KV_COALESCE, "")),  # the default since 12-04b
                                draft_kv_side=switch_on(env, ENV_DRAFT_KV_SIDE),   # the default since 2026-12-03i
                                fast_grammar=switch_on(env, offgrammar.ENV),   # checked on a GPU
                                lean_off=switch_on(env, ENV_LEAN_OFF),         # measured: offstubs.py
                                defer_prompt_kv=switch_on(env, ENV_DEFER_PROMPT_KV, False),   # measured: no gain (12-04e)
                                lean_resolve=switch_on(env, ENV_LEAN_RESOLVE, False),         # not yet on a GPU
                                capture_hidden=switch_on(env, EXPERIMENTS_ENV, False))
        self.telemetry = TelemetrySender(env.get(ENV_ADDRESS), self.failures, self.stats, **telemetry_options)
        self.alloc_loop = allocloop.AllocLoop(registered=allocloop.wanted(env, parse_version(sglang_version())))
        self.plain = plainoff.PlainOff(self.off_path, plainoff.wanted(env, sglang_version()), sample=self.telemetry.sample)
        if self.plain.registered:          # (else the worker hook does not even look for plain batches)
            self.off_path.plain = self.plain

    def stats(self) -> tuple[dict[str, int], dict[str, Any]]:
        """(counters, what the stats message says about the off path: contract.encode_stats's keywords)."""
        reason = self.off_path.reason
        if self.router.checked and self.router.inert_reason is not None:
            reason = REASON_INACTIVE
        return ({**self.router.counters(), **self.off_path.counters(), "alloc_loop_batches": self.alloc_loop.batches},
                {"off_path": self.off_path.path_index(), "off_reason": reason,
                 "sglang": parse_version(self.router.version()) or (0, 0, 0)})

    def after_init_cuda_graphs(self, result: Any, worker: Any, *args, **kwargs) -> None:
        """AFTER EAGLEWorkerV2.init_cuda_graphs: the off path is decided; the daemon hears it at the first idle pass,
        not after STATS_EVERY samples (its zero verdict follows what the stats say of the prefills)."""
        self.off_path.after_init_cuda_graphs(result, worker, *args, **kwargs)
        self.telemetry.announce()
        if switch_on(self.env, warmsizes.ENV):
            self._warm_sizes(worker)

    def _warm_sizes(self, worker: Any) -> None:
        """warmsizes (on unless SPEC_CONTROLLER_WARM_SIZES=0): a failure is logged and the engine serves as it would
        have without it; an SGLang without the kernel is told once, not counted as a failure."""
        t0 = time.perf_counter()
        try:    # inside SGLang's init_cuda_graphs hook: nothing here may stop the engine's start
            reason = warmsizes.unsupported_reason()
            if reason is not None:
                log.info("spec-controller: no start-up warm-up of the decode preparation: %s", reason)
                return
            max_bs = warmsizes.max_batch_size(worker)
            launches = warmsizes.warm(worker, max_bs)
        except Exception as e:
            self.failures.record("warm sizes", e)
            return
        log.info("spec-controller: warmed speculative decode preparation for batch sizes up to %d "
                 "(%d launches, %.0f ms)", max_bs, launches, (time.perf_counter() - t0) * 1e3)

    def hooks(self) -> dict[str, tuple[Callable, str]]:
        """target -> (bound hook, HookType name); the targets are support.HOOK_TARGETS."""
        r, off, tel = self.router, self.off_path, self.telemetry
        extra = {allocloop.TARGET: (self.alloc_loop.around, "AROUND")} if self.alloc_loop.registered else {}
        if off.resolve.enabled:      # started with it (ENV_LEAN_RESOLVE=1): a call per decode batch otherwise saved
            extra[f"{FUTURE_MAP}._resolve_spec_extras"] = (off.resolve.around, "AROUND")
            extra[f"{SCHEDULER}._forward_isolation"] = (off.resolve.isolation, "AROUND")
        if self.plain.registered:    # started with it (plainoff.ENV=1, a supported SGLang)
            extra.update(plainoff.hooks(self.plain))
        return {**extra,
            f"{EAGLE_WORKER}.activate_step_by_batch": (r.activate_step_by_batch, "AROUND"),
            f"{EAGLE_WORKER}.forward_batch_generation": (off.forward_batch_generation, "AROUND"),
            f"{EAGLE_WORKER}.init_cuda_graphs": (self.after_init_cuda_graphs, "AFTER"),
            f"{DRAFT_WORKER}._draft_extend_for_prefill": (off.draft_extend_for_prefill, "AROUND"),
            f"{EAGLE_WORKER}.on_verify_complete_cpu": (r.on_verify_complete_cpu, "AROUND"),
            f"{SCHEDULER}.set_internal_state": (self.set_internal_state, "AROUND"),
            f"{RESULT_PROCESSOR}.process_batch_result_prefill": (tel.before_prefill_result, "BEFORE"),
            f"{RESULT_PROCESSOR}._resolve_spec_v2_tokens": (tel.after_spec_result, "AFTER"),
            f"{SCHEDULER}.on_idle": (tel.flush, "BEFORE"),
        }

    # --- set_internal_state --------------------------------------------------------------------
    def validate_own_keys(self, ours: Mapping[str, Any]) -> str | None:
        """The plugin's set_internal_state keys: all valid, or the first problem (nothing applied)."""
        if THRESHOLD_KEY in ours and (problem := validate_threshold(ours[THRESHOLD_KEY])):
            return problem
        for key in BOOL_KEYS:                      # SGLang's request path turns JSON booleans into 0/1
            if key in ours and ours[key] not in (True, False):
                return f"{key} must be true or false, got {ours[key]!r}"
        built = not self.router.checked or self.off_path.fast is not None
        for key in (FAST_OFF_KEY, LEAN_OFF_KEY, LEAN_RESOLVE_KEY):
            if ours.get(key) and not built:
                return f"{key}: the fast off path is not available in this engine (see its log)"
        if ours.get(SYNC_DRAFT_KEY) and not (built and self.off_path.can_sync()):
            return (f"{SYNC_DRAFT_KEY}: this engine's off path cannot run the draft (start it with "
                    f"{ENV_SYNC_DRAFT}=1)")
        if ours.get(DRAFT_KV_KEY) and not (built and self.off_path.can_write_kv()):
            return (f"{DRAFT_KV_KEY}: this engine's off path cannot write the draft's KV (start it with "
                    f"{ENV_DRAFT_KV}=1; the engine log says if the draft is unsupported)")
        if ours.get(DRAFT_KV_GRAPH_KEY) and built and self.off_path.kv_graph is None:
            return (f"{DRAFT_KV_GRAPH_KEY}: no draft KV graphs were captured (start the engine with "
                    f"{ENV_DRAFT_KV_GRAPH} unset or 1; TP 1 with decode CUDA graphs; the engine log says why not)")
        if ours.get(DRAFT_KV_SIDE_KEY) and built and self.off_path.kv_graph is None:
            return f"{DRAFT_KV_SIDE_KEY}: no draft KV graphs were captured to replay beside (see {DRAFT_KV_GRAPH_KEY})"
        if LEAN_RESOLVE_KEY in ours and not self.off_path.resolve.registered:
            return f"{LEAN_RESOLVE_KEY}: not in this engine (start it with {ENV_LEAN_RESOLVE}=1)"
        if PLAIN_OFF_KEY in ours and not self.plain.registered:
            return (f"{PLAIN_OFF_KEY}: not in this engine (start it with {plainoff.ENV}=1; SGLang "
                    f"{'-'.join('.'.join(map(str, v)) for v in plainoff.VERSIONS)})")
        if ours.get(DEFER_PROMPT_KV_KEY) and built and self.off_path.prompts.why_not:
            return f"{DEFER_PROMPT_KV_KEY}: not in this engine: {self.off_path.prompts.why_not}"
        if ours.get(DRAFT_KV_SIDE_KEY) and getattr(self.off_path.kv_graph, "side_why", None):
            return f"{DRAFT_KV_SIDE_KEY}: not in this engine: {self.off_path.kv_graph.side_why}"
        if ours.get(DRAFT_KV_COALESCE_KEY) and built and not self.off_path.coalesces():
            if (why := self.off_path.coalesce_why()) is not None:   # (not logged at start unless asked for)
                return f"{DRAFT_KV_COALESCE_KEY}: not in this engine: {why}"
            return (f"{DRAFT_KV_COALESCE_KEY}: this engine does not coalesce the draft's KV writes (started with "
                    f"{ENV_DRAFT_KV_COALESCE}=1, or without draft KV graphs: restart it with {ENV_DRAFT_KV_COALESCE} "
                    f"unset (the graphs: {DEFAULT_GRAPH_COALESCE} writes a replay) or 2 .. 64; the engine log says if "
                    "it is unsupported)")
        if ours.get(ALLOC_LOOP_KEY) and not (self.alloc_loop.registered and self.alloc_loop.applies is not False):
            return (f"{ALLOC_LOOP_KEY}: not in this engine (SGLang 0.5.16-0.5.18's own function only, "
                    f"{allocloop.ENV} not 0; see its log)")
        for key in EXPERIMENT_KEYS:
            if key in ours and not switch_on(self.env, EXPERIMENTS_ENV, False):
                return f"{key} is an experiment knob (start the engine with SPEC_CONTROLLER_EXPERIMENTS=1)"
        if SIM_ACC_KEY in ours:
            value = ours[SIM_ACC_KEY]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value <= 0 or 1 <= value <= 64):
                return f"{SIM_ACC_KEY} must be a mean accept length in 1 .. 64 (or <= 0: off), got {value!r}"
        if self.router.checked and self.router.inert_reason is not None:
            return f"spec-controller plugin inactive: {self.router.inert_reason}"
        return None

    def apply_own_keys(self, ours: Mapping[str, Any]) -> None:
        if THRESHOLD_KEY in ours:
            self.router.threshold = int(ours[THRESHOLD_KEY])
        if FAST_OFF_KEY in ours:
            self.off_path.enabled = bool(ours[FAST_OFF_KEY])
        if LEAN_PREFILL_KEY in ours:
            self.off_path.lean_prefill = bool(ours[LEAN_PREFILL_KEY])
        if SYNC_DRAFT_KEY in ours:
            self.off_path.sync_draft = bool(ours[SYNC_DRAFT_KEY])
        if DRAFT_KV_KEY in ours:
            self.off_path.draft_kv = bool(ours[DRAFT_KV_KEY])
        if DRAFT_KV_GRAPH_KEY in ours:
            self.off_path.use_kv_graph = bool(ours[DRAFT_KV_GRAPH_KEY])
        if DRAFT_KV_COALESCE_KEY in ours:
            self.off_path.set_kv_coalesce(bool(ours[DRAFT_KV_COALESCE_KEY]))
        if DRAFT_KV_SIDE_KEY in ours:
            self.off_path.set_kv_side(bool(ours[DRAFT_KV_SIDE_KEY]))
        if LEAN_OFF_KEY in ours:
            self.off_path.lean_off = bool(ours[LEAN_OFF_KEY])
        if ALLOC_LOOP_KEY in ours:
            self.alloc_loop.enabled = bool(ours[ALLOC_LOOP_KEY])
        if DEFER_PROMPT_KV_KEY in ours:    # rows held now are staged at the next forward or flush either way
            self.off_path.prompts.defer = bool(ours[DEFER_PROMPT_KV_KEY])
        if LEAN_RESOLVE_KEY in ours:
            self.off_path.resolve.enabled = bool(ours[LEAN_RESOLVE_KEY])
        if PLAIN_OFF_KEY in ours:          # a plain batch goes back to speculative at its next preparation
            self.plain.enabled = bool(ours[PLAIN_OFF_KEY])
        if SIM_ACC_KEY in ours:   # SGLang's benchmark knob, read by every verify (spec_utils.SIMULATE_ACC_LEN)
            from sglang.srt.speculative import spec_utils
            spec_utils.SIMULATE_ACC_LEN = float(ours[SIM_ACC_KEY])
        self.telemetry.announce()

    def set_internal_state(self, original: Callable, scheduler: Any, recv_req: Any) -> Any:
        """AROUND Scheduler.set_internal_state: the plugin's keys are validated together and applied
        only if SGLang accepted the rest of the request."""
        args = getattr(recv_req, "server_args", None)
        ours = {k: v for k, v in args.items() if k in OWN_KEYS} if isinstance(args, dict) else {}
        if not ours:
            return original(scheduler, recv_req)
        from sglang.srt.managers.io_struct import SetInternalStateReqOutput
        problem = self.validate_own_keys(ours)
        if problem is not None:
            log.warning("set_internal_state refused: %s", problem)
            return state_output(SetInternalStateReqOutput, False)
        rest = {k: v for k, v in args.items() if k not in ours}
        if rest:
            recv_req.server_args = rest
            out = original(scheduler, recv_req)
            if not out.updated:
                return out
        self.apply_own_keys(ours)
        return state_output(SetInternalStateReqOutput, True)
