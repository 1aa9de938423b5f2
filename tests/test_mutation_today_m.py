"""Tests for the gaps the mutation pass of 2026-12-06m found in the lines changed since ab4e8d1 (the daemon's own
files watched, threshold 0 read as never, a relative $XDG_STATE_HOME ignored, a config's byte-order mark refused,
bench/gpu/frontend.py; bench/results/mutation-today-2026-12-06m.md). Each test is named after the mutants it kills
(test_<id>_...). Each was checked red with its mutant applied and green on the original."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller import paths
from controller.cli.main import cli
from controller.daemon.config import load_config
from state.db import open_store
from tests.test_own_files import own_files as _own

ROOT = Path(__file__).resolve().parents[1]
FRONTEND = ROOT / "bench/gpu/frontend.py"
sys.path.insert(0, str(ROOT / "bench/gpu"))
from frontend import flag, outside  # noqa: E402


# --- daemon/ownfiles.py: what counts as removed, replaced or merely unreadable --------------------------------------


def test_of2_a_database_replaced_by_a_link_to_itself_is_replaced(tmp_path):
    """The database moved away and a symbolic link to it left at its path: not the file the daemon opened there (the
    database refuses to be opened through a link, so specctl and the restarted daemon would refuse it): `replaced`.
    Asked with stat (the link followed) it read as the same file."""
    files, db, _ = _own(tmp_path)
    moved = tmp_path / "moved.db"
    os.rename(db, moved)
    os.symlink(moved, db)
    assert files.changed() == f"database {db} was replaced under the daemon"


def test_of5_another_file_system_at_the_path_is_a_replacement_even_with_the_same_inode(tmp_path, monkeypatch):
    """A file system mounted over the state directory can hold a file of the same inode number: the device tells
    them apart (an injected lstat gives the same inode on another device)."""
    files, db, _ = _own(tmp_path)
    real = os.lstat

    def lstat(path, *a, **k):
        st = real(path, *a, **k)
        if Path(path) != db:
            return st
        fields = list(st[:10])
        fields[2] += 1                                   # st_dev
        return os.stat_result(fields)

    monkeypatch.setattr(os, "lstat", lstat)
    assert files.changed() == f"database {db} was replaced under the daemon"


def _refused(monkeypatch, path: Path) -> None:
    """lstat of `path` refused (a directory's mode changed; root cannot be refused for real, so injected)."""
    real = os.lstat

    def lstat(p, *a, **k):
        if Path(p) == path:
            raise PermissionError(13, "Permission denied", str(p))
        return real(p, *a, **k)

    monkeypatch.setattr(os, "lstat", lstat)


def test_of7_a_file_that_cannot_be_looked_at_is_not_called_removed(tmp_path, monkeypatch):
    files, db, _ = _own(tmp_path)
    _refused(monkeypatch, db)
    assert files.changed() is None


def test_of6_an_unreadable_file_does_not_hide_a_removed_one_after_it(tmp_path, monkeypatch):
    files, db, sock = _own(tmp_path)
    _refused(monkeypatch, db)
    sock.unlink()
    assert files.changed() == f"control socket {sock} was removed under the daemon"


def test_of12_with_both_removed_the_database_is_named(tmp_path):
    """`rm -rf` of the state directory: the first remembered file, the database, is the one named."""
    files, db, sock = _own(tmp_path)
    db.unlink()
    sock.unlink()
    assert files.changed() == f"database {db} was removed under the daemon"


# --- cli/status.py threshold_line: an unknown threshold is not 'never speculate' -----------------------------------
def test_st1_st5_an_empty_database_s_unknown_threshold_is_not_never_and_not_none(tmp_path):
    """Offline, a database no daemon has written a threshold into has none (None): shown '-', and not read as 0's
    'never speculate' (`not t`) nor as 'None' in the meaning (`{t}` unformatted)."""
    db = tmp_path / "empty.db"
    open_store(db).conn.close()
    res = CliRunner().invoke(cli, ["--socket", str(tmp_path / "none.sock"), "--db", str(db), "status"])
    assert res.exit_code == 3, res.output
    (line,) = [x for x in res.stdout.splitlines() if x.startswith("threshold:")]
    assert line.startswith("threshold:   -   ") and "never" not in line and "None" not in line, line


# --- paths.py user_state_dir: an absolute $XDG_STATE_HOME is taken as given ----------------------------------------
def test_pa5_an_absolute_xdg_state_home_through_a_link_is_kept_as_given(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "link"))
    assert paths.user_state_dir() == tmp_path / "link" / "spec-controller"


# --- daemon/config.py: only a leading byte-order mark is refused ---------------------------------------------------
def test_cf2_a_zero_width_no_break_space_inside_the_file_is_not_a_byte_order_mark(tmp_path):
    """U+FEFF is a BOM only at the start; later (here in a comment) it is a character TOML takes."""
    path = tmp_path / "config.toml"
    path.write_text("# speed\ufeff for the tests\n[sim]\nspeed = 10\n", encoding="utf-8")
    assert load_config(path)["sim"]["speed"] == 10


# --- bench/gpu/frontend.py ------------------------------------------------------------------------------------------
T0 = 1_796_557_000.123456


def _pair(label: str, level: int, repeat: int, t_start: float, wall: float | None, window: float) -> tuple[dict, dict]:
    key = {"label": label, "shape": "steady", "level": level, "repeat": repeat, "t_start": t_start}
    return {**key, "wall_ms": wall}, {**key, "window_ms": window, "kinds": {}}


