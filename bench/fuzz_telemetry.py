"""Boundary 2 of bench/fuzz.py: telemetry messages as the engine's receiver gets them, in process.

Random bytes, hostile field values packed into the wire struct, and byte-mutated valid sample and stats messages go
through contract.decode, then (samples) the daemon's real Ingest with its SampleGate, a real ControlLoop with the
bandit policy and the real LiveStats, and a recording writer in place of SQLite; stats dicts go through specctl's
rendering of them. Invariants: decode raises ValueError or nothing (the receiver counts that as a bad message, any
other exception would kill its thread); every sample is counted as admitted or rejected by kind; only samples that
pass an independent sanity check (faultkit's BAD_ROWS, re-stated here) reach the policy or the writer; the loop's
observe and tick never raise (Ingest.errors stays 0)."""
from __future__ import annotations

import logging
import math
import random
import struct
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller import contract  # noqa: E402
from controller.cli.status import _plugin_lines  # noqa: E402
from controller.control.loop import ControlLoop  # noqa: E402
from controller.daemon.ingest import Ingest  # noqa: E402
from controller.daemon.intake import SampleGate, SteadyClock  # noqa: E402
from controller.daemon.livestats import LiveStats  # noqa: E402
from policies import make_policy  # noqa: E402

MAX_BS, K = 256, 4
T = [float("nan"), float("inf"), float("-inf"), -1.0, 0.0, 1e300, 5e-324]
STEP = [float("nan"), float("inf"), float("-inf"), 0.0, -1.0, 1e-6, 1e-5, 3600.0, 3600.5, 5e-324, 1e308]


