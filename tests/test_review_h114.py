"""helper-114's adversarial review of the boundaries: what it found, each test red before its fix."""
import sqlite3

import pytest

from state.db import StoreError, open_store
from tests.test_daemon_e2e import run_daemon_once
from tests.test_faults_cli import _one_line, specctl


def _sqlite_file(path, version: int, tables=("accounts",)):
    conn = sqlite3.connect(path)
    for table in tables:
        conn.execute(f"CREATE TABLE {table} (x)")
    conn.execute(f"PRAGMA user_version={version}")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("version", [-1, 1])
@pytest.mark.parametrize("readonly", [False, True])
def test_an_sqlite_file_of_another_application_at_any_schema_version_is_refused_and_left_alone(short_tmp, version,
                                                                                              readonly):
    """user_version 0 with tables was refused as another application's file; at 1 (this schema's number, which other
    applications use too) every query was a traceback (no such table: decisions); at -1 the migration ran from step
    -1, so the daemon added its tables to the file before failing on 'table "samples" already exists'."""
    db = short_tmp / "other.db"
    before = _sqlite_file(db, version)
    with pytest.raises(StoreError, match="is not a spec-controller database"):
        open_store(db, readonly=readonly)
    assert db.read_bytes() == before


def test_a_database_of_ours_missing_a_table_is_named(short_tmp):
    db = short_tmp / "d.db"
    open_store(db).conn.close()
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE decisions")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="schema version 1 without its table decisions; refusing it"):
        open_store(db)


@pytest.mark.parametrize("command", [["status"], ["history"], ["threshold", "pin", "3"]])
def test_specctl_on_another_applications_file_at_user_version_1_is_one_line(short_tmp, command):
    db = short_tmp / "v1.db"
    before = _sqlite_file(db, 1)
    _one_line(specctl(short_tmp, db, *command), f"specctl: {db} is not a spec-controller database")
    assert db.read_bytes() == before


@pytest.mark.parametrize("version", [-1, 1])
def test_the_daemon_refuses_another_applications_file_in_one_line_and_leaves_it(short_tmp, version):
    db = short_tmp / "x.db"
    before = _sqlite_file(db, version)
    res = run_daemon_once(short_tmp, "--concurrency", "4", "--db", str(db), "--socket", str(short_tmp / "s"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"spec-controller: {db} is not a spec-controller database") and db.read_bytes() == before and not (short_tmp / "x.db.lock").exists()