def _level(outside_ms: list[float], level: int = 128, t0: float = T0) -> tuple[list[dict], list[dict]]:
    """One steady run per value, engine window 1540 ms, client wall 1540 + the value."""
    rows = [_pair("off" if i % 2 else "nospec", level, i // 2, t0 + 2.5 * i, 1540.0 + o, 1540.0)
            for i, o in enumerate(outside_ms)]
    return [r for r, _ in rows], [t for _, t in rows]


def test_fe3_a_steady_run_without_its_wall_is_left_out(tmp_path):
    results, timeline = _level([45.0, 46.0, 47.0])
    results[1]["wall_ms"] = None                        # the run failed: no client wall
    assert [r["outside_ms"] for r in outside(results, timeline)] == [45.0, 47.0]


def test_fe4_fe5_runs_are_matched_by_a_start_time_with_a_fraction():
    """time.time()'s start, copied into both files: matched (each side rounds it the same way)."""
    results, timeline = _level([45.0, 46.0, 47.0, 48.0])
    assert [r["outside_ms"] for r in outside(results, timeline)] == [45.0, 46.0, 47.0, 48.0]


def test_fe6_two_calls_runs_of_one_key_each_meet_their_own_window():
    """Two calls' files read together: the same label, level and repeat twice, told apart by their start."""
    a = _pair("off", 128, 0, T0, 1590.0, 1540.0)
    b = _pair("off", 128, 0, T0 + 600, 1990.0, 1940.0)
    got = outside([a[0], b[0]], [a[1], b[1]])
    assert [(r["window_ms"], r["outside_ms"]) for r in got] == [(1540.0, 50.0), (1940.0, 50.0)]


def test_fe9_the_time_outside_is_kept_to_a_tenth_of_a_ms():
    results, timeline = _level([45.26])
    assert outside(results, timeline)[0]["outside_ms"] == 45.3


def test_fe12_a_run_exactly_the_margin_above_the_median_is_not_a_stall():
    """`stall`: the outside time exceeds the level's median by margin_ms (strictly)."""
    runs = outside(*_level([40.0, 40.0, 40.0, 40.0, 40.0, 140.0, 140.1]))
    assert [r["stall"] for r in flag(runs, 100.0)] == [False] * 5 + [False, True]


def test_fe13_a_big_stall_does_not_hide_a_smaller_one():
    """The median, not the mean: a 2 s stall in the level must not lift the bar over a 200 ms one."""
    runs = outside(*_level([45.0, 45.0, 46.0, 46.0, 200.0, 2000.0]))
    assert [r["stall"] for r in flag(runs, 100.0)] == [False] * 4 + [True, True]


def test_fe16_the_margin_given_is_the_one_used():
    runs = outside(*_level([45.0, 45.0, 46.0, 46.0, 47.0, 446.0]))
    assert not any(r["stall"] for r in flag(runs, 500.0))
    assert [r["stall"] for r in flag(runs, 300.0)] == [False] * 5 + [True]


def _script(tmp_path, results: list, timeline: list, *args: str, raw_results: str | None = None):
    (tmp_path / "r.jsonl").write_text(raw_results if raw_results is not None else
                                      "".join(json.dumps(r) + "\n" for r in results))
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in timeline))
    return subprocess.run([sys.executable, str(FRONTEND), str(tmp_path / "r.jsonl"), str(tmp_path / "t.jsonl"), *args],
                          capture_output=True, text=True)


def test_fe22_fe23_the_margin_is_100_ms_unless_given(tmp_path):
    """A run 80 ms above its level's median: no stall at the default 100 ms, one at --margin-ms 50."""
    results, timeline = _level([45.0, 45.0, 46.0, 46.0, 47.0, 126.0])
    default = _script(tmp_path, results, timeline)
    assert default.returncode == 0 and default.stdout == (
        "front end: no steady run lost time outside its engine (6 runs)\n"), default.stdout + default.stderr
    given = _script(tmp_path, results, timeline, "--margin-ms", "50")
    assert given.returncode == 0 and "front end: 1 of 6 steady runs lost time" in given.stdout, given.stdout


def test_fe24_no_steady_run_in_both_files_prints_nothing(tmp_path):
    """A call without steady runs (run_pair.sh prints the script's output into every summary): no line at all."""
    results, timeline = _level([45.0, 46.0])
    for r in results:
        r["shape"] = "closed"
    got = _script(tmp_path, results, timeline)
    assert got.returncode == 0 and got.stdout == "", got.stdout + got.stderr


def test_fe25_fe26_batch_rows_in_the_timeline_and_blank_lines_in_the_results_are_passed_over(tmp_path):
    """timeline.jsonl holds the plugin's batch rows (lists) beside the summaries (dicts); a results file may end in
    blank lines."""
    results, timeline = _level([45.0, 45.0, 46.0, 46.0, 47.0, 446.0])
    batches = [["B", "decode", 128, 0, 1.0, 2.0, 0.5]] * 3
    raw = "\n" + "".join(json.dumps(r) + "\n\n" for r in results) + "  \n"
    got = _script(tmp_path, results, batches + timeline, raw_results=raw)
    assert got.returncode == 0 and "front end: 1 of 6 steady runs lost time" in got.stdout, got.stdout + got.stderr


@pytest.mark.parametrize("broken", ["results not JSON", "missing results"])
def test_fe27_fe28_fe29_a_bad_or_missing_file_is_one_line_and_exit_1(tmp_path, broken):
    results, timeline = _level([45.0, 46.0])
    got = _script(tmp_path, results, timeline, raw_results="{not json\n")
    if broken == "missing results":
        got = subprocess.run([sys.executable, str(FRONTEND), str(tmp_path / "none.jsonl"), str(tmp_path / "t.jsonl")],
                             capture_output=True, text=True)
    assert got.returncode == 1 and got.stdout == "", got.stdout
    (line,) = got.stderr.strip().splitlines()
    assert line.startswith("frontend.py: "), got.stderr
    if broken == "missing results":
        assert "No such file or directory" in line, line
