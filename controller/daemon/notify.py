"""sd_notify over $NOTIFY_SOCKET (a datagram socket); no dependency, never raises."""
from __future__ import annotations

import os
import socket


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


def watchdog_interval_s() -> float | None:
    """Half of WatchdogSec when systemd asked for pings (WATCHDOG_USEC), for this PID."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 2e6
    except ValueError:
        return None
