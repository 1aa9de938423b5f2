"""helper's mutation check of the lines changed since 070c65b (bench/results/mutation-today-2026-12-07u.md): a test
for each surviving mutant that is not equivalent, named by its id, and for the defects found beside them. No
wall-clock assertions: a race's window is held open by a hook."""
from __future__ import annotations

import contextlib
import os
import sqlite3
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.cli.options import EXIT_STARTING
from state.db import StoreError
from state.lock import DaemonLock
from tests.daemon_proc import ROOT
from tests.test_stop_while_draining import _closing_daemon, held

# the exec by its own path: searched along PATH, an E2BIG there was reported as the EACCES of a folder on the way
# (a user other than root, root's PATH kept by runuser)
TRUE = shutil.which("true") or "/bin/true"

# another pid namespace's daemon, as test_stop_other_namespace.py has it: its pid is this test's (a process alive
# here: the host's process of that number), its namespace 1 (no namespace's inode)
OTHER = f"{os.getpid()} 1"


# --- state/lock.py: what the lock file says ---------------------------------------------------------------------------
_EMPTY_HOLDER = """
import fcntl, os, sys

fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


@contextlib.contextmanager
def _held_empty(db: Path):
    """The lock held with nothing written in it (a daemon between acquire's truncation and its write, or whatever
    else takes the flock): a holder all the same."""
    child = subprocess.Popen([sys.executable, "-c", _EMPTY_HOLDER, f"{db}.lock"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        yield child
    finally:
        child.stdin.close()
        child.wait(10)


def test_pid_in_empty_words_split_space_a_lock_held_with_nothing_written_is_held_by_pid_unknown(short_tmp):
    """pid-in-empty: `or ["?"]` -> `or [""]`; words-split-space: `.split()` -> `.split(" ")` (''.split(' ') is ['']).
    Either way an empty lock file that is held gave holder() '', which specctl reads as no holder: `stop` said 'daemon
    is not running' (exit 3) beside a process holding the database."""
    db, sock = short_tmp / "s.db", short_tmp / "none.sock"
    from state.db import open_store
    open_store(db).conn.close()
    with _held_empty(db):
        assert DaemonLock(db).holder() == "?"
        res = CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "stop", "--timeout", "1"])
    assert res.exit_code == EXIT_STARTING, res.output
    assert res.stderr.startswith(f"specctl: daemon pid ? holds {db}"), res.stderr


def _always_there(monkeypatch, tmp: Path, times: int) -> list[int]:
    """A hook on the lock file's opens: at each of the first `times` opens that may make it, another start's lock file
    is put there first (a hard link to a file of its own, so that a file made here is told from it), and where this
    open was an O_EXCL one, that start, refused, removes it again. Returns the count of such opens."""
    from state import lock as lockmod
    real = lockmod.open_nofollow
    theirs = tmp / "theirs"
    theirs.write_text("")
    seen = [0]

    def hook(path, flags, *args):
        if flags & os.O_CREAT and seen[0] < times:
            seen[0] += 1
            os.link(theirs, path)
            try:
                return real(path, flags, *args)
            finally:
                if flags & os.O_EXCL:
                    os.unlink(path)
        return real(path, flags, *args)
    monkeypatch.setattr(lockmod, "open_nofollow", hook)
    return seen


def test_made_final_false_range_1_the_last_try_makes_it_and_says_so(short_tmp, monkeypatch):
    """made-final-false: the last O_EXCL open (after three tries each met a lock file there and then gone) said not
    made; made-range-1: one try, not three. Here three tries meet another start's lock file, there at the O_EXCL open
    and gone at the plain one: the last open makes it, holds it, and says made (a refused start removes it)."""
    db = short_tmp / "s.db"
    seen = _always_there(monkeypatch, short_tmp, 3)
    lock = DaemonLock(db)
    lock.acquire()
    try:
        assert seen[0] == 3 and lock.created
        assert os.stat(f"{db}.lock").st_ino != os.stat(short_tmp / "theirs").st_ino
    finally:
        lock.release(remove_if_created=True)
    assert not Path(f"{db}.lock").exists()


