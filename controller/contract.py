"""The contract between the two processes: the SGLang plugin (inside every scheduler process) and the daemon. Both
import this module and nothing of each other's; it imports only the standard library (SGLang loads it in each).

- the routing predicate (which batches speculate) and the lean-prefill rule built on it,
- the per-batch sample and its wire codec (plugin rank 0 -> daemon, over zmq),
- the set_internal_state keys the daemon sends and the plugin accepts,
- the SGLang versions and engine configurations the plugin supports (the daemon refuses them before any start).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Mapping, Sequence


# --- routing ----------------------------------------------------------------------------------
def speculates(batch_size: int, threshold: int) -> bool:
    """The one routing rule: a decode batch speculates iff its size is at most the threshold."""
    return batch_size <= threshold


def prefill_skips_draft(threshold: int, last_batch_size: int, joining: int, draft_kv_written: bool) -> bool:
    """Lean prefill (the plugin's; the simulator charges prefills by the same rule): a prefill skips the
    draft's forward over its prompt while no batch size speculates, and, where the plugin writes the
    draft's KV itself (off path kv: the prompt's draft KV is complete either way), also when the decode
    batch the new requests join will not speculate, estimated as the last decode batch plus them (high:
    a wrong guess costs those requests one draft step from a stub, the other way a draft pass per prefill)."""
    return threshold == 0 or (draft_kv_written and not speculates(last_batch_size + joining, threshold))


def zero_saves_prefill_draft(lean_prefill: bool, draft_kv_written: bool) -> bool:
    """Does threshold 0 save the prefills of off batches the draft's pass, against any threshold above 0
    (prefill_skips_draft at 0 and not above it)? With lean prefill, only where the off path does not write the
    draft's KV: with the writer the pass is skipped above 0 too. The plugin says it in its stats, the daemon's
    engine and the simulator's profile derive it from their configuration (policies.types.Snapshot)."""
    return lean_prefill and not draft_kv_written


# --- the sample -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Sample:
    """One decode batch, as the SGLang plugin and the simulator both report it.

    steps == 0 means speculation was off for this batch; tokens is the sum of accept lengths
    (== batch_size when off); step_s is the interval between consecutive decode results;
    decode_only is False when that interval also held a prefill/extend batch.
    """

    t: float
    batch_size: int
    steps: int
    tokens: int
    step_s: float
    decode_only: bool = True

    @property
    def speculative(self) -> bool:
        return self.steps > 0

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.step_s if self.step_s > 0 else 0.0

    def as_tuple(self) -> tuple:
        return (self.t, self.batch_size, self.steps, self.tokens, self.step_s, int(self.decode_only))


# --- the wire: tiny fixed structs over zmq ----------------------------------------------------
ENV_ADDRESS = "SPEC_CONTROLLER_TELEMETRY"          # e.g. ipc:///run/spec-controller/telemetry.ipc
ENV_INITIAL_THRESHOLD = "SPEC_CONTROLLER_INITIAL_THRESHOLD"

SAMPLE = struct.Struct("<BdIHIdB")       # kind=1, t, batch size, steps, tokens, step s, decode-only
STATS_FIELDS = ("decisions", "decision_ns",            # routing decisions and their total time
                "switches", "switch_ns",                 # those that switched SGLang's state, their time
                "sent", "dropped",                       # samples sent / dropped at a full queue
                "telemetry_calls", "telemetry_ns",       # time spent producing and sending samples
                "fast_off_batches", "fast_off_graph_batches", "fast_off_cpu_ns",   # the fast off path
                "off_fallbacks",                         # off batches that took SGLang's steps-0 path
                "lean_prefills",                         # prefills that skipped the draft (their batch did not speculate)
                "off_fallbacks_logprob", "off_fallbacks_grammar",   # of off_fallbacks: why (the rest: other)
                "draft_kv_writes",                       # off batches and lean prefills whose draft KV the plugin wrote
                "fast_off_target_ns", "draft_kv_ns",     # of fast_off_cpu_ns: the target's forward, the KV writes
                "draft_kv_prefill_ns",                   # CPU of the lean prefills' prompt writes
                "draft_kv_prefill_eager", "draft_kv_prefill_eager_ns",   # of those: written eagerly (no graph held them)
                "draft_kv_graph_writes",                 # draft KV writes replayed from CUDA graphs (decode and prompt)
                "prefills_pay_draft",                    # how prefills pay the draft's pass (PAYS_DRAFT below)
                "fast_off_lean_batches",                 # fast off batches that took the lean step (plugin/offstubs.py)
                "alloc_loop_batches",                    # decode allocations by 0.5.19's loop (plugin/allocloop.py)
                "draft_kv_side_writes",                  # of draft_kv_graph_writes: replayed on the side stream
                "draft_kv_graph_launches",               # graph replays holding them (fewer while coalescing)
                "draft_kv_prefill_held",                 # prompt writes held until the next decode (plugin/promptkv.py)
                "lean_resolves",                         # off batches whose draft extras were not gathered (offresolve)
                "plain_off_batches",                     # off batches run as SGLang's non-speculative ones (plainoff)
                "draft_kv_prefill_writer_ns",            # of draft_kv_prefill_ns: in the graphed writer's write()
                "draft_kv_prefill_direct")               # prompts written straight into the graphs' inputs (write_prompt)
