"""helper-181's mutation pass aa over the lines changed since 03490d3 (bench/results/mutation-today-2026-12-07aa.md):
state/mounts (kernel_file_system, refusing), the preflight's folder checks (check_db_folder, check_socket_folder,
_said), db's journals_refused, specctl's lock_unread / not_running, `policy show`'s line, sockprobe.link_refused and
numtext.plain's call sites. A test for each surviving mutant that is not equivalent, named by its id."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from controller.daemon.preflight import Fatal, check_db_folder, check_socket_folder, store_refusal
from state.db import open_store
from state.faults import StoreError
from state.mounts import kernel_file_system
from tests.conftest import as_nobody
from tests.test_review_h176 import root_only

NOBODY = 65534


def _mounted(point: str, kind: str) -> bool:
    """Whether /proc/self/mountinfo lists a `kind` file system mounted at `point` (read here, not by the code under
    test)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[4] == point and line.partition(" - ")[2].split()[:1] == [kind] for line in lines)


def _refused(fn) -> tuple[int, str] | None:
    """fn()'s refusal as (code, line): Fatal's code, 2 / 1 for a StoreError as run words it (store_refusal)."""
    try:
        fn()
    except Fatal as e:
        return e.code, str(e)
    except StoreError as e:
        refusal = store_refusal(e)
        return refusal.code, str(refusal)
    return None


# --- state/mounts.py: kernel_file_system, refusing -----------------------------------------------------------------
@pytest.mark.parametrize("point,kind", [("/sys", "sysfs"), ("/dev/pts", "devpts")])
def test_no_sysfs_no_devpts_a_socket_folder_on_any_kernel_file_system_is_refused_not_only_proc(point, kind):
    # mutants mo-no-sysfs, mo-no-devpts: a kernel file system left out of KERNEL_FILE_SYSTEMS: as root, access(2)
    # passes there, so the preflight said nothing and the bind failed late (exit 1, retried for good)
    if not _mounted(point, kind):
        pytest.skip(f"no {kind} at {point} here")
    assert _refused(lambda: check_socket_folder(Path(point) / "h181-none" / "c.sock")) == (
        2, f"cannot create the control socket's directory {point}/h181-none: nothing can be made in it ({kind}: the "
           "kernel's own file system)")


def test_kfs_lstat_a_socket_folder_that_is_a_link_to_proc_is_judged_where_it_leads(short_tmp):
    # mutant mo-kfs-lstat: the link's own device (this tmp folder's) was asked, not /proc's: no refusal as root, and
    # a user was told to get write access
    if not _mounted("/proc", "proc"):
        pytest.skip("no /proc here")
    (link := short_tmp / "link").symlink_to("/proc")
    assert kernel_file_system(link) == "proc"
    assert _refused(lambda: check_socket_folder(link / "c.sock")) == (
        2, f"cannot create the control socket in {link}: nothing can be made in it (proc: the kernel's own file "
           "system)")


def test_kfs_except_raises_a_path_that_is_not_there_has_no_file_system_to_tell(short_tmp):
    # mutant mo-kfs-except-raises: 'None, also where that cannot be told' raised FileNotFoundError instead
    assert kernel_file_system(short_tmp / "missing") is None


def test_kfs_source_not_type_the_file_systems_type_is_read_not_its_source(short_tmp, monkeypatch):
    # mutant mo-kfs-source-not-type: mountinfo's field after the type is the source, often the type's name again
    # ('proc proc') but not always ('bpf none', a tmpfs whose source is 'proc'): the source was taken for the type
    import pathlib
    st = os.stat(short_tmp)
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    real = pathlib.Path.read_text
    mountinfo = {}

    def read_text(self, *args, **kwargs):
        return mountinfo["text"] if str(self) == "/proc/self/mountinfo" else real(self, *args, **kwargs)
    monkeypatch.setattr(pathlib.Path, "read_text", read_text)
    mountinfo["text"] = f"40 1 {device} / {short_tmp} rw,relatime - tmpfs proc rw\n"
    assert kernel_file_system(short_tmp) is None
    mountinfo["text"] = f"40 1 {device} / {short_tmp} rw,relatime - bpf none rw\n"
    assert kernel_file_system(short_tmp) == "bpf"


