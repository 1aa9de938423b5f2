"""`spec-controller config from-launch`: the command that starts an operator's SGLang server today, as the config the
daemon starts it from (the daemon launches SGLang itself, README "Install as a service").

SGLang's own parser reads the command (launchparse.py, run by an interpreter that has SGLang), so aliases (--model,
--tensor-parallel-size), argparse's abbreviations (--tp), boolean and list flags and SGLang's --config YAML mean
what they mean to launch_server. The [sglang] section is then parsed back by the same parser, as the daemon will pass
it, and must come out the same field for field but for what the daemon sets itself; otherwise nothing is printed.
Runs in the daemon's command line (no daemon, no GPU)."""
from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract import unsupported_reason
from .engines.base import EngineError
from .engines.sglang import SGLangEngine, server_flags

SCRIPT = Path(__file__).with_name("launchparse.py")
# What the daemon passes itself, or chooses where a command leaves SGLang to (engines/sglang.py): told, not refused
DAEMON_SETS = {"speculative_adaptive", "speculative_adaptive_config", "speculative_num_steps",
               "speculative_num_draft_tokens", "speculative_eagle_topk", "host", "port"}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
SURROGATE = re.compile("[\ud800-\udfff]")


class LaunchError(ValueError):
    """One line for the operator: the command cannot become a config (nothing printed). code: the exit status (2: the
    command; 1: SGLang's parser could not run)."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


@dataclass
class Converted:
    sglang: dict                         # the [sglang] table
    version: str                         # the SGLang whose parser read it
    notes: list[str] = field(default_factory=list)


def split_command(command: list[str]) -> tuple[dict[str, str], str | None, list[str]]:
    """(VAR=value assignments before it, the interpreter it names, launch_server's arguments). Takes
    `[env] [VAR=x ...] python -m sglang.launch_server ARGS`, `sglang serve [MODEL] ARGS`, or the arguments alone;
    one quoted string is split as a shell would."""
    tokens = shlex.split(command[0]) if len(command) == 1 and " " in command[0].strip() else list(command)
    env: dict[str, str] = {}
    while tokens and (tokens[0] == "env" or ASSIGNMENT.fullmatch(tokens[0])):
        head = tokens.pop(0)
        if head != "env":
            name, value = head.split("=", 1)
            env[name] = value
    if "sglang.launch_server" in tokens:
        at = tokens.index("sglang.launch_server")
        return env, tokens[0] if at >= 2 and tokens[at - 1] == "-m" else None, tokens[at + 1:]
    if len(tokens) >= 2 and Path(tokens[0]).name == "sglang" and tokens[1] == "serve":
        rest = tokens[2:]
        return env, None, ["--model-path", *rest] if rest and not rest[0].startswith("-") else rest   # as serve does
    if not tokens or tokens[0].startswith("-"):
        return env, None, tokens
    raise LaunchError(f"not an SGLang launch command: {shlex.join(tokens[:3])} ... (expected 'python -m "
                      "sglang.launch_server ARGS', 'sglang serve MODEL ARGS' or the arguments alone)")


class SGLangParser:
    """launchparse.py in `python`, asked over a pipe (one SGLang import for every question)."""

    def __init__(self, python: str):
        try:
            self.proc = subprocess.Popen([python, str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
        except OSError as e:
            raise LaunchError(f"cannot run {python}: {e.strerror or e}", 1) from None
        self.python = python

    def ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            last = (self.proc.stderr.read().strip().splitlines() or ["no answer"])[-1]
            raise LaunchError(f"SGLang's parser in {self.python} stopped: {last}", 1)
        answer = json.loads(line)
        if "version" not in answer:         # SGLang did not load there
            raise LaunchError(f"{answer['error']} (in {self.python}; --python PATH: the interpreter that runs SGLang)", 1)
        if "error" in answer:
            raise LaunchError(f"SGLang {answer['version']} refuses the command: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def convert(command: list[str], python: str | None = None) -> Converted:
    """The [sglang] table for `command`; LaunchError (one line) where it cannot be one."""
    env, interpreter, argv = split_command(command)
    parser = SGLangParser(python or sys.executable)
    try:
        answer = parser.ask({"argv": argv})
        table = {flag.lstrip("-").replace("-", "_"): value for flag, value in answer["items"]}
        notes = [f"{key} dropped: the daemon passes it itself" for key in
                 ("speculative_adaptive", "speculative_adaptive_config") if table.pop(key, None) is not None]
        if table.get("speculative_algorithm") is None:
            raise LaunchError("the command starts no speculation: spec-controller steers an EAGLE or EAGLE3 draft "
                              "(add --speculative-algorithm EAGLE3 --speculative-draft-model-path PATH)")
        reason = unsupported_reason({**table, "speculative_adaptive": True})
        if reason:
            raise LaunchError(f"the plugin cannot steer this server: {reason}")
        if env:
            table["env"] = env
        if python:
            table["python"] = python
        try:
            engine = SGLangEngine(table)
        except EngineError as e:
            raise LaunchError(str(e)) from None
        table = {k: engine.args[k] for k in table} | {k: engine.args[k] for k in engine.args if k not in table}
        notes += _daemon_choices(parser, argv, engine)
    finally:
        parser.close()
    notes += path_notes(table)
    if interpreter and "/" in interpreter and not python:
        notes.append(f"your command ran {interpreter}; the daemon starts SGLang with its own interpreter "
                     f"({sys.executable}): --python {interpreter} keeps yours (spec-controller must be installed there)")
    return Converted(table, answer["version"], notes)


def _daemon_choices(parser: SGLangParser, argv: list[str], engine: SGLangEngine) -> list[str]:
    """The fields where the daemon's launch differs from the operator's command: only what it sets itself, told."""
    differ = parser.ask({"argv": engine.command()[3:], "same_as": argv})["differ"]
    unexpected = sorted(set(differ) - DAEMON_SETS)
    if unexpected:      # the section would start another server than the command did: print nothing
        raise LaunchError(f"the section would not launch what the command does ({', '.join(unexpected)} differ): "
                          "put those flags in [sglang] extra_args by hand")
    shown = {k: engine.args[k] for k in sorted(set(differ) & set(engine.args))}
    return [f"the daemon sets {', '.join(f'{k} = {v}' for k, v in shown.items())} (your command left them to SGLang)"] \
        if shown else []


def path_notes(table: dict) -> list[str]:
    """Paths the service will not see as the command did: systemd starts it in / with ProtectHome (docs/systemd.md)."""
    notes = []
    for key, value in table.items():
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str) or not text:
                continue
            if text.startswith(("/home/", "/root/", "/run/user/", "~")):
                notes.append(f"{key} = {text}: the service cannot read home directories (ProtectHome); move it")
            elif "path" in key and not text.startswith("/") and Path(text).exists():
                notes.append(f"{key} = {text} is relative to this directory; the service runs in /: give "
                             f"{Path(text).resolve()}")
    return notes


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")) if not math.isfinite(value) \
            else repr(value)
    if isinstance(value, str) and not SURROGATE.search(value):       # (bytes that were not UTF-8: not text)
        # JSON's escapes are TOML's; TOML escapes DEL too and has no surrogate pairs (ensure_ascii's for U+10000 up)
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    raise LaunchError(f"cannot write {value!r} ({type(value).__name__}) to TOML")


def toml_text(result: Converted, command: list[str]) -> str:
    """A whole config file: [engine] sglang, the [sglang] section; every other key keeps its built-in default."""
    env = result.sglang.get("env") or {}
    lines = ["# spec-controller config, from the launch command (read by SGLang " + result.version + "'s parser):",
             "#   " + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in shlex.join(command)),
             "# Every other key (policy, guard, storage, control) keeps its default (all listed in the source's",
             "# systemd/config.example.toml).",
             "", "[engine]", 'kind = "sglang"', "", "[sglang]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in result.sglang.items() if key != "env"]
    if env:
        lines += ["", "[sglang.env]"] + [f"{name} = {toml_value(value)}" for name, value in env.items()]
    return "\n".join(lines) + "\n"
