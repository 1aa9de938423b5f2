"""helper-173's mutation pass z over the lines changed since 9b36d41 (bench/results/mutation-today-2026-12-07z.md):
intake's Undecodable.lossy, the engine stop's DropWatch.connected, setpairs, numtext (trimmed, not_a_number, shown),
clients.Slot.writing, migrations.V1_COLUMNS and db.NotOurs, specctl's client (ANSWERS, MAX_HEAD), paths.denied_step,
queries.unstopped_run, configdiff.given_causes and Room.set_floor. A test for each surviving mutant that is not
equivalent, named by its id. No wall-clock timing: clocks are given."""
from __future__ import annotations

import pytest


def test_shown_depth_ignored_a_value_nested_past_eight_levels_is_cut_not_spelled_as_python():
    # mutant nt-shown-depth-ignored (`if depth and isinstance(...)` -> `if isinstance(...)`) survived, and showed a
    # defect: past its 8 levels shown() fell back to repr(), Python's spelling (None, True) of what the client wrote as
    # null / true; now cut with '...' there, as a list past 20 items is
    from controller.numtext import shown
    from policies import PolicyError, make_policy
    assert shown({"c": [[[[[[[None]]]]]]]}) == "{'c': [[[[[[[null]]]]]]]}"      # (8 levels: spelled whole)
    assert shown({"c": [[[[[[[[[None]]]]]]]]]}) == "{'c': [[[[[[[[...]]]]]]]]}"
    assert shown([[[[[[[[[True, {"k": None}]]]]]]]]]) == "[[[[[[[[[...]]]]]]]]]"
    with pytest.raises(PolicyError) as e:
        make_policy("ucb", {"c": [[[[[[[[[None]]]]]]]]]})
    assert "None" not in str(e.value) and "c=[[[[[[[[[...]]]]]]]]] is not a number" in str(e.value)
