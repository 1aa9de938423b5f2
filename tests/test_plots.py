"""Plots: `specctl plot` from a real SQLite store, `specctl simulate --plot`, and their errors
(one line, exit 1, the simulate table still printed)."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from state import timeline
from state.db import open_store

PNG = b"\x89PNG"
ROOT = Path(__file__).resolve().parent.parent
TRACE = """name = "tiny"
profile = "crossover-a"
[[segment]]
label = "coding C=8"
seconds = 8
concurrency = 8
mean_accept_length = 2.6
[[segment]]
label = "chat C=2"
seconds = 8
concurrency = 2
mean_accept_length = 1.7
"""


@pytest.fixture
def tiny_trace(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TRACE)
    return str(path)


def _store(path, seconds: int = 120):
    """Samples every 0.1 s: batch 8, speculating (accept 2.5) until t=60, then plain; one decision."""
    db = open_store(path)
    rows = [{"t": i / 10, "batch_size": 8, "steps": 2 if i < 600 else 0, "tokens": 20 if i < 600 else 8,
             "step_s": 0.02 if i < 600 else 0.01, "decode_only": 1} for i in range(seconds * 10)]
    db["samples"].insert_all(rows)
    db["decisions"].insert_all([
        {"t": 1.0, "wall": 0.0, "old": 0, "new": 16, "policy": "bandit", "reason": "x", "exploratory": 0},
        {"t": 60.0, "wall": 0.0, "old": 16, "new": 4, "policy": "bandit", "reason": "y", "exploratory": 0}])
    return db


def test_timeline_bins_sum_what_ran(tmp_path):
    db = _store(tmp_path / "s.db")
    rows = timeline.bins(db, 0.0, 120.0, 30.0)
    assert [r["t"] for r in rows] == [15.0, 45.0, 75.0, 105.0]
    first, last = rows[0], rows[-1]
    assert first["batches"] == 300 and first["spec_batches"] == 300 and last["spec_batches"] == 0
    assert first["spec_tokens"] / first["spec_requests"] == 2.5
    assert first["tokens"] / first["busy_s"] == pytest.approx(1000.0)
    steps = timeline.threshold_steps(db, 30.0, 120.0)
    assert [(s["t"], s["threshold"]) for s in steps] == [(30.0, 16), (60.0, 4)]


def test_specctl_plot_writes_a_png_from_the_database(tmp_path):
    _store(tmp_path / "s.db").conn.close()
    out = tmp_path / "live.png"
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                   "plot", str(out), "--last", "120"])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:4] == PNG and "2 threshold steps" in res.output


@pytest.mark.parametrize("last,said", [([], "the last 120 engine seconds (all recorded)"),
                                        (["--last", "60"], "the last 60 engine seconds\n")])
def test_specctl_plot_says_the_span_it_drew(tmp_path, last, said):
    """A newcomer's plot of 450 s said 'the last 600 engine seconds' (--last's default): the span is what was recorded."""
    _store(tmp_path / "s.db").conn.close()
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                   "plot", str(tmp_path / "x.png"), *last])
    assert res.exit_code == 0 and said in res.output, res.output


def test_specctl_plot_counts_one_point_and_one_step_in_the_singular(tmp_path):
    """--bin over --last: 'wrote x.png: 1 points, 1 threshold steps over ...' was the line."""
    _store(tmp_path / "s.db").conn.close()
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                   "plot", str(tmp_path / "x.png"), "--last", "30", "--bin", "60"])
    assert res.exit_code == 0, res.output
    assert ": 1 point, 1 threshold step over the last 30 engine seconds" in res.output, res.output


@pytest.mark.parametrize("args,said", [
    (["--last", "30", "--bin", "60"], "over the last 30 engine seconds; --bin 60 is wider than that span: a shorter one "
                                      "draws more points\n"),
    (["--bin", "500"], "over the last 120 engine seconds (all recorded); --bin 500 is wider than that span: a shorter "
                       "one draws more points\n"),      # (the span recorded: under --last's 600)
    (["--last", "30", "--bin", "30"], "over the last 30 engine seconds\n"),
    ([], "over the last 120 engine seconds (all recorded)\n")])
def test_specctl_plot_says_where_its_bin_is_wider_than_the_span(tmp_path, args, said):
    """helper-163: `plot --bin 1000` over 600 s drew a single point and said only '1 point'."""
    _store(tmp_path / "s.db").conn.close()
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                   "plot", str(tmp_path / "x.png"), *args])
    assert res.exit_code == 0 and res.output.endswith(said) and len(res.output.splitlines()) == 1, res.output


@pytest.mark.parametrize("target,needle", [
    ("no/such/dir/x.png", "directory"),
    ("x.bmpx", "give a .png, .svg or .pdf"),
])
def test_specctl_plot_bad_path_is_one_line(tmp_path, target, needle):
    _store(tmp_path / "s.db").conn.close()
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "plot", str(tmp_path / target)])
    assert res.exit_code == 2                       # a bad argument (README: exit 2), refused before reading
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specctl: cannot write plot") and needle in lines[0]


@pytest.mark.parametrize("name,needle", [("", "cannot write plot '': give a file name"),
                                         ("a" * 300 + ".png", "File name too long")])
def test_simulate_plot_to_no_name_or_one_too_long_is_refused_before_simulating(tmp_path, monkeypatch, name, needle):
    """'' was "cannot write plot .: give a .png ..." (Path('') is '.'); a name too long for the file system passed the
    check, the simulation ran, and the rename refused it (exit 1)."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["simulate", "--concurrency", "4", "--seconds", "2", "--plot", name])
    assert res.exit_code == 2 and res.stdout == "", res.output
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("specctl: cannot write plot ") and line.endswith(needle), line
    assert list(tmp_path.iterdir()) == []