@root_only   # (as its owner the folder's other bits do not apply: nobody is the other user)
def test_ref_w_only_a_folder_this_user_may_write_but_not_search_takes_no_socket(short_tmp):
    # mutant mo-ref-w-only: `may(existing, W_OK)` alone passed a folder without x (mutation-today-l's pf12 covers it
    # only where the tests do not run as root: skipped there). As nobody, a folder of root's at 0702.
    os.chmod(short_tmp, 0o755)
    (folder := short_tmp / "wonly").mkdir()
    folder.chmod(0o702)
    assert as_nobody(lambda: _refused(lambda: check_socket_folder(folder / "c.sock"))) == (
        2, f"cannot create the control socket in {folder}: Permission denied")


# --- preflight.check_db_folder ------------------------------------------------------------------------------------
@root_only   # (as its owner the folder's other bits do not apply: nobody is the other user)
def test_dbf_lexists_follows_a_link_at_the_lock_files_path_is_a_file_there_not_one_to_be_made(short_tmp):
    # mutant pf-dbf-lexists-follows: os.path.exists follows a dangling link at x.db.lock, so the lock file was said
    # not to be creatable where a file is; the first file a start would make there is the database
    os.chmod(short_tmp, 0o755)
    (folder := short_tmp / "f").mkdir()
    (folder / "x.db.lock").symlink_to(short_tmp / "nowhere")
    folder.chmod(0o555)
    assert as_nobody(lambda: _refused(lambda: check_db_folder(folder / "x.db"))) == (
        2, f"database {folder}/x.db cannot be created in {folder} (Permission denied); let this user write there (its "
           "owner, its mode), or give another --db")


def test_dbf_journals_eacces_journals_on_a_read_only_mount_are_told_of_the_mount_not_a_mode(short_tmp, monkeypatch):
    # mutant pf-dbf-journals-eacces: journals_refused(db, EACCES) whatever refused: a database and its lock file on a
    # read-only mount were told to 'let this user write there (its owner, its mode)'. The mount is a fault injected
    # here (on_read_only_mount), for nobody in a folder at 0555: what refusing sees on a read-only mount.
    import state.mounts
    os.chmod(short_tmp, 0o755)
    (folder := short_tmp / "f").mkdir()
    for name in ("x.db", "x.db.lock"):
        (folder / name).write_text("")
    folder.chmod(0o555)
    monkeypatch.setattr(state.mounts, "on_read_only_mount", lambda path: True)
    assert as_nobody(lambda: _refused(lambda: check_db_folder(folder / "x.db"))) == (
        2, f"database {folder}/x.db cannot be opened for writing: its folder {folder} takes no new file (SQLite's "
           "journals); give a --db on a writable file system (under the unit: leave [storage] db empty, for its state "
           "directory)")


# --- preflight.check_socket_folder and _said --------------------------------------------------------------------------
def test_sf_notdir_said_no_error_a_file_of_ones_own_at_the_socket_folders_path_is_no_mode_to_change(short_tmp):
    # mutants pf-sf-notdir-ignored ('the control socket in' a file) and pf-said-no-error (denied_note asked without
    # the error: a file of the user's own at 0444 in the way was told 'chmod u+rw', which makes it no folder)
    os.chmod(short_tmp, 0o755)
    (file := short_tmp / "file").write_text("")
    os.chown(file, NOBODY, NOBODY) if os.geteuid() == 0 else None
    file.chmod(0o444)
    assert as_nobody(lambda: _refused(lambda: check_socket_folder(file / "c.sock"))) == (
        2, f"cannot create the control socket's directory {file}: Not a directory")


