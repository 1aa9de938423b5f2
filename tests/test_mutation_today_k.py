"""Tests for the gaps the mutation pass of 2026-12-06k found in the lines changed since 23e5383 in state/, policies/
and the daemon's start (bench/results/mutation-today-2026-12-06k.md; the rest in test_mutation_today_k2.py). Each
test is named after the mutant it kills (test_<id>_...). Each was checked red with its mutant applied and green on the
original."""
import json
import os
import sqlite3

import pytest


# --- DaemonLock.acquire: a lock held shared (an offline write) is waited out; one held by a daemon is not ------------
def _acquire_in_thread(lock):
    """acquire() in a thread: (the thread, its outcome: 'acquired' or the StoreError's text)."""
    import threading

    from state.db import StoreError
    outcome: list = []

    def attempt():
        try:
            lock.acquire()
            outcome.append("acquired")
        except StoreError as e:
            outcome.append(str(e))
    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    return t, outcome


def test_lk2_a_start_waits_out_an_offline_write_longer_than_a_look(short_tmp):
    """held_off (specctl writing offline: a statement up to its busy timeout) holds the lock shared for longer than
    holder()'s look (LOOK_GRACE_S): the start must wait it out, then start, not say 'another spec-controller'."""
    from state.lock import LOOK_GRACE_S, DaemonLock
    db = short_tmp / "s.db"
    ran = DaemonLock(db)
    ran.acquire()
    ran.release()                                      # (a daemon ran here: the lock file is there)
    with DaemonLock(db).held_off():
        lock = DaemonLock(db)
        t, outcome = _acquire_in_thread(lock)
        t.join(LOOK_GRACE_S + 1.5)                     # past a look's grace: still waiting, not refused
        assert t.is_alive() and outcome == [], outcome
    t.join(30)
    assert outcome == ["acquired"]
    lock.release()


def test_lk3_a_start_beside_a_daemon_is_refused_at_once_not_after_the_offline_writes_wait(short_tmp):
    """A daemon holds the lock exclusively: the start is refused after the look's grace, and does not wait the 30 s
    an offline write may take (and start after all if that daemon stops meanwhile)."""
    from state.lock import DaemonLock
    db = short_tmp / "s.db"
    running = DaemonLock(db)
    running.acquire()
    lock = DaemonLock(db)
    t, outcome = _acquire_in_thread(lock)
    t.join(10)                                         # (refused after the 0.5 s grace, well before this)
    running.release()                                  # that daemon stops
    t.join(60)
    lock.release()
    assert outcome == [f"another spec-controller (pid {os.getpid()}) is running on {db}; stop it (specctl --db {db} "
                       "stop) or give another --db"]


def test_lk5_a_lock_held_shared_past_the_wait_is_said_as_such(short_tmp, monkeypatch):
    """Held shared for longer than HELD_OFF_S (a stuck offline write, a look that hangs): the refusal says the lock
    stayed held, not 'another spec-controller (pid of the last daemon) is running' (no daemon runs)."""
    import state.lock
    from state.lock import DaemonLock
    monkeypatch.setattr(state.lock, "HELD_OFF_S", 0.5)
    db = short_tmp / "s.db"
    ran = DaemonLock(db)
    ran.acquire()
    ran.release()
    with DaemonLock(db).held_off():
        t, outcome = _acquire_in_thread(DaemonLock(db))
        t.join(30)
    assert outcome == [f"{db}.lock stayed locked by another process (specctl writing offline?) for 0.5 s"]


def test_lk11_a_refused_database_keeps_a_lock_file_an_earlier_daemon_made(short_tmp):
    """release(remove_if_created) removes only a lock file this start made: one an earlier daemon left (its mode and
    group set for the service's operators) stays when a start refuses the database."""
    from tests.test_daemon_e2e import run_daemon_once
    text = short_tmp / "notes.md"
    text.write_text("# not a database\n")
    lock = short_tmp / "notes.md.lock"
    lock.write_text("12345")
    os.chmod(lock, 0o640)
    res = run_daemon_once(short_tmp, "--concurrency", "4", "--db", str(text), "--socket", str(short_tmp / "s"))
    assert res.returncode != 0 and f"{text} is not a spec-controller database" in res.stderr, res.stderr
    assert lock.exists() and oct(lock.stat().st_mode & 0o777) == "0o640"


# --- db.durable / Writer._synced: what a failing synchronous pragma does to a command's write ------------------------
def _refusing_synchronous(conn, value: str) -> None:
    """SQLite's authorizer refuses `PRAGMA synchronous=<value>` on conn (as a pragma that fails), nothing else."""
    def authorize(action, arg1, arg2, *_):
        refused = action == sqlite3.SQLITE_PRAGMA and arg1 == "synchronous" and (arg2 or "").upper() == value
        return sqlite3.SQLITE_DENY if refused else sqlite3.SQLITE_OK
    conn.set_authorizer(authorize)


