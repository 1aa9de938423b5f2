"""'did you mean' for a name a config got wrong: the daemon's config ([section] and key: controller.daemon.config) and
the guard's settings (controller.control.guard_config, which the simulator's evaluation reads too) give one hint, as
specctl's usage errors do. Standard library only."""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping


def close_hint(name: str, known: Iterable[str], homes: Mapping[str, Iterable[str]] | None = None,
               brackets: bool = False) -> str:
    """The hint to put before a refusal's list of the known names ('' where none fits), ending '; ' or '? ':
    - `name` a key of other sections (homes: section -> its keys): "it belongs in [sim]; ", "in one of [sim], [policy]; "
      (first: `speed` in [policy] is [sim]'s key, not a typo of [policy]'s `seed`);
    - else the closest of `known`: "did you mean 'speed'? ". brackets: names written as sections, [control]."""
    if where := [section for section, keys in (homes or {}).items() if name in keys]:
        return f"it belongs in {_listed([f'[{s}]' for s in where])}; "
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {f'[{close[0]}]' if brackets else repr(close[0])}? " if close else ""


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"one of {', '.join(names)}"
