"""The words of an operator's SGLang launch command, before SGLang's parser reads them (launchcfg.py): the
environment assignments in front, the interpreter, launch_server's arguments. What the daemon cannot carry over
(nohup, numactl, python's own options, a shell's unexpanded variables) is refused in one line, never dropped.
Also: the paths a config names that the service will not see as the operator's shell did."""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from .engines.sglang_env import KILLPG_ENV
from .engines.sglang_flags import named_paths, secrets_in, shown_value

ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
PYTHON_FLAGS = {"-u", "-B", "-O", "-OO", "-s", "-E", "-I", "-P"}     # no bearing on the server: left out, said
PRINT_AND_EXIT = {"-h", "--help", "--version"}
# where systemd's sandbox hides files (ProtectHome) or the service's working directory (/) differs from a shell's
HIDDEN = ("/home/", "/root/", "/run/user/", "~")
PRIVATE_TMP = ("/tmp/", "/var/tmp/")
# what a shell would expand in a word: $NAME, ${...}, $(...), $1, $$, $?, $@ ... (and `...` where a command is read)
EXPANSION = re.compile(r"\$[A-Za-z0-9_{(?$@*#!]")


class CommandError(ValueError):
    """The command cannot be read (one line; exit 2)."""


def words(command: list[str]) -> list[str]:
    """The command's words. One string (pasted lines) is read as a shell would: backslash-newlines joined, comments
    dropped, `;` and newlines ending a command. The commands before the launch command may only export variables
    (they become VAR=value in front of it) and nothing may follow it; variables and substitutions a shell would have
    expanded are refused."""
    if not (len(command) == 1 and any(c.isspace() for c in command[0].strip())):
        return list(command)
    text = command[0].replace("\\\r\n", " ").replace("\\\n", " ")
    if EXPANSION.search(text) or "`" in text:
        raise CommandError("the command holds shell variables or substitutions ($NAME, `...`): give it expanded "
                           "(as the shell runs it), or unquoted so that your shell expands it")
    try:
        commands = [c for c in (shlex.split(part) for part in _commands(text)) if c]      # (comments: _commands)
    except ValueError as e:
        raise CommandError(f"the command cannot be split as a shell would: {e}") from None
    if len(commands) < 2:
        return commands[0] if commands else []
    at = next((i for i, c in enumerate(commands) if "sglang.launch_server" in c or _serve_at(c) is not None), None)
    if at is None:
        raise CommandError(f"none of the {len(commands)} pasted commands starts SGLang ('python -m "
                           "sglang.launch_server ARGS' or 'sglang serve MODEL ARGS')")
    exported = []
    for before in commands[:at]:
        if before[0] != "export" or not all(ASSIGNMENT.fullmatch(w) for w in before[1:]):
            raise CommandError(f"the commands before the launch command may only export variables (export "
                               f"NAME=value), got: {shlex.join(before)}")
        exported += before[1:]
    if at + 1 < len(commands):
        raise CommandError(f"the pasted lines go on after the launch command ({shlex.join(commands[at + 1])}): give "
                           "the launch command alone")
    return exported + commands[at]


def _commands(text: str) -> list[str]:
    """`text` cut where a shell ends a command: at `;` and newlines that are not quoted, escaped or in a comment."""
    parts, current, quote, i = [], [], None, 0
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "'" and i + 1 < len(text):
            current += [c, text[i + 1]]
            i += 2
            continue
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;"):       # a comment starts a word
            while i + 1 < len(text) and text[i + 1] != "\n":
                i += 1
            c = ""
        elif c in ";\n":
            parts.append("".join(current))
            current, c = [], ""
        current.append(c)
        i += 1
    return parts + ["".join(current)]


def _serve_at(tokens: list[str]) -> int | None:
    """Where `sglang serve` starts in `tokens`, or None."""
    return next((i for i in range(len(tokens) - 1) if Path(tokens[i]).name == "sglang" and tokens[i + 1] == "serve"),
                None)