def _saved(path) -> dict:
    conn = sqlite3.connect(path)
    try:
        return {k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM settings")}
    finally:
        conn.close()


def test_wr2_a_command_whose_full_sync_cannot_be_set_is_refused_not_said_saved(tmp_path):
    """The FULL pragma failed: nothing was written, and the command must hear so (WriteFailed), not that it was saved."""
    from state.db import open_store
    from state.items import setting_item
    from state.writer import WriteFailed, Writer
    db = open_store(tmp_path / "s.db")
    writer = Writer(db).start()
    try:
        _refusing_synchronous(db.conn, "FULL")
        with pytest.raises(WriteFailed, match="^the database write failed: "):
            writer.transaction([setting_item("pinned", 5)], timeout=10)
        db.conn.set_authorizer(None)
        assert writer.flush(10)
    finally:
        writer.stop()
    assert "pinned" not in _saved(tmp_path / "s.db")


def test_db5_a_command_committed_under_full_sync_is_saved_though_the_return_to_normal_fails(tmp_path):
    """The commit is on disk before synchronous goes back to NORMAL: that pragma failing afterwards (it touches no disk)
    must not turn a saved pin into a 'write failed' answer."""
    from state.db import open_store
    from state.items import setting_item
    from state.writer import Writer
    db = open_store(tmp_path / "s.db")
    writer = Writer(db).start()
    try:
        _refusing_synchronous(db.conn, "NORMAL")
        writer.transaction([setting_item("pinned", 5)], timeout=10)
        db.conn.set_authorizer(None)
    finally:
        writer.stop()
    assert _saved(tmp_path / "s.db")["pinned"] == 5


# --- policies.make_policy: who takes an unknown parameter ------------------------------------------------------------
def test_po4_every_policy_that_takes_the_unknown_parameter_is_named():
    """half_life_s is a parameter of each learning policy: all of them are named, not the first alone."""
    from policies import POLICIES, PolicyError, make_policy
    with pytest.raises(PolicyError) as err:
        make_policy("never", {"half_life_s": 1})
    takers = [name for name, cls in POLICIES.items() if "half_life_s" in {p.name for p in cls.PARAMS}]
    assert len(takers) > 1
    assert str(err.value).endswith(f"; half_life_s is a parameter of {', '.join(takers)}")


def test_po2_a_refusal_that_is_not_about_the_unknown_parameter_names_no_owner():
    """The largest batch is refused before the parameters are read: the refusal says that alone, not that a stray
    parameter (scale) is thompson's, which is not why it was refused."""
    from policies import PolicyError, make_policy
    with pytest.raises(PolicyError) as err:
        make_policy("ucb", {"scale": 1}, max_batch_size=0)
    assert str(err.value) == "max_batch_size=0 out of range (allowed 1 .. 65536)"


# --- restore.saved_policy / Service: what a start runs when the saved policy no longer builds -------------------------
def _started_on(tmp, saved: dict, config_policy: str, state: str | None = None):
    """A Service started on a database whose saved policy is `saved` (and, if given, a checkpoint of it whose state is
    `state`), the config's [policy] name `config_policy`: (its policy_info(), the warnings it logged)."""
    import time

    from state import queries
    from state.db import open_store
    from state.items import INSERTS
    from tests.conftest import repeat_filtered
    from tests.fakes import make_service
    db = open_store(tmp / "s.db")
    db.conn.execute(INSERTS["settings"], queries.setting_row("policy", saved))
    if state is not None:
        db.conn.execute(INSERTS["policy_state"], {"wall": time.time(), "policy": saved["name"],
                                                  "params": "{}", "state": state})
    db.conn.close()
    with repeat_filtered() as records:
        service, writer = make_service(tmp, policy=config_policy)
    writer.stop()
    return service.policy_info(), [r.getMessage() for r in records]


def test_rs4_a_damaged_checkpoint_of_a_saved_policy_with_a_dropped_parameter_still_starts(tmp_path):
    """The saved ucb's c=500 is out of today's range: the start runs c at its default. Its checkpoint is damaged too,
    so the start builds the policy afresh: from the parameters it runs with, not the saved ones (a PolicyError there
    refused the start, exit 2, the service down until the database was edited)."""
    info, said = _started_on(tmp_path, {"name": "ucb", "params": {"c": 500, "half_life_s": 30}}, "ucb", "not json")
    assert (info["name"], info["params"]["c"], info["params"]["half_life_s"]) == ("ucb", 1.0, 30.0)
    assert any(m.startswith("saved state of ucb not restored") for m in said), said


@pytest.mark.parametrize("saved", [{"name": "retired", "params": {"k": 1}}, {"name": "ucb", "params": {"c": 500}}],
                         ids=["unknown-policy", "dropped-parameter"])
def test_sv1_the_config_policy_that_runs_is_not_said_unused(tmp_path, saved):
    """The config says [policy] ucb. A saved policy this version does not know: the config's ucb runs; a saved ucb
    whose only parameter is dropped: ucb at its defaults runs, as the config says. Either way the config's policy is
    what runs, and no '[policy] ... in the config is not used' warning says otherwise (one warning: the dropped)."""
    info, said = _started_on(tmp_path, saved, "ucb")
    assert (info["name"], info["params"]["c"]) == ("ucb", 1.0)
    assert [m for m in said if "in the config is not used" in m] == [] and len(said) == 1, said
    assert said[0].startswith(f"saved policy {saved['name']}"), said


def test_the_held_databases_remedy_is_a_command_a_shell_takes_whole(short_tmp):
    """helper-145: a database path with a blank was pasted into the remedy unquoted (specctl --db /srv/my db stop)."""
    import shlex

    from state.db import StoreError
    from state.lock import DaemonLock
    folder = short_tmp / "my state"
    folder.mkdir()
    db = folder / "s.db"
    running = DaemonLock(db)
    running.acquire()
    try:
        with pytest.raises(StoreError) as refused:
            DaemonLock(db).acquire()
    finally:
        running.release()
    remedy = str(refused.value).split("stop it (", 1)[1].split(")", 1)[0]
    assert shlex.split(remedy) == ["specctl", "--db", str(db), "stop"], remedy
