"""SGLang's own launch-argument parser, for `spec-controller config from-launch` (controller/daemon/launchcfg.py).

Run as a script (`PYTHON launchparse.py FD`) by the interpreter that has SGLang, which need not have spec-controller:
standard library and SGLang only. One SGLang import (seconds) serves every request: JSON objects on stdin, one a line,
each answered by one line on file descriptor FD (whatever SGLang or the interpreter prints goes elsewhere):
  {"argv": [...]}                   {"version": V, "items": [[flag, value, field], ...]}: what differs from SGLang's
                                    defaults, each under its canonical flag (value true: the flag alone; a list: the
                                    flag's values, for flags that take several)
  {"argv": [...], "same_as": [...]} {"version": V, "differ": [field, ...]}: fields the two parse differently
  (a refused command)               {"version": V, "error": "..."}
  (SGLang did not load)             {"error": "..."}, once, at the start
As launch_server does, SGLang's plugins are loaded first (they may add flags) and a `--config FILE` (SGLang's YAML) is
merged under the command line."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any, NoReturn


class Refused(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:              # argparse would print the usage and exit 2: the caller wants one line
        raise Refused(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:    # --help, --version: print and exit, here a refusal
        raise Refused("a flag that prints and exits (--help, --version) is not a server's")


def load() -> Parser:
    try:
        from sglang.srt.plugins import load_plugins
        load_plugins()                      # (launch_server's first step; their failures are logged, not raised)
    except ImportError:
        pass
    from sglang.srt.server_args import ServerArgs
    parser = Parser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


def parse(parser: Parser, argv: list[str]) -> argparse.Namespace:
    argv = list(argv)
    if "--config" in argv:
        try:                               # (SGLang 0.5.23 moved it into utils)
            from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
        except ImportError:
            from sglang.srt.server_args_config_parser import ConfigArgumentMerger
        at = argv.index("--config")
        try:
            argv = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        except Exception as e:             # its YAML, its keys: the file's fault, not the interpreter's
            raise Refused(f"--config {argv[at + 1] if at + 1 < len(argv) else ''}: {type(e).__name__}: "
                          f"{' '.join(str(e).split())}") from None
    return parser.parse_args(argv)


def own_flag(dest: str) -> str:
    """The flag named after a field: --tp-size for tp_size."""
    return "--" + dest.replace("_", "-")


def flag_of(action: argparse.Action, dest: str) -> str:
    """The field's own flag where the action has it, else the action's first long one."""
    named = own_flag(dest)
    longs = [s for s in action.option_strings if s.startswith("--")] or action.option_strings
    return named if named in longs else longs[0]


def canonical(actions: list[argparse.Action], dest: str) -> argparse.Action:
    """Several flags may store into one field (deprecated spellings): the field's own, else a current one."""
    same = [a for a in actions if a.dest == dest and a.option_strings]
    named = [a for a in same if own_flag(dest) in a.option_strings]
    current = [a for a in same if not type(a).__name__.startswith("Deprecated")]
    return (named or current or same)[0]


def as_typed(action: argparse.Action, value: Any) -> Any:
    """One value as launch_server reads it back from its flag: JSON-typed arguments as their JSON text (a dict, a list,
    true, a string), booleans as words, anything else not plain as text."""
    if action.type is json.loads or isinstance(value, (dict, list, tuple)):    # (SGLang's own JSON-list types too)
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, (str, int, float)) else str(value)


def items(parser: Parser, ns: argparse.Namespace) -> list[list]:
    out = []
    for dest in dict.fromkeys(a.dest for a in parser._actions if a.option_strings):
        if dest in ("help", "config"):
            continue
        action = canonical(parser._actions, dest)
        value = getattr(ns, dest, action.default)
        if same(value, action.default):
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            out.append([action.option_strings[0 if value else 1], True, dest])          # --x / --no-x
        elif action.nargs == 0:
            out.append([flag_of(action, dest), True, dest])
        elif action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1):
            out.append([flag_of(action, dest), [as_typed(action, v) for v in value], dest])
        else:
            out.append([flag_of(action, dest), as_typed(action, value), dest])
    return out


def deprecated(parser: Parser, got: list[list]) -> list[list[str]]:
    """[flag, SGLang's help] for each item whose field SGLang itself calls deprecated (its Deprecated* action classes,
    or help that starts so): written as given, it makes SGLang warn at every start."""
    out = []
    for flag, _, dest in got:
        action = canonical(parser._actions, dest)
        text = " ".join((action.help or "").split())
        if type(action).__name__.startswith("Deprecated") or text.lstrip("(").lower().startswith("deprecated"):
            out.append([flag, text[:160]])
    return out


def same(a: Any, b: Any) -> bool:
    """Equal, NaN included (`--mem-fraction-static nan` parses to a value unequal to itself)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


def answer(parser: Parser, request: dict) -> dict:
    ns = parse(parser, request["argv"])
    if "same_as" in request:
        other = vars(parse(parser, request["same_as"]))
        return {"differ": sorted(k for k, v in vars(ns).items() if not same(other.get(k), v))}
    got = items(parser, ns)
    return {"items": got, "deprecated": deprecated(parser, got)}


def main() -> int:
    answers = os.fdopen(int(sys.argv[1]), "w")
    os.dup2(2, 1)                          # whatever SGLang prints must not reach the answers
    try:
        parser = load()
        import sglang
        version = getattr(sglang, "__version__", "unknown")
    except Exception as e:                 # not installed, or broken where this interpreter runs
        answers.write(json.dumps({"error": f"SGLang's parser did not load: {type(e).__name__}: {e}"}) + "\n")
        return 1
    for line in sys.stdin:
        try:
            reply = answer(parser, json.loads(line))
        except Refused as e:
            reply = {"error": str(e)}
        except Exception as e:             # anything else SGLang's parsing raises: said, and the next request served
            reply = {"error": f"{type(e).__name__}: {' '.join(str(e).split())}"}
        answers.write(json.dumps({"version": version, **reply}, default=str) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