class Recorder:
    """The writer, as Ingest uses it: the rows it would commit."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def samples(self, rows) -> bool:
        self.rows.extend(rows)
        return True


def sound(row: tuple) -> bool:
    """What a stored sample must be (t, batch size, steps, tokens, step s, decode-only), independent of intake.py."""
    t, bs, steps, tokens, step_s, decode_only = row
    return (all(type(v) is int for v in (bs, steps, tokens)) and math.isfinite(t) and 0 < bs <= MAX_BS
            and 0 <= steps <= K and bs <= tokens <= bs * (steps + 1) and 1e-5 <= step_s <= 3600
            and decode_only in (0, 1))


def sample_msg(rng: random.Random, now: float) -> bytes:
    """Several packed samples, each field valid most of the time (so that some pass and feed the loop), else hostile."""
    pick = lambda valid, hostile: valid if rng.random() < 0.85 else rng.choice(hostile)
    out = b""
    for _ in range(rng.randint(1, 6)):
        bs = pick(rng.randint(1, MAX_BS), [0, MAX_BS + 1, 65535, 2**32 - 1])
        steps = pick(rng.choice([0, rng.randint(1, K)]), [K + 1, 65535])
        tokens = pick(rng.randint(bs, bs * (steps + 1)), [bs - 1 if bs else 0, bs * (steps + 1) + 1, 0, 2**32 - 1])
        t = pick(now - rng.uniform(0, 0.5), [now - 2.0, now + 4.0, now + 6.0, now - 599.0, now - 700.0, *T])
        step_s = pick(rng.uniform(1e-4, 0.2), STEP)
        decode_only = pick(rng.randrange(2), [2, 255])
        out += contract.SAMPLE.pack(contract.KIND_SAMPLE, t, bs, steps, tokens % 2**32, step_s, decode_only)
    return out


def stats_msg(rng: random.Random) -> bytes:
    counters = {k: rng.choice([0, 1, rng.randrange(2**64), 2**64 - 1]) for k in contract.STATS_FIELDS}
    msg = contract.encode_stats(counters, rng.randrange(256), rng.randrange(256),
                                tuple(rng.randrange(65536) for _ in range(3)))
    roll = rng.random()
    if roll < 0.3:                                   # a plugin of another release: fewer or more counters
        n = rng.randint(1, contract.MAX_STATS_FIELDS + 2)
        msg = struct.pack("<B" + "Q" * n + "BB3H", contract.KIND_STATS, *(rng.randrange(2**64) for _ in range(n)),
                          rng.randrange(256), rng.randrange(256), *(rng.randrange(65536) for _ in range(3)))
    return msg


def mutate(rng: random.Random, msg: bytes) -> bytes:
    data = bytearray(msg)
    for _ in range(rng.randint(1, 3)):
        op, at = rng.randrange(4), rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 8, contract.SAMPLE.size])))
        elif op == 2:
            del data[at:at + rng.choice([1, 8, contract.SAMPLE.size])]
        else:
            data = data[:at]
    return bytes(data)


def message(rng: random.Random, now: float) -> tuple[str, bytes]:
    roll = rng.random()
    if roll < 0.15:
        return "random", bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 9, 31, 62, 100, 265, 266])))
    if roll < 0.5:
        return "samples", sample_msg(rng, now)
    if roll < 0.7:
        return "stats", stats_msg(rng)
    kind, msg = ("samples", sample_msg(rng, now)) if rng.random() < 0.6 else ("stats", stats_msg(rng))
    return f"mutated {kind}", mutate(rng, msg)


def run(seed: int, n: int) -> dict:
    rng = random.Random(seed)
    quiet = logging.getLogger("spec_controller")          # (ingest's reject warnings: counted, not printed)
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    violations: list[dict] = []
    engine_now = [1000.0]
    clock = SteadyClock(lambda: engine_now[0])
    gate = SampleGate(MAX_BS, K, clock)
    loop = ControlLoop(make_policy("bandit", max_batch_size=MAX_BS), initial_threshold=32)
    reached: list[tuple] = []
    observe = loop.observe
    loop.observe = lambda s: (reached.append(s.as_tuple()), observe(s))[1]     # what reaches the policy
    writer = Recorder()
    ingest = Ingest(threading.RLock(), loop, LiveStats(), writer, gate, 1 << 20)
    counts = {"messages": 0, "decode_refused": 0, "samples": 0, "stats": 0}
    kinds: dict[str, int] = {}

    def violated(kind: str, msg: bytes, problem: str) -> None:
        violations.append({"boundary": "telemetry", "kind": kind, "input": msg[:64].hex(), "problem": problem[:300]})

    for i in range(n):
        engine_now[0] += rng.choice([0.01] * 20 + [3.0, -2.0])          # the engine's clock steps back too
        kind, msg = message(rng, engine_now[0])
        kinds[kind] = kinds.get(kind, 0) + 1
        counts["messages"] += 1
        try:
            decoded = contract.decode(msg)
        except ValueError:
            counts["decode_refused"] += 1
            continue
        except Exception as e:                  # the receiver thread catches ValueError only: it would die
            violated(kind, msg, f"decode raised {type(e).__name__}: {e}")
            continue
        if isinstance(decoded, dict):
            counts["stats"] += 1
            bad = [k for k in contract.STATS_FIELDS if type(decoded.get(k)) is not int or decoded[k] < 0]
            if bad:
                violated(kind, msg, f"stats counters not non-negative ints: {bad[:3]}")
            try:
                _plugin_lines(decoded)
            except Exception as e:
                violated(kind, msg, f"specctl status rendering of the stats raised {type(e).__name__}: {e}")
            continue
        for s in decoded:
            counts["samples"] += 1
            try:
                ingest.on_sample(s)
            except Exception as e:
                violated(kind, msg, f"on_sample raised {type(e).__name__}: {e}")
        try:
            ingest.step(final=i % 7 == 0)
            if i % 20 == 0:
                loop.tick(clock.now())
        except Exception as e:
            violated(kind, msg, f"ingest/tick raised {type(e).__name__}: {e}")
    ingest.step(final=True)
    admitted = counts["samples"] - gate.rejected_total
    if ingest.errors:
        violations.append({"boundary": "telemetry", "kind": "ingest", "input": "",
                           "problem": f"{ingest.errors} admitted samples raised in the loop: {ingest.failing}"})
    if len(reached) != admitted - ingest.dropped or len(writer.rows) != len(reached):
        violations.append({"boundary": "telemetry", "kind": "count", "input": "", "problem":
                           f"{counts['samples']} samples, {gate.rejected_total} rejected, {len(reached)} observed, "
                           f"{len(writer.rows)} written"})
    for row in reached + writer.rows:
        if not sound(row):
            violations.append({"boundary": "telemetry", "kind": "leak", "input": repr(row),
                               "problem": "an unsound sample reached the policy or the writer"})
    return {"cases": kinds, "total": counts["messages"], "violations": violations,
            "detail": {**counts, "admitted": admitted, "rejected": dict(gate.rejected)}}