def test_made_final_no_excl_a_file_there_at_the_last_try_is_refused_not_taken_for_made(short_tmp, monkeypatch):
    """made-final-no-excl: the last open without O_EXCL took a file put there (whoever may write the folder) for one
    made here: root's held_off would give it (a hard link: the file it names) to the database's owner. Four opens
    meeting another's file: a StoreError in one line, nothing taken."""
    db = short_tmp / "s.db"
    _always_there(monkeypatch, short_tmp, 4)
    lock = DaemonLock(db)
    with pytest.raises(StoreError, match="File exists"):
        lock.acquire()
    assert lock.created is False and not Path(f"{db}.lock").exists()


# --- controller/cli/stop.py: a daemon of another pid namespace --------------------------------------------------------
def _let_go(child: subprocess.Popen) -> None:
    """The holder lets go of the lock and exits (the end of its drain)."""
    if child.poll() is None:
        child.stdin.write("go\n")
        child.stdin.flush()
        child.wait(10)


def _dropping_daemon(path: Path, pid: int, db: Path, before_drop=lambda: None) -> threading.Thread:
    """A daemon at the end of its drain on a socket (test_stop_while_draining's): answers GET /status (pid, db), then
    reads POST /stop, runs before_drop and closes the connection without a word, its socket gone."""
    thread, seen = _closing_daemon(path, {"daemon": {"pid": pid, "db": str(db), "running": True}}, before_drop)
    thread.seen = seen
    return thread


def _stop(db: Path, sock: Path, timeout: str = "5"):
    return CliRunner().invoke(cli, ["--socket", str(sock), "--db", str(db), "stop", "--timeout", timeout])


def test_dropped_seen_true_a_dropped_stop_of_another_namespaces_daemon_ends_at_the_locks_release(short_tmp):
    """dropped-seen-true: the dropped /stop's wait took the pid in the lock for a process here and waited for its exit
    (this test's own pid here, the host's process of that number in life: 'had not exited after 5 s', exit 1). The
    lock says the other namespace: the release is the end. (Its lock is let go of once /stop is dropped: a timer
    lets the wait begin first; the assertions do not depend on when.)"""
    db, sock = short_tmp / "state.db", short_tmp / "d.sock"
    with held(db, sock, stopping=True, written=OTHER) as child:
        server = _dropping_daemon(sock, os.getpid(), db,
                                  lambda: threading.Timer(0.2, _let_go, [child]).start())
        res = _stop(db, sock)
        server.join(10)
    assert server.seen == ["GET /status HTTP/1.1", "POST /stop HTTP/1.1"]
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"daemon pid {os.getpid()} stopped (it was already stopping)"


def test_defect_a_drain_whose_lock_is_let_go_of_as_its_stop_is_dropped_is_another_namespaces_still(short_tmp):
    """Defect (found beside dropped-seen-true): held_here read the namespace only from a lock still held. A daemon of
    another namespace that drops /stop at its drain's end and lets go of its lock before specctl looks (as it does,
    ~0.1 s later) was taken for one of this namespace: specctl waited for its pid here to exit (the host's process of
    that number; a container's pid 1: init) and said 'had not exited', exit 1. release() leaves the lock file as
    written: the namespace written beside that pid is read there. Here the lock is let go of before the drop."""
    db, sock = short_tmp / "state.db", short_tmp / "d.sock"
    with held(db, sock, stopping=True, written=OTHER) as child:
        server = _dropping_daemon(sock, os.getpid(), db, lambda: _let_go(child))
        res = _stop(db, sock, "1")
        server.join(10)
    assert server.seen == ["GET /status HTTP/1.1", "POST /stop HTTP/1.1"]
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"daemon pid {os.getpid()} stopped (it was already stopping)"


def test_defect_a_drain_found_by_its_lock_let_go_of_while_specctl_looks_is_another_namespaces_still(short_tmp,
                                                                                                   monkeypatch):
    """The same defect on the path of a socket already gone: the lock held at specctl's first look, let go of before
    held_here's (the hook lets it go as find_holder returns)."""
    from controller.cli import stop as stopmod
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    with held(db, sock, stopping=True, written=OTHER) as child:
        real = stopmod.find_holder

        def found_then_let_go(*args):
            found = real(*args)
            _let_go(child)
            return found
        monkeypatch.setattr(stopmod, "find_holder", found_then_let_go)
        res = _stop(db, sock, "1")
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"daemon pid {os.getpid()} stopped (it was already stopping)"


