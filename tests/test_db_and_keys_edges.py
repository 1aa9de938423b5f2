"""Edges of today's boundaries that a mutation pass (helper-62, 44 mutants, 13 survived) found untested: specctl's
--db check against a real daemon, the --config YAML key, the 401 hint, an SGLang that exits 0 before it is ready."""
import json
import os
import urllib.error

import pytest
from click.testing import CliRunner

from controller.cli import common
import controller.cli.status  # noqa: F401  (imported before common.lock_holder is patched: it binds its own)
from controller.cli.main import cli
from controller.daemon.engines.base import EngineError
from controller.daemon.engines.sglang import SGLangEngine
from controller.daemon.engines.sglang_flags import refused_hint
from tests.conftest import fake_sglang_python
from tests.daemon_proc import StartingDaemon
from tests.test_cli_daemon import _copy_db, daemon  # noqa: F401  (module-scoped daemon fixture)

BASE = {"model_path": "/m", "speculative_algorithm": "EAGLE3"}


def _status_db_as(monkeypatch, served):
    """/status answers as a daemon of an older version would: its db as it was given (here relative)."""
    real = common.request

    def older(sock, method, path, body=None, **kw):
        answer = real(sock, method, path, body, **kw)
        if path == "/status":
            answer["daemon"]["db"] = served
        return answer
    monkeypatch.setattr(common, "request", older)


# the check runs once per invocation (a command calling the daemon twice asks /status once)
def test_check_db_asks_the_daemon_once_per_invocation(daemon, monkeypatch):
    asked, real = [], common.request
    monkeypatch.setattr(common, "request", lambda s, m, p, *a, **k: asked.append(p) or real(s, m, p, *a, **k))
    ctx = common.Ctx(str(daemon.socket), str(daemon.db))
    common.call(ctx, "GET", "/policy")
    common.call(ctx, "GET", "/policy")
    assert asked == ["/status", "/policy", "/policy"]


# an unreadable lock is no holder found
def test_an_unreadable_lock_reads_as_no_daemon_holding_it(daemon, short_tmp, monkeypatch):
    from state.db import open_store
    other = short_tmp / "other.db"
    open_store(other).conn.close()
    monkeypatch.setattr(common, "lock_holder", lambda db: common.UNREADABLE)
    res = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(other), "status"])
    # (helper-179: it said 'daemon is not running', which an unreadable lock cannot tell; it says so, and why)
    assert res.exit_code == 3 and f"specctl: no daemon answers (no daemon holds {other}" in res.stderr, res.output
    assert f"whether a daemon holds {other} (one still starting" in res.stderr, res.output


# the lock's pid answers for a daemon whose reported db cannot be compared
def test_the_lock_holder_answering_is_the_dbs_daemon_whatever_db_it_reports(daemon, monkeypatch):
    _status_db_as(monkeypatch, daemon.db.name)           # (relative: not comparable)
    res = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(daemon.db), "status", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["daemon"]["pid"] == daemon.proc.pid, res.output


# the reported path is compared as a path (realpath), not as a string
def test_a_db_spelled_another_way_with_an_unreadable_lock_is_the_daemons_own(daemon, monkeypatch):
    monkeypatch.setattr(common, "lock_holder", lambda db: common.UNREADABLE)
    monkeypatch.chdir(daemon.db.parent)
    res = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", daemon.db.name, "status", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["daemon"]["running"] is True, res.output


# a relative db reported is the daemon's working directory's, never specctl's
def test_a_relative_db_reported_is_not_taken_for_specctls_own(daemon, short_tmp, monkeypatch):
    from state.db import open_store
    open_store(short_tmp / "state.db").conn.close()
    _status_db_as(monkeypatch, "state.db")
    monkeypatch.chdir(short_tmp)
    res = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", "state.db", "status", "--json"])
    assert res.exit_code == 3 and json.loads(res.stdout)["daemon"]["running"] is False, res.output


