"""helper-168: what the last reviewers reported and left alone, each test red before its fix."""
import os

import pytest
from click.testing import CliRunner

from controller.daemon import main as daemon_main
from controller.daemon.sockprobe import SocketRefused, check_socket_free
from tests.test_denied_step import _as_owner


# --- a refusal by the user's own state folder names it and the chmod, in the daemon as in specctl ---------------------
@pytest.fixture
def state(short_tmp):
    os.chmod(short_tmp, 0o755)      # (nobody passes into the test's folder)
    folder = short_tmp / "state"
    folder.mkdir()
    CliRunner().invoke(daemon_main.main, ["config", "check", "--db", str(short_tmp / "a.db")])   # (imports, as root)
    yield folder
    os.chmod(folder, 0o700)


def test_run_on_its_own_state_folder_at_000_names_the_folder_and_the_chmod(state):
    """`spec-controller run` said only 'control socket path ...: Permission denied'."""
    with _as_owner(state):
        os.chmod(state, 0)
        try:
            with pytest.raises(SocketRefused) as err:
                check_socket_free(state / "control.sock")
        finally:
            os.chmod(state, 0o700)
    assert str(err.value) == (f"control socket path {state / 'control.sock'}: Permission denied (the folder {state} is "
                              f"yours but its mode 0 refuses you: chmod u+rwx {state})")


def test_config_check_on_its_own_state_folder_at_500_names_the_chmod(state):
    with _as_owner(state):
        os.chmod(state, 0o500)
        try:
            res = CliRunner().invoke(daemon_main.main, ["config", "check", "--db", str(state / "x.db"),
                                                        "--socket", str(state / "c.sock")])
        finally:
            os.chmod(state, 0o700)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (f"spec-controller: lock file {state}/x.db.lock cannot be created in {state} (Permission "
                                  f"denied) (the folder {state} is yours but its mode 500 refuses you: chmod u+rwx "
                                  f"{state})")      # (run's line: helper-176)


# --- an offline write where the database cannot be made: the folder is named, not a database that is not there -------
def test_an_offline_policy_set_in_a_state_folder_that_takes_no_new_file_names_the_folder(state, monkeypatch):
    from controller.cli.main import cli
    from tests.conftest import UNIT_PATH_READERS
    for module in UNIT_PATH_READERS:       # (the conftest's stand-in lies in pytest's folder, which nobody cannot enter)
        monkeypatch.setattr(f"{module}.UNIT_DB", state.parent / "no-service" / "spec-controller.db")
        monkeypatch.setattr(f"{module}.UNIT_SOCKET", state.parent / "no-service" / "control.sock")
    folder = state.parent / "spec-controller"       # (the default database's, under XDG_STATE_HOME: no --db given)
    folder.mkdir()
    env = {"XDG_STATE_HOME": str(state.parent), "SPECCTL_DB": None, "SPECCTL_SOCKET": None, "STATE_DIRECTORY": None,
           "RUNTIME_DIRECTORY": None}
    CliRunner().invoke(cli, ["--socket", str(state / "none.sock"), "--db", str(state / "spare.db"), "policy", "set",
                             "ucb"])            # (imports, as root: this Python may live in /root)
    with _as_owner(folder):
        os.chmod(folder, 0o500)
        try:
            res = CliRunner(env=env).invoke(cli, ["policy", "set", "ucb"])
        finally:
            os.chmod(folder, 0o700)
    db = folder / "spec-controller.db"
    assert res.exit_code == 1, res.output
    assert res.output.strip() == f"specctl: database {db} cannot be created in {folder} (Permission denied)"
    assert not db.exists()


# --- config check names a policy given on the command line as the flag's, not the config's ----------------------------
@pytest.mark.parametrize("args,named", [
    (["--policy", "thompson"], "policy thompson given on the command line"),
    (["--set", "policy.name=thompson"], "policy thompson given on the command line"),
    (["--config", "FILE"], "[policy] thompson in the config"),
    ([], "the default policy bandit")])
def test_config_check_names_where_the_policy_a_first_start_runs_was_given(short_tmp, args, named):
    from controller.cli.main import cli
    from state.db import open_store
    db = short_tmp / "s.db"
    open_store(db).conn.close()
    saved = CliRunner().invoke(cli, ["--db", str(db), "--socket", str(short_tmp / "c.sock"), "policy", "set",
                                     "ucb", "--param", "c=3"])
    assert saved.exit_code == 0, saved.output
    (config := short_tmp / "c.toml").write_text('[policy]\nname = "thompson"\n' if "FILE" in args else "")
    args = [a if a != "FILE" else str(config) for a in args] + ([] if "FILE" in args else ["--config", str(config)])
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--db", str(db), "--socket",
                                                str(short_tmp / "c.sock"), *args])
    assert res.exit_code == 0 and res.stdout.strip().endswith(
        f"policy ucb (c=3) saved in {db}, which run resumes ({named} is a first start's only: `specctl policy set` "
        "switches))"), res.output


# --- a range bounded by another setting names that setting's value ---------------------------------------------------
def test_min_threshold_above_max_threshold_names_max_thresholds_value(short_tmp):
    (config := short_tmp / "c.toml").write_text("[guard]\nmax_threshold = 10\n")
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(config), "--set",
                                                "guard.min_threshold=50"])
    assert res.exit_code == 2 and res.stderr.strip() == (
        "spec-controller: config: [guard] setting min_threshold=50 out of range (allowed 0 .. max_threshold, 10) "
        "(given on the command line: --set guard.min_threshold=50)"), res.output


