"""[sglang] as launch_server flags, and what of them is a secret: the daemon runs in its own process and hands these
to SGLang's (engines/sglang.py); from-launch reads them back through SGLang's parser."""
from __future__ import annotations

import re
from typing import IO, Any

from ...paths import NOT_PLAIN, read_text_file
from .base import EngineError


def flag_of(key: str) -> str:
    """A ServerArgs key as launch_server's flag: key_name -> --key-name."""
    return "--" + key.replace("_", "-")


# SGLang's keys whose values unlock its HTTP API (--api-key, --admin-api-key): never written to a log
SECRET_KEYS = ("api_key", "admin_api_key")
SECRET_FLAGS = tuple(map(flag_of, SECRET_KEYS))
# [sglang.env] names whose values are shown as *** where a config's values are (HF_TOKEN, *_API_KEY, ...)
SECRET_ENV = re.compile("TOKEN|KEY|SECRET|PASSW|CREDENTIAL", re.I)
# Keys of [sglang] that the daemon itself uses and does not pass as server flags
OWN_KEYS = {"ready_timeout_s", "python", "extra_args", "env", "probe_s", "hang_after_s", "off_path", "lean_prefill"}


def server_flags(args: dict) -> list[str]:
    """ServerArgs as `launch_server` flags: key_name=value -> --key-name value (--key-name=value where the value starts
    with '-': argparse would take it for a flag); True -> --key-name."""
    flags: list[str] = []
    for key, value in args.items():
        if key in OWN_KEYS or value is None or value is False:
            continue
        flag = flag_of(key)
        if value is True:
            flags.append(flag)
        elif isinstance(value, (list, tuple)):
            flags += [flag, *map(str, value)]
        else:
            flags += [f"{flag}={value}"] if str(value).startswith("-") else [flag, str(value)]
    return flags + [str(x) for x in args.get("extra_args", [])]


ARG_MOST = 131071       # bytes in one word of a command line or one NAME=value of an environment (MAX_ARG_STRLEN)


def unfit_key(table: dict, within: str = "") -> tuple[str, str] | None:
    """(the first key whose name or value (a string, or one in a list or a table) no command line or environment
    carries, why), or None: a NUL byte (Popen's ValueError at the engine's start, after `config check` said ok) or a
    word longer than ARG_MOST (a 200 KB model_path: E2BIG, 'Argument list too long', the same way)."""
    for key, value in table.items():
        items = value if isinstance(value, list) else [value]
        if any("\0" in str(key) or (isinstance(item, str) and "\0" in item) for item in items):
            return f"{within}{key}", "holds a NUL byte, which no command line or environment carries"
        if any(len(word.encode()) > ARG_MOST for word in _words(key, value, within)):
            return f"{within}{key}", f"is longer than a command line's word or an environment's may be " \
                                     f"({ARG_MOST:,} bytes)"
        for item in items:
            if isinstance(item, dict) and (inner := unfit_key(item, f"{within}{key}.")) is not None:
                return inner
    return None


def _words(key: str, value: object, within: str) -> list[str]:
    """The words key = value is written as at the engine's start: a flag of SGLang's as server_flags writes it
    (--key-name=value where the value starts with '-', a table as its text: one word each; measured as key=value, a
    '-' value 2 bytes past the limit and a table of any size passed the check, and the exec refused them), extra_args'
    as given (measured as extra_args=word, one 11 bytes short of the limit was refused: helper-145), else NAME=value
    ([sglang.env]'s), the engine's other own keys' measured the same way."""
    if within or key in OWN_KEYS - {"extra_args"}:
        items = value if isinstance(value, list) else [value]
        return [f"{key}={item if isinstance(item, str) else ''}" for item in items]
    return server_flags({key: value})


