"""helper's mutation check of the lines changed since e2381f0 that pass s did not check
(bench/results/mutation-today-2026-12-07t.md): a test for each surviving mutant, named by its id, and for the two
defects found beside them. No wall-clock assertions: a race's window is held open by a hook."""
from __future__ import annotations

import os
import socket as socketlib
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon.engines.base import EngineError
from controller.daemon.engines.sglang import SGLangEngine
from controller.daemon.engines.sglang_flags import ARG_MOST
from controller.numtext import data_text
from state.db import StoreError, open_store
from state.lock import DaemonLock

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root makes a file for another user's database")
NOBODY = 65534


def _owner(path: Path) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid


# --- state/lock.py: acquire's folder, the lock file root makes for an offline write ------------------------------------
def test_acquire_folder_enoent_only_a_folder_that_cannot_be_made_is_a_store_error(short_tmp):
    """acquire-folder-enoent-only: `except OSError` -> `except FileNotFoundError`. A state folder that cannot be made
    (its parent a regular file: ENOTDIR) is acquire()'s StoreError in one line, not an OSError out of the start."""
    (short_tmp / "f").write_text("")
    lock = DaemonLock(short_tmp / "f" / "sub" / "s.db")
    with pytest.raises(StoreError) as err:
        lock.acquire()
    assert str(err.value) == f"cannot create {short_tmp / 'f' / 'sub'}: Not a directory"


def _service_folder(short_tmp: Path, db: bool = True, folder_owner: int = NOBODY) -> Path:
    folder = short_tmp / "svc"
    folder.mkdir(mode=0o750)
    if db:
        open_store(folder / "s.db").conn.close()
        os.chown(folder / "s.db", NOBODY, NOBODY)
    (folder / "s.db.lock").unlink(missing_ok=True)
    os.chown(folder, folder_owner, folder_owner)
    return folder


def _pin(short_tmp: Path, db: Path) -> None:
    res = CliRunner().invoke(cli, ["--db", str(db), "--socket", str(short_tmp / "none.sock"), "threshold", "pin", "7"])
    assert res.exit_code == 0 and "saved to" in res.output, res.output


@as_root
def test_owned_folder_only_the_databases_owner_wins_over_its_folders(short_tmp):
    """owned-folder-only: the owner looked up on the folder, not on the database. A database the service's user owns
    in a folder root owns (/var/lib itself, a restored copy): its lock file is the database's owner's, or the service
    cannot open it at its next start."""
    folder = _service_folder(short_tmp, folder_owner=0)
    _pin(short_tmp, folder / "s.db")
    assert _owner(folder / "s.db.lock") == (NOBODY, NOBODY)


@as_root
def test_owned_no_folder_fallback_with_no_database_the_folders_owner(short_tmp):
    """owned-no-folder-fallback: no database beside it -> nothing given. held_off on a folder the service's user owns
    and no database yet: the lock file is the folder's owner's, as the docstring says."""
    folder = _service_folder(short_tmp, db=False)
    with DaemonLock(folder / "s.db").held_off():
        pass
    assert _owner(folder / "s.db.lock") == (NOBODY, NOBODY)


@as_root
def test_owned_if_always_a_lock_file_already_there_is_not_given_away(short_tmp):
    """owned-if-always: `if made:` -> `if True:`. A lock file that is there already is not the offline write's to give:
    one the folder's owner made a hard link to a file of root's (here victim) stays root's, the pin saved."""
    folder = _service_folder(short_tmp)
    victim = short_tmp / "victim"
    victim.write_text("root's\n")
    os.chmod(victim, 0o600)
    os.link(victim, folder / "s.db.lock")
    _pin(short_tmp, folder / "s.db")
    assert _owner(victim) == (0, 0)


@as_root
def test_a_lock_file_put_there_between_the_look_and_the_open_is_not_given_away(short_tmp, monkeypatch):
    """Defect found beside owned-if-always (fixed in state/lock.py's _made): 'made' was asked (os.path.lexists) before
    the open, which then took whatever was at the path (O_CREAT, no O_EXCL). A hard link the folder's owner put there
    in between was taken for a file made here, and root gave the file it names to the database's owner. The hook
    puts the link there at the look; made is now the open's own O_EXCL answer."""
    folder = _service_folder(short_tmp)
    victim = short_tmp / "victim"
    victim.write_text("root's\n")
    os.chmod(victim, 0o600)
    real = os.path.lexists

    def look_then_a_link_appears(path):
        answer = real(path)
        if Path(path) == folder / "s.db.lock" and not real(path):
            os.link(victim, path)
        return answer
    monkeypatch.setattr(os.path, "lexists", look_then_a_link_appears)
    _pin(short_tmp, folder / "s.db")
    assert _owner(victim) == (0, 0)
    assert _owner(folder / "s.db.lock") == (NOBODY, NOBODY)         # (the one made here)


