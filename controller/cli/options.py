"""What both command lines (`specctl` and the daemon's `spec-controller`) share: exit codes, errors
as one line, integer and number arguments that parse negatives and name their range, --version.
Standard library and click only: imported on every start of specctl."""
from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys
from typing import Any, Callable, NoReturn

import click

from .. import __version__
from ..paths import NoHome
from ..numtext import Unheld, a_kind, echoed, number_text, one_line, plain, written

# Exit codes (README "specctl"): the same for every command.
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
# a group called without a command (click >= 8.2, pyproject's floor: 8.1 printed the help and exited 0)
NO_ARGS_IS_HELP = click.exceptions.NoArgsIsHelpError
EXIT_NOT_RUNNING = 3      # no daemon: the answer came from the database (or could not come at all)
EXIT_STARTING = 4         # a daemon holds the database but does not serve yet (engine loading)
EXIT_UNFLUSHED = 5        # the daemon's (and `specctl stop`'s): stopped as asked, its final writes lost (no restart)


def say(message: str, err: bool = False) -> None:
    """A one-line answer that carries a path or name: still one line (helper-130: `--db $'a\\nb.db'`'s 'saved to'
    line was two)."""
    click.echo(one_line(message), err=err)


def fail_as(prog: str, message: str, code: int = EXIT_ERROR) -> NoReturn:
    click.echo(f"{prog}: {one_line(message)}", err=True)       # (a path holding a newline: still one line)
    sys.exit(code)


class OneLineGroup(click.Group):
    """Usage errors as one line ('prog: ...', exit 2) instead of click's usage block."""

    prog = "specctl"

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("standalone_mode", None)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except NO_ARGS_IS_HELP as e:      # a group given no command: its help, as written (click >= 8.2)
            click.echo(e.ctx.get_help() if e.ctx is not None else e.format_message(), err=True)
            sys.exit(EXIT_USAGE)
        except click.UsageError as e:
            fail_as(self.prog, usage_line(e), EXIT_USAGE)
        except click.ClickException as e:
            fail_as(self.prog, e.format_message(), e.exit_code)
        except click.exceptions.Abort:
            fail_as(self.prog, "aborted", EXIT_ERROR)
        except NoHome as e:           # (the default paths, asked for by every command)
            fail_as(self.prog, str(e), EXIT_ERROR)
        except OSError as e:            # (click answers EPIPE itself: a closed pipe exits 1 without a word)
            if not _stdout_refused(e):
                raise
            fail_as(self.prog, f"cannot write to standard output: {e.strerror}", EXIT_ERROR)


def _stdout_refused(error: OSError) -> bool:
    """Whether the answer could not be written: click's echo refused on stdout (a full disk, `> /dev/full`: its
    traceback, helper-142). stdout then goes to /dev/null, or the flush at exit would say it again with a traceback of
    its own. False where the OSError came from elsewhere (raised again as it was)."""
    tb = error.__traceback__
    while tb is not None and not (tb.tb_frame.f_code is click.echo.__code__ and
                                  _is_stdout(tb.tb_frame.f_locals.get("file"))):
        tb = tb.tb_next
    if tb is None:
        return False
    with contextlib.suppress(OSError, ValueError):      # (io.UnsupportedOperation: no file descriptor under it)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    return True


def _is_stdout(file: object) -> bool:
    """sys.stdout, or another writer on its descriptor: click's text wrapper of it where stdout's encoding is ascii
    (PYTHONIOENCODING=ascii, a C locale not coerced), which is not sys.stdout (the traceback came back: helper-145)."""
    if file is None or file is sys.stdout:
        return file is not None
    try:
        return file.fileno() == sys.stdout.fileno()      # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):        # (none under it, or stdout None: closed at start)
        return False


def usage_line(e: click.UsageError) -> str:
    """click's usage error in the style of the project's own lines: lower case, no full stop before the hint, one hint
    in brackets ("No such option '--jsn'. Did you mean '--json'?" -> "no such option '--jsn' (did you mean
    '--json'?)"; a command's suggestion with its whole path)."""
    message = e.format_message().replace("\n", " ").strip()
    # click's own suggestions: "Did you mean X?", "(Did you mean one of: X, Y?)" (8.5), "(Possible options: X, Y)" (8.2)
    close = re.fullmatch(r"(.*?)\.?\s+\(?(?:Did you mean(?: one of:)?|Possible options:)\s+(.+?)\??\)?", message)
    if close:
        message, listed = close.groups()
        names = [name.strip("'\"") for name in re.split(r",\s*", listed)]
        if re.fullmatch(r"No such command '.+'", message) and e.ctx is not None:
            names = [f"{e.ctx.command_path} {name}" for name in names]
        quoted = ", ".join(f"'{name}'" for name in names)
        hint = f" (did you mean {quoted}?)" if len(names) == 1 else f" (did you mean one of {quoted}?)"
    else:
        message, hint = message.removesuffix("."), usage_hint(e)
    if re.match(r"[A-Z][a-z]", message):         # ("Invalid value", "Missing argument"; not "NAME ...")
        message = message[0].lower() + message[1:]
    return message + hint


