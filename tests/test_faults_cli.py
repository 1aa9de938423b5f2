"""specctl with the daemon down and its database in a bad way: one line and a non-zero exit, never a
traceback, and nothing changed. Also the daemon on a read-only database refuses to start."""
import json
import os
import sqlite3
import subprocess

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.cli.options import EXIT_NOT_RUNNING
from state.db import open_store
from tests.test_daemon_e2e import run_daemon_once


def specctl(tmp, db, *args):
    return CliRunner().invoke(cli, ["--socket", str(tmp / "none.sock"), "--db", str(db), *args])


def _one_line(res, needle: str, code: int = 1) -> None:
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == code and len(lines) == 1 and needle in lines[0], (res.output, res.exception)
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), res.exception


def test_status_on_an_empty_sqlite_file(short_tmp):
    (short_tmp / "empty.db").write_bytes(b"")
    _one_line(specctl(short_tmp, short_tmp / "empty.db", "status"), "holds no spec-controller data")


@pytest.mark.parametrize("command", [["status"], ["history"], ["threshold", "pin", "3"], ["plot", "x.png"]])
def test_a_file_that_is_not_ours_is_refused_as_such_and_never_moved(short_tmp, command):
    """`--db /etc/passwd`, or another application's SQLite file: not a spec-controller database, and no
    advice to move it aside (that is for a damaged database of ours)."""
    text = short_tmp / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n" * 20)
    other = short_tmp / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE accounts (x)")
    conn.commit()
    conn.close()
    for db in (text, other):
        args = [a if a != "x.png" else str(short_tmp / "x.png") for a in command]
        res = specctl(short_tmp, db, *args)
        _one_line(res, f"specctl: {db} is not a spec-controller database")
        assert "move it aside" not in res.output and "corrupt" not in res.output
    assert text.read_text().startswith("root:x:0:0")


def test_a_damaged_database_of_ours_is_corrupt_move_it_aside(short_tmp):
    from tests.test_state import damaged_store
    db = damaged_store(short_tmp / "d.db")
    _one_line(specctl(short_tmp, db, "status"), "corrupt")
    assert "; move it aside to start afresh" in specctl(short_tmp, db, "status").output


def test_an_offline_pin_on_a_locked_database(short_tmp):
    db = short_tmp / "l.db"
    open_store(db).conn.close()
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        _one_line(specctl(short_tmp, db, "threshold", "pin", "3"), "database locked")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert sqlite3.connect(db).execute("SELECT count(*) FROM settings WHERE key = 'pinned'").fetchone()[0] == 0


