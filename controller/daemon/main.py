"""`spec-controller run`: the service systemd starts (Type=notify)."""
from __future__ import annotations

import signal
from pathlib import Path

import click

from state.db import StoreError
from state.room import Room

from ..cli.options import EXIT_USAGE, Bounded, OneLineGroup, fail_as, version_option
from . import logs
from ..numtext import one_line, plain
from ..paths import DEFAULT_CONFIG, default_db
from .config import FLAGS, LOG_LEVELS, MIN_ARRIVAL_RATE, RANGES, ConfigError, load_config
from .configdiff import given_causes
from .lifecycle import Daemon
from .preflight import Fatal, store_refusal
from .setpairs import parse_set, set_keys


# run's number flags: ASCII decimal only (click's int() and float() took "1_0" as 10, "٣" as 3, "+5", " 5"); their
# ranges are the config's, checked with the rest of it
INF = float("inf")


# specctl's commands, typed to the daemon's own command (newcomer-54: "no such command 'status' (commands: config,
# run)" did not say where they are)
SPECCTL_COMMANDS = ("status", "stop", "history", "policy", "threshold", "plot", "simulate")


class DaemonGroup(OneLineGroup):
    prog = "spec-controller"

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if name in SPECCTL_COMMANDS:
            raise click.UsageError(f"no such command '{name}': a running daemon is steered with specctl (specctl "
                                   f"{name}; in a clone .venv/bin/specctl {name})", ctx)
        if name == "start":
            raise click.UsageError("no such command 'start' (did you mean 'spec-controller run'? it runs in the "
                                   "foreground; the service: systemctl start spec-controller)", ctx)
        return super().resolve_command(ctx, args)


@click.group(cls=DaemonGroup)
@version_option("spec-controller")
def main() -> None:
    """spec-controller: the daemon that retunes SGLang's speculation threshold."""


# run's options, which `config check` takes as well (newcomer-53: it took --config and --set only, so the command line
# a daemon runs with could not be checked as one)
CONFIG_OPTIONS = [
    click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                 help="TOML config (default /etc/spec-controller/config.toml; missing = built-in defaults)"),
    click.option("--engine", type=click.Choice(["sim", "sglang"]), help="engine to embed"),
    click.option("--profile", help="simulator profile: name or .toml/.json path (default: the trace's own)"),
    click.option("--trace", help="simulator load trace (looped): name or path"),
    click.option("--concurrency", type=Bounded("--concurrency", -INF, INF),
                 help="simulator: fixed number of clients instead of a trace"),
    click.option("--arrival-rate", type=Bounded("--arrival-rate", -INF, INF, float),
                 help="simulator: Poisson arrivals at this many requests/s instead of a trace"),
    click.option("--speed", type=Bounded("--speed", -INF, INF, float),
                 help="simulator clock rate (virtual seconds per real second)"),
    click.option("--policy", help="policy at first start (later: specctl policy set)"),
    click.option("--db", metavar="PATH", help="SQLite database path"),
    click.option("--socket", "socket_path", metavar="PATH", help="control socket path"),
    click.option("--metrics-port", type=Bounded("--metrics-port", -INF, INF),
                 help="serve Prometheus metrics on PORT of [control] metrics_addr (127.0.0.1)"),
    click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), help="as [control] log_level"),
    click.option("--set", "settings", multiple=True, metavar="SECTION.KEY=VALUE",
                 help="any config key, e.g. --set guard.explore_share=0.1 (repeatable; VALUE in TOML syntax, a number "
                      "as the flags take one: not +5, 1_0 or 0x10)"),
]


def config_options(command):
    for option in reversed(CONFIG_OPTIONS):
        command = option(command)
    return command