def named_paths(args: dict) -> list[tuple[str, str]]:
    """(key, value) of every path an [sglang] table hands SGLang, as written: each *_path key's (not the daemon's own),
    each entry of a *_paths list (lora_paths: "/path" or "name=/path") and each value extra_args gives a --*-path or
    --*-paths flag ("extra_args --FLAG")."""
    named = [(k, v) for k, v in args.items() if k.endswith("_path") and k not in OWN_KEYS and isinstance(v, str)]
    named += [(k, _entry(x)) for k, v in args.items()
              if k.endswith("_paths") and isinstance(v, list) for x in v if isinstance(x, str)]
    extra = args.get("extra_args")
    return named + (_flag_paths([str(w) for w in extra]) if isinstance(extra, list) else [])


def _entry(value: str) -> str:
    return value.partition("=")[2] if "=" in value else value      # a *_paths entry: "/path" or "name=/path"


def _flag_paths(words: list[str]) -> list[tuple[str, str]]:
    """("extra_args --FLAG", value) for the values of path-named flags in a launch line's words: --x-path V, --x-path=V,
    --x-paths V1 V2 ... (up to the next flag), as SGLang's parser takes them."""
    out: list[tuple[str, str]] = []
    flag, many = None, False
    for word in words:
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            flag, many = (name, name.endswith("-paths")) if name.endswith(("-path", "-paths")) else (None, False)
            if flag and eq:
                out.append((f"extra_args {flag}", _entry(value) if many else value))
                flag = None
        elif flag:
            out.append((f"extra_args {flag}", _entry(word) if many else word))
            flag = flag if many else None
    return out


def extra_args(args: dict) -> list[str]:
    """[sglang] extra_args: words added to the launch line as given (a list; a string would be split into letters)."""
    extra = args.get("extra_args", [])
    bad = [x for x in extra if isinstance(x, (bool, dict, list))] if isinstance(extra, list) else [extra]
    if bad:
        raise EngineError(f"sglang engine: [sglang] extra_args must be a list of words, e.g. [\"--flag\", \"value\"], "
                          f"got {'a ' if not isinstance(extra, list) else 'a list holding a '}{type(bad[0]).__name__}")
    owned = [w for w in map(str, extra) if w.partition("=")[0] in ("--port", "--host")]
    if owned:
        key = owned[0].partition("=")[0][2:]
        raise EngineError(f"sglang engine: [sglang] extra_args {owned[0].partition('=')[0]}: set [sglang] {key} "
                          f"instead (the daemon reaches SGLang there)")
    return [str(x) for x in extra]


# SGLang modes that serve no HTTP API (launch_server.run_server, 0.5.17 ... 0.5.23): the daemon's health checks and
# threshold changes are HTTP
NO_HTTP_KEYS = ("grpc_mode", "smg_grpc_mode", "encoder_only")
TLS_KEYS = ("ssl_certfile", "ssl_keyfile")     # SGLang then serves HTTPS only (ServerArgs.url(): https)


def no_http_reason(args: dict) -> str | None:
    """Why SGLang started with these [sglang] keys (and extra_args) would leave the daemon no HTTP API, or None."""
    words = {w.partition("=")[0] for w in server_flags(args)}
    for key in NO_HTTP_KEYS:
        if flag_of(key) in words:
            return (f"{key}: SGLang then serves no HTTP API, and the daemon checks its health and changes the threshold "
                    "over HTTP (leave it out; the OpenAI-compatible HTTP port serves clients)")
    for key in TLS_KEYS:
        if flag_of(key) in words:
            return (f"{key}: SGLang then serves HTTPS only, and the daemon checks its health and changes the threshold "
                    "over plain HTTP on this host (leave SGLang's TLS out and terminate TLS in a proxy in front of its "
                    "port)")
    return None


def secret_key(word: str) -> str | None:
    """The API key a flag word sets ('--api-key', '--admin-api-key=X'), or None. argparse also takes any prefix that
    names one flag only ('--api', '--adm'; SGLang 0.5.17 ... 0.5.23 have no other flag starting '--ap' or '--ad')."""
    flag = word.partition("=")[0]
    named = [key for key, full in zip(SECRET_KEYS, SECRET_FLAGS) if len(flag) >= 4 and full.startswith(flag)]
    return named[0] if len(named) == 1 else None


