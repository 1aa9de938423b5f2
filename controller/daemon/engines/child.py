"""SGLang's process as the daemon launches it: where it will listen checked free first, and tied to the daemon's life
(outside systemd, which stops the whole unit, a daemon killed with SIGKILL or by the OOM killer would leave SGLang
running, holding the GPU and the port the next daemon needs)."""
from __future__ import annotations

import errno
import os
import sys
import threading

from ...contract import MAX_TELEMETRY_MESSAGE
from ...paths import umask

# Run by the daemon's own interpreter (-I -S: no PYTHONPATH, user site or .pth code of SGLang's environment in its way)
# between the fork and SGLang: PR_SET_PDEATHSIG (1) asks SIGKILL (9) once the daemon's thread that started it is gone,
# kept across the exec (SIGKILL, not SIGTERM: SGLang drains a busy server on SIGTERM for as long as requests keep
# coming, unsteered; its schedulers die with it, freeing the GPU). Best effort: the exec happens whatever prctl did.
# A daemon already gone is checked after (exit 70); SIGPIPE / SIGXFSZ back to their defaults (Python ignores them
# and an exec keeps what is ignored); then the command replaces the stub in the same process (the PID the daemon
# signals and waits on), or one line and exit 127 / 126 (the shell's codes: not found / not executable).
BOUND = ("import os, signal, sys\n"
         "try:\n"
         "    import ctypes\n"
         "    ctypes.CDLL(None, use_errno=True).prctl(1, 9)\n"
         "except Exception:\n"
         "    pass\n"
         "os.getppid() == int(sys.argv[1]) or sys.exit(70)\n"
         "for s in (signal.SIGPIPE, signal.SIGXFSZ):\n"
         "    signal.signal(s, signal.SIG_DFL)\n"
         "try:\n"
         "    os.execvp(sys.argv[2], sys.argv[2:])\n"
         "except OSError as e:\n"
         "    print(f'spec-controller: cannot run {sys.argv[2]}: {e.strerror}', file=sys.stderr)\n"
         "    sys.exit(127 if isinstance(e, FileNotFoundError) else 126)\n")
NOT_STARTED = (126, 127)
USAGE = 2                  # argparse's exit status: a launch flag or value refused
SGLANG_PORT = 30000        # [sglang] port's default (SGLang's own)


def bound_to_daemon(cmd: list[str]) -> list[str]:
    """`cmd` run so that it is killed when the daemon dies. Only from the main thread: the kernel's signal follows the
    thread that started the child, and a thread that ends would take SGLang with it (elsewhere, and off Linux or
    without the daemon's interpreter: `cmd` as it is)."""
    if not sys.platform.startswith("linux") or not sys.executable or \
            threading.current_thread() is not threading.main_thread():
        return list(cmd)
    return [sys.executable, "-I", "-S", "-c", BOUND, str(os.getpid()), *cmd]


def port_reason(host: str, port: int) -> str | None:
    """Why SGLang could not serve at host:port: something holds it already (SGLang would then fail to bind and the
    daemon's readiness probe could be answered by the other server: outside systemd, an SGLang left running by a
    daemon that was killed keeps the GPU and the port; systemd stops the whole unit), or the address is not this
    host's."""
    from ..metrics import check_port_free
    try:
        check_port_free(port, host)
    except OSError as e:
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if e.errno == errno.EADDRINUSE:
            return (f"SGLang's port {where} is in use: another server holds it, e.g. an SGLang an earlier daemon left "
                    f"running (`ss -ltnp 'sport = :{port}'` names its PID); stop that one or set [sglang] port")
        return f"SGLang's address {where} cannot be bound ({e.strerror or e}): check [sglang] host and port"
    return None


def telemetry_pull(address: str, hwm: int = 100000):
    """The daemon's end of the plugin's telemetry: a zmq PULL bound at address. A message over
    contract.MAX_TELEMETRY_MESSAGE (1 KiB: RCVHWM of them, ~100 MB, at most in memory; it was 64 KiB, ~6 GiB) drops its
    sender's connection before it is read (DropWatch counts it). An ipc socket is the daemon's user's alone (0600): only
    the SGLang it starts, as that user, sends on it. Made under the unit's UMask (0007) it was 0770, and any operator in
    the service's group pushed 1.9 GB of forged samples into the daemon's memory in 3 s (helper-133)."""
    import zmq
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, hwm)
    pull.setsockopt(zmq.MAXMSGSIZE, MAX_TELEMETRY_MESSAGE)
    with umask(0o177):                  # (the socket is made by the bind: never reachable by the group, even for a moment)
        pull.bind(address)
    return pull


class DropWatch:
    """The connections zmq dropped unread under `pull` (a message over MAX_TELEMETRY_MESSAGE, or a sender's frames not
    of zmq's protocol): they were lost without a word, a plugin whose messages outgrew the cap sending nothing that
    arrived. zmq says only 'disconnected', as for a sender that exits, and names no connection in a handshake's outcome
    (whose order is not the connections': a probe's failure came before the sender's success). So it counts: an engine
    has one sender (the plugin's rank 0), which zmq reconnects at once when the daemon's side drops it; every handshake
    passed after the first is such a reconnect, where a connection that had passed one has gone (disconnects less
    failed handshakes: another daemon's start probing the socket, sockprobe, fails its handshake and is no sender,
    helper-162; an engine's exit is a disconnect no handshake follows)."""
    OUTCOMES = ("EVENT_HANDSHAKE_SUCCEEDED", "EVENT_HANDSHAKE_FAILED_NO_DETAIL", "EVENT_HANDSHAKE_FAILED_PROTOCOL",
                "EVENT_HANDSHAKE_FAILED_AUTH")

    def __init__(self, pull):
        import zmq
        events = zmq.EVENT_DISCONNECTED
        for name in self.OUTCOMES:
            events |= getattr(zmq, name)
        self.monitor = pull.get_monitor_socket(events)
        self._pull = pull
        self.passed = self.failed = self.gone = self.counted = 0

    def dropped(self) -> int:
        """The drops its events prove since the last call (read without waiting: call when the monitor is readable)."""
        import zmq
        from zmq.utils.monitor import recv_monitor_message
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor, zmq.NOBLOCK)["event"]
            if event == zmq.EVENT_DISCONNECTED:
                self.gone += 1
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.passed += 1
            else:
                self.failed += 1
        proven = max(0, min(self.passed - 1, self.gone - self.failed))
        new, self.counted = max(0, proven - self.counted), max(self.counted, proven)
        return new

    def connected(self) -> int:
        """Senders whose connection is up, as far as the events read so far say (handshakes passed, less the
        disconnects of connections that had passed one)."""
        return max(0, self.passed - max(0, self.gone - self.failed))

    def close(self) -> None:
        self._pull.disable_monitor()
        self.monitor.close(linger=0)