def read_config(config_path: str | None, settings: tuple[str, ...], flags: dict) -> dict:
    """The config run starts with, from the file, the flags and --set; a refusal is one line and exit 2."""
    given = {"config_path": config_path, **flags}
    if (empty := [p.opts[0] for p in run.params if isinstance(given.get(p.name), str) and not given[p.name].strip()]):
        # (helper-133: --db '' ran on the default database, --config '' read "config file .", as from an unset "$DB")
        fail_as("spec-controller", f"{', '.join(empty)}: empty; leave {'it' if len(empty) == 1 else 'them'} out for "
                "the default", EXIT_USAGE)
    overrides: dict | None = None      # (None: --set itself refused)
    try:
        overrides = parse_set(settings)
        for name, (section, key) in FLAGS.items():
            if flags[name] is not None:
                if key in overrides.get(section, {}):     # (the flag won without a word, as a second --set did)
                    fail_as("spec-controller", f"{_option(name)} and --set {section}.{key}=... both set [{section}] {key}; give "
                            "it once", EXIT_USAGE)
                overrides.setdefault(section, {})[key] = flags[name]
        cfg = load_config(config_path, overrides)
    except ConfigError as e:
        fail_as("spec-controller", str(e) + _from_command_line(str(e), config_path, overrides, flags, settings),
                EXIT_USAGE)
    if (ignored := _sim_flags_ignored(cfg, flags, overrides)):
        fail_as("spec-controller", ignored, EXIT_USAGE)
    for name, least, unit in (("concurrency", 1, "clients"), ("arrival_rate", MIN_ARRIVAL_RATE, "requests/s")):
        if flags[name] == 0:    # (the config's 0 is "none": typed as a flag it chose nothing, and the trace ran)
            most = next(hi for section, key, _, hi in RANGES if (section, key) == ("sim", name))
            fail_as("spec-controller", f"{_option(name)} 0 chooses no load: give {plain(least)} .. {plain(most)} "
                    f"{unit}, or leave {_option(name)} out for the trace", EXIT_USAGE)
    cfg["_overrides"] = overrides
    return cfg


@main.command()
@config_options
def run(config_path: str | None, settings: tuple[str, ...], **flags) -> None:
    """Run the daemon in the foreground (systemd's ExecStart)."""
    # A SIGHUP from here on, before the daemon's handler (Daemon._signals: ~25 ms of imports and checks after the config
    # is read), is a reload it then makes: ignored (the entry point's SIG_IGN), one after the read was lost
    hups: list[int] = []
    signal.signal(signal.SIGHUP, lambda *_: hups.append(1))
    cfg = read_config(config_path, settings, flags)
    logs.setup(cfg["control"]["log_level"])
    try:
        daemon = Daemon(cfg)
        daemon.hups_before = hups
        code = daemon.run()
    except StoreError as e:         # (the database, its lock file, journals or folder: 2 where no restart changes it)
        refusal = store_refusal(e)
        fail_as("spec-controller", str(refusal), refusal.code)
    except (Fatal, RuntimeError) as e:
        fail_as("spec-controller", str(e), getattr(e, "code", 1))
    finally:
        # The daemon is done: a SIGHUP (a reload) from here on arrived while the interpreter wound down, which puts back
        # each handler's default action (for SIGHUP, termination): the process died of it after logging 'exit 0'
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    raise SystemExit(code)


@main.group()
def config() -> None:
    """The daemon's config: written from the SGLang launch command you run today (from-launch), checked as run reads it
    (check)."""


@config.command("from-launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--python", metavar="PATH", help="the interpreter that runs SGLang (default: this one; then also "
              "[sglang] python)")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="write the config there (replaced whole, only "
              "once it is complete) instead of printing it")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def from_launch(python: str | None, output: str | None, command: tuple[str, ...]) -> None:
    """Print a config that starts what COMMAND starts (`-- python -m sglang.launch_server ARGS` or `sglang serve
    ...`), read by SGLang's own parser; notes on stderr. Nothing is written when it cannot."""
    from .engines.sglang_flags import secrets_in
    from .launchcfg import LaunchError, convert, toml_text, write_whole
    _own_options_mistyped(click.get_current_context(), output, command)
    try:
        result = convert(list(command), python, output or DEFAULT_CONFIG)
        text = toml_text(result, list(command))
    except LaunchError as e:
        fail_as("spec-controller", str(e), e.code)
    _say_notes(result.notes)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        write_whole(output, text, private=bool(secrets_in(result.sglang)))
    except OSError as e:
        fail_as("spec-controller", f"cannot write {output}: {e.strerror or e}; nothing written")
    click.echo(one_line(f"spec-controller: wrote {output}"), err=True)      # (a name holding a newline: one line)


