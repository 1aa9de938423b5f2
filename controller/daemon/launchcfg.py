"""`spec-controller config from-launch`: the command that starts an operator's SGLang server today, as the config the
daemon starts it from (the daemon launches SGLang itself, README "Install as a service").

SGLang's own parser reads the command (launchparse.py, run by an interpreter that has SGLang), so aliases (--model,
--tensor-parallel-size), argparse's abbreviations (--tp), boolean, list and JSON flags and SGLang's --config YAML mean
what they mean to launch_server. The [sglang] section is then parsed back by the same parser as the daemon will pass
it, and must come out the same field for field but for what the daemon sets itself; otherwise nothing is printed.
Runs in the daemon's command line (no daemon, no GPU)."""
from __future__ import annotations

import json
import math
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract import unsupported_reason
from ..outfile import replace_whole
from ..paths import DEFAULT_CONFIG, open_regular
from .engines.base import EngineError
from .engines.sglang import SGLangEngine
from .engines.sglang_install import own_installed, with_sglang
from .engines.sglang_flags import masked, secrets_in, shown
from .launchcmd import CommandError, path_notes, private_steps, split_command, words
from .serviceaccess import service_account

SCRIPT = Path(__file__).with_name("launchparse.py")
ANSWER_TIMEOUT_S = 300.0        # SGLang's import (seconds on a GPU host) and one parse
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


class NoSGLang(LaunchError):
    """The parser's interpreter could not load SGLang."""


class SGLangParser:
    """launchparse.py in `python`, asked over pipes (one SGLang import for every question). Its answers come on a
    descriptor of their own, its stdout and stderr go to a file (read for the last line when it stops)."""

    def __init__(self, python: str, env: dict[str, str] | None = None, named_by: str = "--python PATH"):
        self.python, self.log, self.named_by = python, tempfile.TemporaryFile("w+"), named_by    # (config check's: [sglang] python)
        read, write = os.pipe()
        try:
            self.proc = subprocess.Popen([python, str(SCRIPT), str(write)], stdin=subprocess.PIPE, stdout=self.log,
                                         stderr=self.log, text=True, pass_fds=(write,), env=env)
        except OSError as e:
            os.close(read)
            self.log.close()        # (close() is never called on a parser that did not start)
            raise LaunchError(f"cannot run {python}: {e.strerror or e}", 1) from None
        finally:
            os.close(write)
        self.answers = os.fdopen(read, encoding="utf-8", errors="replace")     # (bytes not UTF-8: something else)

    def _stopped(self, why: str) -> LaunchError:
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read().splitlines() if line.strip()]
        last = lines[-1] if lines else "no output"
        return LaunchError(f"SGLang's parser in {self.python} {why}: {last[:300]}{'...' if len(last) > 300 else ''}", 1)

    def ask(self, request: dict, what: str = "the command") -> dict:
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:                  # it exited before reading (not Python, or no SGLang and no answer)
            raise self._stopped("stopped") from None
        if not select.select([self.answers], [], [], ANSWER_TIMEOUT_S)[0]:
            raise self._stopped(f"gave no answer in {ANSWER_TIMEOUT_S:.0f} s")
        line = self.answers.readline()
        try:
            answer = json.loads(line) if line else None
        except ValueError:
            answer = None
        if not _shaped(answer):
            raise self._stopped("stopped" if not line else "answered something else")
        if "version" not in answer:         # SGLang did not load there
            raise NoSGLang(f"{answer['error']} (in {self.python}; {self.named_by}: the interpreter that runs SGLang)", 1)
        if "error" in answer:             # (argparse quotes the words it refuses: a key among them goes as ***)
            words = [str(w) for w in request.get("argv", []) + request.get("same_as", [])]
            raise LaunchError(f"SGLang {answer['version']} refuses {what}: {masked(str(answer['error']), words)}")
        return answer

    def close(self) -> None:
        for stream in (self.proc.stdin, self.answers):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)      # (it exits once its stdin closes; one that hangs is killed)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _shaped(answer: Any) -> bool:
    """An answer as launchparse.py writes them (another interpreter's garbage is not read as one)."""
    rows = lambda key, n: isinstance(answer.get(key, []), list) and all(
        isinstance(row, list) and len(row) == n for row in answer.get(key, []))
    return isinstance(answer, dict) and ("version" in answer or "error" in answer) and rows("items", 3) and \
        rows("deprecated", 2) and isinstance(answer.get("differ", []), list)