# prefills_pay_draft: 1: off batches' prefills run the draft above 0 only (lean
# prefill, no KV writer, no rejection sampling: threshold 0 saves that pass); 2: not (at 0 as well, or never); 0: a
# plugin before it. The daemon's zero verdict follows it (policies.types.Snapshot.prefills_pay_draft).
PAYS_DRAFT, SAME_AT_ZERO = 1, 2
# kind=2, the counters, then: the off path in use (OFF_PATHS), why (OFF_REASONS), SGLang's version
STATS = struct.Struct("<B" + "Q" * len(STATS_FIELDS) + "BB3H")
STATS_TAIL = 1 + 8                      # the kind byte, then after the counters: path, reason, version
MAX_STATS_FIELDS = 64                   # a longer message is not a stats message
KIND_SAMPLE, KIND_STATS = 1, 2
SAMPLES_PER_MESSAGE = 16                # the plugin's samples per send (one GIL release per 16 batches: plugin/telemetry)
# The daemon's cap on a message (zmq's MAXMSGSIZE; RCVHWM may wait in memory): twice the largest made here (448 / 521 B)
MAX_TELEMETRY_MESSAGE = 2 * max(SAMPLES_PER_MESSAGE * SAMPLE.size, STATS_TAIL + 8 * MAX_STATS_FIELDS)
OFF_PATHS = ("steps-0", "fast (draft not written while off)", "steps-0 (fast path switched off)",
             "fast, draft synced", "fast, draft KV written")
FAST_PATHS = (1, 3, 4)                  # the OFF_PATHS entries that are the fast off path
KV_PATH = 4                             # the one that writes the draft's KV (off path kv)
# Why the off path is what it is (index sent by the plugin; "" = nothing to explain)
OFF_REASONS = (
    "",
    "off_path = steps0 in the config",
    "SGLang before 0.5.16: TpModelWorker.forward_batch_generation takes no capture_hidden_mode",
    "SGLang 0.5.16: no get_server_return_hidden_states_mode, decode graphs re-captured at replay for a higher "
    "hidden-state mode (the fast path is written from 0.5.17)",
    "an SGLang internal it needs is missing or changed (the engine log names it)",
    "its CUDA-graph capture failed (see the engine log)",
    "another TP rank could not build it",
    "it failed on a batch (see the engine log); SGLang's steps-0 took over",
    "the plugin is inactive in this engine (see the engine log)",
    "speculative_use_rejection_sampling: the draft's probabilities must stay in step (a skipped draft would "
    "skew sampled outputs after speculation resumes)",
    "the plugin cannot write this draft's KV (the engine log says why): SGLang's draft extend keeps it in step "
    "instead, at its cost (off_path = \"fast\" skips the draft)",
    "a prompt's draft-KV write failed (the engine log says why): the draft's KV is no longer written while off, so a "
    "request that lives through off -> on drafts from stale KV (poorer acceptance, same outputs) until the engine "
    "restarts",
)
(REASON_NONE, REASON_CONFIG, REASON_NO_CAPTURE_MODE, REASON_0_5_16, REASON_MISSING_INTERNAL, REASON_CAPTURE_FAILED,
 REASON_OTHER_RANK, REASON_RUN_FAILED, REASON_INACTIVE, REASON_REJECTION_SAMPLING,
 REASON_KV_UNSUPPORTED, REASON_KV_WRITE_FAILED) = range(len(OFF_REASONS))
