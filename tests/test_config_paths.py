"""A config file's relative paths are read from the file's directory: `config check` run in a shell and the unit
(started in /) must mean the same files. Flags keep the shell's directory."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.daemon.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """etc/c.toml beside etc/p.toml (a profile file); the process starts in an unrelated directory."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "etc" / "p.toml").write_text((ROOT / "controller" / "profiles" / "crossover-b.toml").read_text())
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path


def write(layout: Path, text: str) -> Path:
    path = layout / "etc" / "c.toml"
    path.write_text(text)
    return path


def test_relative_db_socket_and_profile_file_are_the_config_files(layout):
    cfg = load_config(write(layout, '[storage]\ndb = "state/x.db"\n[control]\nsocket = "c.sock"\n'
                                    '[sim]\nprofile = "p.toml"\n'))
    etc = layout / "etc"
    assert cfg["storage"]["db"] == str(etc / "state" / "x.db")
    assert cfg["control"]["socket"] == str(etc / "c.sock")
    assert cfg["sim"]["profile"] == str(etc / "p.toml")


def test_a_config_given_by_a_relative_path_anchors_at_its_absolute_directory(layout):
    write(layout, '[storage]\ndb = "x.db"\n')
    cfg = load_config(Path("..") / "etc" / "c.toml")
    assert Path(cfg["storage"]["db"]).is_absolute() and Path(cfg["storage"]["db"]).resolve() == layout / "etc" / "x.db"


def test_absolute_paths_built_in_names_and_empty_values_stay_as_written(layout):
    cfg = load_config(write(layout, f'[storage]\ndb = "{layout}/abs.db"\n[control]\nsocket = ""\n'
                                    '[sim]\nprofile = "crossover-b"\ntrace = "mixed-shift"\n'))
    assert cfg["storage"]["db"] == f"{layout}/abs.db" and cfg["control"]["socket"] == ""
    assert (cfg["sim"]["profile"], cfg["sim"]["trace"]) == ("crossover-b", "mixed-shift")


def test_flags_stay_relative_to_the_shell(layout):
    cfg = load_config(write(layout, '[storage]\ndb = "x.db"\n'), {"storage": {"db": "mine.db"}})
    assert cfg["storage"]["db"] == "mine.db"