def test_specctl_plot_of_an_empty_store_says_so(tmp_path):
    open_store(tmp_path / "e.db").conn.close()
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "e.db"), "plot", str(tmp_path / "x.png")])
    assert res.exit_code == 1 and res.output.strip() == f"specctl: nothing recorded in {tmp_path / 'e.db'} yet"


@pytest.mark.parametrize("extra", [["--concurrency", "1,4"], ["--arrival-rate", "2"]])
def test_simulate_plot_to_a_missing_directory_is_refused_before_simulating(tmp_path, extra, monkeypatch):
    import controller.cli.simulate as simulate
    ran = []
    monkeypatch.setattr(simulate, "evaluate", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(simulate, "_simulate_open", lambda *a, **k: ran.append(a))
    res = CliRunner().invoke(cli, ["simulate", "--profile", "seed", *extra, "--seconds", "5",
                                   "--plot", str(tmp_path / "nope" / "x.png")])
    assert res.exit_code == 2 and res.stdout == "" and ran == []
    assert res.stderr.strip().splitlines() == [f"specctl: cannot write plot {tmp_path / 'nope' / 'x.png'}: "
                                               f"directory {tmp_path / 'nope'} does not exist"]


@pytest.mark.parametrize("load", [["--concurrency", "1,4"], ["--arrival-rate", "2"]])
def test_simulate_plot_that_fails_only_when_written_prints_the_table_and_one_error_line(load):
    target = "/proc/self/x.png"       # a name that passes the check but where no file can be made (even as root)
    res = CliRunner().invoke(cli, ["simulate", "--profile", "seed", *load, "--seconds", "5", "--plot", target])
    assert res.exit_code == 1
    assert res.stdout.startswith("policy bandit on profile seed")     # the table, printed before the plot failed
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specctl: cannot write plot {target}: "), lines


def test_simulate_trace_plot_and_baselines(tmp_path, tiny_trace):
    png = tmp_path / "t.png"
    res = CliRunner().invoke(cli, ["simulate", "--trace", tiny_trace, "--json", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert "timeline" not in out and png.read_bytes()[:4] == PNG
    for r in out["rows"]:          # the oracle is at least as good as never and always, segment by segment
        assert r["oracle_tok_s"] >= 0.99 * max(r["never_tok_s"], r["always_tok_s"])


def test_simulate_profile_beside_trace_is_honoured(tiny_trace):
    res = CliRunner().invoke(cli, ["simulate", "--trace", tiny_trace, "--profile", "seed", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["profile"] == "seed"
    res = CliRunner().invoke(cli, ["simulate", "--trace", tiny_trace, "--json"])
    assert json.loads(res.stdout)["profile"] == "crossover-a"            # the trace's own


def test_simulate_trace_with_concurrency_is_refused():
    res = CliRunner().invoke(cli, ["simulate", "--trace", "coding-to-chat", "--concurrency", "4"])
    assert res.exit_code == 2 and res.output.strip() == "specctl: give --trace or --concurrency, not both"


def _specctl_with_file_size_limit(limit: int, *args: str):
    """specctl in a process of its own whose files may not grow past `limit` bytes (RLIMIT_FSIZE: Python ignores
    SIGXFSZ, so a write past it fails with EFBIG, as one on a full disk fails with ENOSPC)."""
    import resource
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "controller.cli", *args], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))


@pytest.mark.parametrize("name", ["x.png", "x.svg", "x.pdf"])
def test_a_plot_that_cannot_be_written_whole_leaves_the_earlier_one_and_no_part(tmp_path, name):
    """Written in place, a write that failed midway (a full disk) left a truncated file: an earlier plot at the path
    destroyed (png), a new .svg's first 40 KB left behind."""
    db = _store(tmp_path / "s.db")
    db.execute("PRAGMA journal_mode=DELETE")        # (a read of a WAL database writes its -shm: past the limit too)
    db.conn.close()
    out = tmp_path / "plots" / name
    out.parent.mkdir()
    out.write_bytes(b"the earlier plot")
    done = _specctl_with_file_size_limit(4096, "--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                         "plot", str(out), "--last", "120")
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.splitlines() == [f"specctl: cannot write plot {out}: File too large"], done.stderr
    assert out.read_bytes() == b"the earlier plot" and sorted(p.name for p in out.parent.iterdir()) == [name]
    out.unlink()
    done = _specctl_with_file_size_limit(4096, "simulate", "--concurrency", "4", "--seconds", "2", "--plot", str(out))
    assert done.returncode == 1 and done.stdout.startswith("policy bandit on profile seed"), done
    assert done.stderr.splitlines() == [f"specctl: cannot write plot {out}: File too large"], done.stderr
    assert list(out.parent.iterdir()) == []


def test_a_plot_whole_replaces_the_earlier_one_with_its_mode(tmp_path):
    _store(tmp_path / "s.db").conn.close()
    out = tmp_path / "x.png"
    out.write_bytes(b"old")
    out.chmod(0o640)
    res = CliRunner().invoke(cli, ["--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"),
                                   "plot", str(out), "--last", "120"])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:4] == PNG and (out.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir() if "x.png" in p.name] == ["x.png"]     # (no temporary file left)


def test_simulate_plot_to_a_fifo_is_refused_before_simulating_not_written_after(tmp_path):
    """A FIFO named as the plot passed the check: the whole simulation ran, then 'File or stream is not seekable'."""
    import os
    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    res = CliRunner().invoke(cli, ["simulate", "--profile", "seed", "--concurrency", "4", "--seconds", "2",
                                   "--plot", str(fifo)])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.strip().splitlines() == [f"specctl: cannot write plot {fifo}: not a regular file, which the "
                                               "plot would replace"]
    assert fifo.is_fifo()


@pytest.mark.parametrize("kind", ["directory", "trailing slash"])
def test_simulate_plot_to_a_directory_is_refused_before_simulating(tmp_path, kind):
    """A directory named x.png passed the check (the simulation ran, then replace_whole refused it); 'x.png/' wrote
    x.png. Both usage errors now, nothing simulated, nothing written."""
    target = tmp_path / "x.png"
    if kind == "directory":
        target.mkdir()
    arg = str(target) + ("/" if kind == "trailing slash" else "")
    res = CliRunner().invoke(cli, ["simulate", "--profile", "seed", "--concurrency", "4", "--seconds", "2",
                                   "--plot", arg])
    assert res.exit_code == 2 and res.stdout == "", res.output
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"specctl: cannot write plot {arg}: "), line
    assert target.is_dir() if kind == "directory" else not target.exists()


