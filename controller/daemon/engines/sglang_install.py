"""What the interpreter that will run SGLang has installed, checked before anything is launched: another one named by
[sglang] python is asked in a child process (the daemon may not import what it has), the daemon's own read in-process;
one rule judges both answers."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from urllib.parse import unquote

from ...contract import PLATFORM_PLUGINS_GROUP, installed_platform_plugins, sglang_unsupported_reason

PLUGINS_GROUP = "sglang.srt.plugins"       # where SGLang finds plugins (pyproject: spec_controller = controller.plugin:load)
OWN_PLUGIN = "spec_controller"
ASK_TIMEOUT_S = 60.0
# Run by the other interpreter: package metadata and entry points only, nothing imported from SGLang
ASK = """import importlib.metadata as m, json, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
names = lambda group: sorted(ep.name for ep in m.entry_points(group=group))
print(json.dumps({"sglang": version("sglang"), "plugins": names(sys.argv[1]), "platforms": names(sys.argv[2])}))
"""


class NoAnswer(ValueError):
    """The interpreter did not answer in time (a host under load, a slow mount at boot): not a verdict on it."""


def installed(python: str, env: dict[str, str] | None = None) -> dict:
    """{"sglang": version or None, "plugins": [...], "platforms": [...]} of `python` run with `env` (that of the SGLang
    process: [sglang.env]'s PYTHONPATH counts); OSError / ValueError where it cannot say (not found, not Python 3.10+,
    exits, times out, prints something else)."""
    try:
        # in / as the service runs: a clone's spec_controller.egg-info in the working directory would answer for it
        done = subprocess.run([python, "-c", ASK, PLUGINS_GROUP, PLATFORM_PLUGINS_GROUP], capture_output=True,
                              text=True, timeout=ASK_TIMEOUT_S, stdin=subprocess.DEVNULL, env=env, cwd="/")
    except subprocess.TimeoutExpired:
        raise NoAnswer(f"no answer within {ASK_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"exited {done.returncode}: {last}")
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    names = lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)
    if not (isinstance(answer, dict) and isinstance(answer.get("sglang"), (str, type(None)))
            and names(answer.get("plugins")) and names(answer.get("platforms"))):
        raise ValueError(f"answered {done.stdout.strip()[:80]!r}")
    return answer


def own_installed() -> dict:
    """installed()'s answer for the daemon's own interpreter, read in-process (metadata only)."""
    import importlib.metadata as m
    try:
        version = m.version("sglang")
    except m.PackageNotFoundError:
        version = None
    return {"sglang": version, "plugins": sorted(ep.name for ep in m.entry_points(group=PLUGINS_GROUP)),
            "platforms": installed_platform_plugins()}


def install_source() -> str:
    """What pip installs spec-controller from: where this one came from (pip's direct_url.json: a clone's directory,
    a git URL), else its name."""
    import importlib.metadata as m
    for dist in m.distributions(name="spec-controller"):    # (a clone's egg-info, on the path first, has none)
        try:
            origin = json.loads(dist.read_text("direct_url.json") or "{}")
            url, vcs = origin.get("url", ""), origin.get("vcs_info", {}).get("vcs")
        except (ValueError, AttributeError):
            continue
        if url:
            return unquote(url.removeprefix("file://")) if url.startswith("file://") else \
                (f"{vcs}+{url}" if vcs else url)
    return "spec-controller"


def with_sglang(source: str | None = None) -> str:
    """What pip installs for spec-controller with SGLang: this one's source (install_source()) with the extra."""
    source = source or install_source()
    # pip reads an extra after a name or a directory, never after a URL ('NAME[extra] @ URL' there)
    return f"spec-controller[sglang] @ {source}" if "://" in source else f"{source}[sglang]"


def installed_reason(found: dict, where: str, pip: str) -> str | None:
    """Why the SGLang of `found` (installed()'s answer for the interpreter `where` names, installed into with `pip`)
    cannot run the plugin, or None: SGLang missing or outside the supported range, spec-controller not installed there
    (SGLang would start without the plugin and the daemon wait for telemetry that never comes), an out-of-tree platform
    (0.5.23+)."""
    source = install_source()
    if found["sglang"] is None:
        return f"{where} has no sglang installed ({pip} install {shlex.quote(with_sglang(source))})"
    if OWN_PLUGIN not in found["plugins"]:
        return (f"{where} has sglang {found['sglang']} but not spec-controller: SGLang would run without the plugin "
                f"({pip} install {shlex.quote(source)})")
    return sglang_unsupported_reason(found["sglang"], found["platforms"])


def interpreter_reason(python: str | None, env: dict[str, str] | None = None) -> str | None:
    """installed_reason for `python` ([sglang] python, asked in a child process with the SGLang process's `env`), or
    with None the daemon's own; NoAnswer where it did not answer in time."""
    if not python:
        return installed_reason(own_installed(), f"this interpreter ({sys.executable})", f"{sys.executable} -m pip")
    if "/" in python:           # (asked in /: a relative path as the launch, in the daemon's directory, reads it)
        python = os.path.abspath(python)
    try:
        found = installed(python, env)
    except NoAnswer as e:       # (raised, not returned: the caller tells a verdict from a question that timed out)
        raise NoAnswer(f"[sglang] python = {python}: cannot ask what it has installed ({e})") from None
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        return f"[sglang] python = {python}: cannot ask what it has installed ({why})"
    return installed_reason(found, f"[sglang] python = {python}", f"{python} -m pip")