def _own_options_mistyped(ctx: click.Context, output: str | None, command: tuple[str, ...]) -> None:
    """COMMAND takes the options click does not know (SGLang's flags), so a typo in from-launch's own (`--ouput FILE
    -- python -m ...`) reached the launch command, refused there as words "before the interpreter"; `-o` given no
    name took the `--` after it and wrote a file named `--`. Usage errors of from-launch instead (helper-94)."""
    if output is not None and (output.startswith("-") or not output.strip()):      # ('': an unset shell variable)
        raise click.UsageError(f"-o / --output needs a file name, got {output!r} (leave it out to print the config; "
                               "the launch command goes after --)")
    rest = command[1:]
    launch = "--" in rest or any("sglang.launch_server" in word for word in rest) or any(
        Path(word).name == "sglang" and after == "serve" for word, after in zip(rest, rest[1:]))
    if command and command[0].startswith("-") and command[0] != "--" and launch:    # (not SGLang's arguments alone)
        raise click.NoSuchOption(command[0].split("=", 1)[0], ctx=ctx,
                                 possibilities=[o for p in ctx.command.params for o in p.opts if o.startswith("--")])


@config.command("check")
@config_options
def check(config_path: str | None, settings: tuple[str, ...], **flags) -> None:
    """Check a config as `run` reads it, with run's options, starting nothing: one line, exit 0 when run would accept
    it (before a `systemctl restart`); notes on stderr."""
    from ..sim.profile import ProfileError
    from .engines.base import EngineError
    from .launchcfg import LaunchError, off_path_note
    from .launchcheck import section_notes
    from .launchcmd import missing_path_notes, path_notes, secret_mode_note
    from .preflight import (build_engine, check_files_apart, check_given_paths, check_metrics_port, check_store_opens,
                            privileged_port)
    from .serviceaccess import service_account, service_cannot_read, unit_cannot_write
    parsed: list[str] = []
    try:
        cfg = read_config(config_path, settings, flags)
        check_given_paths(cfg)
        engine = build_engine(cfg)
        check_files_apart(cfg, engine.own_files)
        saved, unread = check_store_opens(cfg)     # (what a start resumes, read once)
        check_metrics_port(cfg, held_is_ok=True)
        if cfg["engine"]["kind"] == "sglang":
            engine.check_installed()
            parsed = section_notes(engine)     # SGLang's parser, where it runs (seconds: its import)
    except (ConfigError, ProfileError, EngineError, LaunchError, Fatal) as e:
        fail_as("spec-controller", str(e), EXIT_USAGE)
    where = config_path or cfg["_path"] or f"{DEFAULT_CONFIG} (absent: built-in defaults)"   # (load_config looked)
    sglang = cfg["engine"]["kind"] == "sglang"
    _say_notes(path_notes(cfg["sglang"]) + missing_path_notes(cfg["sglang"]) + off_path_note(cfg["sglang"]) + parsed
               if sglang else _empty_note(cfg))
    user, group = service_account()     # the installed unit's User= / Group= (an operator's drop-in included)
    readable = service_cannot_read(cfg["sglang"], user, config=cfg["_path"]) if sglang else []
    port = cfg["control"]["metrics_port"]     # (root binds any port at the check above; the unit's user not: noted)
    privileged = [f"[control] metrics_port = {port}: {why}"] if (why := privileged_port(port)) else []
    policy, resumed = _policy_run_starts(cfg, engine, saved)
    room = Room(cfg["storage"]["db"] or default_db(), cfg["storage"]["min_free_mb"]).problem()  # (a disk under it)
    _say_notes(secret_mode_note(cfg["_path"], cfg["sglang"], group) + readable + privileged +
               unit_cannot_write(cfg, DEFAULT_CONFIG) + unread + resumed + ([room] if room else []))
    click.echo(one_line(f"{where}: ok (engine {cfg['engine']['kind']}: {_engine_words(cfg, engine)}; policy "
                        f"{policy})"))          # (a path holding a newline: still one line)


