"""sd_notify over $NOTIFY_SOCKET (a datagram socket); no dependency, never raises."""
from __future__ import annotations

import math
import os
import socket
from typing import Any, Mapping

BRING_UP_S = 120.0      # systemd's start timeout covers ready_timeout_s plus this (ingest, socket, jobs)
MAX_EXTEND_S = 365 * 86400.0     # a ready_timeout_s of inf (no limit of its own): systemd's start waits a year


def extend_timeout_usec(ready_timeout_s: float) -> int | None:
    """EXTEND_TIMEOUT_USEC's value for a start that waits ready_timeout_s for the engine (None: NaN, no
    extension). Finite and capped: int(inf) raised, and the daemon refused to start with `ready_timeout_s = inf`,
    which the engine's wait itself takes as no limit."""
    if math.isnan(ready_timeout_s):
        return None
    return int(min(max(ready_timeout_s, 0.0) + BRING_UP_S, MAX_EXTEND_S) * 1e6)


def status_text(threshold: int, pinned: bool, policy: str, window: Mapping[str, Any]) -> str:
    """The STATUS= line `systemctl status` shows: what specctl status's first lines say, in its words (it read
    'accept None, tok/s 3663.4', Python's None where no batch had speculated or no sample arrived)."""
    head = f"threshold {threshold}{' (pinned)' if pinned else ''}, policy {policy}; last {window['window_s']:g} s: "
    if window.get("tok_per_s") is None:
        return head + "no samples"
    accept = window.get("mean_accept_length")
    return head + (f"accept length {accept:.2f}" if accept is not None else "no speculative batch") + \
        f", {window['tok_per_s']:,.0f} tok/s"


def sd_notify(message: str) -> bool:
    """Send one notification ('READY=1', 'STATUS=...', 'WATCHDOG=1', 'STOPPING=1')."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]          # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.setblocking(False)          # a reader that stalls must never stall the control loop
            s.connect(addr)
            s.send(message.encode())
        return True
    except OSError:
        return False