# Where the fast off path was measured on a GPU (H200, bench/results/); elsewhere contract-checked only
GPU_MEASURED = ((0, 5, 17),)


def pack_sample(t: float, batch_size: int, steps: int, tokens: int, step_s: float, decode_only: bool) -> bytes:
    return SAMPLE.pack(KIND_SAMPLE, t, batch_size, steps, tokens, step_s, decode_only)


def encode_stats(counters: Mapping[str, int], off_path: int = 0, off_reason: int = 0,
                 sglang: tuple[int, int, int] | None = None) -> bytes:
    """The plugin's counters (STATS_FIELDS; missing ones are 0), OFF_PATHS[off_path],
    OFF_REASONS[off_reason] and the running SGLang's version ((0, 0, 0): unknown)."""
    return STATS.pack(KIND_STATS, *(int(counters.get(k, 0)) for k in STATS_FIELDS), off_path, off_reason,
                      *(sglang or (0, 0, 0)))


def off_path_evidence(path: int, sglang: tuple[int, int, int]) -> str:
    """What backs a fast off path on this version: a GPU measurement, or the wheel contract alone."""
    if path not in FAST_PATHS:
        return ""
    if sglang in GPU_MEASURED:
        return "measured on a GPU"
    if not any(sglang):
        return "not measured on a GPU (SGLang version unknown)"
    return f"contract-checked against the {'.'.join(map(str, sglang))} wheel, not measured on a GPU"


def _decode_stats(values: tuple, n: int) -> dict:
    counters = {k: 0 for k in STATS_FIELDS} | dict(zip(STATS_FIELDS, values[1:n + 1]))
    path, reason, *version = values[n + 1:]
    label = lambda names, i: names[i] if i < len(names) else "?"
    return {**counters, "off_path": label(OFF_PATHS, path), "off_reason": label(OFF_REASONS, reason),
            "sglang": ".".join(map(str, version)) if any(version) else "?",
            "off_path_evidence": off_path_evidence(path, tuple(version))}


def decode(msg: bytes) -> list[Sample] | dict:
    """A list of Samples (the plugin sends several per message), or a dict of plugin counters; else ValueError."""
    if msg and msg[0] == KIND_SAMPLE and len(msg) % SAMPLE.size == 0:
        samples = []
        for kind, t, bs, steps, tokens, step_s, decode_only in SAMPLE.iter_unpack(msg):
            if kind != KIND_SAMPLE:
                raise ValueError("corrupt telemetry message (a sample without its kind byte)")
            samples.append(Sample(t, bs, steps, tokens, step_s, bool(decode_only)))
        return samples
    counters, rest = divmod(len(msg) - STATS_TAIL, 8)
    if msg and msg[0] == KIND_STATS and rest == 0 and 1 <= counters <= MAX_STATS_FIELDS:
        # Counters are only ever appended: a plugin of another release (`[sglang] python`) sends fewer
        # or more of them; the ones both know are read, the missing ones count 0.
        layout = STATS if counters == len(STATS_FIELDS) else struct.Struct("<B" + "Q" * counters + "BB3H")
        return _decode_stats(layout.unpack(msg), counters)
    raise ValueError(f"unknown telemetry message ({len(msg)} bytes)")