def test_an_unusable_lock_file_or_runtime_dir(short_tmp):
    db = short_tmp / "u.db"
    open_store(db).conn.close()
    (short_tmp / "u.db.lock").symlink_to("/etc/hostname")
    _one_line(specctl(short_tmp, db, "threshold", "pin", "3"), "symbolic link")
    (short_tmp / "u.db.lock").unlink()
    (short_tmp / "u.db.lock").mkdir()               # the daemon cannot open it for writing
    res = run_daemon_once(short_tmp, "--db", str(db), "--socket", str(short_tmp / "s"))
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [       # (helper-172: was 1, restarted for good)
        f"spec-controller: lock file {db}.lock: Is a directory; remove it (nothing else belongs there)"], res.stderr
    (short_tmp / "file").write_text("")             # a socket "directory" that is a file: a configuration error
    res = run_daemon_once(short_tmp, "--db", str(short_tmp / "v.db"), "--socket", str(short_tmp / "file" / "s"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and f"its directory {short_tmp / 'file'} is not a directory" in lines[0]


@pytest.fixture
def readonly_db(short_tmp):
    """A database on a read-only file system (a tmpfs remounted read-only): as root, file modes do not
    stop writes, so a real read-only mount stands for a read-only disk."""
    mnt = short_tmp / "ro"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        db = open_store(mnt / "r.db")
        db.execute("INSERT INTO settings (key, value, wall) VALUES ('pinned', '5', 1)")
        db.conn.close()
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        yield mnt / "r.db"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_an_offline_pin_on_a_read_only_database(short_tmp, readonly_db):
    _one_line(specctl(short_tmp, readonly_db, "threshold", "pin", "3"), "Read-only file system")
    res = specctl(short_tmp, readonly_db, "status", "--json")
    assert res.exit_code == EXIT_NOT_RUNNING and '"threshold": 5' in res.output       # reads still work


def test_the_daemon_refuses_a_read_only_database(short_tmp, readonly_db):
    res = run_daemon_once(short_tmp, "--db", str(readonly_db), "--socket", str(short_tmp / "s"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "Read-only file system" in lines[0], res.stderr    # (h172: 1)
    assert lines[0].endswith("; give a --db on a writable file system (under the unit: leave [storage] db empty, for its "
                             "state directory)"), res.stderr


def test_the_daemon_refuses_a_database_it_may_not_write(short_tmp):
    if os.geteuid() == 0:
        pytest.skip("root writes whatever the file mode (the read-only mount case covers it)")
    db = short_tmp / "p.db"
    open_store(db).conn.close()
    db.chmod(0o444)
    res = run_daemon_once(short_tmp, "--db", str(db), "--socket", str(short_tmp / "s"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr      # (helper-172: was 1)


@pytest.mark.parametrize("args,heading", [([], "Commands:"), (["policy"], "Commands:")])   # (threshold alone: its line)
def test_a_group_without_a_command_prints_its_help_as_written(args, heading):
    """Not flattened into one line as a usage error is (the newcomer saw the whole help on one line)."""
    res = CliRunner().invoke(cli, args)
    lines = res.output.splitlines()
    assert res.exit_code == 2 and lines[0].startswith("Usage:") and heading in lines, res.output
    assert not res.output.startswith("specctl:")


def test_an_unknown_command_is_still_one_line():
    _one_line(CliRunner().invoke(cli, ["bogus"]), "specctl: no such command 'bogus' (", code=2)


@pytest.mark.parametrize("args,hint", [
    (["pin", "3"], "(did you mean 'specctl threshold pin'?)"),       # a subgroup's command typed at the top
    (["policy", "sett", "x"], "specctl: no such command 'sett' (did you mean 'specctl policy set'?)"),  # click's own
    (["polcy", "list"], "(did you mean 'specctl policy'?)"),
    (["zzz"], "(commands: history, plot, policy, simulate, status, stop, threshold)"),
    (["policy", "set"], "missing argument 'NAME' (usage: specctl policy set [OPTIONS] NAME)"),
    (["status", "--bogus"], "(usage: specctl status [OPTIONS])"),
    (["threshold", "pin", "-5"], "threshold -5 out of range (allowed 0 .. 65536)"),
    (["policy", "set", "fixed", "threshold=12"], "(did you mean '--param threshold=12'?)"),
    (["policy", "show", "nosuch"], "(policy show takes no name: it shows the active policy; 'specctl policy list'"),
])
def test_a_usage_error_says_what_to_type_in_its_one_line(args, hint):
    """A newcomer met "specctl: No such command 'pin'." and "Missing argument 'NAME'." bare."""
    res = CliRunner().invoke(cli, args, prog_name="specctl")
    _one_line(res, hint, code=2)
    kinds = ("(usage:", "(did you mean", "(commands:")       # one hint, none where the message says it all
    assert sum(map(res.output.count, kinds)) == sum(map(hint.count, kinds)), res.output


def test_the_daemon_refusing_a_file_that_is_not_ours_leaves_no_lock_file_beside_it(short_tmp):
    text = short_tmp / "notes.md"
    text.write_text("# not a database\n")
    res = run_daemon_once(short_tmp, "--concurrency", "4", "--db", str(text), "--socket", str(short_tmp / "s"))
    assert res.returncode != 0 and f"{text} is not a spec-controller database" in res.stderr, res.stderr
    assert text.read_text() == "# not a database\n" and not (short_tmp / "notes.md.lock").exists()


@pytest.mark.parametrize("message,line", [
    ("No such option: --jso (Possible options: --json, --socket)",                       # click 8.2
     "no such option: --jso (did you mean one of '--json', '--socket'?)"),
    ("No such option: --jsn Did you mean --json?", "no such option: --jsn (did you mean '--json'?)"),
    ("No such option '--jso'.\n(Did you mean one of: '--json', '--socket'?)",           # click 8.5
     "no such option '--jso' (did you mean one of '--json', '--socket'?)"),
    ("Invalid value for '--speed': 'abc' is not a valid float.", "invalid value for '--speed': 'abc' is not a valid float"),
    ("NAME must be given", "NAME must be given"),
])
def test_clicks_usage_errors_in_the_projects_style(message, line):
    import click

    from controller.cli.options import usage_line
    assert usage_line(click.UsageError(message)) == line


def test_a_mistyped_subcommand_is_suggested_with_its_whole_path():
    res = CliRunner().invoke(cli, ["threshold", "pinn"], prog_name="specctl")
    assert res.exit_code == 2 and res.stderr == (
        "specctl: no such command 'pinn' (did you mean one of 'specctl threshold pin', 'specctl threshold unpin'?)\n")


@pytest.mark.parametrize("command", [["status"], ["history"], ["history", "--json"], ["plot", "x.png"]])
def test_a_database_of_a_newer_schema_is_refused_in_one_line_and_left_alone(short_tmp, command):
    """A database a newer spec-controller wrote (PRAGMA user_version beyond this one's migrations, a column renamed):
    the daemon refused it, but specctl's reads went on to query columns this version expects: a traceback
    (sqlite3.OperationalError: no such column)."""
    from state.migrations import MIGRATIONS
    db = short_tmp / "n.db"
    open_store(db).conn.close()
    conn = sqlite3.connect(db)
    conn.execute("ALTER TABLE decisions RENAME COLUMN reason TO why")
    conn.execute("ALTER TABLE samples RENAME COLUMN tokens TO n_tokens")
    conn.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    args = [a if a != "x.png" else str(short_tmp / "x.png") for a in command]
    _one_line(specctl(short_tmp, db, *args), f"schema version {len(MIGRATIONS) + 1} is newer than this spec-controller")
    assert db.read_bytes() == before and not (short_tmp / "x.png").exists()


def test_status_of_a_database_no_start_served_says_no_threshold_is_saved(short_tmp):
    """helper-128: a database made but never served (an engine that failed to load) read 'threshold: -   speculate
    iff batch size <= -'."""
    from state.db import open_store
    open_store(short_tmp / "made.db").conn.close()
    for command in (["status"], ["threshold"]):
        res = specctl(short_tmp, short_tmp / "made.db", *command)
        line = next(line for line in res.stdout.splitlines() if line.startswith("threshold:"))
        assert res.exit_code == 3 and "none saved yet" in line and "<=" not in line, res.output


def test_status_of_a_run_that_ended_on_an_error_says_why(short_tmp):
    """review-52: after a failed start `specctl status` said NOT RUNNING and nothing else; the reason sat in the
    journal and the events table. An error before the newest start is a run before it: not said."""
    from state.db import open_store
    from state.items import INSERTS, event_item
    store = open_store(short_tmp / "x.db")
    for kind, detail in [("start", "engine=sglang pid=1"), ("error", "SGLang exited 1 before it was ready\nlast line"),
                         ("start", "engine=sglang pid=2"), ("error", "sglang engine: SGLang was not ready within 900 s")]:
        store.conn.execute(INSERTS["events"], event_item(kind, detail)[1])
    store.conn.commit()
    res = specctl(short_tmp, short_tmp / "x.db", "status")
    problems = [line for line in res.stdout.splitlines() if line.startswith("problem:")]
    assert res.exit_code == 3 and len(problems) == 1, res.output
    assert problems[0].endswith("ago: sglang engine: SGLang was not ready within 900 s"), problems
    store.conn.execute(INSERTS["events"], event_item("start", "engine=sglang pid=3")[1])
    store.conn.commit()
    res = specctl(short_tmp, short_tmp / "x.db", "status", "--json")
    problems = json.loads(res.stdout)["daemon"]["problems"]     # (helper-164: its own end, no stop on record, is)
    assert res.exit_code == 3 and len(problems) == 1 and "not ready" not in problems[0], res.output
    assert problems[0].startswith("the last run (pid 3) ended without a stop on record"), problems
    # mutation pass q: an error the run went on past (a set_threshold retried at the next tick), then a clean stop
    for kind, detail in [("error", "set_threshold(4) failed: timed out"), ("stop", "SIGTERM: exit 0")]:
        store.conn.execute(INSERTS["events"], event_item(kind, detail)[1])
    store.conn.commit()
    res = specctl(short_tmp, short_tmp / "x.db", "status", "--json")
    assert res.exit_code == 3 and json.loads(res.stdout)["daemon"]["problems"] == [], res.output
    store.conn.execute(INSERTS["events"], event_item("start", "engine=sglang pid=4")[1])
    for kind, detail in [("error", "no retune worked for 60 s"), ("stop", "no retune worked for 60 s: exit 1")]:
        store.conn.execute(INSERTS["events"], event_item(kind, detail)[1])
    store.conn.commit()
    store.conn.close()
    res = specctl(short_tmp, short_tmp / "x.db", "status")
    assert "ago: no retune worked for 60 s" in res.stdout, res.output