def test_a_lock_file_of_a_later_daemon_does_not_lend_its_namespace_to_an_earlier_pid(short_tmp):
    """(the fix's own check) The namespace read from a lock let go of is the one written beside that pid: a lock file
    another pid wrote since says nothing of it."""
    db = short_tmp / "s.db"
    lock = DaemonLock(db)
    lock.acquire(namespace=7)
    lock.release()
    assert DaemonLock(db).holder_namespace(str(os.getpid())) == 7
    assert DaemonLock(db).holder_namespace(str(os.getpid() + 1)) is None
    assert DaemonLock(db).holder_namespace() is None           # (none holds it)


def test_answerless_who_kill_plain_a_daemon_of_another_namespace_with_no_start_on_record(short_tmp):
    """answerless-who-plain / answerless-kill-plain: the line for a holder that does not answer and has no socket on
    record (its start not yet written) named it and told to kill it as a process here. The other-namespace test
    covered only the branch of a socket on record."""
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    with held(db, sock, stopping=False, written=OTHER):
        with sqlite3.connect(db) as conn:
            conn.execute("DELETE FROM events")
        res = _stop(db, sock, "1")
    assert res.exit_code == EXIT_STARTING, res.output
    line = res.stderr.strip()
    assert "\n" not in line and "does not answer" in line, line
    assert f"daemon pid {os.getpid()} (of another pid namespace: a container's) holds" in line, line
    assert f"(kill -TERM {os.getpid()} where it runs: its pid names another process here stops it)" in line, line



def test_ns_open_raise_a_lock_file_removed_while_specctl_looks_is_no_traceback(short_tmp, monkeypatch):
    """ns-open-raise: holder_namespace's refused open (`return None` -> `raise`) let a StoreError out of `specctl stop`.
    A start refused after it took the lock removes the lock file it made while still holding it (release(
    remove_if_created=True)): specctl, which saw the holder, then finds no file (the hook removes it as find_holder
    returns). One line, the holder named, as before."""
    from controller.cli import stop as stopmod
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    with held(db, sock, stopping=False):
        real = stopmod.find_holder

        def found_then_removed(*args):
            found = real(*args)
            os.unlink(f"{db}.lock")
            return found
        monkeypatch.setattr(stopmod, "find_holder", found_then_removed)
        res = _stop(db, sock, "1")
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == EXIT_STARTING, res.output
    assert res.stderr.startswith("specctl: daemon pid ") and res.stderr.count("\n") == 1, res.stderr

@pytest.mark.parametrize("word", ["x1", "\u00b2"])
def test_ns_no_isdigit_a_second_word_that_is_no_namespace_is_none(short_tmp, word):
    """ns-no-isdigit: `and words[1].isdigit()` dropped: a lock file whose second word is no number (another version's,
    a tampered one) made int() raise out of `specctl stop`. Defect beside it: str.isdigit() takes '\u00b2' (a
    superscript two), which int() refuses: the same ValueError out of `specctl stop`, a traceback. Such a word says no
    namespace: the holder is taken as one of this namespace, as one of an older version is."""
    db, sock = short_tmp / "state.db", short_tmp / "gone.sock"
    with held(db, sock, stopping=False, written=f"{os.getpid()} {word}"):
        assert DaemonLock(db).holder_namespace() is None
        res = _stop(db, sock, "1")
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == EXIT_STARTING, res.output
    assert "another pid namespace" not in res.stderr and "where it runs" not in res.stderr, res.stderr


# --- specctl's text: history, status's last change, emit --------------------------------------------------------------
def _tampered(db: Path, old: int, new: int, policy: str, reason: str) -> None:
    from state.db import open_store
    from state.items import INSERTS, decision_item
    store = open_store(db)
    kind, row = decision_item(1.0, old, new, policy, reason, False)
    store.conn.execute(INSERTS[kind], row)
    store.conn.commit()
    store.conn.close()


def _offline(short_tmp: Path, *args):
    return CliRunner().invoke(cli, ["--socket", str(short_tmp / "none.sock"), "--db", str(short_tmp / "s.db"), *args])