def test_fix_second_no_creat_a_lock_file_removed_between_the_two_opens_is_made_again(short_tmp, monkeypatch):
    """(the fix's own mutant: the second open without O_CREAT) The lock file is there at the O_EXCL open, and a
    daemon's start refused beside this one removes the lock file it made before the second open: this start makes it
    again and holds it, not 'lock file ... does not exist'; and says it made it (helper-145: the second open made it
    and said not made, so a refused start left it behind and root's offline write did not give it away)."""
    from state import lock as lockmod
    db = short_tmp / "s.db"
    Path(f"{db}.lock").write_text("")
    real = lockmod.open_nofollow

    def excl_refused_then_the_other_start_removes_it(path, flags, *args):
        try:
            return real(path, flags, *args)
        except StoreError:
            if flags & os.O_EXCL:
                os.unlink(path)
            raise
    monkeypatch.setattr(lockmod, "open_nofollow", excl_refused_then_the_other_start_removes_it)
    lock = DaemonLock(db)
    lock.acquire()
    try:
        assert Path(f"{db}.lock").read_text() == str(os.getpid())
        assert lock.created
    finally:
        lock.release(remove_if_created=True)
    assert not Path(f"{db}.lock").exists()


def test_a_fifo_at_the_lock_files_path_is_still_refused_in_its_own_words(short_tmp):
    """(the retry's own mutant: a lock file there and refused is not retried into 'File exists')"""
    db = short_tmp / "s.db"
    os.mkfifo(f"{db}.lock")
    with pytest.raises(StoreError, match="is not a regular file"):
        DaemonLock(db).acquire()


# --- controller/daemon/sockprobe.py: a left-over removed while probed -------------------------------------------------
def test_recheck_enoent_refused_a_left_over_removed_meanwhile_is_free(short_tmp, monkeypatch):
    """recheck-enoent-refused: `except FileNotFoundError: return None` dropped. A crashed run's socket that a daemon
    starting beside this one removes between this one's probe and its removal: the path is free, not 'a left-over ...
    which this user cannot remove (No such file or directory)'."""
    from controller.daemon import sockprobe
    path = short_tmp / "c.sock"
    stale = socketlib.socket(socketlib.AF_UNIX)
    stale.bind(str(path))
    stale.close()
    real = sockprobe.who_listens

    def probe_then_another_daemon_removes_it(p, *args):
        answer = real(p, *args)
        os.unlink(path)
        return answer
    monkeypatch.setattr(sockprobe, "who_listens", probe_then_another_daemon_removes_it)
    assert sockprobe.check_socket_free(path) is None
    assert not path.exists()


# --- controller/paths.py: $RUNTIME_DIRECTORY ----------------------------------------------------------------------------
def test_runtime_ignored_specctl_looks_for_the_socket_in_runtime_directory(short_tmp):
    """runtime-ignored: default_socket() without $RUNTIME_DIRECTORY. The service's socket is there (systemd's
    RuntimeDirectory): specctl run in the service's environment asks it, not the state folder's."""
    run = short_tmp / "run"
    run.mkdir()
    stale = socketlib.socket(socketlib.AF_UNIX)
    stale.bind(str(run / "control.sock"))
    try:
        res = CliRunner().invoke(cli, ["status"], env={"RUNTIME_DIRECTORY": f"{run}:{short_tmp}/other",
                                                       "SPECCTL_SOCKET": None})
    finally:
        stale.close()
    assert res.exit_code == 3, res.output
    assert f"(nothing listens on {run / 'control.sock'})" in res.output, res.output


# --- controller/daemon/engines/sglang_flags.py: a word's length -------------------------------------------------------
SGLANG = {"model_path": "m", "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "d",
          "python": sys.executable}
TOO_LONG = f"is longer than a command line's word or an environment's may be ({ARG_MOST:,} bytes)"


def _execs(engine: SGLangEngine) -> None:
    """The engine's command line and environment as the start gives them: the exec takes every word (E2BIG would be an
    OSError here); SGLang is not installed, so the interpreter itself exits 1 after the exec."""
    subprocess.run(engine.command(), env={**os.environ, **engine.user_env}, capture_output=True, timeout=120)


@pytest.mark.parametrize("key,prefix,first", [
    ("model_path", "", "/"),                      # its own word: --model-path VALUE
    ("chat_template", "--chat-template=", "-"),   # a '-' value: one word, --chat-template=-VALUE
    ("env", "X=", "/")])                          # [sglang.env] X = VALUE: X=VALUE in the environment