def shebang_of(script: str) -> str:
    """The interpreter a console script (`/venv/bin/sglang`) starts: its first line's `#!PATH`; LaunchError where it
    names none by its path (an `env python3` shebang depends on a PATH the service does not have)."""
    try:
        with open_regular(script) as f:            # (a FIFO there: from-launch hung)
            first = f.readline(4096).decode("utf-8", "replace")
    except OSError as e:
        raise LaunchError(f"cannot read {script}: {e.strerror or e}", 1) from None
    words = first[2:].split() if first.startswith("#!") else []
    if not words or "/" not in words[0] or Path(words[0]).name == "env":
        raise LaunchError(f"{script} does not name its interpreter by path ({first.strip()[:80] or 'no #! line'}): "
                          "give it with --python PATH", 1)
    return words[0]


def named_interpreter(named: str) -> str:
    """The interpreter a command names: itself, or for a `sglang` console script the one its #! line starts."""
    return shebang_of(named) if Path(named).name == "sglang" else named


def interpreter(python: str) -> str:
    """--python as the config keeps it: absolute (the service runs in /, with another PATH)."""
    found = shutil.which(python) if "/" not in python else python
    if found is None:
        raise LaunchError(f"cannot run {python}: not found on PATH", 1)
    return str(Path(found).absolute())


def _with_install_hint(e: NoSGLang) -> NoSGLang:
    """The daemon's own interpreter has no SGLang: beside --python, how to install it there (as `config check` says).
    One whose SGLang is installed but does not load keeps its own error."""
    if own_installed()["sglang"] is not None:
        return e
    return NoSGLang(f"{str(e).removesuffix(')')}, or install SGLang in this one: {sys.executable} -m pip install "
                    f"{shlex.quote(with_sglang())})", 1)


def convert(command: list[str], python: str | None = None, config_path: str | Path = DEFAULT_CONFIG) -> Converted:
    """The [sglang] table for `command` (to be written at `config_path`); LaunchError (one line) where it cannot be
    one."""
    try:
        env, named, argv, notes = split_command(command)
    except CommandError as e:
        raise LaunchError(str(e)) from None
    python = interpreter(python) if python else None
    parser = SGLangParser(python or sys.executable, {**os.environ, **env})     # (VAR=x before it: SGLang's too)
    try:
        try:
            answer = parser.ask({"argv": argv})
        except NoSGLang as e:
            if python or not named or "/" not in named:      # (a bare `python`: PATH here need not be the server's)
                raise e if python else _with_install_hint(e)
            parser.close()          # the interpreter the command names by its path, where the daemon's has no SGLang
            python = interpreter(named_interpreter(named))
            parser = SGLangParser(python, {**os.environ, **env})
            answer = parser.ask({"argv": argv})
            notes.append(f"python = {python} written: the interpreter your command names (the daemon's, "
                         f"{sys.executable}, has no SGLang); spec-controller must be installed there too "
                         "(`spec-controller config check` says whether it is)")
        table = {flag.lstrip("-").replace("-", "_"): value for flag, value, _ in answer["items"]}
        notes += deprecated_notes(answer)
        fields = {name: value for _, value, name in answer["items"]}      # SGLang's own names: what the checks read
        for key in ("speculative_adaptive", "speculative_adaptive_config"):
            if table.pop(key, None) is not None:
                notes.append(f"{key} left out: the daemon passes it itself")
        if fields.get("speculative_algorithm") is None:
            raise LaunchError("the command starts no speculation: spec-controller steers an EAGLE or EAGLE3 draft "
                              "(add --speculative-algorithm EAGLE3 --speculative-draft-model-path PATH)")
        if reason := unsupported_reason({**fields, "speculative_adaptive": True}):
            raise LaunchError(f"the plugin cannot steer this server: {reason}")
        table |= ({"env": env} if env else {}) | ({"python": python} if python else {})
        notes += operator_notes(fields, table, config_path)
        try:
            engine = SGLangEngine(table)
        except EngineError as e:
            raise LaunchError(f"{e} (from the command's flags)") from None
        table = dict(engine.args)          # the table, then what the daemon chose where the command left it to SGLang
        notes += check_round_trip(parser, argv, engine)
    finally:
        parser.close()
    notes += path_notes(table)
    if named and "/" in named and not python:
        try:
            yours = named_interpreter(named)
        except LaunchError:
            yours = "PATH (the interpreter that runs it)"
        notes.append(f"your command ran {named}; the daemon starts SGLang with its own interpreter "
                     f"({sys.executable}): --python {yours} keeps yours (spec-controller must be installed there)")
    return Converted(table, answer["version"], notes)


def deprecated_notes(answer: dict) -> list[str]:
    """The flags SGLang's parser called deprecated in its answer (they make SGLang warn at every start)."""
    return [f"{flag}: SGLang {answer['version']} deprecates it and warns at every start; its help: {why or '-'}"
            for flag, why in answer.get("deprecated", [])]