def test_said_directory_only_the_chmod_names_the_folder_that_refuses_not_the_one_to_be_made(short_tmp):
    # mutant pf-said-directory-only: denied_note asked of the socket's folder (two levels not there yet), whose
    # first missing part 'cannot be searched': no chmod said, where the user's own folder at 0500 is what refuses
    os.chmod(short_tmp, 0o755)
    (own := short_tmp / "own").mkdir()
    os.chown(own, NOBODY, NOBODY) if os.geteuid() == 0 else None
    own.chmod(0o500)
    assert as_nobody(lambda: _refused(lambda: check_socket_folder(own / "a" / "b" / "c.sock"))) == (
        2, f"cannot create the control socket's directory {own}/a/b: Permission denied (the folder {own} is yours but "
           f"its mode 500 refuses you: chmod u+rwx {own})")


# --- state/db.py: describe's journals ----------------------------------------------------------------------------
def test_describe_journals_erofs_a_writable_database_in_a_closed_folder_is_told_of_the_mode(short_tmp):
    # mutant db-describe-journals-erofs: the open's word on a folder that takes no -wal said 'give a --db on a
    # writable file system' (a read-only mount is refused before, by pin_file): a mode refuses, the user may change it
    os.chmod(short_tmp, 0o755)
    (folder := short_tmp / "f").mkdir()
    store = open_store(folder / "x.db")
    store.execute("PRAGMA journal_mode=DELETE")
    store.conn.close()
    (folder / "x.db").chmod(0o666)
    folder.chmod(0o555)

    def opened():
        try:
            open_store(folder / "x.db").conn.close()
        except StoreError as e:
            return e.errno, str(store_refusal(e))
    assert as_nobody(opened) == (errno.EACCES, f"database {folder}/x.db cannot be opened for writing: its folder "
                                               f"{folder} takes no new file (SQLite's journals); let this user write "
                                               "there (its owner, its mode), or give another --db")


# --- specctl: lock_unread, _holder_or_why, not_running, policy show ----------------------------------------------
def _specctl(*args: str, env: dict | None = None):
    from controller.cli.main import cli
    return CliRunner(env=env).invoke(cli, list(args))


def _unreadable_lock(db: Path) -> Path:
    """A database and, at its lock file's path, a symbolic link (specctl reads no lock through one: unreadable)."""
    db.parent.mkdir(parents=True, exist_ok=True)
    open_store(db).conn.close()
    (lock := db.parent / (db.name + ".lock")).unlink(missing_ok=True)
    lock.symlink_to(db.parent / "nowhere")
    return lock


def test_unread_colon_always_a_lock_readable_after_all_says_no_reason(short_tmp):
    # mutant cm-unread-colon-always: ': ' and nothing after it where the lock was readable at the second look
    from controller.cli.common import lock_unread
    db = short_tmp / "x.db"
    assert lock_unread(db) == (f"whether a daemon holds {db} (one still starting, its socket not open yet) cannot be "
                               "told")


def test_holder_oserror_a_lock_whose_lock_state_cannot_be_asked_is_said_with_the_errors_words(short_tmp, monkeypatch):
    # mutants cm-holder-oserror-repr ('[Errno 37] ...: path'), cm-holder-oserror-unsaid (no reason) and
    # cm-holder-oserror-raised (an OSError traceback out of specctl): flock failing on the lock file (ENOLCK: an NFS
    # without locks; a fault injected here, the file itself a real one)
    import state.lock
    from controller.cli.common import UNREADABLE, lock_holder, lock_unread
    db = short_tmp / "x.db"
    (lock := short_tmp / "x.db.lock").write_text("")

    def no_locks(fd):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
    monkeypatch.setattr(state.lock, "_shareable", no_locks)
    assert lock_holder(db) == UNREADABLE
    assert lock_unread(db) == (f"whether a daemon holds {db} (one still starting, its socket not open yet) cannot be "
                               f"told: lock file {lock}: {os.strerror(errno.ENOLCK)}")