# --- a config's number refused in one wording, whichever section ---------------------------------------------------
@pytest.mark.parametrize("toml,said", [
    ('[sim]\nspeed = "fast"\n', "[sim] speed='fast' must be a number"),
    ('[guard]\nmin_gain = "fast"\n', "[guard] setting min_gain='fast' must be a number"),
    ('[sim]\nconcurrency = "4"\n', "[sim] concurrency='4' must be an integer, not text: write it unquoted "
                                   "(concurrency = 4)"),
    ('[guard]\nmin_threshold = "4"\n', "[guard] setting min_threshold='4' must be an integer, not text: write it "
                                       "unquoted (min_threshold = 4)")])
def test_a_number_the_config_refuses_is_worded_alike_in_every_section(short_tmp, toml, said):
    """[sim] said "must be a number" and [guard] "is not a number", two checks of one thing; a quoted number got the
    hint how to write it in [guard] only."""
    (config := short_tmp / "c.toml").write_text(toml)
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(config)])
    assert res.exit_code == 2 and res.stderr.strip() == f"spec-controller: config: {said}", res.output


# --- a policy parameter refused shows its value as the user wrote it (JSON's null / true), not Python's -------------
@pytest.fixture
def api(short_tmp):
    """A real service (fake engine) behind a real control socket: (post(path, raw body) -> (status, error line))."""
    import json
    import socket

    from controller.daemon.api import ControlServer
    from tests.fakes import make_service
    svc, writer = make_service(short_tmp)
    server = ControlServer(short_tmp / "c.sock", svc)
    server.start()

    def post(path: str, body: bytes) -> tuple[int, str]:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(30)
            s.connect(str(short_tmp / "c.sock"))
            s.sendall(f"POST {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                      + body)
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
        head, _, data = raw.partition(b"\r\n\r\n")
        return int(head.split()[1]), json.loads(data).get("error", "")
    post.service = svc
    yield post
    server.stop()
    writer.stop()


@pytest.mark.parametrize("value,said", [("null", "null"), ("true", "true"), ("[1]", "[1]"), ('{"a": null}', "{'a': null}"),
                                        ('"x"', "'x'")])      # (text as every refusal quotes it)
def test_a_policy_parameter_from_the_api_is_echoed_in_jsons_spelling(api, value, said):
    """It said c=None, c=True, {'a': None}: Python's spelling of what came as JSON."""
    status, error = api("/policy", b'{"name": "ucb", "params": {"c": %s}}' % value.encode())
    assert status == 400 and error.startswith(f"policy ucb: parameter c={said} is not a number (allowed 0 .. 100"), error


def test_a_config_value_is_echoed_as_toml_writes_it(short_tmp):
    (config := short_tmp / "c.toml").write_text('[policy]\nname = "ucb"\n[policy.params]\nc = true\n'
                                                '[guard]\nmin_gain = false\n')
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(config)])
    assert res.exit_code == 2 and res.stderr.strip() == (
        "spec-controller: config: [guard] setting min_gain=false must be a number"), res.output
    config.write_text('[policy]\nname = "ucb"\n[policy.params]\nc = true\n')
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--config", str(config)])
    assert res.exit_code == 2 and res.stderr.strip() == (
        "spec-controller: config: [policy] policy ucb: parameter c=true is not a number (allowed 0 .. 100)"), res.output


# --- another application's database: a config error for run and config check alike --------------------------------
@pytest.mark.parametrize("version", [0, 1])
def test_config_check_refuses_another_applications_database_as_run_does(short_tmp, version):
    """config check said ok (with a note that the saved policy could not be read), and run then refused it, exit 1,
    restarted by the unit every 5 s. tests/test_review_h114.py: run's exit 2."""
    from tests.test_review_h114 import _sqlite_file
    db = short_tmp / "x.db"
    before = _sqlite_file(db, version)
    res = CliRunner().invoke(daemon_main.main, ["config", "check", "--db", str(db), "--socket", str(short_tmp / "s")])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"spec-controller: {db} is not a spec-controller database") and \
        len(res.stderr.strip().splitlines()) == 1, res.output
    assert db.read_bytes() == before and not (short_tmp / "x.db.lock").exists()


# --- the control API's bodies are UTF-8 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-16-le", "utf-32-be"])
def test_a_body_that_is_not_utf8_is_refused_and_changes_nothing(api, encoding):
    """json.loads detects UTF-16 and UTF-32 in bytes: such a pin was applied. RFC 8259 8.1: JSON exchanged between
    systems is UTF-8. (Without a byte order mark, UTF-16 / UTF-32 text in ASCII is UTF-8 with NULs: no JSON.)"""
    status, error = api("/threshold/pin", '{"threshold": 5}'.encode(encoding))
    assert status == 400 and error in ("body is not UTF-8 (a JSON body is UTF-8, RFC 8259)", "body is not valid JSON")
    assert api.service.loop.pinned is None


def test_a_utf8_body_with_a_byte_order_mark_is_still_taken(api):
    """(RFC 8259: a parser may ignore it; json.loads did)"""
    status, _ = api("/threshold/pin", '\ufeff{"threshold": 5}'.encode())
    assert status == 200 and api.service.loop.pinned == 5
