"""The gaps of the mutation pass over the changes since 32dc63d (bench/results/mutation-today-2026-12-06p.md): each test
here is red on its mutant(s) and green on the code. Service._unsettled (a refusal that changed nothing after one that may
yet land; a fresh service), Writer.finish_timeout_s in its message, numtext.one_line (every control and nothing else;
the cut's exact form and bound; the cut measured after escaping), the daemon's notes, refuse_unpaired (the service's
pair; no --socket), recorded_socket (a newest start naming no socket), the key above every header ([sim] = 5, [guard]'s
keys), parse_set's VALUE with spaces, [guard] given every section's name, parse_kv's first value."""
import sqlite3

import pytest
from click.testing import CliRunner

from controller.cli import common
from controller.cli.main import cli
from controller.daemon.config import ConfigError, DEFAULTS, load_config
from controller.daemon.setpairs import parse_set
from controller.daemon.main import main
from controller.daemon.commands import CommandRefused
from controller.numtext import one_line
from controller import paths
from policies import PolicyError, parse_kv
from state.db import open_store
from state.items import setting_item
from state.writer import Ticket, WriteFailed, Writer
from tests.fakes import make_service
from tests.test_pin_unsettled import _saved_pin


# --- Service._unsettled --------------------------------------------------------------------------------------------

def _events(db):
    store = open_store(db, readonly=True, check=False)
    try:
        return [(r["kind"], r["detail"]) for r in store["events"].rows]
    finally:
        store.conn.close()


