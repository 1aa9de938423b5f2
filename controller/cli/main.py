"""specctl: steer and inspect the spec-controller daemon (and run the simulator).

Commands live in their own modules and are imported when invoked (LazyGroup), so that
`specctl status` does not pay for the simulator's or the policies' imports."""
from __future__ import annotations

import importlib

import click
from click.core import ParameterSource

from .common import Ctx, not_empty
from .options import OneLineGroup, version_option

OWN_PATHS = {"simulate"}      # commands that reach no daemon: no --socket / --db of theirs
COMMANDS = {
    "status": "controller.cli.status:status",
    "stop": "controller.cli.stop:stop",
    "plot": "controller.cli.plot:plot",
    "policy": "controller.cli.steer:policy",
    "threshold": "controller.cli.steer:threshold",
    "history": "controller.cli.steer:history",
    "simulate": "controller.cli.simulate:simulate",
}


class PathOption(click.Option):
    """--socket / --db as often as typed (click kept the last of `--db A --db B`, A dropped unsaid): each after the
    first passes Ctx.named_again; a variable's value whole (a list's would be split at its spaces)."""

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, multiple=True, **kwargs)

    def value_from_envvar(self, ctx: click.Context) -> tuple[str, ...] | None:
        value = self.resolve_envvar_value(ctx)
        return None if value is None else (value,)


def _named(obj: Ctx | None, name: str, values: tuple[str, ...]) -> None:
    """--socket / --db (name) as typed after the first one before the command (a second there, any after it): each
    replaces the variable's and must name the path typed first (Ctx.named_again)."""
    for value in values:
        not_empty(f"--{name}", value)
        if value and obj is not None:
            obj.named_again(name, value)


def _set_path(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
    _named(ctx.find_object(Ctx), param.name, value)


def with_path_options(cmd: click.Command) -> click.Command:
    """--socket / --db after the command too (`specctl status --socket PATH`), overriding SPECCTL_SOCKET / SPECCTL_DB;
    one typed before it too must name the same path (Ctx.named_again)."""
    for sub in getattr(cmd, "commands", {}).values():
        with_path_options(sub)
    names = {p.name for p in cmd.params}
    for name, what in (("socket", "daemon control socket"), ("db", "the daemon's database")):
        if name not in names:
            cmd.params.append(PathOption([f"--{name}"], metavar="PATH", expose_value=False, callback=_set_path,
                                         help=f"{what} (as specctl --{name})"))
    return cmd


class LazyGroup(OneLineGroup):
    """Subcommands imported on use; usage errors as one line ('specctl: ...') and exit code 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        command = getattr(importlib.import_module(module), attr)
        return command if name in OWN_PATHS else with_path_options(command)


@click.group(cls=LazyGroup)
@version_option("specctl")
@click.option("--socket", cls=PathOption, metavar="PATH", envvar="SPECCTL_SOCKET",
              help="daemon control socket [env SPECCTL_SOCKET]")
@click.option("--db", cls=PathOption, metavar="PATH", envvar="SPECCTL_DB",
              help="the daemon's database: the daemon asked must keep it; read offline where none does [env SPECCTL_DB]")
@click.pass_context
def cli(click_ctx: click.Context, socket: tuple[str, ...], db: tuple[str, ...]) -> None:
    """Steer spec-controller: status, stop, policy, threshold pins, history, plots, simulation."""
    click_ctx.obj = Ctx(socket[0] if socket else None, db[0] if db else None,
                        [name for name in ("socket", "db")
                         if click_ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE])
    _named(click_ctx.obj, "socket", socket[1:])
    _named(click_ctx.obj, "db", db[1:])


if __name__ == "__main__":
    cli()