# --- set_internal_state keys ------------------------------------------------------------------
THRESHOLD_KEY = "speculative_disable_batch_threshold"
FAST_OFF_KEY = "spec_controller_fast_off"               # run-time switch for the fast off path
SIM_ACC_KEY = "spec_controller_simulate_acc_len"         # experiments only (SPEC_CONTROLLER_EXPERIMENTS=1)
LEAN_PREFILL_KEY = "spec_controller_lean_prefill"      # no draft prefill while no batch size speculates
SYNC_DRAFT_KEY = "spec_controller_sync_draft"          # off batches also run the draft's extend
DRAFT_KV_KEY = "spec_controller_draft_kv"              # the plugin writes the draft's KV while off
DRAFT_KV_GRAPH_KEY = "spec_controller_draft_kv_graph"  # ... from CUDA graphs (captured unless ENV_DRAFT_KV_GRAPH=0)
DRAFT_KV_COALESCE_KEY = "spec_controller_draft_kv_coalesce"   # ... coalesced (the graphs by default; see ENV_...)
DRAFT_KV_SIDE_KEY = "spec_controller_draft_kv_side"    # ... the graphs replayed beside the next forward (side stream)
LEAN_OFF_KEY = "spec_controller_lean_off"              # off batches' results from per-engine stubs (plugin/offstubs.py)
ALLOC_LOOP_KEY = "spec_controller_alloc_loop"          # SGLang 0.5.19's decode allocation loop (plugin/allocloop.py)
DEFER_PROMPT_KV_KEY = "spec_controller_defer_prompt_kv"  # a prompt's draft-KV write after the next forward (promptkv)
LEAN_RESOLVE_KEY = "spec_controller_lean_resolve"      # off batches' bonus tokens gathered alone (plugin/offresolve.py)
PLAIN_OFF_KEY = "spec_controller_plain_off"            # off batches as SGLang's non-speculative ones (plugin/plainoff.py)
OWN_KEYS = (THRESHOLD_KEY, FAST_OFF_KEY, SIM_ACC_KEY, LEAN_PREFILL_KEY, SYNC_DRAFT_KEY, DRAFT_KV_KEY, DRAFT_KV_GRAPH_KEY,
            DRAFT_KV_COALESCE_KEY, DRAFT_KV_SIDE_KEY, LEAN_OFF_KEY, ALLOC_LOOP_KEY, DEFER_PROMPT_KV_KEY, LEAN_RESOLVE_KEY,
            PLAIN_OFF_KEY)
EXPERIMENT_KEYS = (SIM_ACC_KEY,)
BOOL_KEYS = (FAST_OFF_KEY, LEAN_PREFILL_KEY, SYNC_DRAFT_KEY, DRAFT_KV_KEY, DRAFT_KV_GRAPH_KEY, DRAFT_KV_COALESCE_KEY,
             DRAFT_KV_SIDE_KEY, LEAN_OFF_KEY, ALLOC_LOOP_KEY, DEFER_PROMPT_KV_KEY, LEAN_RESOLVE_KEY, PLAIN_OFF_KEY)
# The engine's start-up choices (environment of the SGLang process; the daemon's [plugin] settings)
ENV_FAST_OFF = "SPEC_CONTROLLER_FAST_OFF"              # "0": off batches take SGLang's steps-0 path
ENV_SYNC_DRAFT = "SPEC_CONTROLLER_SYNC_DRAFT"          # "1": keep the draft in step while off
ENV_DRAFT_KV = "SPEC_CONTROLLER_DRAFT_KV"              # "1": write the draft's KV while off (plugin's own writer)
ENV_DRAFT_KV_GRAPH = "SPEC_CONTROLLER_DRAFT_KV_GRAPH"  # "0": ... eagerly instead of from CUDA graphs (graphs: TP 1 only)
ENV_DRAFT_KV_COALESCE = "SPEC_CONTROLLER_DRAFT_KV_COALESCE"  # "N": ... N off batches a write (graphs: 8; "0"/"1": each)
ENV_DRAFT_KV_SIDE = "SPEC_CONTROLLER_DRAFT_KV_SIDE"    # "0": the graphs' replays in line, not on a side stream
ENV_LEAN_PREFILL = "SPEC_CONTROLLER_LEAN_PREFILL"      # "0": prefills run the draft even while nothing speculates
ENV_LEAN_OFF = "SPEC_CONTROLLER_LEAN_OFF"              # "0": off batches' results made per batch (plugin/offstubs.py)
ENV_DEFER_PROMPT_KV = "SPEC_CONTROLLER_DEFER_PROMPT_KV"  # "1": prompts' draft-KV writes after the next forward (promptkv)
ENV_LEAN_RESOLVE = "SPEC_CONTROLLER_LEAN_RESOLVE"      # "1": off batches' bonus tokens gathered alone (offresolve)
# The largest batch size, and so threshold, anything here accepts (config, CLI, policies, guard, plugin): far above
# any --max-running-requests, one bound so that every boundary agrees with what the daemon may send.
MAX_BATCH = 65536


def validate_threshold(value: Any) -> str | None:
    # (is_integer: False for nan and inf, on which int() raised inside SGLang's scheduler: 1e999 in a JSON body)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not value.is_integer()):
        return f"{THRESHOLD_KEY} must be an integer, got {value!r}"
    if not 0 <= value <= MAX_BATCH:
        return f"{THRESHOLD_KEY}={int(value)} out of range (allowed 0 .. {MAX_BATCH})"
    return None