def _secret_words(words: list[str]):
    """(index of the word holding an API key, the key's name, whether it is a '--flag=value' word) per key given."""
    for i, word in enumerate(words):
        key, eq = secret_key(word), "=" in word
        if key and (eq or i + 1 < len(words)):
            yield (i if eq else i + 1), key, eq


# a flag named like a secret, SGLang's or not (--api_key, --apikey, --hf-token: a mistyped one is what argparse quotes)
SECRET_FLAG = re.compile(r"^--?(.*[-_])?(api[-_]?key|token|secret|passw\w*|credentials?)([-_].*)?$", re.I)


def _masked_words(words: list[str]):
    """(index, whether '--flag=value') of every word a log or a refusal must not show: the API keys' values, and the
    value of any flag named like a secret (not a next word that is itself a flag)."""
    seen = {(i, joined) for i, _, joined in _secret_words(words)}
    for i, word in enumerate(words):
        flag, eq, _ = word.partition("=")
        if SECRET_FLAG.match(flag):
            if eq:
                seen.add((i, True))
            elif i + 1 < len(words) and not words[i + 1].startswith("-"):
                seen.add((i + 1, False))
    return sorted(seen)


def _masked_values(words: list[str]) -> list[str]:
    """The values _masked_words points at (the part after '=' of a '--flag=value' word)."""
    return [v for i, joined in _masked_words(words) if (v := words[i].partition("=")[2] if joined else words[i])]


def shown(cmd: list[str]) -> list[str]:
    """A command as the daemon logs it or a config's header shows it: the API keys' values, and those of secret-named
    variables set in front of it (HF_TOKEN=...), replaced by ***."""
    out = list(cmd)
    for i, joined in _masked_words(cmd):
        out[i] = f"{cmd[i].partition('=')[0]}=***" if joined else "***"
    for i, word in enumerate(cmd):
        name, eq, _ = word.partition("=")
        if eq and name.isidentifier() and SECRET_ENV.search(name):
            out[i] = f"{name}=***"
    return out


def shown_value(key: str, value: Any) -> Any:
    """An [sglang] value (`env.NAME` for [sglang.env]'s) as logs and events show a config's values: the API keys,
    secret-named variables and the keys in extra_args as ***."""
    if key in SECRET_KEYS or (key.startswith("env.") and SECRET_ENV.search(key[4:])):
        return "***"
    return shown([str(x) for x in value]) if key == "extra_args" and isinstance(value, list) else value


def given_keys(args: dict) -> dict[str, list[str]]:
    """Every value each API key is given: the table's, then extra_args' in order (argparse: the last one wins)."""
    keys: dict[str, list[str]] = {key: [str(args[key])] if args.get(key) else [] for key in SECRET_KEYS}
    words = [str(x) for x in args.get("extra_args", [])]
    for i, key, joined in _secret_words(words):
        keys[key].append(words[i].partition("=")[2] if joined else words[i])
    return keys


def masked(text: str, words: list[str]) -> str:
    """text (a parser's refusal, which may quote the command) with the secret values the command's words give as ***:
    each where it stands as a word of its own (a one-letter key must not star every 'a' of the line)."""
    for value in sorted(set(_masked_values(words)), key=len, reverse=True):
        text = re.sub(rf"(?<![\w.~+/-]){re.escape(value)}(?![\w.~+/-])", "***", text)
    return text


def secrets_in(args: dict) -> list[str]:
    """Every secret value an [sglang] table holds: the API keys (its own and extra_args'), the value of any flag named
    like a secret (a mistyped key SGLang's argparse would print whole) and its secret-named [sglang.env] variables."""
    env = args.get("env") if isinstance(args.get("env"), dict) else {}
    named = _masked_values(server_flags(args))     # (any flag named like a secret: --apikey, --hf-token, extra_args')
    return list(dict.fromkeys([v for values in given_keys(args).values() for v in values] + named +
                              [str(v) for name, v in env.items() if SECRET_ENV.search(name) and str(v)]))


