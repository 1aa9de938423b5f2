"""The wire format between the SGLang plugin (rank 0) and the daemon: tiny fixed structs over zmq."""
from __future__ import annotations

import struct
from typing import Mapping

ENV_ADDRESS = "SPEC_CONTROLLER_TELEMETRY"          # e.g. ipc:///run/spec-controller/telemetry.ipc
ENV_INITIAL_THRESHOLD = "SPEC_CONTROLLER_INITIAL_THRESHOLD"

SAMPLE = struct.Struct("<BdIHIdB")       # kind=1, t, batch size, steps, tokens, step s, decode-only
STATS_FIELDS = ("decisions", "decision_ns",            # routing decisions and their total time
                "switches", "switch_ns",                 # those that switched SGLang's state, their time
                "sent", "dropped",                       # samples sent / dropped at a full queue
                "telemetry_calls", "telemetry_ns",       # time spent producing and sending samples
                "fast_off_batches", "fast_off_graph_batches", "fast_off_cpu_ns",   # the fast off path
                "off_fallbacks")                         # off batches that took SGLang's steps-0 path
STATS = struct.Struct("<B" + "Q" * len(STATS_FIELDS) + "B")   # kind=2, the counters, the off path in use
KIND_SAMPLE, KIND_STATS = 1, 2
OFF_PATHS = ("steps-0", "fast", "steps-0 (fast path switched off)")


def pack_sample(t: float, batch_size: int, steps: int, tokens: int, step_s: float, decode_only: bool) -> bytes:
    return SAMPLE.pack(KIND_SAMPLE, t, batch_size, steps, tokens, step_s, decode_only)


def encode_stats(counters: Mapping[str, int], off_path: int = 0) -> bytes:
    """The plugin's counters (STATS_FIELDS; missing ones are 0) and OFF_PATHS[off_path]."""
    return STATS.pack(KIND_STATS, *(int(counters.get(k, 0)) for k in STATS_FIELDS), off_path)


_sample_type = None     # policies.types.Sample, bound on the daemon's first decode


def decode(msg: bytes):
    """A list of Samples (the plugin sends several per message), or a dict of plugin counters;
    ValueError on anything else.
    (policies is imported on first use, not at the top: the plugin side imports this module
    inside every SGLang process and must stay light; and not on every call: this is the ingest path.)"""
    global _sample_type
    if msg and msg[0] == KIND_SAMPLE and len(msg) % SAMPLE.size == 0:
        if _sample_type is None:
            from policies.types import Sample
            _sample_type = Sample
        samples = []
        for kind, t, bs, steps, tokens, step_s, decode_only in SAMPLE.iter_unpack(msg):
            if kind != KIND_SAMPLE:
                raise ValueError("corrupt telemetry message (a sample without its kind byte)")
            samples.append(_sample_type(t, bs, steps, tokens, step_s, bool(decode_only)))
        return samples
    if len(msg) == STATS.size and msg[0] == KIND_STATS:
        values = STATS.unpack(msg)
        path = values[-1]
        return {**dict(zip(STATS_FIELDS, values[1:-1])), "off_path": OFF_PATHS[path] if path < len(OFF_PATHS) else "?"}
    raise ValueError(f"unknown telemetry message ({len(msg)} bytes)")
