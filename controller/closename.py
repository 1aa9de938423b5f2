"""'did you mean' for a name a config got wrong: the daemon's config ([section] and key: controller.daemon.config) and
the guard's settings (controller.control.guard_config, which the simulator's evaluation reads too) give one hint, as
specctl's usage errors do. Standard library only."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_hint(name: str, known: Iterable[str], brackets: bool = False) -> str:
    """The hint to put before a refusal's list of the known names, 'did you mean 'speed'? ' ('' where none is close).
    brackets: names written as sections, [control]."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {f'[{close[0]}]' if brackets else repr(close[0])}? " if close else ""
