"""What another interpreter named by [sglang] python has installed, asked in a child process before anything is
launched (the daemon may not import what it has; the daemon's own interpreter is read in SGLangEngine.check_installed)."""
from __future__ import annotations

import json
import subprocess

from ...contract import PLATFORM_PLUGINS_GROUP, platform_unsupported_reason, version_unsupported_reason

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


def installed(python: str) -> dict:
    """{"sglang": version or None, "plugins": [...], "platforms": [...]} of `python`; OSError / ValueError where it
    cannot say (not found, not Python 3.10+, exits, prints something else)."""
    done = subprocess.run([python, "-c", ASK, PLUGINS_GROUP, PLATFORM_PLUGINS_GROUP], capture_output=True, text=True,
                          timeout=ASK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ValueError(f"exited {done.returncode}: {last}")
    answer = json.loads(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "")
    if not isinstance(answer, dict) or not {"sglang", "plugins", "platforms"} <= set(answer):
        raise ValueError(f"answered {done.stdout.strip()[:80]!r}")
    return answer


def other_interpreter_reason(python: str) -> str | None:
    """Why the SGLang in `python` cannot run the plugin, or None: SGLang missing or outside the supported range,
    spec-controller not installed there (SGLang would start without the plugin), an out-of-tree platform (0.5.23+)."""
    try:
        found = installed(python)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        return f"[sglang] python = {python}: cannot ask what it has installed ({why})"
    if found["sglang"] is None:
        return f"[sglang] python = {python} has no sglang installed"
    if OWN_PLUGIN not in found["plugins"]:
        return (f"[sglang] python = {python} has sglang {found['sglang']} but not spec-controller: SGLang would run "
                f"without the plugin ({python} -m pip install spec-controller)")
    return version_unsupported_reason(found["sglang"]) or platform_unsupported_reason(found["sglang"],
                                                                                       found["platforms"])