MATH = "$\\foo{$"       # matplotlib's mathtext: its parser raised ValueError at the drawing, a traceback


def test_specctl_plot_of_a_database_whose_name_reads_as_mathtext(tmp_path):
    db = tmp_path / f"a{MATH}.db"
    _store(db).conn.close()
    res = CliRunner().invoke(cli, ["--db", str(db), "--socket", str(tmp_path / "no.sock"), "plot",
                                   str(tmp_path / "x.png"), "--last", "120"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "x.png").read_bytes()[:4] == PNG


@pytest.mark.parametrize("where", ["name", "label"])
def test_simulate_plot_of_a_trace_whose_names_read_as_mathtext(tmp_path, where):
    trace = tmp_path / "t.toml"
    text = TRACE.replace('name = "tiny"', f"name = '{MATH}'") if where == "name" else \
        TRACE.replace('label = "chat C=2"', f"label = '{MATH}'")
    trace.write_text(text)
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--plot", str(tmp_path / "x.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "x.png").read_bytes()[:4] == PNG


def test_a_matplotlibrc_in_the_working_directory_is_not_the_plots(tmp_path):
    """matplotlib reads ./matplotlibrc at import: text.usetex there ran latex, a RuntimeError traceback where there is
    none (PATH empty here), after the simulation; a bad value there was a warning line of matplotlib's own."""
    import subprocess
    import sys
    (tmp_path / "matplotlibrc").write_text("text.usetex: True\nfont.size: abc\n")
    done = subprocess.run([sys.executable, "-m", "controller.cli", "simulate", "--concurrency", "4", "--seconds", "2",
                           "--plot", "x.png"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PATH": "", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert done.returncode == 0 and done.stderr == "wrote x.png\n", done.stderr[-2000:]
    assert (tmp_path / "x.png").read_bytes()[:4] == PNG
