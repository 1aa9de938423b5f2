"""A threshold of nan or inf through SGLang's /set_internal_state (a JSON 1e999 or NaN: json.loads and pydantic pass
both) is refused by the plugin's hook, not raised inside SGLang's scheduler (helper-85: int(nan) there stopped the
engine on every TP rank). SGLang is not installed here: its io_struct answer class is stood in."""
import sys
from types import ModuleType, SimpleNamespace

import pytest

from controller.contract import THRESHOLD_KEY, validate_threshold
from controller.plugin.instance import Plugin


@pytest.fixture
def io_struct(monkeypatch):
    class Out:
        def __init__(self, updated):
            self.updated = updated
    mods = {n: ModuleType(n) for n in ("sglang", "sglang.srt", "sglang.srt.managers", "sglang.srt.managers.io_struct")}
    mods["sglang.srt.managers.io_struct"].SetInternalStateReqOutput = Out
    for n, m in mods.items():
        monkeypatch.setitem(sys.modules, n, m)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), float("-inf")])
def test_validate_threshold_refuses_non_finite(value):
    assert validate_threshold(value) == f"{THRESHOLD_KEY} must be an integer, got {value!r}"


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_set_internal_state_hook_refuses_non_finite_threshold(io_struct, value):
    plug = Plugin({})
    plug.router.checked, plug.router.k, plug.router.threshold = True, 3, 8
    req = SimpleNamespace(server_args={THRESHOLD_KEY: value})
    out = plug.set_internal_state(lambda s, r: pytest.fail("SGLang's own handler"), object(), req)
    assert out.updated is False and plug.router.threshold == 8
