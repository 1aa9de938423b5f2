"""Config files, guard settings and database paths that bench/fuzz.py (seed 1) found ending in a traceback instead of
one line and exit 2: each kept here."""
import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.control.guard_config import GuardConfig, GuardConfigError
from controller.daemon.config import ConfigError, load_config
from controller.daemon.main import main
from controller.numtext import shown
from controller.sim.profile import ProfileError, load_profile, load_trace


def _one_usage_line(result, prog: str) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: "), result.output
    return lines[0]


@pytest.mark.parametrize("data,byte", [(b"\xff\xfe[sim]\n", "0xff"), (b"[sim]\nspeed = 2.0\n# caf\xe9\n", "0xe9")])
def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path, data, byte):
    path = tmp_path / "c.toml"
    path.write_bytes(data)
    with pytest.raises(ConfigError, match=f"^config file {path}: not UTF-8 text \\(byte {byte} at offset "):
        load_config(path)                           # was UnicodeDecodeError: config check and run ended in a traceback
    line = _one_usage_line(CliRunner().invoke(main, ["config", "check", "--config", str(path)]), "spec-controller")
    assert "not UTF-8 text" in line


@pytest.mark.parametrize("key,value,kind", ids=["inf", "-inf", "nan", "1.7", "true", "str-int", "false", "str-float",
                                                "10**400", "list"], argvalues=[
    ("min_threshold", float("inf"), "int"),          # OverflowError: a traceback
    ("max_threshold", float("-inf"), "int"),
    ("fallback_threshold", float("nan"), "int"),
    ("max_step_buckets", 1.7, "int"),                # was taken as 1
    ("max_step_buckets", True, "int"),               # was taken as 1
    ("min_threshold", "5x", "int"),                  # ("5" was taken as 5: test_a_guard_number_written_as_text_...)
    ("explore_share", False, "float"),               # was taken as 0.0
    ("explore_share", "0.1.2", "float"),
    ("explore_window_s", 10**400, "float"),          # OverflowError (TOML's integers are not bounded in tomllib)
    ("flap_s", [60], "float"),
])
def test_a_guard_setting_must_be_a_number_of_its_kind(key, value, kind):
    with pytest.raises(GuardConfigError) as err:
        GuardConfig.from_mapping({key: value})
    assert str(err.value) == f"guard setting {key}={shown(value)} must be {'an integer' if kind == 'int' else 'a number'}"
    with pytest.raises(ConfigError, match=r"^config: \[guard\] setting "):
        load_config(None, {"guard": {key: value}})


@pytest.mark.parametrize("key,value,fix,kind", [
    ("min_threshold", "5", "min_threshold = 5", "an integer"), ("explore_share", "0.1", "explore_share = 0.1", "a number"),
    ("explore_share", ".5", "explore_share = 0.5", "a number"),  # (a quoted ".5"; --set takes .5 as a number)
    ("stabilisation_s", " 2 ", "stabilisation_s = 2.0", "a number"),
    ("fallback_threshold", "-1", "fallback_threshold = -1", "an integer"),    # (a sign: mutation-today-2026-12-05g GC1)
])
def test_a_guard_number_written_as_text_says_how_to_write_it(key, value, fix, kind):
    """A quoted number was taken before (int("5"), float("0.1")) and is refused now, leaving a service that restarts
    on that config failed (exit 2): the line says the value is text and how to write it, not only that '5' is not
    an integer."""
    with pytest.raises(GuardConfigError) as err:
        GuardConfig.from_mapping({key: value})
    assert str(err.value).endswith(f"must be {kind}, not text: write it unquoted ({fix})"), str(err.value)


def test_text_that_is_no_number_gets_no_such_hint():
    with pytest.raises(GuardConfigError) as err:
        GuardConfig.from_mapping({"max_step_buckets": "2.5"})       # (a number, but not of the setting's kind)
    assert str(err.value) == "guard setting max_step_buckets='2.5' must be an integer"
    with pytest.raises(GuardConfigError) as err:
        GuardConfig.from_mapping({"explore_share": "lots"})
    assert str(err.value) == "guard setting explore_share='lots' must be a number"


