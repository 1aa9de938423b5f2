"""Boundary inputs a review (helper-95) found getting through: each kept here, red before its fix."""
import errno
import pytest
from click.testing import CliRunner

from controller.contract import MAX_BATCH
from controller.control.guard_config import GuardConfig, GuardConfigError
from controller.daemon.main import main
from controller.numtext import written


def _one_usage_line(result, prog: str = "spec-controller") -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: "), result.output
    return lines[0]


# --- [guard] thresholds: at most MAX_BATCH, as every other boundary --------------------------------------------------
@pytest.mark.parametrize("values,says", [
    ({"min_threshold": 10**20, "max_threshold": 10**20}, f"max_threshold=100000000000000000000 out of range (allowed 0 .. {MAX_BATCH})"),
    ({"max_threshold": MAX_BATCH + 1}, f"max_threshold={MAX_BATCH + 1} out of range (allowed 0 .. {MAX_BATCH})"),
    ({"fallback_threshold": 10**20}, "fallback_threshold=100000000000000000000 out of range"),
])
def test_a_guard_threshold_above_max_batch_is_refused(values, says):
    """min_threshold = max_threshold = 1e20 passed `config check`; the daemon applied threshold 1e20, every history row
    failed to write (Python int too large to convert to SQLite INTEGER) and SGLang's plugin refused every threshold."""
    with pytest.raises(GuardConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        GuardConfig.from_mapping(values)


def test_a_guard_threshold_above_max_batch_is_one_line_from_config_check():
    result = CliRunner().invoke(main, ["config", "check", "--set", "guard.min_threshold=100000000000000000000",
                                       "--set", "guard.max_threshold=100000000000000000000"])
    assert "max_threshold=100000000000000000000 out of range" in _one_usage_line(result)


def test_guard_thresholds_up_to_max_batch_are_taken():
    cfg = GuardConfig.from_mapping({"min_threshold": MAX_BATCH, "max_threshold": MAX_BATCH,
                                    "fallback_threshold": MAX_BATCH})
    assert (cfg.min_threshold, cfg.max_threshold, cfg.fallback_threshold) == (MAX_BATCH,) * 3


# --- TOML / JSON nested past the recursion limit: one line, and a reload keeps the running daemon -------------------
DEEP_TOML = "[guard]\nx = " + "[" * 5000 + "]" * 5000 + "\n"


def test_a_config_file_nested_too_deeply_is_one_line(tmp_path):
    from controller.daemon.config import ConfigError, load_config
    path = tmp_path / "c.toml"
    path.write_text(DEEP_TOML)
    with pytest.raises(ConfigError, match=r"not valid TOML \(nested too deeply\)"):
        load_config(path)                                   # was RecursionError: config check and run a traceback
    line = _one_usage_line(CliRunner().invoke(main, ["config", "check", "--config", str(path)]))
    assert line == f"spec-controller: config file {path}: not valid TOML (nested too deeply)"


def test_a_set_value_nested_too_deeply_is_one_line():
    result = CliRunner().invoke(main, ["config", "check", "--set", "guard.x=" + "[" * 5000 + "]" * 5000])
    assert _one_usage_line(result) == "spec-controller: --set guard.x=...: VALUE is nested too deeply"


@pytest.mark.parametrize("name,text", [("p.toml", "x = " + "[" * 5000 + "]" * 5000),
                                       ("p.json", '{"x": ' + "[" * 100000 + "]" * 100000 + "}")])
def test_a_profile_or_trace_nested_too_deeply_is_one_line(tmp_path, name, text):
    from controller.sim.profile import ProfileError, load_profile, load_trace
    (tmp_path / name).write_text(text)
    for load in (load_profile, load_trace):
        with pytest.raises(ProfileError, match=r"not valid (TOML|JSON) \(nested too deeply\)"):
            load(str(tmp_path / name))
    line = _one_usage_line(CliRunner().invoke(main, ["config", "check", "--set", f"sim.profile={tmp_path / name}"]))
    assert "nested too deeply" in line


def test_a_reload_of_a_config_nested_too_deeply_keeps_the_daemon_running(short_tmp):
    """SIGHUP re-read the file; tomllib's RecursionError was no ConfigError, left _serve and stopped the daemon
    ('spec-controller: maximum recursion depth exceeded', exit 1) instead of keeping the running config."""
    import signal
    import time

    from tests.daemon_proc import DaemonProc
    d = DaemonProc(short_tmp, "--concurrency", "2", config_text="[guard]\nexplore_share = 0.05\n")
    try:
        d.wait_socket()
        (short_tmp / "config.toml").write_text(DEEP_TOML)
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "reload refused" not in d.log_text() and d.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert d.proc.poll() is None, d.log_text()[-500:]
        assert "reload refused, keeping the running config" in d.log_text()
        assert d.call("GET", "/status")["daemon"]["running"]
    finally:
        assert d.stop() == 0


# --- number arguments: ASCII decimal only, as specctl's own (controller/numtext.py) --------------------------------
@pytest.mark.parametrize("flag,value", [("--concurrency", "1_0"), ("--concurrency", "\u0663"), ("--speed", "+10"),
                                        ("--arrival-rate", "1_0.5"), ("--metrics-port", "\u0669\u0660"),
                                        ("--speed", "nan")])
def test_runs_number_flags_take_ascii_decimals_only(flag, value, monkeypatch):
    """click's int() / float() read '1_0' as 10 and Arabic-Indic digits as digits: run started on a number the
    operator never wrote (the conflict line below said '--concurrency 10' for a '1_0')."""
    # (--db in no directory: a value taken as a number stops at that check, no daemon starts, its log not set up)
    from controller.daemon import logs
    monkeypatch.setattr(logs, "setup", lambda level: None)
    result = CliRunner().invoke(main, ["run", flag, value, "--db", "/nonexistent-h95/x.db"])
    kind = "an integer" if flag in ("--concurrency", "--metrics-port") else "a number"
    rule = written(int if kind == "an integer" else float)
    assert _one_usage_line(result) == f"spec-controller: {flag} {value!r} is not {kind} ({rule})"


def test_runs_number_flags_still_reach_the_configs_range_check():
    result = CliRunner().invoke(main, ["run", "--concurrency", "-1"])
    assert "[sim] concurrency=-1 out of range (allowed 0 .. 65536)" in _one_usage_line(result)
    result = CliRunner().invoke(main, ["run", "--concurrency", "10", "--trace", "mixed-shift"])
    assert "concurrency = 10 (--concurrency)" in _one_usage_line(result)        # (a conflict: the number read as written)


@pytest.mark.parametrize("flag,value", [("--concurrency", "\u0663"), ("--concurrency", "1_0"), ("--concurrency", "+4"),
                                        ("--arrival-rate", "1_0"), ("--arrival-rate", "\u0663"),
                                        ("--concurrency", "1,,2"), ("--arrival-rate", "2,"), ("--concurrency", " , ")])
def test_simulates_level_lists_take_ascii_decimals_only(flag, value):
    from controller.cli.main import cli
    result = CliRunner().invoke(cli, ["simulate", flag, value, "--seconds", "1"])
    assert result.exit_code == 2 and f"invalid value for {flag}: {value!r} is not a comma-separated list" in \
        result.output, result.output


# --- config from-launch -o: only a regular file (or none) is replaced -----------------------------------------------
def test_from_launch_output_that_is_no_regular_file_is_refused_and_left_as_it_was(tmp_path, monkeypatch):
    """write_whole replaced whatever the path named by a new regular file: run as root with -o /dev/null, /dev/null
    became a regular file (mode 0666, every later write to it kept); a FIFO the same (checked here, not /dev/null)."""
    import os
    import stat

    from controller.daemon import launchcfg
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        launchcfg.write_whole(str(fifo), "x\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(os.listdir(tmp_path)) == ["out"]
    monkeypatch.setattr(launchcfg, "convert", lambda *a: launchcfg.Converted({"model_path": "m"}, "0.5.17"))
    result = CliRunner().invoke(main, ["config", "from-launch", "-o", str(fifo), "--", "python", "-m",
                                       "sglang.launch_server", "--model-path", "m"])
    assert result.exit_code == 1 and stat.S_ISFIFO(os.lstat(fifo).st_mode), result.output
    assert result.output.strip().splitlines()[-1] == (f"spec-controller: cannot write {fifo}: not a regular file, which "
                                                      "the config would replace (leave -o out to print it); nothing written")
    regular = tmp_path / "c.toml"           # (a regular file, or none, still written)
    assert CliRunner().invoke(main, ["config", "from-launch", "-o", str(regular), "--", "python", "-m",
                                     "sglang.launch_server", "--model-path", "m"]).exit_code == 0
    assert 'model_path = "m"' in regular.read_text()


# --- a simulator profile's step table: none the daemon's boundary rejects -------------------------------------------
def test_a_step_table_below_what_the_daemon_takes_is_refused_and_the_floors_samples_pass_its_gate(tmp_path):
    """A profile with step times of 1e-6 .. 1e-5 s passed (the floor was 1e-6); every sample the simulator made of it
    failed the daemon's check (intake.MIN_STEP_S, 1e-5 s): 400,000 rejected (step_s), nothing learned, and the daemon
    said healthy."""
    from controller.daemon.intake import MIN_STEP_S, validate_sample
    from controller.sim.core import SimCore
    from controller.sim.profile import ProfileError, load_profile
    from controller.sim.profile import BUILTIN_DIR
    text = (BUILTIN_DIR / "crossover-b.toml").read_text()
    fast = text.replace("off  = [0.00705, 0.0086, 0.0134, 0.02876]", "off  = [2e-6, 3e-6, 4e-6, 5e-6]") \
               .replace("spec = [0.0103, 0.0196, 0.0484, 0.1252]", "spec = [3e-6, 5e-6, 8e-6, 1e-5]")
    assert fast != text
    (tmp_path / "fast.toml").write_text(fast)
    with pytest.raises(ProfileError, match=r"\[step_time\]: off\[0\]=2e-06 must be a number in 0.0001 .. 60"):
        load_profile(str(tmp_path / "fast.toml"))
    floor = text.replace("off  = [0.00705, 0.0086, 0.0134, 0.02876]", "off  = [1e-4, 1e-4, 1e-4, 1e-4]") \
                .replace("spec = [0.0103, 0.0196, 0.0484, 0.1252]", "spec = [1e-4, 1e-4, 1e-4, 1e-4]") \
                .replace("prefill_s = 0.003", "prefill_s = 0.0").replace("prefill_s_per_request = 0.0005",
                                                                          "prefill_s_per_request = 0.0")
    (tmp_path / "floor.toml").write_text(floor)
    core = SimCore(load_profile(str(tmp_path / "floor.toml")), seed=1)
    core.set_load(32)
    samples = [core.step(i % 2 == 0) for i in range(2000)]
    assert min(s.step_s for s in samples) > MIN_STEP_S
    assert [validate_sample(s, 256, 4, None, s.t) for s in samples] == [None] * len(samples)


# --- a command is acknowledged once it is on disk: synchronous=FULL for its commit ----------------------------------
def _traced(db) -> list[str]:
    seen: list[str] = []
    db.conn.set_trace_callback(seen.append)
    return seen


def test_a_commands_commit_is_synced_and_a_samples_group_is_not(tmp_path):
    """The store runs PRAGMA synchronous=NORMAL in WAL mode, under which a commit is not synced to disk (SQLite: it
    "might roll back following a power loss or system crash"): a pin or a policy switch answered as saved could be
    gone after an operating-system crash. Its transaction now commits under FULL; samples stay under NORMAL."""
    from state.db import open_store
    from state.items import setting_item
    from state.writer import Writer
    db = open_store(tmp_path / "s.db")
    seen = _traced(db)
    writer = Writer(db).start()
    try:
        writer.transaction([setting_item("pinned", 5)])
        i = seen.index("COMMIT")
        assert seen[:2] == ["PRAGMA synchronous=FULL", "BEGIN IMMEDIATE"] and seen[i + 1] == "PRAGMA synchronous=NORMAL"
        seen.clear()
        writer.samples([(1.0, 4, 0, 4, 0.01, 1)])
        assert writer.flush(5)
        assert "BEGIN IMMEDIATE" in seen and not [s for s in seen if s.startswith("PRAGMA synchronous")]
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 1          # NORMAL again
    finally:
        writer.stop()


def test_an_offline_pin_is_synced_before_specctl_says_saved(short_tmp, monkeypatch):
    from controller.cli.main import cli
    from state import db as store
    db, sock = short_tmp / "off.db", short_tmp / "none.sock"
    store.open_store(db).conn.close()
    opened, seen = store.open_store, []

    def traced(*a, **k):
        got = opened(*a, **k)
        got.conn.set_trace_callback(seen.append)
        return got
    monkeypatch.setattr(store, "open_store", traced)
    res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "threshold", "pin", "3"])
    assert res.exit_code == 0 and "saved" in res.output, res.output
    insert = next(i for i, s in enumerate(seen) if s.startswith("INSERT INTO settings"))
    assert "PRAGMA synchronous=FULL" in seen[:insert], seen


