"""docs/api.md held to the code: the status document's table names every key the builder returns (top level, `daemon`
and `samples`, the rejection kinds), and the /history limit it states is the API's; docs/sglang.md's range of the
threshold the plugin takes is the contract's."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
API = (ROOT / "docs" / "api.md").read_text()


def _status_table() -> str:
    start = API.index("## The status document")
    return API[start:API.index("## Prometheus metrics", start)]


def test_the_status_table_names_every_key_of_the_document():
    from controller.daemon.intake import REJECT_KINDS
    from controller.status import DAEMON_KEYS, SAMPLE_KEYS, build_status
    named = set(re.findall(r"`(\w+)`", _status_table()))
    keys = set(build_status({}, None, {}, {}, {})) | set(DAEMON_KEYS) | set(SAMPLE_KEYS) | set(REJECT_KINDS)
    assert not keys - named, sorted(keys - named)       # (`trial` was missing)


def test_the_history_limit_stated_is_the_apis(monkeypatch):
    said = re.search(r"/history\?limit=N \| \| N in (\d+) \.\. (\d+), default (\d+)", API)
    assert said, "docs/api.md no longer states /history's limit"
    lo, hi, default = (int(g) for g in said.groups())
    from types import SimpleNamespace

    from controller.daemon import api
    from controller.daemon.apicheck import ApiError
    monkeypatch.setattr(api.queries, "recent_decisions", lambda db, limit: limit)      # (the limit the route asks for)
    service = SimpleNamespace(writer=SimpleNamespace(flush=lambda s: None),
                              reader=lambda: SimpleNamespace(conn=SimpleNamespace(close=lambda: None)))
    history = api.make_routes(service)[("GET", "/history")].handler
    assert history({}, {}) == default and history({"limit": str(lo)}, {}) == lo and history({"limit": str(hi)}, {}) == hi
    for bad in (lo - 1, hi + 1):
        try:
            history({"limit": str(bad)}, {})
        except ApiError as e:
            assert e.status == 400
        else:
            raise AssertionError(f"limit {bad} taken")


def test_the_threshold_range_the_sglang_doc_states_is_the_plugins():
    from controller.contract import validate_threshold
    text = " ".join((ROOT / "docs" / "sglang.md").read_text().split())
    said = re.search(r"same batch\. Integers 0 … (\d+)", text)
    assert said, "docs/sglang.md no longer states the threshold's range"          # (it said 2^20 after the bound moved)
    top = int(said.group(1))
    assert validate_threshold(0) is None and validate_threshold(top) is None and validate_threshold(top + 1)