def test_notrun_asked_socket_only_with_no_db_nor_socket_given_the_socket_asked_is_said(short_tmp, monkeypatch):
    # mutant cm-notrun-asked-socket-only: neither --db nor --socket: the default socket asked and not answering went
    # unsaid beside the unreadable lock ('no daemon answers, and ...': which daemon was asked?)
    from controller.paths import UNIT_DB, UNIT_SOCKET, default_db, default_socket, present
    if present(UNIT_SOCKET) or present(UNIT_DB):
        pytest.skip("the service's files are on this host: specctl takes them by default")
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp / "state"))
    for name in ("SPECCTL_SOCKET", "SPECCTL_DB"):
        monkeypatch.delenv(name, raising=False)
    lock = _unreadable_lock(db := default_db())
    res = _specctl("status")
    assert res.exit_code == 3, res.output
    assert res.stderr.splitlines()[0].startswith(
        f"specctl: no daemon answers (no daemon socket at {default_socket()}), and whether a daemon holds {db} (one "
        f"still starting, its socket not open yet) cannot be told: lock file {lock} is a symbolic link"), res.stderr


@pytest.mark.parametrize("socket_given", [False, True], ids=["--db", "--db-and---socket"])
def test_unreadable_holder_policy_show_with_an_unreadable_lock_does_not_say_a_next_start(short_tmp, socket_given):
    # mutant ps-unreadable-holder; the defect it showed: with a lock it cannot read, `policy show` said in one line that
    # whether a daemon holds the database (one still starting) cannot be told, and then 'the policy saved for its next
    # start': a start that may be under way. status's 'last state from the database' says no more than it knows.
    db = short_tmp / "x.db"
    sock = ["--socket", str(short_tmp / "none.sock")] if socket_given else []
    open_store(db).conn.close()
    assert _specctl(*sock, "--db", str(db), "policy", "set", "ucb").exit_code == 0      # (saved offline)
    lock = _unreadable_lock(db)
    res = _specctl(*sock, "--db", str(db), "policy", "show")
    asked = f" (no daemon socket at {short_tmp}/none.sock)" if socket_given else ""
    assert res.exit_code == 0 and res.stdout.splitlines()[0] == "ucb", res.output
    assert res.stderr.startswith(f"specctl: no daemon answers{asked}, and whether a daemon holds {db} (one still "
                                 f"starting, its socket not open yet) cannot be told: lock file {lock} is a symbolic "
                                 "link"), res.stderr
    assert res.stderr.endswith("; the policy saved in the database:\n"), res.stderr


# --- sockprobe.link_refused --------------------------------------------------------------------------------------
def test_link_unsaid_the_probe_says_a_link_in_the_preflights_words(short_tmp):
    # mutant sp-link-unsaid: the probe (the bind's, minutes after the preflight: a link planted during the engine's
    # start) said 'exists and is not a socket' of a link, not link_refused's line
    from controller.daemon.sockprobe import SocketRefused, check_socket_free, link_refused
    (link := short_tmp / "c.sock").symlink_to(short_tmp / "nowhere")
    with pytest.raises(SocketRefused) as refused:
        check_socket_free(link)
    assert str(refused.value) == link_refused(link) and link.is_symlink()


# --- numtext.plain's call sites ----------------------------------------------------------------------------------
def test_stop_drained_a_timeout_is_said_in_full_where_the_daemon_let_go_but_has_not_exited(tmp_path, monkeypatch):
    # mutant pl-stop-drained: %g's 1234.57 for --timeout 1234.5678 (helper-180's test saw the 'still draining' line)
    import click

    from controller.cli import stop
    monkeypatch.setattr(stop, "wait_gone", lambda *a, **k: False)
    monkeypatch.setattr(stop, "_gone", lambda *a: True)
    res = CliRunner().invoke(click.command()(lambda: stop._wait(tmp_path / "x.db", 7, 1234.5678)))
    assert res.output == ("specctl: daemon pid 7 has drained and let go of its database but had not exited after "
                          "1234.5678 s\n"), res.output