# --- a damaged settings row: left out, as if never saved -----------------------------------------------------------
@pytest.mark.parametrize("key,value", [("threshold", "{bad"), ("policy", '"ucb"'), ("policy", '{"name": 5}'),
                                       ("policy", '{"name": "ucb", "params": [1]}'), ("pinned", "\xff not json"),
                                       ("policy", '{"name": "", "params": {}}'),   # (mutation-today-2026-12-06j Q3)
                                       ("clock", "5")])
def test_a_damaged_settings_row_is_no_setting_for_the_daemon_status_and_policy_show(short_tmp, key, value):
    """A settings row that is not JSON, or a policy that is no {name, params} object: the daemon's start (Service),
    `specctl status` and `specctl policy show` offline ended in a JSONDecodeError / TypeError traceback."""
    import sqlite3

    from controller.cli.main import cli
    from state import queries
    from state.db import open_store
    from tests.fakes import make_service
    service, writer = make_service(short_tmp)
    writer.stop()
    conn = sqlite3.connect(short_tmp / "s.db")
    conn.execute("INSERT INTO settings (key, value, wall) VALUES ('clock', '{\"speed\": 1.0}', 0) ON CONFLICT(key) "
                 "DO UPDATE SET value = excluded.value")
    conn.execute("INSERT INTO settings (key, value, wall) VALUES (?, ?, 0) ON CONFLICT(key) DO UPDATE SET "
                 "value = excluded.value", [key, value])
    conn.commit()
    conn.close()
    db = open_store(short_tmp / "s.db", readonly=True)
    try:
        saved = queries.settings(db)
    finally:
        db.conn.close()
    assert key not in saved and (key == "clock" or saved["clock"] == {"speed": 1.0})
    service, writer = make_service(short_tmp, policy="ucb")           # starts; a damaged policy: the config's
    try:
        assert service.policy_name == ("ucb" if key == "policy" else "thompson")
    finally:
        writer.stop()
    base = ["--socket", str(short_tmp / "none.sock"), "--db", str(short_tmp / "s.db")]
    for args in (["status"], ["policy", "show"], ["threshold"]):
        res = CliRunner().invoke(cli, [*base, *args])
        assert res.exception is None or isinstance(res.exception, SystemExit), (args, res.output, res.exception)
        assert res.exit_code in (0, 3) and "Traceback" not in res.output, (args, res.output)