def _policy_run_starts(cfg: dict, engine, saved: dict) -> tuple[str, list[str]]:
    """restore.resumed_policy of the database `run` would open, from its settings as check_store_opens read them."""
    from policies import make_policy

    from .restore import resumed_policy
    db = Path(cfg["storage"]["db"] or default_db())
    return resumed_policy(cfg, saved, lambda name, params: make_policy(
        name, params, seed=cfg["policy"]["seed"], max_batch_size=engine.max_batch_size), str(db))


def _empty_note(cfg: dict) -> list[str]:
    """A config file that sets nothing (empty, comments only: a `from-launch > FILE` that failed) runs the simulator."""
    return [f"{cfg['_path']} sets nothing: run takes every default, the simulator (engine sim), and starts no SGLang"] \
        if cfg["_file_empty"] else []


def _say_notes(notes: list[str]) -> None:
    for note in notes:
        click.echo(f"spec-controller: note: {one_line(note)}", err=True)


def _engine_words(cfg: dict, engine) -> str:
    """The engine `run` would start: SGLang's model, or the simulator's load and the profile it runs (the engine's, as
    built: the one given, else the trace's own; `--profile seed --concurrency 16` said '16 clients' alone)."""
    sim = cfg["sim"]
    if cfg["engine"]["kind"] == "sglang":
        return f"model {cfg['sglang'].get('model_path')}"
    load = (f"{sim['concurrency']} clients" if sim["concurrency"] else f"{plain(sim['arrival_rate'])} requests/s"
            if sim["arrival_rate"] else f"trace {sim['trace']}")
    return f"{load}, profile {engine.profile.name}"


def _sim_flags_ignored(cfg: dict, flags: dict, overrides: dict) -> str | None:
    """Why run refuses simulator flags given for another engine, or None. (newcomer-53: the quick start's --speed 10 on
    a host with the service's config, [engine] kind = "sglang", started SGLang and dropped --speed without a word.)"""
    kind = cfg["engine"]["kind"]
    given = [_option(name) for name, (section, _) in FLAGS.items() if section == "sim" and flags[name] is not None]
    if kind == "sim" or not given:
        return None
    source = "--engine" if flags["engine"] else "--set engine.kind" if "kind" in overrides.get("engine", {}) else \
        f"[engine] kind in {cfg['_path']}"
    return (f"{', '.join(given)}: the simulator's, but the engine is {kind} ({source}); add --engine sim to run the "
            "simulator, or leave them out")


def _option(name: str) -> str:
    """The option a parameter of run (and config check) is given by: --socket for socket_path."""
    return next(p.opts[0] for p in run.params if p.name == name)


def _from_command_line(message: str, config_path: str | None, overrides: dict | None, flags: dict,
                       settings: tuple[str, ...]) -> str:
    """' (given on the command line: --policy)' where values from flags or --set are why the config is refused: the
    message says 'config:', and an operator who gave no file would look for one (configdiff.given_causes)."""
    if overrides is None:       # (--set itself refused)
        return ""
    given = [(_option(name), (section, key)) for name, (section, key) in FLAGS.items() if flags[name] is not None]
    given += [(f"--set {pair}", set_keys(pair)) for pair in settings]     # (each read by parse_set already)
    causes = given_causes(message, config_path, overrides, given)
    return f" (given on the command line: {', '.join(causes)})" if causes else ""


if __name__ == "__main__":
    main()