def test_hist_policy_raw_a_policy_name_holding_a_newline_stays_on_its_line(short_tmp):
    """hist-policy-raw: history's policy printed as stored. emit escapes an ESC there anyway, not a newline: a
    tampered policy name forged a decision line of its own (test_tampered_text's policy holds no newline)."""
    _tampered(short_tmp / "s.db", 0, 5, "bandit\n2026-01-01 00:00:00      1 -> 9     forged", "why")
    res = _offline(short_tmp, "history")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert len(lines) == 1 and lines[0].endswith(r"bandit\n2026-01-01 00:00:00      1 -> 9     forged: why"), lines


def test_applied_reason_raw_a_reapplied_thresholds_reason_stays_on_its_line(short_tmp):
    """applied-reason-raw: status's 'last applied' (old == new: the start re-applies the restored threshold) printed
    its reason raw; only 'last change' (old != new) was tested."""
    _tampered(short_tmp / "s.db", 5, 5, "bandit", "restored\nFAKE: line")
    res = _offline(short_tmp, "status")
    last = [line for line in res.stdout.splitlines() if line.startswith("last applied:")]
    assert len(last) == 1 and last[0].endswith(r"5, restored\nFAKE: line"), res.stdout
    assert not any(line.startswith("FAKE") for line in res.stdout.splitlines()), res.stdout


@pytest.mark.parametrize("control,escape", [("\r", "\\r"), ("\x7f", "\\x7f")])
def test_term_keeps_cr_del_a_carriage_return_and_a_delete_are_escaped(capsys, control, escape):
    """term-keeps-cr / term-keeps-del: emit kept a carriage return (it rewrites the line shown: 'ok\\rFAIL' reads
    FAIL) or a DEL raw; only the newline and the tab a rendering puts there stay."""
    from controller.cli.common import emit
    emit({}, False, lambda _: f"FAIL{control}ok")
    assert capsys.readouterr().out == f"FAIL{escape}ok\n"


