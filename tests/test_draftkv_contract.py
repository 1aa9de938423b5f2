"""The SGLang names the draft-KV writer (controller/plugin/draftkv.py) relies on, against every wheel
the fast off path supports: parameters in order, attributes set, and the source facts that make its k, v
the ones SGLang's own draft forward would store."""
import pytest

from controller.contract import parse_version
from controller.plugin import draftkv, internals
from tests.sglang_wheels import VERSIONS, name_problems, source

FAST = [v for v in VERSIONS if internals.for_version(parse_version(v))]


def problems(version: str) -> list[str]:
    return name_problems(source(version), draftkv.CALLABLES, draftkv.ATTRIBUTES, facts=draftkv.FACTS)


@pytest.mark.parametrize("version", FAST)
def test_the_writers_sglang_names_hold_in_every_fast_wheel(version):
    assert problems(version) == [], version


def test_the_check_can_fail():
    # a fact or parameter that no wheel has is reported (the check is not vacuous)
    saved = draftkv.CALLABLES, draftkv.FACTS
    try:
        draftkv.CALLABLES = {**saved[0], "sglang.srt.models.llama.LlamaAttention.forward_prepare_native":
                             ("self", "hidden_states", "positions")}
        draftkv.FACTS = saved[1] + (("sglang.srt.models.llama.LlamaAttention.forward", "no such line", "x"),)
        found = problems(FAST[0])
    finally:
        draftkv.CALLABLES, draftkv.FACTS = saved
    assert len(found) == 2