def test_ints_are_guard_numbers_and_a_whole_float_only_where_a_float_goes():
    cfg = GuardConfig.from_mapping({"max_step_buckets": 4, "explore_share": 0, "min_threshold": 3})
    assert (cfg.max_step_buckets, cfg.explore_share, cfg.min_threshold) == (4, 0.0, 3)
    assert type(cfg.max_step_buckets) is int and type(cfg.explore_share) is float
    # (an integer setting is a TOML integer, as in every other section and the API: 4.0 was taken as 4 here only)
    with pytest.raises(GuardConfigError, match=r"^guard setting max_step_buckets=4.0 must be an integer$"):
        GuardConfig.from_mapping({"max_step_buckets": 4.0})


def test_an_infinite_integer_guard_setting_is_one_line_from_config_check(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[guard]\nmin_threshold = inf\n")
    line = _one_usage_line(CliRunner().invoke(main, ["config", "check", "--config", str(path)]), "spec-controller")
    assert line == "spec-controller: config: [guard] setting min_threshold=inf must be an integer"


@pytest.mark.parametrize("length,why", [(300, "file name too long"), (252, "file name too long (with .lock added)")])
def test_a_database_name_the_file_system_refuses_is_a_config_error(tmp_path, length, why):
    db = tmp_path / ("a" * length)
    with pytest.raises(ConfigError) as err:
        load_config(None, {"storage": {"db": str(db)}})       # was OSError at the lock file, after the config passed
    assert str(err.value) == f"config: [storage] db {db}: {why}"
    line = _one_usage_line(CliRunner().invoke(main, ["config", "check", "--set", f'storage.db="{db}"']),
                           "spec-controller")
    assert f"{why} (given on the command line: --set storage.db=" in line        # (as run says it)


def test_a_database_name_of_250_characters_is_fine(tmp_path):
    assert load_config(None, {"storage": {"db": str(tmp_path / ("a" * 250))}})["storage"]["db"].endswith("a" * 250)


@pytest.mark.parametrize("args", [["--db", "{db}", "status"], ["status", "--db", "{db}"], ["--db", "{db}", "history"],
                                  ["--db", "{db}", "threshold", "pin", "3"], ["--db", "{db}", "policy", "list"]])
def test_specctl_says_a_database_name_too_long_in_one_line(tmp_path, args):
    db = str(tmp_path / ("b" * 300))
    result = CliRunner().invoke(cli, [a.format(db=db) for a in args])     # was OSError: File name too long, raised
    assert _one_usage_line(result, "specctl") == f"specctl: database {db}: file name too long; nothing changed"


def test_specctl_says_so_for_specctl_db_too(tmp_path, monkeypatch):
    db = str(tmp_path / ("b" * 300))
    monkeypatch.setenv("SPECCTL_DB", db)
    assert _one_usage_line(CliRunner().invoke(cli, ["status"]), "specctl").endswith("file name too long; nothing changed")


@pytest.mark.parametrize("load,what", [(load_profile, "profile"), (load_trace, "trace")])
def test_a_profile_or_trace_that_is_a_binary_file_is_one_line(tmp_path, load, what):
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(128, 256)))
    with pytest.raises(ProfileError, match=f"^{what} {path}: not UTF-8 text \\(invalid start byte at offset 8\\)$"):
        load(str(path))                              # was UnicodeDecodeError out of config check, run and simulate
    result = CliRunner().invoke(main, ["config", "check", "--set", f'sim.{what}="{path}"'])
    assert _one_usage_line(result, "spec-controller").endswith("not UTF-8 text (invalid start byte at offset 8)")


@pytest.mark.parametrize("load,what", [(load_profile, "profile"), (load_trace, "trace")])
def test_a_profile_or_trace_name_too_long_for_the_file_system_is_one_line(tmp_path, load, what):
    with pytest.raises(ProfileError, match=f"^{what} 'a{{300}}': File name too long$"):
        load("a" * 300)                              # was OSError ENAMETOOLONG from the look for a built-in one
    with pytest.raises(ProfileError, match=f"^{what} '{tmp_path}/a{{300}}.toml': File name too long$"):
        load(str(tmp_path / ("a" * 300 + ".toml")))


