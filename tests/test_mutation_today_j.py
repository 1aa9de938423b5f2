"""Tests for the gaps the mutation pass of 2026-12-06j found in the lines changed since 5512fb6 and the modules around
them (bench/results/mutation-today-2026-12-06j.md). Each test is named after the mutant it kills (test_<id>_...). Each
was checked red with its mutant applied and green on the original."""
import os
import socket

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.contract import Sample
from controller.daemon.main import main
from controller.numtext import WRITTEN, written
from tests.fakes import good, make_service


def _check_socket(path) -> tuple[int, str]:
    """`spec-controller config check` of a config file with [control] socket at `path`: (exit code, its output)."""
    import tempfile
    with tempfile.TemporaryDirectory() as where:
        config = os.path.join(where, "c.toml")
        with open(config, "w") as f:
            f.write(f'[control]\nsocket = "{path}"\n')
        res = CliRunner().invoke(main, ["config", "check", "--config", config])
    return res.exit_code, res.output


# --- EW2: [sglang] env SPEC_CONTROLLER_PLUGIN takes 'on' as the plugin reads it: any case, spaces around ------------
@pytest.mark.parametrize("value", [" On ", "TRUE", "yes"])
def test_ew2_plugin_on_in_sglang_env_is_taken_in_any_case_with_spaces(value):
    """The plugin's switch_on folds case and strips (' On ' is on); the [sglang] env check refused what it would read
    as its default, on."""
    from controller.daemon.engines.sglang import SGLangEngine
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "env": {"SPEC_CONTROLLER_PLUGIN": value}})
    assert eng.user_env == {"SPEC_CONTROLLER_PLUGIN": value}


# --- PA12: a control socket path of exactly 107 bytes is taken (108 is not) ------------------------------------------
def test_pa12_a_socket_path_of_107_bytes_is_taken_and_108_refused(short_tmp):
    base = f"{short_tmp}/"
    at_most = base + "s" * (107 - len(base))
    code, out = _check_socket(at_most)
    assert code == 0 and out.rstrip().endswith("ok (engine sim: trace mixed-shift, profile crossover-b; policy bandit)"), out
    with socket.socket(socket.AF_UNIX) as s:      # (and a socket is bound there: 107 is no figure of speech)
        s.bind(at_most)
    code, out = _check_socket(at_most + "t")
    assert code == 2 and out.splitlines() == [
        f"spec-controller: config: [control] socket {at_most}t: too long for a unix socket (108 bytes, at most 107)"]


# --- PA13: the length is counted in bytes, not characters ------------------------------------------------------------
def test_pa13_a_socket_path_is_measured_in_bytes_not_characters(short_tmp):
    """60 'é' are 60 characters and 120 bytes: bind() refuses the path, so the check must (it passed it)."""
    path = f"{short_tmp}/" + "\u00e9" * 60
    assert len(path) <= 107 < len(os.fsencode(path))
    code, out = _check_socket(path)
    assert code == 2 and out.splitlines() == [
        f"spec-controller: config: [control] socket {path}: too long for a unix socket "
        f"({len(os.fsencode(path))} bytes, at most 107)"]


# --- PA15: a symbolic link to a socket is a socket to connect to -----------------------------------------------------
def test_pa15_a_symlink_to_a_socket_is_taken_as_the_socket(short_tmp):
    """specctl connects through a link to a socket (no daemon listens behind this one: not running, no usage error).
    The daemon's start never takes one for its own socket (it binds there itself): config check refuses it as run
    does (helper-180: it said ok of what run refused), so this mutant is seen through specctl."""
    from state.db import open_store
    real, link = short_tmp / "real.sock", short_tmp / "link.sock"
    open_store(short_tmp / "x.db").conn.close()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(real))
        os.symlink(real, link)
        res = CliRunner().invoke(cli, ["--socket", str(link), "--db", str(short_tmp / "x.db"), "status"])
        code, out = _check_socket(link)
    assert res.exit_code == 3 and "not a socket" not in res.output, res.output
    assert code == 2 and out.rstrip().endswith(f"control socket path {link} is a symbolic link, which a start neither "
                                               "follows nor removes; remove it, or give another --socket"), out
    code, out = _check_socket(short_tmp)            # (what is no socket is still refused)
    assert code == 2 and out.rstrip().endswith(f"[control] socket {short_tmp}: a directory, not a socket"), out


