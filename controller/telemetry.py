"""The wire format between the SGLang plugin (rank 0) and the daemon: tiny fixed structs over zmq."""
from __future__ import annotations

import struct

ENV_ADDRESS = "SPEC_CONTROLLER_TELEMETRY"          # e.g. ipc:///run/spec-controller/telemetry.ipc
ENV_INITIAL_THRESHOLD = "SPEC_CONTROLLER_INITIAL_THRESHOLD"

SAMPLE = struct.Struct("<BdIHIdB")       # kind=1, t, batch size, steps, tokens, step s, decode-only
STATS = struct.Struct("<BQQQQQQQB")      # kind=2, decisions, decision ns total, samples sent, dropped,
#                                         fast-off batches, of those on CUDA graphs, off batches that fell
#                                         back to SGLang's steps-0, off path (OFF_PATHS index)
KIND_SAMPLE, KIND_STATS = 1, 2
OFF_PATHS = ("steps-0", "fast", "steps-0 (fast path switched off)")


def pack_sample(t: float, batch_size: int, steps: int, tokens: int, step_s: float, decode_only: bool) -> bytes:
    return SAMPLE.pack(KIND_SAMPLE, t, batch_size, steps, tokens, step_s, decode_only)


def encode_stats(decisions: int, decision_ns: int, sent: int, dropped: int,
                 fast_batches: int = 0, fast_graph_batches: int = 0, off_fallbacks: int = 0, off_path: int = 0) -> bytes:
    return STATS.pack(KIND_STATS, decisions, decision_ns, sent, dropped, fast_batches, fast_graph_batches,
                      off_fallbacks, off_path)


def decode(msg: bytes):
    """A Sample, or a dict of plugin counters; ValueError on anything else.
    (policies is imported here, not at the top: the plugin side imports this module
    inside every SGLang process and must stay light.)"""
    from policies.types import Sample
    if len(msg) == SAMPLE.size and msg[0] == KIND_SAMPLE:
        _, t, bs, steps, tokens, step_s, decode_only = SAMPLE.unpack(msg)
        return Sample(t, bs, steps, tokens, step_s, bool(decode_only))
    if len(msg) == STATS.size and msg[0] == KIND_STATS:
        _, decisions, ns, sent, dropped, fast, graphs, fallbacks, path = STATS.unpack(msg)
        return {"decisions": decisions, "decision_ns": ns, "sent": sent, "dropped": dropped,
                "fast_off_batches": fast, "fast_off_graph_batches": graphs, "off_fallbacks": fallbacks,
                "off_path": OFF_PATHS[path] if path < len(OFF_PATHS) else "?"}
    raise ValueError(f"unknown telemetry message ({len(msg)} bytes)")