def split_command(command: list[str]) -> tuple[dict[str, str], str | None, list[str], list[str]]:
    """(VAR=value assignments before it, the interpreter it names (`/venv/bin/sglang serve`: that script, whose
    shebang names it), launch_server's arguments, notes). Takes
    `[env] [VAR=x ...] python -m sglang.launch_server ARGS`, `[VAR=x ...] sglang serve [MODEL] ARGS`, or the
    arguments alone; `export VAR=x` words count as VAR=x. A variable the daemon holds itself is left out, noted."""
    env, named, args, notes = _split(command)
    held = [name for name in KILLPG_ENV if env.pop(name, None) is not None]
    return env, named, args, notes + [f"{name} left out: the daemon holds it off (SGLang runs in the daemon's process "
                                      "group, which its killpg would take down; the daemon stops SGLang itself)"
                                      for name in held]


def _split(command: list[str]) -> tuple[dict[str, str], str | None, list[str], list[str]]:
    tokens = words(command)
    env: dict[str, str] = {}
    # `export VAR=x` lines before it (a pasted script's shape) set the server's environment as VAR=x in front does
    while tokens and (tokens[0] in ("env", "export") or ASSIGNMENT.fullmatch(tokens[0])):
        head = tokens.pop(0)
        if head not in ("env", "export"):
            name, value = head.split("=", 1)
            env[name] = value
    if asked := PRINT_AND_EXIT & set(tokens):
        raise CommandError(f"{' '.join(sorted(asked))} prints and exits: give the command that starts the server")
    if "sglang.launch_server" in tokens:
        at = tokens.index("sglang.launch_server")
        named, notes = _python(tokens[:at])
        return env, named, tokens[at + 1:], notes
    serve = _serve_at(tokens)
    if serve is not None:
        _nothing_before(tokens[:serve], "sglang serve")
        args, notes = _serve_args(tokens[serve + 2:])
        script = tokens[serve]          # (`/venv/bin/sglang serve`: its shebang names the interpreter: shebang_of)
        return env, script if "/" in script else None, args, notes
    if not tokens or tokens[0].startswith("-"):
        return env, None, tokens, []
    raise CommandError(f"not an SGLang launch command: {shlex.join(tokens[:3])} ... (expected 'python -m "
                       "sglang.launch_server ARGS', 'sglang serve MODEL ARGS' or the arguments alone)")


def _python(head: list[str]) -> tuple[str | None, list[str]]:
    """The interpreter before `-m sglang.launch_server`, and notes on python's own options, left out."""
    at = next((i for i, word in enumerate(head) if Path(word).name.startswith("python")), None)
    if at is None or head[-1] != "-m":
        raise CommandError(f"expected 'python -m sglang.launch_server', got {shlex.join(head + ['sglang.launch_server'])}")
    _nothing_before(head[:at], "the interpreter")
    options = head[at + 1:-1]
    if unknown := [o for o in options if o not in PYTHON_FLAGS]:
        raise CommandError(f"python options {shlex.join(unknown)} cannot be carried over (the daemon starts SGLang "
                           "with its own interpreter): give the command without them")
    return head[at], [f"python's {' '.join(options)} left out (no bearing on the server)"] if options else []


def _nothing_before(head: list[str], what: str) -> None:
    if head:
        raise CommandError(f"{shlex.join(head)} before {what} cannot be carried over (the daemon starts SGLang "
                           "itself; VAR=value assignments in front become [sglang.env]): give the command without it")


def _serve_args(rest: list[str]) -> tuple[list[str], list[str]]:
    """As `sglang serve` reads its arguments: a first positional is the model path, --model-type picks the server."""
    notes, args, i = [], [], 0
    while i < len(rest):
        word = rest[i]
        if word == "--model-type" or word.startswith("--model-type="):
            kind = word.split("=", 1)[1] if "=" in word else (rest[i + 1] if i + 1 < len(rest) else "")
            if kind not in ("auto", "llm"):
                raise CommandError(f"--model-type {kind or '(no value)'}: spec-controller steers language models "
                                   "(llm) only")
            notes.append(f"--model-type {kind} left out (launch_server serves language models)")
            i += 1 if "=" in word else 2
            continue
        args.append(word)
        i += 1
    return (["--model-path", *args] if args and not args[0].startswith("-") else args), notes