# --- a socket this user may not connect to is no left-over ---------------------------------------------------------
class _Refused:
    """A unix socket whose connect() the kernel answers EACCES: another user's socket, mode 0600 (as a non-root
    daemon sees it: shown on a real one with setpriv, uid 65534)."""

    def __init__(self, *a, **k):
        pass

    def settimeout(self, t):
        pass

    def connect(self, path):
        raise PermissionError(13, "Permission denied")

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_a_control_socket_this_user_may_not_connect_to_is_not_unlinked(short_tmp, monkeypatch):
    """check_socket_free took EACCES for 'nobody listening' and unlinked the socket: a daemon started by another user
    with --socket in a directory both may write removed a live daemon's socket and took its place."""
    import socket

    from controller.daemon import api
    path = short_tmp / "c.sock"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(path))
    live.listen()
    try:
        monkeypatch.setattr(socket, "socket", _Refused)
        with pytest.raises(RuntimeError, match="a socket this user may not connect to .*refusing to remove it"):
            api.check_socket_free(path)
        assert path.is_socket()
    finally:
        live.close()


def test_a_telemetry_socket_this_user_may_not_connect_to_counts_as_in_use(short_tmp, monkeypatch):
    """socket_answers (now sockprobe.who_listens) said False (a left-over) for EACCES, and zmq's ipc bind then unlinks whatever is at the path."""
    import socket

    from controller.daemon.sockprobe import FOREIGN, who_listens
    path = short_tmp / "t.ipc"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(path))
    live.listen()
    try:
        with monkeypatch.context() as m:
            m.setattr(socket, "socket", _Refused)
            assert who_listens(path) == (FOREIGN, None)
    finally:
        live.close()