def test_config_check_from_another_directory_finds_the_files_beside_the_config(layout):
    """The real CLI in a subprocess started elsewhere: the profile beside the config is found; one that is only in
    the starting directory is not (the unit would not find it either)."""
    path = write(layout, '[sim]\nprofile = "p.toml"\n')
    run = [sys.executable, "-m", "controller.daemon", "config", "check", "--config", str(path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(run, capture_output=True, text=True, env=env, cwd=layout / "elsewhere")
    assert ok.returncode == 0, ok.stderr
    (layout / "elsewhere" / "q.toml").write_text((layout / "etc" / "p.toml").read_text())
    write(layout, '[sim]\nprofile = "q.toml"\n')
    refused = subprocess.run(run, capture_output=True, text=True, env=env, cwd=layout / "elsewhere")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"spec-controller: config: [sim] profile (--profile): profile file "
                                      f"{layout / 'etc' / 'q.toml'} does not exist")


def test_a_relative_db_in_a_missing_directory_names_the_anchored_path(layout):
    from controller.daemon.preflight import Fatal, check_given_paths
    cfg = load_config(write(layout, '[storage]\ndb = "nowhere/x.db"\n'))
    with pytest.raises(Fatal) as e:
        check_given_paths(cfg)
    assert f"its directory {layout / 'etc' / 'nowhere'} does not exist" in str(e.value)
    with pytest.raises(ConfigError):            # (a bad key still refused first, anchoring or not)
        load_config(write(layout, '[storage]\ndbx = "x.db"\n'))


def test_a_trace_files_own_profile_file_is_read_beside_the_trace(layout):
    """helper-72: the config's trace was found beside the config, but the profile the trace names was the shell's."""
    (layout / "etc" / "t.toml").write_text('profile = "p.toml"\n[[segment]]\nseconds = 5\nconcurrency = 8\n')
    mine = layout / "etc" / "p.toml"
    mine.write_text(mine.read_text().replace('name = "crossover-b"', 'name = "the one beside the trace"'))
    from controller.daemon.preflight import configured_engine
    engine = configured_engine(load_config(write(layout, '[sim]\ntrace = "t.toml"\n')))
    assert engine.profile.name == "the one beside the trace"


def test_paths_are_written_without_dot_dot(layout):
    cfg = load_config(write(layout, '[storage]\ndb = "../var/x.db"\n'))
    assert cfg["storage"]["db"] == str(layout / "var" / "x.db")


def test_a_tilde_is_refused_not_taken_for_a_directory(layout):
    with pytest.raises(ConfigError) as e:
        load_config(write(layout, '[storage]\ndb = "~/x.db"\n'))
    assert str(e.value) == "config: [storage] db '~/x.db': nothing expands ~ here: write the path out"


@pytest.mark.parametrize("path, refused", [("~spec/x.db", True), ("~", True), ("/srv/a~b/x.db", False),
                                           ("x~.db", False)])
def test_only_a_leading_tilde_is_a_home_no_one_expands(path, refused):
    """~user and ~ alone are the shell's too; a ~ inside a name is just a character."""
    from controller.paths import home_unexpanded
    assert bool(home_unexpanded(path)) is refused


def test_a_flag_naming_another_file_than_the_configs_is_reported_as_overriding_it(layout):
    """shadowed() (the reload's warning) compares the files named: the config's x.db (in etc/) and the shell's x.db
    (in elsewhere/) differ; the config's file given by its absolute path is the same one."""
    from controller.daemon.configdiff import shadowed
    path = write(layout, '[storage]\ndb = "x.db"\n')
    assert shadowed(path, {"storage": {"db": "x.db"}}) == [
        f"[storage] db {str(layout / 'etc' / 'x.db')!r} (overridden by the command line: "
        f"{str(layout / 'elsewhere' / 'x.db')!r})"]
    assert shadowed(path, {"storage": {"db": str(layout / "etc" / "x.db")}}) == []


def test_a_path_with_a_slash_but_no_suffix_is_a_file_too(layout):
    cfg = load_config(write(layout, '[sim]\nprofile = "shapes/mine"\n'))
    assert cfg["sim"]["profile"] == str(layout / "etc" / "shapes" / "mine")


def test_built_in_names_in_the_file_and_a_flag_are_compared_as_names(layout):
    from controller.daemon.configdiff import shadowed
    path = write(layout, '[sim]\nprofile = "crossover-a"\n')
    assert shadowed(path, {"sim": {"profile": "crossover-a"}}) == []
    assert shadowed(path, {"sim": {"profile": "crossover-b"}}) == [
        "[sim] profile 'crossover-a' (overridden by the command line: 'crossover-b')"]


def test_the_daemon_started_elsewhere_keeps_its_files_beside_its_config_and_a_reload_sees_no_change(short_tmp):
    """A real daemon started in another directory (as the unit starts it in /): the database and the socket the
    config names relatively are beside the config; SIGHUP re-reads the same file the same way (no key to restart)."""
    from tests.daemon_proc import DaemonProc
    from tests.test_faults_config import _hup_and_wait
    (short_tmp / "state").mkdir()
    (short_tmp / "cwd").mkdir()
    d = DaemonProc(short_tmp, "--concurrency", "2", cwd=short_tmp / "cwd",
                   config_text='[storage]\ndb = "state/x.db"\n[control]\nsocket = "c.sock"\n',
                   paths_in_config=(short_tmp / "state" / "x.db", short_tmp / "c.sock"))
    try:
        d.wait_socket()
        assert d.call("GET", "/status")["daemon"]["db"] == str(short_tmp / "state" / "x.db")
        assert sorted(p.name for p in (short_tmp / "cwd").iterdir()) == []
        assert _hup_and_wait(d, 1) == ["guard, retention, min_free_mb and log level re-read"], d.log_text()
    finally:
        assert d.stop() == 0


def test_a_missing_directory_names_the_default_here_and_the_units(layout, monkeypatch):
    """(helper-73: under sudo the default named was root's ~/.local one, not the service's /var/lib one)"""
    from controller.daemon.preflight import Fatal, check_given_paths
    from controller.paths import default_db
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    with pytest.raises(Fatal) as e:
        check_given_paths(load_config(write(layout, '[storage]\ndb = "nowhere/x.db"\n')))
    assert str(e.value).endswith(f"(create it, or leave the option out for the default: {default_db()} here, "
                                 "/var/lib/spec-controller/spec-controller.db under the unit)")
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/spec-controller")
    with pytest.raises(Fatal) as e:
        check_given_paths(load_config(write(layout, '[storage]\ndb = "nowhere/x.db"\n')))
    assert str(e.value).endswith("for the default: /var/lib/spec-controller/spec-controller.db)")


@pytest.mark.parametrize("key,thing,said", [
    ("db", "dir", "[storage] db {p}: a directory, not a database file"),
    ("db", "link", "[storage] db {p}: a symbolic link; refusing to follow it"),
    ("db", "fifo", "[storage] db {p}: not a regular file"),
    ("socket", "dir", "[control] socket {p}: a directory, not a socket"),
    ("socket", "file", "[control] socket {p}: not a socket"),
    ("socket", "the db", "[control] socket {p} is the database's own path")])
def test_what_is_at_a_given_path_is_refused_by_check_as_by_run(short_tmp, key, thing, said):
    """helper-81: config check said ok for a db or socket naming a directory, which run then refused (the db with
    exit 1, which systemd restarts). Both now refuse it at the config's check, exit 2, the same line, nothing made."""
    p = short_tmp / "x"
    if thing == "dir":
        p.mkdir()
    elif thing == "link":
        p.symlink_to(short_tmp / "real.db")
    elif thing == "fifo":
        os.mkfifo(p)
    elif thing == "file":
        p.write_text("notes")
    db, sock = (p, short_tmp / "c.sock") if key == "db" else (short_tmp / "a.db", p)
    if thing == "the db":
        db, sock = short_tmp / "a.db", Path(f"{short_tmp / 'a.db'}-wal")
    cfg = short_tmp / "c.toml"
    cfg.write_text(f'[storage]\ndb = "{db}"\n[control]\nsocket = "{sock}"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(short_tmp / "state")}
    env.pop("INVOCATION_ID", None)
    before = sorted(q.name for q in short_tmp.iterdir())
    for words in (["config", "check"], ["run", "--concurrency", "2"]):
        res = subprocess.run([sys.executable, "-m", "controller.daemon", *words, "--config", str(cfg)],
                             capture_output=True, text=True, env=env, timeout=60)
        lines = res.stderr.splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith(
            f"spec-controller: config: {said.format(p=sock if key == 'socket' else db)}"), (words, res.stderr)
    assert sorted(q.name for q in short_tmp.iterdir()) == before


@pytest.mark.parametrize("args", [["--db", "~/x.db"], ["--socket", "~/c.sock"], ["--set", 'storage.db="~/x.db"']])
def test_a_quoted_tilde_on_the_command_line_is_named_as_such(tmp_path, monkeypatch, args):
    """(helper-94: `run --db '~/x.db'` said only that a directory .../~ did not exist; the config file's own `~` line
    says nothing expands it)"""
    from click.testing import CliRunner
    from controller.daemon.main import main
    from controller.daemon import logs
    monkeypatch.setattr(logs, "setup", lambda level: None)    # (the daemon's log set-up: the other tests' caplog)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", *args])
    assert result.exit_code == 2 and "~ does not exist (nothing expands ~ here: write the path out)" in result.output, \
        result.output
    assert not (tmp_path / "~").exists()


def test_specctl_pairs_the_database_with_the_socket_it_finds(short_tmp, monkeypatch):
    """helper-94: with a service's database left from an earlier run (its socket gone with it) and the user's daemon
    up, specctl talked to the user's daemon but read and saved offline into the service's database."""
    import socket as socketlib

    from controller import paths
    monkeypatch.setenv("XDG_STATE_HOME", str(short_tmp / "xdg"))
    monkeypatch.delenv("SPECCTL_DB", raising=False)
    monkeypatch.delenv("SPECCTL_SOCKET", raising=False)
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    unit = short_tmp / "unit"
    unit.mkdir()
    monkeypatch.setattr(paths, "UNIT_DB", unit / "spec-controller.db")
    monkeypatch.setattr(paths, "UNIT_SOCKET", unit / "control.sock")
    paths.UNIT_DB.write_bytes(b"")
    assert paths.find_db() == paths.UNIT_DB                    # no daemon's socket: the service's database
    paths.default_socket().parent.mkdir(parents=True)
    with socketlib.socket(socketlib.AF_UNIX) as user:
        user.bind(str(paths.default_socket()))
        assert paths.find_socket() == paths.default_socket() and paths.find_db() == paths.default_db()
        with socketlib.socket(socketlib.AF_UNIX) as service:
            service.bind(str(paths.UNIT_SOCKET))
            assert paths.find_socket() == paths.UNIT_SOCKET and paths.find_db() == paths.UNIT_DB
        monkeypatch.setenv("SPECCTL_DB", str(paths.UNIT_DB))
        assert paths.find_db() == paths.UNIT_DB                # named: as named


def test_config_check_of_the_units_config_notes_a_database_the_unit_may_not_write(layout, monkeypatch):
    """note 53: a [storage] db outside the unit's writable directories passed config check, and the service's start
    failed read-only (ProtectSystem=strict). The unit's config is named; any other config is a shell's, not noted."""
    from click.testing import CliRunner

    from controller.daemon import main, serviceaccess
    data = layout / "data"
    data.mkdir()
    config = write(layout, f'[storage]\ndb = "{data}/spec.db"\n')
    monkeypatch.setattr(serviceaccess, "UNIT_PRIVATE_TMP", ())      # (this folder, under /tmp, stands for /data's)
    monkeypatch.setattr(main, "DEFAULT_CONFIG", config)           # (this file stands for /etc/spec-controller's)
    res = CliRunner().invoke(main.main, ["config", "check", "--config", str(config)])
    notes = [line for line in res.output.splitlines() if "ProtectSystem" in line]
    assert res.exit_code == 0 and notes == [
        f"spec-controller: note: [storage] db = {data}/spec.db: the service (ProtectSystem=strict) may write only under "
        f"/var/lib/spec-controller, /run/spec-controller, /var/cache/spec-controller; let it write {data} with "
        f"`systemctl edit spec-controller`: [Service] ReadWritePaths={data}"], res.output
    monkeypatch.setattr(main, "DEFAULT_CONFIG", layout / "etc" / "other.toml")
    res = CliRunner().invoke(main.main, ["config", "check", "--config", str(config)])
    assert res.exit_code == 0 and "ProtectSystem" not in res.output, res.output


def test_config_check_of_the_units_config_says_what_a_database_under_tmp_becomes(layout):
    """helper-145: a database under /tmp was told 'let it write /tmp: ReadWritePaths=/tmp', which changes nothing: the
    unit writes its own /tmp (PrivateTmp), empty at each start, where specctl does not look."""
    from controller.daemon.serviceaccess import unit_cannot_write
    config = write(layout, "")
    cfg = {"_path": str(config), "storage": {"db": "/var/tmp/sc/spec.db"}, "control": {"socket": "/tmp/c.sock"}}
    assert unit_cannot_write(cfg, config) == [
        f"[{section}] {key} = {value}: the service has its own /tmp and /var/tmp (PrivateTmp), empty at its start, "
        "where specctl does not look; move it (e.g. under /var/lib/spec-controller)"
        for section, key, value in (("storage", "db", "/var/tmp/sc/spec.db"), ("control", "socket", "/tmp/c.sock"))]


@pytest.mark.parametrize("folder,word", [("/data/my models", '"/data/my models"'), ("/data/50%", "/data/50%%"),
                                         ('/data/a"b', '"/data/a\\"b"'), ("/data/m", "/data/m")])
def test_the_read_write_path_a_note_gives_is_the_one_word_systemd_reads(layout, folder, word):
    """helper-145: ReadWritePaths=/data/my models is two paths to systemd (/data/my, and models, ignored: 'path is not
    absolute'); a '%' starts a specifier."""
    from controller.daemon.serviceaccess import unit_cannot_write
    config = write(layout, "")
    cfg = {"_path": str(config), "storage": {"db": f"{folder}/s.db"}, "control": {"socket": None}}
    assert [note.rpartition("ReadWritePaths=")[2] for note in unit_cannot_write(cfg, config)] == [word]