# a holder that recorded no socket is not "elsewhere": status reads it as starting, a change is refused
def test_a_holder_of_no_recorded_socket_beside_another_daemon_reads_as_starting(daemon, tmp_path):
    import os
    db = _copy_db(daemon, tmp_path / "copy.db")
    with StartingDaemon(db, tmp_path / "no.sock", record=False):
        res = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(db), "status", "--json"])
        assert res.exit_code == 4 and json.loads(res.stdout)["daemon"]["pid"] == os.getpid(), res.output
        pin = CliRunner().invoke(cli, ["--socket", str(daemon.socket), "--db", str(db), "threshold", "pin", "3"])
        assert pin.exit_code == 2 and f"daemon pid {os.getpid()} holding it does not answer there" in pin.stderr, \
            pin.output


# a --config with no file after it: one line, not a crash, and not the daemon's next flag taken for the file
def test_a_trailing_config_flag_is_refused():
    with pytest.raises(EngineError, match="extra_args ends with --config: name the YAML file after it"):
        SGLangEngine({**BASE, "extra_args": ["--config"]})


# YAML allows blanks before the colon
def test_a_yaml_key_with_a_blank_before_its_colon_is_seen(tmp_path):
    (tmp_path / "sg.yaml").write_text("api-key : sk-yaml\n")
    with pytest.raises(EngineError, match="sets api_key: set it in \\[sglang\\] instead"):
        SGLangEngine({**BASE, "extra_args": ["--config", str(tmp_path / "sg.yaml")]})


# 403 gets the hint as 401 does; other failures none
@pytest.mark.parametrize("code,hinted", [(401, True), (403, True), (500, False)])
def test_the_refused_hint_is_for_401_and_403_only(code, hinted):
    assert ("SGLang refused the key" in refused_hint(urllib.error.HTTPError("http://x", code, "x", {}, None))) is hinted
    assert refused_hint(OSError("connection refused")) == ""


# an SGLang that exits 0 before it is ready
def test_not_ready_names_an_exit_code_of_zero(short_tmp, monkeypatch):
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    monkeypatch.setattr("controller.daemon.engines.sglang.port_reason", lambda host, port: None)
    eng = SGLangEngine({**BASE, "port": 1, "python": str(fake_sglang_python(short_tmp / "python", "exit 0"))})
    eng.start(lambda s: None)
    eng.proc.wait(timeout=30)
    reason = eng.not_ready_reason(0.5)
    assert reason.startswith("SGLang exited with code 0 before it was ready"), reason
    eng.stop()


# an offline change to a database no daemon ever kept (a mistyped --db / SPECCTL_DB) is refused, creating nothing;
# the same change to one that exists is saved for the next start
@pytest.mark.parametrize("change", [["policy", "set", "bandit"], ["threshold", "pin", "4"]])
def test_offline_change_to_a_missing_database_is_refused(short_tmp, change):
    typo = short_tmp / "spec-controler" / "state.db"
    base = ["--socket", str(short_tmp / "none.sock")]
    res = CliRunner().invoke(cli, [*base, "--db", str(typo), *change])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"specctl: no database at {typo} (--db / SPECCTL_DB)") and res.stderr.count("\n") == 1
    assert res.stderr.rstrip().endswith("nothing changed") and not typo.parent.exists()
    res = CliRunner(env={"SPECCTL_DB": str(typo)}).invoke(cli, [*base, *change])
    assert res.exit_code == 2 and not typo.parent.exists(), res.output
    from state.db import open_store
    open_store(short_tmp / "kept.db").conn.close()
    res = CliRunner().invoke(cli, [*base, "--db", str(short_tmp / "kept.db"), *change])
    assert res.exit_code == 0 and f"saved to {short_tmp / 'kept.db'}" in res.output, res.output