@pytest.mark.parametrize("flag", [["--config", "{p}"], ["--set", 'sim.profile="{p}"'], ["--set", 'sim.trace="{p}"']])
def test_a_fifo_named_as_a_config_profile_or_trace_is_one_line_not_a_hang(tmp_path, flag):
    """A real subprocess: before, opening the FIFO waited for a writer for good (and /dev/zero read until memory ran
    out), so config check, run and a SIGHUP reload hung."""
    import os
    import subprocess
    import sys
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    args = [a.format(p=fifo) for a in flag]
    done = subprocess.run([sys.executable, "-m", "controller.daemon", "config", "check", *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.strip().endswith(f"{fifo}: cannot read (not a regular file)"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_config_file_past_the_size_limit_is_one_line(tmp_path):
    from controller.paths import TEXT_FILE_LIMIT
    path = tmp_path / "big.toml"
    path.write_bytes(b"#" * (TEXT_FILE_LIMIT + 1))       # (comments only: was read whole and run as an empty config)
    with pytest.raises(ConfigError, match=f"^config file {path}: cannot read \\(larger than 16 MiB\\)$"):
        load_config(path)
    path.write_bytes(b"#" * TEXT_FILE_LIMIT)
    assert load_config(path)["sim"] == load_config(None)["sim"]


def _run(prog: str, *args: str, cwd=None):
    import subprocess
    import sys
    module = "controller.daemon" if prog == "spec-controller" else "controller.cli"
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("args", [["plot", "{d}/x.png"], ["simulate", "--concurrency", "2", "--seconds", "1",
                                                          "--plot", "{d}/x.png"]])
def test_a_plot_in_a_directory_whose_name_is_too_long_is_one_line(tmp_path, args):
    """Path.is_dir raised ENAMETOOLONG out of the plot path's check: a traceback (it was for a missing directory only
    that the check had a line)."""
    far = tmp_path / ("d" * 300)
    done = _run("specctl", "--db", str(tmp_path / "none.db"), *[a.format(d=far) for a in args])
    assert done.returncode == 2 and done.stdout == "", done
    assert done.stderr.splitlines() == [f"specctl: cannot write plot {far}/x.png: File name too long"], done.stderr


@pytest.mark.parametrize("command", [["run"], ["config", "check"]])
def test_a_config_file_name_too_long_is_one_line(tmp_path, command):
    """load_config asked Path.exists() before it knew the file was given: ENAMETOOLONG, a traceback out of run and
    config check; nothing is started or written."""
    name = "c" * 300 + ".toml"
    done = _run("spec-controller", *command, "--config", name, "--set", f'storage.db="{tmp_path}/d.db"', cwd=tmp_path)
    assert done.returncode == 2, done
    assert done.stderr.splitlines() == [f"spec-controller: config file {name}: cannot read (File name too long)"]
    assert list(tmp_path.iterdir()) == []


def test_from_launch_with_a_relative_value_too_long_to_be_a_path_is_written(tmp_path):
    """path_notes asked Path.exists() of every relative value (a Hugging Face id may be a directory here): one too long
    for the file system raised ENAMETOOLONG, a traceback. It is no path here, so no note; the config is written."""
    from tests.conftest import stub_sglang_python
    python = stub_sglang_python(tmp_path / "python")
    model = "m" * 1000
    out = tmp_path / "c.toml"
    done = _run("spec-controller", "config", "from-launch", "--python", str(python), "-o", str(out), "--",
                "python", "-m", "sglang.launch_server", "--model-path", model, "--speculative-algorithm", "EAGLE3")
    assert done.returncode == 0, done
    assert "Traceback" not in done.stderr and done.stderr.splitlines()[-1] == f"spec-controller: wrote {out}"
    assert f'model_path = "{model}"' in out.read_text()


def test_a_trace_s_profile_that_fails_is_blamed_on_the_trace_not_on_profile(tmp_path):
    """A trace naming a bad profile (here itself) was refused as '[sim] profile (--profile): ...', a flag not given."""
    trace = tmp_path / "t.toml"
    trace.write_text('profile = "t.toml"\n[[segment]]\nseconds = 5\nconcurrency = 4\n')
    (tmp_path / "c.toml").write_text("")
    line = _one_usage_line(CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml"),
                                                     "--trace", str(trace)]), "spec-controller")
    assert line.startswith("spec-controller: config: [sim] trace (--trace): profile t.toml: unknown key 'profile'"), line
