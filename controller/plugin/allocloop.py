"""SGLang 0.5.19's fix of spec-v2's decode allocation loop, carried to the releases before it. Runs inside SGLang's
scheduler, once per decode batch of a speculative engine (speculating or off).

Why: in 0.5.16-0.5.18 `alloc_for_spec_decode` ends with
    for i, req in enumerate(reqs): req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, int(nxt_kv_lens_cpu[i]))
indexing a CPU tensor once per request (~2.3 us each: 0.30 ms at batch 128 on this project's CPU against 0.04 ms
from a list). An engine without speculation has no such loop, so its scheduler does less per decode batch; under
continuous arrivals that CPU is on the critical path (bench/results/h200-2026-12-03e: the off engine's schedule CPU
per decode batch 1.3-1.6 ms against 0.7-0.8 at C=128). 0.5.19 reads `nxt_kv_lens_cpu.tolist()` instead.

How: SGLang's own function runs, given a stand-in for `reqs` that has its length (the only other use of `reqs`,
the kernel's batch size) but no items, so its loop does nothing; the loop then runs here over the list. Only where
the function's source is the audited text (AUDITED, the digest of 0.5.16-0.5.18's, checked at the first call);
anything else, or SPEC_CONTROLLER_ALLOC_LOOP=0, leaves SGLang's function as it is (`spec_controller_alloc_loop`
switches it at run time, to measure both in one engine).
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import logging
import textwrap
from typing import Any, Callable, Iterator, Mapping

from ..envwords import ALLOC_LOOP_ENV
from .support import switch_on

TARGET = "sglang.srt.mem_cache.allocation.alloc_for_spec_decode"
ENV = ALLOC_LOOP_ENV
# sha1 of ast.unparse(the function) with ' for ": 0.5.16, 0.5.17 and 0.5.18 (tests/test_allocloop.py reads the wheels)
AUDITED = frozenset({"d8e636c18c5c8027b40873096fe0c63a4b3a8c36"})
RELEASES = ((0, 5, 16), (0, 5, 18))      # registered for these (0.5.14-0.5.15 lack the function, 0.5.19+ are fixed)

log = logging.getLogger("spec_controller.plugin")


def wanted(env: Mapping[str, str], version: tuple[int, int, int] | None) -> bool:
    """Register the hook? For the releases with the slow loop, unless the environment turns it off."""
    return switch_on(env, ENV) and version is not None and RELEASES[0] <= version[:3] <= RELEASES[1]


def text_digest(text: str) -> str:
    """The digest AUDITED holds of a function's text as tests/sglang_wheels.Source.text renders it."""
    return hashlib.sha1(text.encode()).hexdigest()


def source_digest(fn: Callable) -> str:
    """text_digest of a live function, rendered as Source.text renders a wheel's (ast.unparse, ' for ")."""
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    return text_digest(ast.unparse(node).replace('"', "'"))


class _LengthOnly:
    """len() of the batch's requests, no items: SGLang's loop over them does nothing."""
    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Any]:
        return iter(())


class AllocLoop:
    """The hook and its state: registered or not (Plugin.hooks), the verdict on the live function, the switch."""

    def __init__(self, registered: bool = False) -> None:
        self.registered = registered         # Plugin.hooks() registers `around` (wanted(): decided at start)
        self.applies: bool | None = None     # decided at the first call, from the function's source
        self.enabled = True                  # run-time switch (contract.ALLOC_LOOP_KEY)
        self.batches = 0

    def around(self, original: Callable, *args: Any, **kwargs: Any) -> Any:
        """AROUND alloc_for_spec_decode (reqs and nxt_kv_lens_cpu are keyword-only there)."""
        if self.applies is None:
            self.applies = self._check(original)
        if not (self.applies and self.enabled):
            return original(*args, **kwargs)
        reqs = kwargs["reqs"]
        kwargs["reqs"] = _LengthOnly(len(reqs))      # this call's own dict: no copy on the scheduler's path
        out = original(*args, **kwargs)
        for req, n in zip(reqs, kwargs["nxt_kv_lens_cpu"].tolist(), strict=True):
            if n > req.kv.kv_allocated_len:
                req.kv.kv_allocated_len = n
        self.batches += 1
        return out

    @staticmethod
    def _check(original: Callable) -> bool:
        if inspect.unwrap(original) is not original:   # another plugin's wrapper: getsource would read through it
            log.info("spec-controller: decode allocation loop left as SGLang's (another hook wraps it)")
            return False
        try:
            digest = source_digest(original)
        except Exception as e:            # no source (a frozen install): SGLang's function as it is
            log.info("spec-controller: decode allocation loop left as SGLang's (source unreadable: %s)", e)
            return False
        if digest not in AUDITED:
            log.info("spec-controller: decode allocation loop left as SGLang's (not the audited 0.5.16-0.5.18 text)")
            return False
        log.info("spec-controller: spec-v2 decode allocation loop reads a list (SGLang 0.5.19's fix)")
        return True