def test_a_busy_refusal_after_a_pin_that_may_yet_land_does_not_settle_it(short_tmp):
    """SV2 (`|=` -> `=`): a command refused 'busy ... nothing changed' while the pin's write is still under way proves
    nothing about that write; the next unpin must still be written after it."""
    svc, writer = make_service(short_tmp)
    svc.command_timeout_s, writer.finish_timeout_s = 0.3, 0.3
    assert writer.flush(10)
    other = sqlite3.connect(short_tmp / "s.db", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")                     # the pin's write begins and waits for SQLite's lock
    with pytest.raises(CommandRefused, match="may yet be saved"):
        svc.pin(7)
    with pytest.raises(CommandRefused, match=r"busy.*nothing changed"):
        svc.pin(8)                                       # queued behind it, never begun: cancelled
    other.execute("COMMIT")                              # the pin's write lands now (within the busy timeout)
    other.close()
    svc.command_timeout_s = 5.0
    assert svc.pin(None)["changed"] is False              # a no-op in memory, written all the same
    assert writer.flush(10)
    assert _saved_pin(short_tmp / "s.db") is None        # (the mutant: 7, restored at the next start)
    writer.stop()


def test_a_fresh_service_writes_nothing_for_an_unpin_of_nothing(short_tmp):
    """SV7 (starts unsettled): nothing may yet land at the start; a no-op unpin stays a no-op."""
    svc, writer = make_service(short_tmp)
    assert writer.flush(10)
    before = _events(short_tmp / "s.db")
    assert svc.pin(None)["changed"] is False
    assert writer.flush(10)
    assert _events(short_tmp / "s.db") == before
    writer.stop()


# --- Writer.finish_timeout_s --------------------------------------------------------------------------------------

def test_the_may_yet_be_saved_refusal_names_the_wait_it_made(tmp_path, monkeypatch):
    """WR3: the message says the writer's finish_timeout_s, not a fixed 120 s."""
    waited = []

    class Stuck(Ticket):
        def __init__(self, items):
            super().__init__(items)
            self.begin()
            self.done = type("E", (), {"wait": lambda _, timeout: waited.append(timeout) and False})()
    monkeypatch.setattr("state.writer.Ticket", Stuck)
    w = Writer(open_store(tmp_path / "s.db"))
    w.finish_timeout_s = 2.5
    with pytest.raises(WriteFailed) as err:
        w.transaction([setting_item("pinned", 7)], timeout=0.01)
    assert str(err.value) == "the database write did not finish in 2.5 s; it may yet be saved"
    assert waited == [0.01, 2.5]


# --- numtext.one_line -----------------------------------------------------------------------------------------------

CONTROLS = {*range(0x20), *range(0x7f, 0xa0)}


def test_every_control_character_is_an_escape_and_nothing_else_is():
    """OL1, OL2, OL4, OL5: C0 (NUL and 0x1f included), DEL and C1 (0x9f included) are escapes; a space, a no-break
    space (0xa0) and every other character stay as they are."""
    for c in range(0x800):
        ch = chr(c)
        want = repr(ch)[1:-1] if c in CONTROLS else ch
        assert one_line(f"a{ch}b") == f"a{want}b", hex(c)
    assert one_line("\x00\x1f\x9f\xa0") == "\\x00\\x1f\\x9f\xa0"


@pytest.mark.parametrize("n", [1001, 1041, 5000, 1_000_000])
def test_a_line_over_the_bound_keeps_its_first_600_and_last_360_characters_and_counts_the_rest(n):
    """OL8, OL11 (a 1,001-character line kept whole), OL12, OL13 (a character more or less either side), OL14 (the
    count without its commas), OL15 (a count that is not what was left out)."""
    cut = n - 960
    text = "a" * 600 + "b" * cut + "c" * 360
    got = one_line(text)
    assert got == "a" * 600 + f"...({cut:,} characters left out)..." + "c" * 360
    assert len(got) <= 1000


def test_a_line_is_measured_after_its_escapes():
    """OL17 (cut measured before escaping): 300 ESCs are 1,200 characters written out, and cut as such."""
    assert one_line("\x1b" * 300) == "\\x1b" * 150 + "...(240 characters left out)..." + "\\x1b" * 90


def test_the_daemons_notes_are_one_line_each(tmp_path):
    """FA2: a note naming a path that holds a newline (a config that sets nothing) is one line on stderr."""
    config = tmp_path / "c\nx.toml"
    config.write_text("# nothing\n")
    res = CliRunner().invoke(main, ["config", "check", "--config", str(config)])
    assert res.exit_code == 0, res.output
    assert res.stderr.count("\n") == 1 and "c\\nx.toml sets nothing" in res.stderr, res.stderr
    assert res.stderr.startswith("spec-controller: note: "), res.stderr


# --- refuse_unpaired, recorded_socket -----------------------------------------------------------------------------

@pytest.fixture
def unit(short_tmp, monkeypatch):
    """The service's database (systemd's directories, here under short_tmp), created, no start recorded in it; the
    user's default pair under short_tmp/home, absent."""
    where = short_tmp / "unit"
    where.mkdir()
    for module in (paths, common):
        monkeypatch.setattr(module, "UNIT_DB", where / "spec-controller.db")
        monkeypatch.setattr(module, "UNIT_SOCKET", where / "control.sock")
    open_store(paths.UNIT_DB).conn.close()
    return short_tmp / "home", paths.UNIT_DB, paths.UNIT_SOCKET


def _specctl(home, *args):
    return CliRunner().invoke(cli, list(args), env={"XDG_STATE_HOME": str(home), "SPECCTL_DB": None,
                                                   "SPECCTL_SOCKET": None, "RUNTIME_DIRECTORY": None})


def test_the_services_socket_given_without_db_saves_into_the_services_database(unit):
    """RU3 (the unit's pair not taken): --socket naming the service's socket, its database the one found."""
    home, db, sock = unit
    res = _specctl(home, "--socket", str(sock), "threshold", "pin", "7")
    assert res.exit_code == 0 and f"saved to {db}" in res.output, res.output
    assert _saved_pin(db) == 7


def test_no_socket_given_is_not_checked_for_its_pair(unit):
    """RU2 (checked with no --socket too): with the service stopped, a bare `specctl threshold pin` takes the
    service's database (find_db's choice), though the socket it would have tried is the user's."""
    home, db, _ = unit
    res = _specctl(home, "threshold", "pin", "7")
    assert res.exit_code == 0 and f"saved to {db}" in res.output, res.output
    assert _saved_pin(db) == 7


@pytest.mark.parametrize("start", [None, "engine=sim policy=ucb threshold=4 pinned=None pid=123"])
def test_a_default_database_whose_newest_start_names_no_socket_records_no_daemon_on_it(short_tmp, start):
    """HO3 (start["socket"] unguarded): a default database with no start (an offline pin made it) or a start from
    before the socket was recorded: 'records no daemon on it', exit 3, not a KeyError."""
    db = short_tmp / "spec-controller" / "spec-controller.db"
    w = Writer(open_store(db)).start()
    if start:
        w.event("start", start)
    assert w.flush(10)
    w.stop()
    res = _specctl(short_tmp, "--socket", str(short_tmp / "b.sock"), "threshold", "pin", "7")
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert "(the default database, with no --db) records no daemon on it: give the --db" in res.output, res.output
    assert _saved_pin(db) is None


# --- config ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, line", [
    ("sim = 5\n", "config: [sim] must be a table"),                  # CF1: a section's name above every header
    ("min_gain = 1\n", "config: key 'min_gain' is above every [section] header (put it under [guard])"),   # CF3
    ("stabilisation_s = 1\n[sim]\nseed = 2\n",
     "config: key 'stabilisation_s' is above every [section] header (put it under [guard])"),
])
def test_a_key_above_every_header_is_told_apart_and_guard_keys_have_their_home(tmp_path, text, line):
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert str(err.value) == line


