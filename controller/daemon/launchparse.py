"""SGLang's own launch-argument parser, for `spec-controller config from-launch` (controller/daemon/launchcfg.py).

Run as a script (`PYTHON launchparse.py`) by the interpreter that has SGLang, which need not have spec-controller:
standard library and SGLang only. One SGLang import (seconds) serves every request: JSON objects on stdin, one a line,
each answered by one line on the original stdout (SGLang's own prints go to stderr):
  {"argv": [...]}                   {"version": V, "items": [[flag, value], ...]}: what differs from SGLang's defaults,
                                    each under its canonical flag (value true: the flag alone); lists as lists
  {"argv": [...], "same_as": [...]} {"version": V, "differ": [dest, ...]}: fields the two parse differently
  (a refused command)               {"version": V, "error": "argparse's message"}
  (SGLang did not load)             {"error": "..."}, once, at the start
Like SGLang's prepare_server_args, a `--config FILE` (SGLang's YAML) is merged under the command line first."""
import argparse
import json
import os
import sys


class Refused(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):              # argparse would print the usage and exit 2: the caller wants one line
        raise Refused(message)


def load():
    from sglang.srt.server_args import ServerArgs
    parser = Parser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


def parse(parser, argv):
    if "--config" in argv:
        try:                               # (SGLang 0.5.23 moved it into utils)
            from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
        except ImportError:
            from sglang.srt.server_args_config_parser import ConfigArgumentMerger
        argv = ConfigArgumentMerger(parser).merge_config_with_args(list(argv))
    return parser.parse_args(argv)


def flag_of(action, dest):
    """The long option named after the field (--tp-size for tp_size), else the action's first long one."""
    named = "--" + dest.replace("_", "-")
    longs = [s for s in action.option_strings if s.startswith("--")] or action.option_strings
    return named if named in longs else longs[0]


def canonical(actions, dest):
    """Several flags may store into one field (deprecated spellings): the field's own, else a current one."""
    same = [a for a in actions if a.dest == dest and a.option_strings]
    named = [a for a in same if "--" + dest.replace("_", "-") in a.option_strings]
    current = [a for a in same if not type(a).__name__.startswith("Deprecated")]
    return (named or current or same)[0]


def plain(value):
    """A value as launch_server reads it back from a flag: JSON-typed arguments (dicts) as their JSON text."""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return value if isinstance(value, (str, int, float, bool)) else str(value)


def items(parser, ns):
    out = []
    for dest in dict.fromkeys(a.dest for a in parser._actions if a.option_strings):
        if dest in ("help", "config"):
            continue
        action = canonical(parser._actions, dest)
        value = getattr(ns, dest, action.default)
        if value == action.default:
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            out.append([action.option_strings[0 if value else 1], True])          # --x / --no-x
        elif action.nargs == 0:
            out.append([flag_of(action, dest), True])
        elif isinstance(value, (list, tuple)):
            out.append([flag_of(action, dest), [plain(v) for v in value]])
        else:
            out.append([flag_of(action, dest), plain(value)])
    return out


def main():
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)                          # whatever SGLang prints while it loads must not reach the answers
    try:
        parser = load()
        import sglang
        version = getattr(sglang, "__version__", "unknown")
    except Exception as e:                 # not installed, or broken where this interpreter runs
        answers.write(json.dumps({"error": f"SGLang's parser did not load: {type(e).__name__}: {e}"}) + "\n")
        return 1
    for line in sys.stdin:
        request = json.loads(line)
        try:
            ns = parse(parser, request["argv"])
            if "same_as" in request:
                other = vars(parse(parser, request["same_as"]))
                answer = {"differ": sorted(k for k, v in vars(ns).items() if other.get(k) != v)}
            else:
                answer = {"items": items(parser, ns)}
        except (Refused, argparse.ArgumentError, ValueError, OSError) as e:
            answer = {"error": str(e)}
        answers.write(json.dumps({"version": version, **answer}, default=str) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