# --- PA18: a database in a directory this user may not enter is there, and the error names the permission ------------
def test_pa18_a_database_this_user_may_not_look_at_is_a_permission_error_not_missing(short_tmp):
    """present(): PermissionError counts as present. Taken as absent, status said 'there is no database' (exit 3)
    and unpin 'the threshold was not pinned; nothing changed' (exit 0) about a database that is there. As root, acted
    out as nobody (kept out by the 0700 directory); as a user not root, by that directory's mode taken to 0000."""
    import contextlib

    from state.db import leave_wal, open_store
    from tests.test_group_access import NOBODY, acting_as
    os.chmod(short_tmp, 0o755)                      # (the socket's directory open to all; the database's not)
    private = short_tmp / "private"
    private.mkdir(mode=0o700)
    db = private / "s.db"
    store = open_store(db)
    leave_wal(store)
    store.conn.close()
    flags = ["--socket", str(short_tmp / "none.sock"), "--db", str(db)]
    assert CliRunner().invoke(cli, [*flags, "status"]).exit_code == 3      # (imports cached before acting)
    if os.geteuid() == 0:
        outsider = acting_as(NOBODY, [])
    else:
        os.chmod(private, 0)
        outsider = contextlib.nullcontext()
    try:
        with outsider:
            status = CliRunner().invoke(cli, [*flags, "status"])
            unpin = CliRunner().invoke(cli, [*flags, "threshold", "unpin"])
    finally:
        os.chmod(private, 0o700)
    for res in (status, unpin):
        assert res.exit_code == 1 and res.output == f"specctl: database {db}: Permission denied\n", res.output


# --- IN5, IN10: the stalled telemetry's line --------------------------------------------------------------------------
def _rejecting_service(tmp_path):
    service, writer = make_service(tmp_path)
    real = [1000.0]
    service.ingest.gate.monotonic = lambda: real[0]
    return service, writer, real


def test_in5_samples_still_arrive_while_the_newest_reject_is_a_full_window_old(tmp_path):
    """stalled(): 'samples still arrive (one within window_s)': the newest reject exactly 60 s ago is within."""
    service, writer, real = _rejecting_service(tmp_path)
    try:
        bad = Sample(service.clock.now() + 3600.0, 4, 0, 4, 0.01)      # an hour ahead: "time"
        service.ingest.on_sample(bad)
        real[0] += 60.0
        service.ingest.on_sample(bad)
        real[0] += 60.0
        assert service.status()["daemon"]["problems"] == [
            "telemetry: every sample rejected for 120 s (time 2); nothing is learned"]
        real[0] += 0.5
        assert service.status()["daemon"]["problems"] == []
    finally:
        writer.stop()


def test_in10_every_kind_of_reject_is_named_with_its_count(tmp_path):
    service, writer, real = _rejecting_service(tmp_path)
    try:
        now = service.clock.now()
        for step in range(7):       # 60 s of rejects of two kinds
            service.ingest.on_sample(Sample(now + 3600.0, 4, 0, 4, 0.01) if step % 2 else Sample(now, 4, 0, 4, 0.0))
            real[0] += 10.0 if step < 6 else 0.0
        assert service.status()["daemon"]["problems"] == [
            "telemetry: every sample rejected for 60 s (step_s 4, time 3); nothing is learned"]
        service.ingest.on_sample(good(service.clock.now()))
        assert service.status()["daemon"]["problems"] == []
    finally:
        writer.stop()


# --- OP3, OP7, OP8: specctl's number arguments as the operator typed them ---------------------------------------------
@pytest.mark.parametrize("flag,kind", [("--concurrency", "integers"), ("--arrival-rate", "numbers")])
def test_op3_a_list_that_is_no_list_of_numbers_says_what_it_takes(tmp_path, flag, kind):
    res = CliRunner().invoke(cli, ["--socket", str(tmp_path / "none.sock"), "simulate", flag, "1,x"])
    assert res.exit_code == 2
    assert res.output == \
        f"specctl: invalid value for {flag}: '1,x' is not a comma-separated list of {kind} " \
        f"({written(int if kind == 'integers' else float)})\n"


@pytest.mark.parametrize("args,said", [
    (["stop", "--timeout", "1e4"], "--timeout 1e4 out of range (allowed 1 .. 3600)"),
    (["history", "--limit", "10001"], "--limit 10001 out of range (allowed 1 .. 10000)")])
def test_op7_a_value_out_of_range_is_shown_as_typed(tmp_path, args, said):
    res = CliRunner().invoke(cli, ["--socket", str(tmp_path / "none.sock"), *args])
    assert res.exit_code == 2 and res.output == f"specctl: {said}\n", res.output


def test_op8_a_number_argument_with_spaces_around_is_refused(tmp_path):
    """A quoted ' 7' from a script: int() took it, and so did specctl (stripped) while '+7' was refused; numtext's one
    rule takes neither (helper-118), and nothing is saved."""
    from state.db import open_store
    from state import queries
    open_store(tmp_path / "s.db").conn.close()
    flags = ["--socket", str(tmp_path / "none.sock"), "--db", str(tmp_path / "s.db")]
    res = CliRunner().invoke(cli, [*flags, "threshold", "pin", " 7 "])
    assert res.exit_code == 2 and res.output == f"specctl: threshold ' 7 ' is not an integer ({written(int, 0)})\n", res.output
    db = open_store(tmp_path / "s.db", readonly=True)
    try:
        assert "pinned" not in queries.settings(db)
    finally:
        db.conn.close()