# a mistyped --db is one usage error whichever command meets it, a daemon answering on the socket or not
COMMANDS = [["status"], ["threshold"], ["history"], ["policy", "show"], ["plot", "x.png"], ["stop"],
            ["threshold", "unpin"], ["policy", "set", "never"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_mistyped_db_is_the_same_usage_error_for_every_command(daemon, short_tmp, command, monkeypatch):
    monkeypatch.chdir(short_tmp)
    typo = short_tmp / "spec-controler.db"
    for sock in (daemon.socket, short_tmp / "none.sock"):
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(typo), *command])
        assert res.exit_code == 2, (sock, res.output)
        assert res.stderr.startswith(f"specctl: no database at {typo} (--db / SPECCTL_DB)"), res.stderr
        assert res.stderr.count("\n") == 1, res.stderr
        change = command in (["stop"], ["threshold", "unpin"], ["policy", "set", "never"])   # (a read changes nothing)
        assert res.stderr.rstrip().endswith("nothing changed") == change, res.stderr
        asked = sock == daemon.socket and command[0] != "plot"      # (plot reads the file only: asks no daemon)
        assert (f"the daemon on {sock} keeps {daemon.db}" in res.stderr) == asked, res.stderr
        assert not typo.exists() and not (short_tmp / "x.png").exists()
    assert daemon.call("GET", "/status")["daemon"]["running"]
    assert daemon.call("GET", "/policy")["name"] != "never"


# helper-65's review of the above
def test_policy_list_still_lists_where_the_active_policy_cannot_be_read(short_tmp, monkeypatch):
    """Marking the active policy is extra: a damaged default database leaves the list unmarked, exit 0, a reason on
    stderr (before the mark, policy list read nothing and always listed)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp / "xdg"))
    (short_tmp / "xdg" / "spec-controller").mkdir(parents=True)
    (short_tmp / "xdg" / "spec-controller" / "spec-controller.db").write_text("not sqlite")
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "policy", "list"])
    assert res.exit_code == 0 and "thompson (alias: bandit): " in res.stdout and "[active" not in res.stdout, res.output
    assert res.stderr.startswith("specctl: the active policy is not marked: ") and res.stderr.count("\n") == 1


def test_policy_list_with_socket_alone_asks_the_daemon_there(daemon):
    """--socket alone: the default database is not that daemon's (here there is none): its own answer marks."""
    name = daemon.call("GET", "/policy")["name"]
    rows = json.loads(CliRunner().invoke(cli, ["--socket", str(daemon.socket), "policy", "list", "--json"]).stdout)
    from policies import resolve_name
    assert [r["name"] for r in rows if r["active"]] == [resolve_name(name)]


def test_a_database_about_to_be_created_by_its_daemon_is_not_called_missing(short_tmp):
    """Between a starting daemon's lock and its database there is an instant: the daemon holds it, not a typo."""
    db = short_tmp / "fresh.db"
    with StartingDaemon(db, short_tmp / "none.sock"):
        db.unlink(missing_ok=True)
        res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(db), "status"])
    assert res.exit_code == 4 and res.stderr == f"specctl: daemon pid {os.getpid()} holds {db} but has not created " \
        "it yet (starting)\n", res.output


@pytest.mark.parametrize("args", [["--db", "", "status"], ["--socket", "", "status"], ["status", "--db", ""],
                                  ["threshold", "pin", "3", "--socket", ""]])
def test_an_empty_path_is_a_usage_error_not_the_default(short_tmp, args, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp / "xdg"))
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and "is empty: give a path" in res.stderr and res.stderr.count("\n") == 1, res.output
    assert not (short_tmp / "xdg").exists()


def test_a_lock_this_user_may_not_look_at_is_one_line(short_tmp, monkeypatch):
    """DaemonLock.holder used Path.exists, which raises PermissionError in a directory this user may not enter (a
    --db there): specctl printed a traceback (helper-65, as root without capabilities)."""
    import state.db
    real = os.lstat
    monkeypatch.setattr(state.db.os, "lstat", lambda p, *a, **k: (_ for _ in ()).throw(PermissionError(13, "Permission "
                        "denied")) if str(p).endswith(".lock") else real(p, *a, **k))
    from state.db import open_store
    open_store(short_tmp / "x.db").conn.close()
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(short_tmp / "x.db"),
                                   "threshold", "pin", "3"])
    assert res.exit_code == 1 and not isinstance(res.exception, PermissionError), res.exception
    assert res.stderr == f"specctl: lock file {short_tmp / 'x.db'}.lock: Permission denied\n", res.output