def usage_hint(e: click.UsageError) -> str:
    """What makes click's own usage errors one line enough: where an unknown command lives ('pin': 'specctl threshold
    pin'), a close name ('polcy': 'policy'), '--param K=V' for a bare 'K=V', the command's usage where an argument or
    option is missing or unknown (a newcomer met "Missing argument 'NAME'." bare). Messages that say all already (a
    value out of range, click's own 'Did you mean') get nothing."""
    ctx, message = e.ctx, e.format_message()
    if ctx is None or "Did you mean" in message:
        return ""
    extra = re.match(r"Got unexpected extra arguments? \((.+)\)", message)
    if extra and "=" in extra.group(1) and any("--param" in p.opts for p in ctx.command.params):
        pairs = [word for word in extra.group(1).split() if "=" in word]          # `policy set fixed threshold=12`
        return f" (did you mean '{' '.join(f'--param {pair}' for pair in pairs)}'?)"
    if extra and ctx.command_path.endswith(" policy show"):     # (`policy show ucb`: helper-160 met the bare line)
        return f" (policy show takes no name: it shows the active policy; '{ctx.parent.command_path} list' shows " \
               "every policy and its parameters)"
    if message.startswith(("Missing ", "No such option", "Got unexpected extra")):
        return f" (usage: {ctx.command_path} {' '.join(ctx.command.collect_usage_pieces(ctx))})"
    unknown = re.match(r"No such command '(.+)'\.", message)
    if unknown is None or not isinstance(ctx.command, click.Group):
        return ""
    name, group = unknown.group(1), ctx.command
    names = group.list_commands(ctx)
    nested = [f"{ctx.command_path} {sub} {name}" for sub in names
              if isinstance(cmd := group.get_command(ctx, sub), click.Group) and name in cmd.list_commands(ctx)]
    close = [f"{ctx.command_path} {n}" for n in difflib.get_close_matches(name, names, n=1)]
    return f" (did you mean '{(nested or close)[0]}'?)" if nested or close else f" (commands: {', '.join(names)})"


class Bounded(click.ParamType):
    """An int (or float) in lo .. hi. The message names the value and the range in one line:
    'threshold -1 out of range (allowed 0 .. 65536)'. Negative values parse as values where
    the command accepts them (see NEGATIVE_ARGS). later: the argument is only parsed, the command checks the range
    (check) where no one else judges it (a pin: the daemon's engine judges it where one answers)."""

    def __init__(self, what: str, lo: float, hi: float, kind: type = int, later: bool = False):
        self.what, self.lo, self.hi, self.kind, self.later = what, lo, hi, kind, later
        self.name = "integer" if kind is int else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = number_text(str(value), self.kind)    # (numtext's rule: " 5" no)
            except Unheld as e:         # (1e-400: 0, --arrival-rate's "no rate")
                raise click.UsageError(f"{self.what} {e}", ctx) from None
            if number is None:          # (int() / float() took "1_0", "+5", other scripts' digits, "nan")
                raise click.UsageError(f"{self.what} {echoed(repr(value))} is not {a_kind(self.kind)} "
                                       f"({written(self.kind, self.lo)})", ctx) from None
        return number if self.later else self.check(number, value, ctx)

    def check(self, number: Any, typed: Any = None, ctx: click.Context | None = None) -> Any:
        """number, where it is in lo .. hi; else click.UsageError (typed: the value as given)."""
        if not self.lo <= number <= self.hi:
            typed = echoed(str(typed).strip() if isinstance(typed, str) else plain(number))
            raise click.UsageError(f"{self.what} {typed} out of range (allowed {plain(self.lo)} .. "
                                   f"{plain(self.hi)})", ctx)
        return number


# A command whose arguments may be negative numbers: '-1' is then a value, not an unknown option.
NEGATIVE_ARGS = {"ignore_unknown_options": True}


def number_list(text: str, kind: type, hint: str) -> list:
    """'1,4,16' (or '1, 4, 16': spaces beside a comma are the list's) read item by item as `kind` (int or float, by
    numtext's rule); an empty item ('1,,2') or one that is no number is click.BadParameter naming the flag."""
    try:
        values = [number_text(x, kind) for x in re.split(r"\s*,\s*", text)]
    except Unheld as e:
        raise click.BadParameter(str(e), param_hint=hint) from None
    if None in values:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of {'integers' if kind is int else 'numbers'} "
                                 f"({written(kind)})", param_hint=hint)
    return values


def version_option(prog: str) -> Callable:
    return click.version_option(__version__, "--version", prog_name=prog, message="%(prog)s %(version)s")
