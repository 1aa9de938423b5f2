"""SGLang's process tied to the daemon's life: outside systemd (which stops the whole unit) a daemon killed with
SIGKILL or by the OOM killer would leave SGLang running, holding the GPU and the port the next daemon needs."""
from __future__ import annotations

import os
import sys

# Run by the daemon's own interpreter (-I: no PYTHONPATH or user site of [sglang.env] in its way) between the fork
# and SGLang: PR_SET_PDEATHSIG (1) asks SIGTERM (15) once the daemon's thread that started it is gone (the main thread,
# for the daemon's life), kept across the exec; a daemon already gone by then is checked after (exit 70); then the
# command replaces it in the same process (the PID the daemon signals and waits on).
BOUND = ("import ctypes, os, sys\n"
         "ctypes.CDLL(None, use_errno=True).prctl(1, 15)\n"
         "os.getppid() == int(sys.argv[1]) or sys.exit(70)\n"
         "try:\n"
         "    os.execvp(sys.argv[2], sys.argv[2:])\n"
         "except OSError as e:\n"
         "    sys.exit(f'spec-controller: cannot run {sys.argv[2]}: {e.strerror}')\n")


def bound_to_daemon(cmd: list[str]) -> list[str]:
    """`cmd` run so that it gets SIGTERM when the daemon dies (Linux; elsewhere `cmd` as it is)."""
    if not sys.platform.startswith("linux"):
        return list(cmd)
    return [sys.executable, "-I", "-c", BOUND, str(os.getpid()), *cmd]
