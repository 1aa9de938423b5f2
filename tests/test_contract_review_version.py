"""Review: contract.parse_version reads each part's leading digits only (PEP 440 suffixes glued to the patch)."""
import pytest

from controller import contract


@pytest.mark.parametrize("text,parsed", [
    ("0.5.17", (0, 5, 17)), ("0.5.15.post1", (0, 5, 15)), ("0.5.18.dev3+g1a2b3c", (0, 5, 18)),
    ("0.5.17+cu130", (0, 5, 17)),        # a local build label: read as 0.5.17130 (refused) before
    ("0.5.17rc1", (0, 5, 17)),           # a pre-release: read as 0.5.171 before
    ("0.5.1rc4", (0, 5, 1)),             # read as 0.5.14, inside the supported range, before
    ("0.5", None), ("x.5.17", None), ("0", None),
])
def test_parse_version_reads_leading_digits(text, parsed):
    assert contract.parse_version(text) == parsed


def test_a_local_build_of_a_supported_release_is_not_refused_and_an_old_rc_is():
    assert contract.version_unsupported_reason("0.5.17+cu130") is None
    assert contract.version_unsupported_reason("0.5.1rc4") is not None