def path_notes(values: dict) -> list[str]:
    """Paths the service will not see as the operator's shell did: systemd starts it in / with ProtectHome and
    PrivateTmp (docs/systemd.md); a $NAME no shell will expand. Every string value is looked at, lists and tables
    ([sglang.env]) included."""
    notes = []
    for key, value in values.items():
        # the secrets as *** first (API keys, secret-named variables, keys in extra_args): a note never shows one
        if isinstance(value, dict):
            items = [(name, shown_value(f"env.{name}", v)) for name, v in value.items()]
        else:
            shown = shown_value(key, value)
            items = [(key, v) for v in (shown if isinstance(shown, list) else [shown])]
        for name, text in items:
            if not isinstance(text, str) or not text or text == "***" or text.endswith("=***"):
                continue
            if text.startswith(HIDDEN):
                notes.append(f"{name} = {text}: the service cannot read home directories (ProtectHome); move it")
            elif text.startswith(PRIVATE_TMP) or text in ("/tmp", "/var/tmp"):
                notes.append(f"{name} = {text}: the service has its own /tmp and /var/tmp (PrivateTmp), empty "
                             "at its start; move it (e.g. under /var/lib or /opt)")
            elif EXPANSION.search(text):
                notes.append(f"{name} = {text}: the service passes it as written, no shell expands the $ in it")
            elif text.startswith(("./", "../")) or (not text.startswith("/") and os.path.exists(text)):
                # (a Hugging Face id looks relative too: only what exists here, or says ./ or ../, is a path)
                notes.append(f"{name} = {text} names {Path(text).resolve()} here; the service runs in /: give the "
                             "absolute path if it is one")
    return notes


def missing_path_notes(values: dict) -> list[str]:
    """The absolute paths [sglang] names that do not exist here: SGLang exits at start on them and the unit restarts it
    every 5 s until they do. A note, not a refusal: a mount made before the service starts is fine."""
    return [f"{key} = {path} does not exist here: SGLang cannot start on it (the unit restarts it every 5 s until it "
            "does; fine for a mount made before the service starts)"
            for key, path in named_paths(values) if path.startswith("/") and not os.path.exists(path)
            and not path.startswith(HIDDEN + PRIVATE_TMP)] + [      # (path_notes says what is wrong with those)
        # review-52: a directory that is not a model, or a text file, passed with no word and SGLang exited at every start
        f"{key} = {path} holds no config.json: not a model directory SGLang loads (it exits at start; the unit restarts "
        "it every 5 s)" for key in MODEL_KEYS if isinstance(path := values.get(key), str) and path.startswith("/")
        and (os.path.isdir(path) and not os.path.exists(os.path.join(path, "config.json"))
             or os.path.isfile(path) and not path.endswith(".gguf"))]     # (a GGUF file is a model SGLang loads)


MODEL_KEYS = ("model_path", "speculative_draft_model_path")     # (a Hugging Face hub name is no path: not looked at)


def private_steps(config: str | Path, staged: bool = False, group: str = "spec-controller") -> str:
    """How to leave a config that holds a secret to root and the service (its group): the file's own owner and mode,
    or, for a copy made to be installed (staged: from-launch's -o file), its install into /etc made so."""
    where, target, group = shlex.quote(str(config)), "/etc/spec-controller/config.toml", shlex.quote(group)
    if not staged or str(Path(config).absolute()) == target:
        return f"sudo chown root:{group} {where} && sudo chmod 640 {where}"
    return f"sudo install -m 640 -o root -g {group} {where} {target}"


def secret_mode_note(config: str | Path | None, sglang: dict, group: str = "spec-controller") -> list[str]:
    """A config file that holds an API key or a token and that other users may read or change (config check): others,
    or a group other than the service's."""
    import grp
    try:
        st = Path(config).stat() if config and secrets_in(sglang) else None
    except OSError:
        st = None
    if st is None:
        return []
    try:
        group_of = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group_of = str(st.st_gid)
    mode = st.st_mode & 0o777
    if mode & 0o006:
        who, reads = "other users", mode & 0o004
    elif mode & 0o060 and group_of not in (group, "root"):
        who, reads = f"group {group_of}", mode & 0o040
    else:
        return []
    return [f"{config} holds an API key or a token and {who} may {'read' if reads else 'change'} it (mode {mode:o}): "
            f"{private_steps(config, group=group)}"]
