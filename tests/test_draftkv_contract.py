"""The SGLang names the draft-KV writer (controller/plugin/draftkv.py) relies on, against every wheel
the fast off path supports: parameters in order, attributes set, and the source facts that make its k, v
the ones SGLang's own draft forward would store."""
import pytest

from controller.contract import parse_version
from controller.plugin import draftkv, internals
from tests.sglang_wheels import VERSIONS, params, source

FAST = [v for v in VERSIONS if internals.for_version(parse_version(v))]


def problems(version: str) -> list[str]:
    src, out = source(version), []
    for dotted, expected in draftkv.CALLABLES.items():
        try:
            names = [n for n in params(src.function(dotted)) if n in expected]
        except AssertionError as e:
            out.append(str(e))
            continue
        if names != list(expected):
            out.append(f"{dotted}{tuple(names)} != {expected}")
    for cls, names in draftkv.ATTRIBUTES.items():
        try:
            have = src.class_attributes(cls)
        except AssertionError as e:
            out.append(str(e))
            continue
        out += [f"{cls}.{n} is never set" for n in names if n not in have]
    for fn, quote, why in draftkv.FACTS:
        try:
            text = src.text(fn)
        except AssertionError as e:
            out.append(str(e))
            continue
        if quote.replace('"', "'") not in text:
            out.append(f"{fn}: lacks {quote!r} ({why})")
    return out


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
