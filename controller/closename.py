"""'did you mean' for a name a config got wrong: the daemon's config ([section] and key: controller.daemon.config) and
the guard's settings (controller.control.guard_config, which the simulator's evaluation reads too) give one hint, as
specctl's usage errors do ("did you mean one of 'x', 'y'?"). Standard library only."""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

CUTOFF = 0.6        # difflib.get_close_matches' default


def close_hint(name: str, known: Iterable[str], homes: Mapping[str, Iterable[str]] | None = None,
               renamed: Mapping[str, str] | None = None, brackets: bool = False, sections: Iterable[str] = ()) -> str:
    """The hint to put before a refusal's list of the known names ('' where none fits), ending '; ' or '? ':
    - `name` a key of other sections (homes: section -> its keys): "it belongs in [sim]; ", "it belongs in one of
      [sim], [policy]; " (first: `speed` in [policy] is [sim]'s key, not a typo of [policy]'s `seed`);
    - else `name` one of `sections`: "[storage] is a section of its own; " (not 'trace', close to `storage`);
    - else the closest of `known`, every one as close as the closest: "did you mean 'speed'? ", "did you mean one of
      'metrics_port', 'metrics_addr'? " (get_close_matches(n=1) named one of two equals: a guess, half the time wrong);
      `renamed` (an old name -> its new one) is matched too, and named by its new name.
    brackets: names written as sections, [control]."""
    if where := [section for section, keys in (homes or {}).items() if name in keys]:
        return f"it belongs in {_listed([f'[{s}]' for s in where])}; "
    if name in sections:
        return f"[{name}] is a section of its own; "
    matcher, score = difflib.SequenceMatcher(), {}
    matcher.set_seq2(name)              # (as get_close_matches scores)
    for candidate in [*known, *(renamed or {})]:
        matcher.set_seq1(candidate)
        if (ratio := matcher.ratio()) >= CUTOFF:
            new = (renamed or {}).get(candidate, candidate)
            score[new] = max(score.get(new, 0.0), ratio)
    best = max(score.values(), default=None)
    close = [f"[{n}]" if brackets else repr(n) for n, ratio in score.items() if ratio == best]
    return f"did you mean {_listed(close)}? " if close else ""


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"one of {', '.join(names)}"
