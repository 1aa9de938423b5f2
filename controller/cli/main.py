"""specctl: steer and inspect the spec-controller daemon (and run the simulator).

Commands live in their own modules and are imported when invoked (LazyGroup), so that
`specctl status` does not pay for the simulator's or the policies' imports."""
from __future__ import annotations

import importlib

import click

from .common import Ctx, fail

COMMANDS = {
    "status": "controller.cli.status:status",
    "policy": "controller.cli.steer:policy",
    "threshold": "controller.cli.steer:threshold",
    "history": "controller.cli.steer:history",
    "simulate": "controller.cli.simulate:simulate",
}


class LazyGroup(click.Group):
    """Subcommands imported on use; usage errors as one line ('specctl: ...') and exit code 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), attr)

    def main(self, *args, **kwargs):
        kwargs.pop("standalone_mode", None)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as e:
            fail(e.format_message().replace("\n", " "), 2)
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except click.exceptions.Abort:
            fail("aborted", 1)


@click.group(cls=LazyGroup)
@click.option("--socket", envvar="SPECCTL_SOCKET", help="daemon control socket [env SPECCTL_SOCKET]")
@click.option("--db", envvar="SPECCTL_DB", help="database for offline reads [env SPECCTL_DB]")
@click.pass_context
def cli(click_ctx: click.Context, socket: str | None, db: str | None) -> None:
    """Steer spec-controller: status, policy, threshold pins, history, simulation."""
    click_ctx.obj = Ctx(socket, db)


if __name__ == "__main__":
    cli()