@pytest.mark.parametrize("raw, value", [(" .5", 0.5), (".5 ", 0.5), ("  5. ", 5.0)])
def test_set_takes_a_number_toml_does_not_read_with_spaces_around_it(raw, value):
    """CF7 (decimal_text of the unstripped VALUE): spaces around VALUE are TOML's and numtext's alike."""
    assert parse_set([f"sim.speed={raw}"]) == {"sim": {"speed": value}}


@pytest.mark.parametrize("name", [s for s in DEFAULTS if s != "guard"])
def test_every_other_sections_name_as_a_guard_setting_says_it_is_a_section(name):
    """GC2 (the first section left out): each section's name, [engine] and [sglang] too."""
    with pytest.raises(ConfigError, match=rf"^config: \[guard\] unknown guard setting '{name}' \(\[{name}\] is a "
                                          "section of its own; known: "):
        load_config(None, {"guard": {name: 1}})


# --- parse_kv --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pairs", [["c=1\nx", "c=2"], ["c=" + "9" * 5000, "c=1"]])
def test_a_parameter_given_twice_echoes_its_first_value_cut_short_too(pairs):
    """PK3 (the first value raw): a newline or 5,000 characters in the first of the two."""
    with pytest.raises(PolicyError) as err:
        parse_kv(pairs)
    message = str(err.value)
    assert "\n" not in message and len(message) < 300 and message.startswith("parameter 'c' given twice ("), message


# --- findings of the pass, fixed ------------------------------------------------------------------------------------

def test_an_offline_unpin_on_a_socket_no_daemon_answers_takes_no_word_from_an_absent_default_database(short_tmp):
    """--socket B (its daemon stopped, its own --db) and no default database: the unpin said 'there is no database at
    <the default>: nothing is pinned', exit 0, of B, whose own database may hold a pin restored at its next start. As
    the pin, status and threshold: refuse_unpaired's line, exit 3, nothing made."""
    res = _specctl(short_tmp, "--socket", str(short_tmp / "b.sock"), "threshold", "unpin")
    assert res.exit_code == 3 and res.output.count("\n") == 1, res.output
    assert res.output.startswith(f"specctl: no daemon answers on {short_tmp}/b.sock, and "), res.output
    assert "(the default database, with no --db) records no daemon on it: give the --db" in res.output, res.output
    assert not (short_tmp / "spec-controller").exists()


def test_config_checks_ok_line_is_one_line_whatever_the_path_holds(tmp_path):
    """`config check` says 'one line, exit 0': a --config path holding a newline made its ok line two (its notes and
    refusals were one line since b825830)."""
    config = tmp_path / "c\nx.toml"
    config.write_text("[sim]\nseed = 3\n")
    res = CliRunner().invoke(main, ["config", "check", "--config", str(config)])
    assert res.exit_code == 0 and res.stdout.count("\n") == 1, res.stdout
    assert res.stdout.startswith(f"{tmp_path}/c\\nx.toml: ok (engine sim: "), res.stdout
