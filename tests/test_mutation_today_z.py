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


def test_section_ignored_a_db_flag_that_makes_the_socket_the_databases_path_is_named(short_tmp, monkeypatch):
    # mutant cd-section-ignored (`f"[{at[0]}]" in message and` dropped) survived, and showed a defect: the one refusal
    # that a value of another section causes, '[control] socket S is the database's own path', named [control] only:
    # `--db S` against a config file's socket S said nothing of the --db (the operator was sent to the file's socket),
    # and `--db S --socket S` named the --socket alone. The refusal names [storage] db now
    from click.testing import CliRunner

    from controller.daemon.main import main
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(short_tmp))
    path = short_tmp / "x"
    config = short_tmp / "c.toml"
    config.write_text(f'[control]\nsocket = "{path}"\n')
    said = f"spec-controller: config: [control] socket {path} is the database's own path ([storage] db); give another"
    for args, given in ((["--config", str(config), "--db", str(path)], "--db"),
                        (["--db", str(path), "--socket", str(path)], "--db, --socket")):
        res = CliRunner().invoke(main, ["config", "check", *args])
        assert res.exit_code == 2 and res.output.strip() == f"{said} (given on the command line: {given})", res.output
