"""The SGLang general plugin (entry point `sglang.srt.plugins`): what runs inside every SGLang
scheduler process. It imports only controller.contract from the rest of the project, and stays
light at import: SGLang loads it in every process it starts.

`load()` builds the process's one Plugin and registers its hooks (idempotent); a refusal
leaves SGLang untouched. No SGLang file is edited.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger("spec_controller.plugin")
_loaded: list = []            # the process's Plugin once load() ran (a list: no rebinding of a global)


def load() -> None:
    """Entry point: register the hooks once per process."""
    if _loaded:
        return
    _loaded.append(None)
    from ..envwords import PLUGIN_ENV, switch_on
    from .support import sglang_version
    if not switch_on(os.environ, PLUGIN_ENV):
        return
    from ..contract import ENV_ADDRESS, ENV_INITIAL_THRESHOLD, installed_platform_plugins, sglang_unsupported_reason
    if not (os.environ.get(ENV_ADDRESS) or os.environ.get(ENV_INITIAL_THRESHOLD)):
        # an SGLang the daemon did not start, in the same environment: its own settings rule (at threshold 0 the
        # plugin would have turned speculation off in every adaptive engine there, steered by nobody)
        log.info("spec-controller plugin not loaded: this SGLang was not started by spec-controller (%s and %s unset)",
                 ENV_ADDRESS, ENV_INITIAL_THRESHOLD)
        return
    try:
        version = sglang_version()
        reason = sglang_unsupported_reason(version, installed_platform_plugins())
        if reason:
            log.warning("spec-controller plugin not loaded: %s", reason)
            return
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except Exception as e:
        log.warning("spec-controller plugin not loaded: %s", e)
        return
    from .instance import Plugin
    plugin = Plugin()
    _loaded[0] = plugin
    for target, (hook, kind) in plugin.hooks().items():
        HookRegistry.register(target, hook, getattr(HookType, kind))