def operator_notes(fields: dict, table: dict, config_path: str | Path = DEFAULT_CONFIG) -> list[str]:
    """What the README asks of a server like this one, said where from-launch sees it: TP > 1 runs off_path "fast"
    (written into the table), several nodes or DP replicas are untried, an API key makes the config a secret."""
    notes = []
    several = {key: v for key in ("tp_size", "nnodes", "dp_size") if _above_one(v := fields.get(key))}
    if "tp_size" in several:
        table["off_path"] = "fast"
        notes.append(f'tp_size = {several["tp_size"]}: off_path = "fast" written (the default "kv" has not run at '
                     "TP > 1 on a GPU; README, TP > 1)")
    for key, what in (("nnodes", "several nodes (only rank 0 serves the API the daemon steers through)"),
                      ("dp_size", "data-parallel replicas (one threshold set for all of them)")):
        if key in several:
            notes.append(f"{key} = {several[key]}: {what}: not yet run with spec-controller")
    if fields.get("api_key") or fields.get("admin_api_key") or secrets_in({"env": table.get("env")}):
        notes.append("a secret is in the config (an API key or a token; the daemon's log shows it as ***, SGLang's "
                     f"lines included): let only root and the service read it ({private_steps(config_path, staged=True, group=service_account()[1])})")
    return notes


def _above_one(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 1


def off_path_note(table: dict) -> list[str]:
    """config check's word on a table at TP > 1 that leaves off_path to its default, "kv" (from-launch writes "fast"
    there): tp_size or tensor_parallel_size, or either flag in extra_args."""
    words = [str(w) for w in table.get("extra_args", [])] if isinstance(table.get("extra_args"), list) else []
    given = [table.get("tp_size"), table.get("tensor_parallel_size")] + \
        [int(w) for flag, w in zip(words, words[1:]) if flag in ("--tp-size", "--tensor-parallel-size") and w.isdigit()]
    tp = next((v for v in reversed(given) if v is not None), None)     # (the last flag wins)
    if _above_one(tp) and "off_path" not in table:
        return [f'tp_size = {tp} with off_path left to "kv": "kv" has not run at TP > 1 on a GPU, "fast" has (README, '
                'TP > 1)']
    return []


def check_round_trip(parser: SGLangParser, argv: list[str], engine: SGLangEngine) -> list[str]:
    """The daemon's launch, parsed by SGLang, against the operator's command: LaunchError where a field differs that
    the daemon does not set itself; notes naming those it does."""
    differ = parser.ask({"argv": engine.server_argv(), "same_as": argv}, "the section's flags")["differ"]
    if unexpected := sorted(set(differ) - SGLangEngine.DECIDES):     # the section would start another server: print nothing
        raise LaunchError(f"the section would not launch what the command does ({', '.join(unexpected)} differ): "
                          "put those flags in [sglang] extra_args by hand")
    shown = {k: engine.args[k] for k in sorted(set(differ) & set(engine.args))}
    return [f"the daemon sets {', '.join(f'{k} = {v}' for k, v in shown.items())} (your command left "
            f"{'it' if len(shown) == 1 else 'them'} to SGLang)"] \
        if shown else []


def toml_value(value: Any, key: str = "value") -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")) if not math.isfinite(value) \
            else repr(value)
    if isinstance(value, str) and not SURROGATE.search(value):
        # JSON's escapes are TOML's; TOML escapes DEL too and has no surrogate pairs (ensure_ascii's for U+10000 up)
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, str):
        raise LaunchError(f"{key}: {value.encode('utf-8', 'surrogateescape')!r} is not UTF-8 text; TOML holds text only")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v, key) for v in value) + "]"
    raise LaunchError(f"{key}: cannot write {value!r} ({type(value).__name__}) to TOML")


def toml_text(result: Converted, command: list[str]) -> str:
    """A whole config file: [engine] sglang, the [sglang] section; every other key keeps its built-in default."""
    env = result.sglang.get("env") or {}
    lines = ["# spec-controller config, from the launch command (read by SGLang " + result.version + "'s parser):",
             # its words as a shell splits them (a pasted script's lines on one line), the API keys as ***
             "#   " + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in shlex.join(shown(words(command)))),
             "# Every other key (policy, guard, storage, control) keeps its default (all listed in the source's",
             "# systemd/config.example.toml).",
             "", "[engine]", 'kind = "sglang"', "", "[sglang]"]
    lines += [f"{key} = {toml_value(value, key)}" for key, value in result.sglang.items() if key != "env"]
    if env:
        lines += ["", "[sglang.env]"] + [f"{name} = {toml_value(value, name)}" for name, value in env.items()]
    return "\n".join(lines) + "\n"


def write_whole(path: str, text: str, private: bool = False) -> None:
    """`text` at `path` (-o), replacing what was there only once it is all written (outfile.replace_whole)."""
    def write(partial: str) -> None:
        with open(partial, "w") as f:
            f.write(text)
    replace_whole(path, write, private, "not a regular file, which the config would replace (leave -o out to print it)")