def test_the_engine_start_refuses_a_telemetry_socket_this_user_may_not_connect_to(short_tmp, monkeypatch):
    """The engine's own decision on who_listens' FOREIGN (the test above stops at the probe since the fold into
    sockprobe: an engine that took only LIVE for 'in use' passed every test, and zmq's bind unlinked the socket)."""
    import socket

    from controller.daemon import sockprobe
    from controller.daemon.engines import sglang
    from controller.daemon.engines.base import EngineError
    from tests.conftest import fake_sglang_python
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp))
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(short_tmp / "telemetry.ipc"))
    live.listen()

    def as_another_user(path, *args):
        with monkeypatch.context() as m:
            m.setattr(socket, "socket", _Refused)
            return sockprobe.who_listens(path, *args)
    monkeypatch.setattr(sglang, "who_listens", as_another_user)
    eng = sglang.SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3",
                               "python": str(fake_sglang_python(short_tmp / "python"))})
    try:
        with pytest.raises(EngineError, match="telemetry socket .* is in use by another daemon's engine"):
            eng.start(lambda s: None)
        assert eng.proc is None and (short_tmp / "telemetry.ipc").is_socket()
    finally:
        eng.stop()
        live.close()


def test_a_left_over_control_socket_that_cannot_be_removed_is_one_line(short_tmp, monkeypatch):
    """A crashed run's socket of another user in a sticky directory (/tmp): unlink's EPERM was a PermissionError
    traceback out of `spec-controller run` (checked as uid 65534 on a real one)."""
    from tests.conftest import unremovable_left_over
    path = short_tmp / "c.sock"
    unremovable_left_over(path, monkeypatch, errno.EPERM)
    from controller.daemon import logs
    monkeypatch.setattr(logs, "setup", lambda level: None)    # (the daemon's log set-up: the other tests' caplog)
    result = CliRunner().invoke(main, ["run", "--socket", str(path), "--db", str(short_tmp / "x.db")])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 1 and result.output.strip() == (
        f"spec-controller: control socket {path} is a left-over nobody listens on, which this user cannot remove "
        "(Operation not permitted); remove it or give another --socket")
    assert path.is_socket() and not (short_tmp / "x.db").exists()