# --- what the plugin supports -----------------------------------------------------------------
SUPPORTED = ((0, 5, 14), (0, 5, 23))


def parse_version(text: str) -> tuple[int, int, int] | None:
    parts = []
    for piece in text.split(".")[:3]:
        digits = piece[:len(piece) - len(piece.lstrip("0123456789"))]    # leading digits: "17+cu130", "17rc1" are 17
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
    """Why the plugin must stay out of this engine, or None. Takes ServerArgs or a dict. Mirrors what
    SGLang's adaptive_unsupported_reason turns adaptive off for (0.5.14 ... 0.5.23; SGLang itself only
    warns and falls back to static speculation), plus the plugin's own limits."""
    get = (lambda k, d=None: server_args.get(k, d)) if isinstance(server_args, dict) \
        else (lambda k, d=None: getattr(server_args, k, d))
    if version is not None and (reason := version_unsupported_reason(version)):
        return reason
    algo = get("speculative_algorithm")
    # SGLang upper-cases the name and reads NEXTN as EAGLE (arg_groups/speculative_hook.py, 0.5.17 ... 0.5.23): a config
    # or launch command saying nextn or eagle3 runs EAGLE's worker (a Gemma4 assistant draft it makes FROZEN_KV_MTP,
    # which this check then refuses on the resolved ServerArgs at the engine's start)
    name = {"NEXTN": "EAGLE"}.get(algo.upper(), algo.upper()) if isinstance(algo, str) else algo
    if name not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm {'is not set' if algo is None else f'={algo}'} (EAGLE, EAGLE3 or NEXTN is supported)"
    if get("speculative_eagle_topk") not in (None, 1):
        return f"speculative_eagle_topk={get('speculative_eagle_topk')} (only topk=1 is supported)"
    for flag, why in (("enable_dp_attention", "DP attention"), ("enable_two_batch_overlap", "two-batch overlap"),
                      ("enable_pdmux", "pdmux"), ("enable_multi_layer_eagle", "multi-layer EAGLE")):
        if get(flag):
            return f"{flag}=True: SGLang's adaptive speculation does not support {why}"
    for key, limit in (("attn_dp_size", ATTN_DP_REFUSAL), ("pp_size", PP_REFUSAL)):
        if _count(get(key)) > 1:
            return f"{key}={get(key)}: {limit}"
    if "scale" in (get("ep_join_mode"), get("elastic_ep_join_mode")):    # (a config keyed by 0.5.23's flag name)
        return "ep_join_mode=scale: SGLang (0.5.22+) counts a scale-up joiner as attention DP, " + ATTN_DP_REFUSAL
    if not get("speculative_adaptive"):
        return "speculative_adaptive is off: the engine must start with it (the daemon does this)"
    return None


ATTN_DP_REFUSAL = "SGLang's adaptive speculation does not support attention DP"
PP_REFUSAL = "the plugin does not support pipeline parallelism (stages that host no draft have no adaptive state)"
PLATFORM_PLUGINS_GROUP = "sglang.srt.platforms"       # SGLang's entry-point group for out-of-tree platforms
PLATFORM_WORKER_FROM = (0, 5, 23)                      # from here such a platform may bring its own EAGLE worker


def _count(value: Any) -> int:
    try:
        return int(value or 1)
    except (TypeError, ValueError):
        return 1


def installed_platform_plugins() -> list[str]:
    """Out-of-tree SGLang platforms installed in this interpreter (entry points, nothing imported)."""
    from importlib.metadata import entry_points
    return sorted(ep.name for ep in entry_points(group=PLATFORM_PLUGINS_GROUP))


def platform_unsupported_reason(version: str, plugins: Sequence[str]) -> str | None:
    """0.5.23 turns adaptive off when the platform serves EAGLE with its own worker, which the plugin
    never hooks: refuse at start wherever such a platform is installed."""
    parsed = parse_version(version)
    if plugins and parsed is not None and parsed >= PLATFORM_WORKER_FROM:
        return (f"out-of-tree SGLang platform installed ({', '.join(plugins)}): SGLang {version} may serve EAGLE "
                "with the platform's own worker, where adaptive speculation (and this plugin) do not run")
    return None


def sglang_unsupported_reason(version: str, platforms: Sequence[str]) -> str | None:
    """The installed SGLang (its version, the out-of-tree platforms beside it) against what the plugin supports."""
    return version_unsupported_reason(version) or platform_unsupported_reason(version, platforms)
