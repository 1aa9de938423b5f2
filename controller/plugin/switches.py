"""SGLang's adaptive state switch, used the plugin's way: whenever the batch size crosses the
threshold, possibly every few batches (SGLang's own EMA switches at most once per interval).

Two side effects of a switch in SGLang 0.5.17+ that this rate turns into problems, and their
containment (measured cost of a switch on an H200: ~0.4 ms CPU, bench/results/h200-2026-11-29c):
- `apply_runtime_state` records each switch in `RuntimeContext._overrides_log` (provenance for
  `get_internal_state`, which replays the whole list) and nothing trims it: one entry per switch
  for the life of the process. `SwitchLogTrimmer` keeps only the newest switch entry.
- it logs an INFO line per switch on TP rank 0; the plugin counts switches instead
  (`specctl status`: `plugin cost: ... per state switch`), so `quiet_switch_lines` drops that line.
"""
from __future__ import annotations

import logging
from typing import Any

ADAPTIVE_SOURCE = "adaptive_spec.restore"          # the override source apply_runtime_state uses
SWITCH_LINE = "Switch adaptive runtime state"
WORKER_LOGGER = "sglang.srt.speculative.eagle_worker_v2"

log = logging.getLogger("spec_controller.plugin")


class SwitchLogTrimmer:
    """After each switch, drop the previous switch's entry from the override log. The resolved
    configuration is unchanged (a later entry for the same fields wins anyway) and the list stays
    bounded by the other, rare, overrides."""

    def __init__(self, context: Any):
        self.context = context
        self.last: tuple | None = None
        self.removed = 0

    @classmethod
    def for_this_process(cls) -> SwitchLogTrimmer | None:
        """None where switches leave no log (0.5.14 writes server_args directly)."""
        try:
            from sglang.srt.runtime_context import get_context
            context = get_context()
        except Exception:
            return None
        return cls(context) if isinstance(getattr(context, "_overrides_log", None), list) else None

    def after_switch(self) -> None:
        entries = self.context._overrides_log          # re-read: a republish replaces the list
        if not entries or entries[-1][0] != ADAPTIVE_SOURCE:
            return
        previous, self.last = self.last, entries[-1]
        if previous is None or not previous[1].keys() <= self.last[1].keys():
            return
        for i in range(len(entries) - 2, -1, -1):      # normally the entry right before
            if entries[i] is previous:
                del entries[i]
                if self.removed == 0:
                    log.info("spec-controller: trimming SGLang's override log of superseded adaptive switches")
                self.removed += 1
                return


class _DropSwitchLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(SWITCH_LINE)


_FILTER = _DropSwitchLines()


def quiet_switch_lines() -> None:
    """Idempotent: the same filter object is added at most once."""
    logging.getLogger(WORKER_LOGGER).addFilter(_FILTER)
