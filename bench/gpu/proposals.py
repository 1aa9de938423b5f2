"""Bench-only SGLang plugin: what the EAGLE draft proposed and what the target accepted, verify by verify, for
issue 12 item 3 (does a request that lives through off -> on draft as a request that was always on?).

Installed by bench/gpu/common.sh's `proposals_plugin` (a module and a dist-info with an `sglang.srt.plugins`
entry point in /tmp/site) and active only where SPEC_PROPOSALS=PREFIX is set. It wraps
EAGLEWorkerV2.verify(self, batch, grammar_barrier=None) (SGLang 0.5.17: called once per speculative decode
batch by forward_batch_generation, after the draft; the plugin's fast off path never calls it, SGLang's
steps-0 path does, with steps 0 and one token a row). Per request per verify one JSON line in
PREFIX.PID.jsonl:
  {"rid", "seq_len", "steps", "draft": [bonus, d1, ..], "accept": n, "target": [..]}
seq_len: tokens in the KV cache before this verify (spec v2: the bonus token sits at position seq_len);
draft: the request's row of spec_info.draft_token (its first entry the bonus token, the last step's verified
token; topk 1: then the draft chain); accept: accept_lens, the bonus included (1 .. steps + 1);
target: the target's greedy token after each draft position (next_token_ids), where its size fits.
It reads the tensors with .tolist() (a GPU sync on every verify: bench only, meant for batch size 1) and
writes every line at once (line-buffered), so that a server stopped by a signal loses nothing. TP rank 0
only. A failure to record is logged once and never reaches the engine.
"""
from __future__ import annotations

import json
import logging
import os

VERIFY = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.verify"
log = logging.getLogger("spec_proposals")
_loaded: list = []          # the Recorder of this process once load() registered it (idempotent)


def _list(x) -> list:
    if x is None:
        return []
    return x.tolist() if hasattr(x, "tolist") else list(x)


class Recorder:
    def __init__(self, prefix: str):
        self.prefix = prefix
        self.file = None
        self.failed = False
        self.rows = 0

    def path(self) -> str:
        return f"{self.prefix}.{os.getpid()}.jsonl"

    def write(self, row: dict) -> None:
        if self.file is None:            # opened by the process that verifies (the scheduler), not the loader
            self.file = open(self.path(), "a", buffering=1)
        self.file.write(json.dumps(row) + "\n")
        self.rows += 1

    def before(self, worker, batch) -> dict | None:
        """What the verify is given, read before it runs (it rebinds batch fields)."""
        if getattr(getattr(worker, "ps", None), "tp_rank", 0) not in (0, None):
            return None
        mode = getattr(batch, "forward_mode", None)
        if mode is not None and getattr(mode, "is_idle", lambda: False)():
            return None
        rids = [getattr(r, "rid", None) for r in (getattr(batch, "reqs", None) or [])]
        if not rids:
            return None
        seq_lens = [int(v) for v in _list(batch.seq_lens)]
        draft = [int(v) for v in _list(getattr(batch.spec_info, "draft_token", None))]
        return {"rids": rids, "seq_lens": seq_lens, "draft": draft,
                "steps": int(getattr(worker, "speculative_num_steps", -1))}

    def after(self, seen: dict, result) -> None:
        rids, bs = seen["rids"], len(seen["rids"])
        accept = [int(v) for v in _list(getattr(result, "accept_lens", None))]
        target = [int(v) for v in _list(getattr(result, "next_token_ids", None))]
        width = len(seen["draft"]) // bs if bs else 0
        for i, rid in enumerate(rids):
            row = {"rid": rid, "seq_len": seen["seq_lens"][i] if i < len(seen["seq_lens"]) else None,
                   "steps": seen["steps"], "draft": seen["draft"][i * width:(i + 1) * width],
                   "accept": accept[i] if i < len(accept) else None}
            if width and len(target) == bs * width:
                row["target"] = target[i * width:(i + 1) * width]
            self.write(row)

    def verify(self, original, worker, batch, *args, **kwargs):
        """AROUND EAGLEWorkerV2.verify(self, batch, grammar_barrier=None)."""
        seen = None
        if not self.failed:
            try:
                seen = self.before(worker, batch)
            except Exception as e:       # never the engine's problem
                self.fail(e)
        result = original(worker, batch, *args, **kwargs)
        if seen is not None:
            try:
                self.after(seen, result)
            except Exception as e:
                self.fail(e)
        return result

    def fail(self, e: Exception) -> None:
        self.failed = True
        log.warning("spec_proposals: recording stopped after %d rows: %r", self.rows, e)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def load() -> None:
    prefix = os.environ.get("SPEC_PROPOSALS")
    if not prefix or _loaded:
        return
    import atexit

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    rec = Recorder(prefix)
    HookRegistry.register(VERIFY, rec.verify, HookType.AROUND)
    atexit.register(rec.close)
    _loaded.append(rec)