def test_sglang_ready_sglangs_ready_timeout_is_said_in_full():
    # mutant pl-sglang-ready: '[sglang] ready_timeout_s' of 1234.5678 read 'within 1234.57 s'
    from controller.daemon.engines.sglang import SGLangEngine
    engine = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    assert engine.not_ready_reason(1234.5678) == "SGLang was not ready within 1234.5678 s ([sglang] ready_timeout_s)"


def test_sim_rate_segment_an_unlabelled_rate_segment_of_a_trace_is_said_in_full():
    # mutant pl-sim-rate-segment: a trace's open-loop segment without a label read 'rate=1234.57/s' in status's load
    from controller.daemon.engines.sim import SimEngine
    from controller.sim.profile import Segment, Trace, load_profile
    trace = Trace("t", "", None, (Segment(60.0, 0, None, "", 1234.5678),))
    assert SimEngine(load_profile("crossover-b"), trace=trace)._load_at(0.0)[2] == "rate=1234.5678/s"


def test_finite_too_few_a_finite_run_of_no_request_says_its_rate_and_seconds_in_full():
    # mutant pl-finite-too-few: 'rate 0.00123457 x 12.3457 s' for --arrival-rate 0.0012345678 --seconds 12.3456789
    res = _specctl("simulate", "--finite", "--arrival-rate", "0.0012345678", "--seconds", "12.3456789")
    assert (res.exit_code, res.stderr) == (2, "specctl: --finite: rate x --seconds must give at least one request "
                                              "(rate 0.0012345678 x 12.3456789 s)\n"), res.output


def test_plot_bin_a_bin_wider_than_the_span_is_said_in_full(tmp_path):
    # mutant pl-plot-bin: '--bin 1234.57 is wider than that span' for --bin 1234.5678
    from tests.test_plots import _store
    _store(tmp_path / "s.db").conn.close()
    res = _specctl("--db", str(tmp_path / "s.db"), "--socket", str(tmp_path / "no.sock"), "plot",
                   str(tmp_path / "x.png"), "--last", "30", "--bin", "1234.5678")
    assert res.exit_code == 0 and res.output.endswith(
        "over the last 30 engine seconds; --bin 1234.5678 is wider than that span: a shorter one draws more "
        "points\n"), res.output


# --- found beside the pass: the database's folder below a folder of the user's own -----------------------------------
def test_a_database_folder_below_a_folder_of_ones_own_names_the_chmod_as_the_sockets_does(short_tmp):
    """`--db own/sub/x.db`, own the user's at 000: run and config check said `cannot create own/sub: Permission denied;
    let this user write there (its owner, its mode)`, where the control socket's line names the folder and the chmod
    (folder_refused's Lasting carried no path for store_refusal's denied_step). At 500 (the default state folder's
    spec-controller/ not made yet in it; a --db there is refused first, its directory not existing): the same."""
    from tests.test_review_h180 import _as_nobody_both
    (own := short_tmp / "locked").mkdir()
    os.chown(own, NOBODY, NOBODY) if os.geteuid() == 0 else None
    own.chmod(0o000)
    said = _as_nobody_both(short_tmp, "--socket", str(short_tmp / "own" / "c.sock"), db=str(own / "sub" / "x.db"))
    assert said["run"] == said["config"] == (
        2, f"spec-controller: cannot create {own}/sub: Permission denied (the folder {own} is yours but its mode 0 "
           f"refuses you: chmod u+rwx {own})\n"), said
    own.chmod(0o500)
    assert as_nobody(lambda: _refused(lambda: check_db_folder(own / "spec-controller" / "spec-controller.db"))) == (
        2, f"cannot create {own}/spec-controller: Permission denied (the folder {own} is yours but its mode 500 "
           f"refuses you: chmod u+rwx {own})")