def test_word_ge_no_key_the_longest_value_taken_is_one_the_exec_takes(key, prefix, first):
    """word-ge (`>` -> `>=`) and word-no-key (the key left out of the measure): the longest value accepted is one the
    exec takes, and one byte more is refused. chat_template's starts with '-': server_flags writes it in one word,
    --chat-template=VALUE (the defect found beside these: measured as key=VALUE, 2 bytes more were let past)."""
    longest = first + "v" * (ARG_MOST - len(prefix) - 1)
    section = (lambda v: {**SGLANG, "env": {"X": v}}) if key == "env" else (lambda v: {**SGLANG, key: v})
    _execs(SGLangEngine(section(longest)))
    with pytest.raises(EngineError) as err:
        SGLangEngine(section(longest + "v"))
    assert str(err.value) == f"sglang engine: [sglang] {'env.X' if key == 'env' else key} {TOO_LONG}"


def test_a_table_is_one_word_of_the_command_line():
    """Defect found beside word-dict-str: a table given to a flag of SGLang's is written as its text, one word; each
    of its values short, the word was not measured, config check said ok and the exec refused it (E2BIG)."""
    table = {f"k{i}": "x" * 100 for i in range(2000)}
    with pytest.raises(EngineError) as err:
        SGLangEngine({**SGLANG, "json_model_override_args": table})
    assert str(err.value) == f"sglang engine: [sglang] json_model_override_args {TOO_LONG}"
    with pytest.raises(OSError, match="Argument list too long"):     # (what the start met)
        subprocess.run([sys.executable, "-c", "", f"--json-model-override-args={table}"])


def test_fix_words_own_as_flags_the_interpreters_path_is_a_word_too():
    """(the fix's own mutant: the engine's own keys measured as SGLang's flags, which server_flags leaves out) [sglang]
    python is the exec's first word: one past the limit is refused as the others, as before the fix."""
    with pytest.raises(EngineError) as err:
        SGLangEngine({**SGLANG, "python": "/" + "p" * ARG_MOST})
    assert str(err.value) == f"sglang engine: [sglang] python {TOO_LONG}"


def test_word_chars_a_value_is_measured_in_bytes_not_characters():
    """word-chars: the length in characters. 70,000 'é' are 140,000 bytes: past the limit, which counts bytes."""
    value = "/" + "é" * 70_000
    assert len(value) < ARG_MOST < len(value.encode())
    with pytest.raises(EngineError) as err:
        SGLangEngine({**SGLANG, "model_path": value})
    assert str(err.value) == f"sglang engine: [sglang] model_path {TOO_LONG}"


# --- controller/numtext.py: data_text ---------------------------------------------------------------------------------
@pytest.mark.parametrize("json_text", [False, True])
def test_dt_lo_hi_strict_the_64_bit_ends_are_taken(json_text):
    """dt-lo-strict / dt-hi-strict: `<=` -> `<` at either end. -2**63 and 2**63-1 are TOML's own integers (and a
    JSON's within them): taken; one past either end is refused."""
    text = (lambda v: '{"v": %d}' % v) if json_text else (lambda v: f"v = {v}")
    for v in (-(1 << 63), (1 << 63) - 1):
        assert data_text(text(v), json_text) == {"v": v}
    for v in (-(1 << 63) - 1, 1 << 63):
        with pytest.raises(ValueError, match=r"^v: an integer past 64 bits"):
            data_text(text(v), json_text)


def _simulate_trace(tmp_path: Path, name: str, text: str) -> str:
    trace = tmp_path / name
    trace.write_text(text)
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(trace)])
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    return line.removeprefix(f"specctl: trace {trace}: ")


def test_dt_no_the_value_a_json_trace_that_is_one_huge_integer_names_the_value(tmp_path):
    """dt-no-the-value: `or "the value"` -> `or ""`. A JSON file that is only an integer past 64 bits: where it is
    has no name, so the line says 'the value', not '(: an integer ...'."""
    assert _simulate_trace(tmp_path, "t.json", "99999999999999999999") == \
        "not valid JSON (the value: an integer past 64 bits (-9223372036854775808 .. 9223372036854775807))"


def test_dt_error_toml_a_json_syntax_error_is_the_parsers_own_line(tmp_path):
    """dt-error-toml: the parser's error class taken as TOML's for JSON too. A JSON trace cut short is json's own
    'Expecting value' line, not 'an integer of over 4300 digits' (every other ValueError's)."""
    assert _simulate_trace(tmp_path, "t.json", '{"segment": [') == \
        "not valid JSON (Expecting value: line 1 column 14 (char 13))"


# --- controller/cli/figures.py: a name of blanks ----------------------------------------------------------------------
def test_plot_empty_no_strip_a_name_of_blanks_is_no_name(tmp_path, monkeypatch):
    """plot-empty-no-strip: `str(path).strip()` -> `str(path)`. --plot '  ' names no file: refused as no name, before
    the simulation, not as a name without .png ('cannot write plot   : give a .png ...' with the blanks unseen)."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["simulate", "--concurrency", "4", "--seconds", "2", "--plot", "  "])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.strip() == "specctl: cannot write plot '  ': give a file name"
    assert list(tmp_path.iterdir()) == []