# A key in the YAML of an `--config FILE` in extra_args (SGLang merges it under the command line): a top-level
# `api-key:` / `admin_api_key:` line, quoted or not (flow-style YAML is not looked into; SGLang parses it whole)
_YAML_KEY = re.compile(r"""^["']?((?:admin[-_])?api[-_]key)["']?[ \t]*:""", re.M)


def config_file_reason(args: dict) -> str | None:
    """Why an [sglang] table cannot run as given: an API key set only in extra_args' --config YAML. The daemon must
    send that key with every threshold change and mask it in SGLang's output, and reads no YAML; a key that [sglang]
    sets as well wins over the file's (SGLang: command line over config), so that one is fine. A missing or unreadable
    file is SGLang's to report; one that is no regular file or is over 16 MiB is refused (read whole, a FIFO hung
    config check and run for good, /dev/zero ran out of memory)."""
    words = server_flags(args)              # ([sglang] config = "FILE" is a --config too)
    if words[-1:] == ["--config"]:          # (SGLang would take the daemon's next flag for the file)
        return "[sglang] extra_args ends with --config: name the YAML file after it"
    files = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--config"]
    try:
        text = read_text_file(files[0], errors="replace") if files else ""
    except OSError as e:
        return f"[sglang]'s --config {files[0]}: cannot read ({e.strerror})" if e.errno in NOT_PLAIN else None
    given = given_keys(args)
    unsent = [key.replace("-", "_") for key in _YAML_KEY.findall(text) if not given[key.replace("-", "_")]]
    if not unsent:
        return None
    return (f"[sglang]'s --config {files[0]} sets {unsent[0]}: set it in [sglang] instead ({unsent[0]} = "
            f"\"...\", private file): the daemon sends it with each threshold change and keeps it out of the logs")


def admin_headers(args: dict) -> dict[str, str]:
    """The Authorization header SGLang asks of /set_internal_state (its ADMIN_OPTIONAL level, utils/auth.py in
    0.5.17 ... 0.5.23): the admin key where one is set, else the API key, else none."""
    keys = {key: values[-1] if values else None for key, values in given_keys(args).items()}
    key = keys["admin_api_key"] or keys["api_key"]
    return {"Authorization": f"Bearer {key}"} if key else {}


def refused_hint(error: Exception) -> str:
    """What to add to a refused threshold change: SGLang's 401 means the key the daemon sent (admin_headers) is not
    the one it was started with, e.g. one set where the daemon does not read it."""
    if getattr(error, "code", None) in (401, 403):
        return ("; SGLang refused the key the daemon sends ([sglang] admin_api_key, else api_key): SGLang was started "
                "with another, or one the daemon does not read")
    return ""


def relay_masked(stream: IO[bytes], secrets: list[str], out: IO | None) -> None:
    """SGLang's output to the daemon's own (the journal) with every key's value as ***: SGLang logs its server_args
    whole, keys included (0.5.17 ... 0.5.23). Reads to the end whatever becomes of the writes (a closed or missing
    stderr: dropped): SGLang must never block on a full pipe."""
    masks = sorted({v for s in secrets if s for v in (s.encode(), repr(s)[1:-1].encode())}, key=len, reverse=True)
    sink = getattr(out, "buffer", out)
    try:
        for line in _segments(stream):
            for mask in masks:
                line = line.replace(mask, b"***")
            try:
                sink.write(line)
                sink.flush()
            except Exception:               # (None, a text-only or closed stream: the line is lost, not SGLang)
                pass
    finally:
        stream.close()


def _segments(stream: IO[bytes]):
    """The stream in pieces that each end at a newline or a carriage return (tqdm's progress bars redraw with \r
    alone: read by line, a model's loading bar reached the journal only when it finished), the rest at its end."""
    held = b""
    for chunk in iter(lambda: getattr(stream, "read1", stream.read)(65536), b""):
        held += chunk
        cut = max(held.rfind(b"\n"), held.rfind(b"\r")) + 1
        if cut:
            yield from re.findall(rb"[^\r\n]*(?:\r\n|\r|\n)", held[:cut])
            held = held[cut:]
    if held:
        yield held