# --- [sglang]: a NUL byte in any value is refused where the engine is built (config check), not at Popen -----------
SGLANG = {"model_path": "m", "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "d"}


@pytest.mark.parametrize("extra,key", [({"env": {"FOO": "a\0b"}}, "env.FOO"), ({"model_path": "m\0"}, "model_path"),
                                       ({"extra_args": ["--x", "a\0"]}, "extra_args"), ({"python": "/usr/bin/py\0"}, "python"),
                                       ({"tokenizer_path": "t\0"}, "tokenizer_path"), ({"a\0b": 1}, "a\0b")])
def test_a_nul_byte_in_the_sglang_section_is_refused_where_the_engine_is_built(extra, key):
    """TOML writes one as \\u0000. The engine took it; `config check` said ok (or, for [sglang.env], that the interpreter
    had no SGLang), and the start failed at Popen (ValueError: embedded null byte): exit 1, restarted for ever."""
    import subprocess

    from controller.daemon.engines.base import EngineError
    from controller.daemon.engines.sglang import SGLangEngine
    with pytest.raises(ValueError, match="null byte"):
        subprocess.Popen(["true"], env={"A": "a\0b"})            # (what the start met)
    with pytest.raises(EngineError) as err:
        SGLangEngine({**SGLANG, **extra})
    assert str(err.value) == (f"sglang engine: [sglang] {key} holds a NUL byte, which no command line or environment "
                              "carries") and "a\0b" not in str(err.value).replace(key, "")


def test_a_nul_byte_in_sglang_env_is_one_line_from_config_check(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "m"\nspeculative_algorithm = "EAGLE3"\n'
                    'speculative_draft_model_path = "d"\n[sglang.env]\nFOO = "a\\u0000b"\n')
    line = _one_usage_line(CliRunner().invoke(main, ["config", "check", "--config", str(path)]))
    assert line == "spec-controller: sglang engine: [sglang] env.FOO holds a NUL byte, which no command line or " \
        "environment carries"


@pytest.mark.parametrize("tail, why", [("/", "the trailing /"), ("/.", "it ends in /.")])
def test_from_launch_output_with_a_trailing_slash_writes_nothing(tmp_path, monkeypatch, tail, why):
    """-o out.toml/ or out.toml/. (a directory's name): realpath dropped them and wrote out.toml, where a shell's `>`
    refuses (helper-108 found the second)."""
    import os
    from controller.daemon import launchcfg
    monkeypatch.setattr(launchcfg, "convert", lambda *a: launchcfg.Converted({"model_path": "m"}, "0.5.17"))
    result = CliRunner().invoke(main, ["config", "from-launch", "-o", f"{tmp_path}/out.toml{tail}", "--", "python",
                                       "-m", "sglang.launch_server", "--model-path", "m"])
    assert result.exit_code == 1 and os.listdir(tmp_path) == [], result.output
    assert result.output.strip().splitlines()[-1] == (f"spec-controller: cannot write {tmp_path}/out.toml{tail}: a "
                                                      f"directory's name ({why}), not a file's; nothing written")
