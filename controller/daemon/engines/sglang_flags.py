"""[sglang] as launch_server flags, and what of them is a secret: the daemon runs in its own process and hands these
to SGLang's (engines/sglang.py); from-launch reads them back through SGLang's parser."""
from __future__ import annotations

# SGLang's keys whose values unlock its HTTP API (--api-key, --admin-api-key): never written to a log
SECRET_KEYS = ("api_key", "admin_api_key")
SECRET_FLAGS = tuple("--" + key.replace("_", "-") for key in SECRET_KEYS)
# Keys of [sglang] that the daemon itself uses and does not pass as server flags
OWN_KEYS = {"ready_timeout_s", "python", "extra_args", "env", "probe_s", "hang_after_s", "off_path", "lean_prefill"}


def server_flags(args: dict) -> list[str]:
    """ServerArgs as `launch_server` flags: key_name=value -> --key-name value (--key-name=value where the value starts
    with '-': argparse would take it for a flag); True -> --key-name."""
    flags: list[str] = []
    for key, value in args.items():
        if key in OWN_KEYS or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, (list, tuple)):
            flags += [flag, *map(str, value)]
        else:
            flags += [f"{flag}={value}"] if str(value).startswith("-") else [flag, str(value)]
    return flags + [str(x) for x in args.get("extra_args", [])]


def _secret_words(words: list[str]):
    """(index of the word holding an API key, the key's name, whether it is a '--flag=value' word) per key given."""
    for i, word in enumerate(words):
        flag, eq, _ = word.partition("=")
        if flag in SECRET_FLAGS and (eq or i + 1 < len(words)):
            yield (i if eq else i + 1), SECRET_KEYS[SECRET_FLAGS.index(flag)], bool(eq)


def shown(cmd: list[str]) -> list[str]:
    """The launch command as the daemon logs it: the API keys' values replaced by ***."""
    out = list(cmd)
    for i, _, joined in _secret_words(cmd):
        out[i] = f"{cmd[i].partition('=')[0]}=***" if joined else "***"
    return out


def admin_headers(args: dict) -> dict[str, str]:
    """The Authorization header SGLang asks of /set_internal_state (its ADMIN_OPTIONAL level, utils/auth.py in
    0.5.17 ... 0.5.23): the admin key where one is set, else the API key, else none; a key given in extra_args
    counts (argparse: the last one given wins)."""
    keys = {key: args.get(key) for key in SECRET_KEYS}
    words = [str(x) for x in args.get("extra_args", [])]
    for i, key, joined in _secret_words(words):
        keys[key] = words[i].partition("=")[2] if joined else words[i]
    key = keys["admin_api_key"] or keys["api_key"]
    return {"Authorization": f"Bearer {key}"} if key else {}
