"""The console scripts (pyproject's [project.scripts]): each imports its command's modules only inside, so that a
Ctrl-C while they still import (~0.3 s for spec-controller: click, SQLite, the daemon's modules) ends as a Ctrl-C
later does, "aborted" and exit 1, not a traceback (newcomer-146). Standard library only."""
from __future__ import annotations

import sys


def _aborted(prog: str) -> None:
    sys.stderr.write(f"{prog}: aborted\n")
    sys.exit(1)


def daemon() -> None:
    """spec-controller"""
    if sys.argv[1:2] == ["run"]:
        # A SIGHUP (a reload) while it still imports (~0.3 s) killed it without a word, and systemd counts SIGHUP a
        # clean exit: not restarted. Ignored until main.run, which keeps any from just before it reads the config
        # for Daemon._signals to reload (helper-153, helper-154).
        import signal
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        from .daemon.main import main
    except KeyboardInterrupt:
        _aborted("spec-controller")
    main()


def specctl() -> None:
    """specctl"""
    try:
        from .cli.main import cli
    except KeyboardInterrupt:
        _aborted("specctl")
    cli()