# --- controller/paths.py: _home ---------------------------------------------------------------------------------------
@pytest.fixture
def no_account(tmp_path, monkeypatch):
    """No password-database entry for this uid (a container's arbitrary user) and no XDG_STATE_HOME; the working
    directory a folder of its own."""
    import pwd

    def none(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.setattr(pwd, "getpwuid", none)
    for name in ("XDG_STATE_HOME", "SPECCTL_SOCKET", "SPECCTL_DB", "STATE_DIRECTORY", "RUNTIME_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path / "cwd"


@pytest.mark.parametrize("home,said", [("", "$HOME is unset"), ("rel/home", "$HOME is not an absolute path")])
def test_home_nokey_an_empty_or_relative_home_and_no_account_is_no_state_directory(no_account, monkeypatch, home, said):
    """home-nokey (rewritten for 446accb, where a uid with no entry is NoHome): HOME='' or relative and no entry name no
    state directory, one line that says which, never the working directory (os.listdir stays empty) nor '/'."""
    from controller.paths import NoHome, default_db
    monkeypatch.setenv("HOME", home)
    with pytest.raises(NoHome) as err:
        default_db()
    assert str(err.value).startswith(f"no state directory: {said} and uid {os.getuid()} has no home"), err.value
    assert "\n" not in str(err.value) and os.listdir(no_account) == []


# --- engines/sglang_section.py: launch_size_reason --------------------------------------------------------------------
SGLANG = {"model_path": "m", "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "d"}
MOST = os.sysconf("SC_ARG_MAX")


def _exec_refuses(words: list[str], env: dict | None = None) -> bool:
    """The kernel's own answer: the exec of `true` with these words and environment is refused (E2BIG)."""
    try:
        subprocess.run([TRUE, *words], env=env, check=True)
    except OSError as e:
        assert "Argument list too long" in str(e), e
        return True
    return False


def _size(args: dict) -> int:
    """launch_size_reason's own count, read from its line (args made too large by words of a known size first)."""
    import re

    from controller.daemon.engines.sglang_section import launch_size_reason
    k, word = MOST // 100_000 + 2, "x" * 99_991                          # (each 99,991 + its NUL + its pointer)
    reason = launch_size_reason({**args, "extra_args": [*args.get("extra_args", []), *[word] * k]})
    return int(re.search(r"come to ([\d,]+) bytes", reason)[1].replace(",", "")) - k * 100_000


def test_size_lt_slack_0_a_launch_counted_at_arg_max_is_taken_and_the_exec_takes_it():
    """size-lt: `size <= most` -> `size < most`; size-slack-0: no room left for the words around the counted ones (the
    interpreter, -m sglang.launch_server, the plugin's variables). A launch counted at ARG_MAX exactly is taken, and
    the exec takes its words and environment with room to spare; one byte more is refused."""
    from controller.daemon.engines.sglang_flags import server_flags
    from controller.daemon.engines.sglang_section import launch_size_reason
    whole, rest = divmod(MOST - _size(SGLANG), 100_000)
    if rest < 9:                                                       # (the last word: its NUL and pointer too)
        whole, rest = whole - 1, rest + 100_000
    fill = [*["y" * 99_991] * whole, "z" * (rest - 9)]
    args = {**SGLANG, "extra_args": fill}
    assert _size(args) == MOST
    assert launch_size_reason(args) is None
    assert not _exec_refuses([*["w"] * 4, *server_flags(args)])      # (4 words around it: the interpreter's, -m ...)
    fill[-1] += "z"
    assert "more than the kernel gives a new program" in launch_size_reason(args)


def test_size_no_nul_no_ptr_a_launch_of_many_short_words_the_exec_refuses_is_refused():
    """size-no-ptr / size-no-nul: each word counted without its pointer (8 bytes) or its NUL. A launch of many empty
    words is mostly those: one the exec refuses was taken."""
    from controller.daemon.engines.sglang_section import launch_size_reason
    many = [""] * ((MOST - _size(SGLANG)) // 9 + 2_000)
    assert _exec_refuses(many)
    assert "ARG_MAX" in launch_size_reason({**SGLANG, "extra_args": many})


def test_size_env_ignored_chars_sglang_env_is_counted_in_bytes():
    """size-env-ignored: [sglang.env] left out of the count; size-chars: words counted in characters. Entries of
    two-byte characters, half ARG_MAX in characters and more than it in bytes: the exec refuses them, and so does the
    count."""
    from controller.daemon.engines.sglang_section import launch_size_reason
    env = {f"V{i}": "\u00e9" * 60_000 for i in range(MOST // 120_000 + 2)}
    assert _exec_refuses([], {**os.environ, **env})
    assert "ARG_MAX" in launch_size_reason({**SGLANG, "env": env})


def test_size_environ_ignored_the_daemons_own_environment_is_counted(monkeypatch):
    """size-environ-ignored: the daemon's environment (the engine's is a copy of it) left out of the count."""
    from controller.daemon.engines.sglang_section import launch_size_reason
    for i in range(MOST // 100_000 + 2):
        monkeypatch.setenv(f"SC_BIG_{i}", "x" * 100_000)
    assert _exec_refuses([])
    assert "ARG_MAX" in launch_size_reason(SGLANG)


def test_size_extra_only_an_sglang_keys_list_is_counted():
    """size-extra-only: only extra_args counted, not the words server_flags writes for SGLang's own keys (a list value
    is a word each)."""
    from controller.daemon.engines.sglang_flags import server_flags
    from controller.daemon.engines.sglang_section import launch_size_reason
    args = {**SGLANG, "cuda_graph_bs": [1] * ((MOST - _size(SGLANG)) // 10 + 2_000)}
    assert _exec_refuses(server_flags(args))
    assert "ARG_MAX" in launch_size_reason(args)


def test_size_strict_encode_an_environment_value_not_utf8_is_counted_not_raised(monkeypatch):
    """size-strict-encode: `encode(errors="replace")` -> `encode()`: a variable of the daemon's environment that is no
    UTF-8 (os.environ holds its bytes as surrogates) raised UnicodeEncodeError out of config check and the start."""
    from controller.daemon.engines.sglang_section import launch_size_reason
    monkeypatch.setitem(os.environb, b"SC_NOT_UTF8", b"caf\xe9")
    assert launch_size_reason(SGLANG) is None
