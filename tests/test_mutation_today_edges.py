"""Tests a mutation pass on the day's changes (d7a04b1..c1795dd) asked for: each one kills a mutant the other tests let
live (bench/results/mutation-today-2026-12-05c.md names it). No SGLang, no daemon: the control API's server runs on a
fake service (tests/test_api_hostile.py's), whose calls are recorded."""
import logging

import pytest

from controller.daemon import apicheck
from controller.numtext import WRITTEN
from policies import PolicyError, make_policy
from policies import params as policy_params
from tests.test_api_hostile import _answer, _exchange, _post, _server, api  # noqa: F401  (fixtures)


@pytest.mark.parametrize("shown", [apicheck.shown, policy_params.shown], ids=["api", "policies"])
def test_a_value_whose_repr_is_80_characters_is_shown_whole_and_a_longer_one_cut_to_80(shown):
    """The cut is at 80 characters, '...' included: a repr of exactly 80 is echoed as it is."""
    assert shown("x" * 78) == repr("x" * 78) and len(repr("x" * 78)) == 80
    cut = shown("x" * 79)
    assert cut == repr("x" * 79)[:77] + "..." and len(cut) == 80


def test_a_query_integer_with_a_plus_sign_is_refused(api):
    """'+' in a query is a space once decoded ('?limit=+5' is ' 5'); '%2B5' is a real plus, which int() takes."""
    path, _ = api
    status, _, error = _answer(_exchange(path, b"GET /history?limit=%2B5 HTTP/1.1\r\n\r\n"))
    assert (status, error) == (400, f"limit must be an integer, got '+5' ({WRITTEN})")


def test_a_body_of_exactly_the_limit_is_read_and_one_byte_more_is_413(api):
    path, service = api
    body = b'{"threshold": 5}'
    at_limit = body + b" " * (apicheck.MAX_BODY - len(body))          # JSON's whitespace pads it to the limit
    assert _exchange(path, _post("/threshold/pin", at_limit)).startswith(b"HTTP/1.1 200 ")
    assert service.calls == [("pin", 5)]
    over = f"POST /threshold/pin HTTP/1.1\r\nContent-Length: {apicheck.MAX_BODY + 1}\r\n\r\n".encode()
    status, headers, error = _answer(_exchange(path, over))            # (refused unread: no body sent after it)
    assert status == 413 and error == f"request body of {apicheck.MAX_BODY + 1} bytes is over the limit of " \
                                      f"{apicheck.MAX_BODY}"
    assert headers["connection"] == "close" and service.calls == [("pin", 5)]


@pytest.mark.parametrize("request_bytes", [b"GET /nope HTTP/1.1\r\n\r\n", b"POST /status HTTP/1.1\r\n\r\n",
                                           b"GET /threshold/pin HTTP/1.1\r\n\r\n"])
def test_an_endpoint_that_does_not_exist_is_404(api, request_bytes):
    """(A wrong method on a path that exists is no such endpoint either.)"""
    path, service = api
    status, _, error = _answer(_exchange(path, request_bytes))
    assert status == 404 and error.startswith("no such endpoint: "), error
    assert service.calls == []


@pytest.mark.parametrize("body", [b"[]", b"null", b"5", b'"x"', b"[5]", b'["threshold"]'])
def test_a_body_that_is_not_a_json_object_is_400_and_reaches_nothing(api, body, caplog):
    path, service = api
    status, _, error = _answer(_exchange(path, _post("/threshold/pin", body)))
    assert (status, error) == (400, "body must be a JSON object")
    assert service.calls == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_parameter_out_of_range_is_echoed_cut_short_not_whole():
    """A value that is a valid integer but far out of range (not only one that is no integer) is cut in the refusal."""
    with pytest.raises(PolicyError) as e:
        make_policy("fixed", {"threshold": 10 ** 250})
    message = str(e.value)
    assert " out of range (allowed 0 " in message and "..." in message and len(message) < 200, message[:300]


@pytest.mark.parametrize("text,says", [
    ("[sim]\nconcurrency = true\n", "config: [sim] concurrency=true must be an integer"),
    ("[sim]\nspeed = false\n", "config: [sim] speed=false must be a number"),
    ("[control]\nmetrics_port = true\n", "config: [control] metrics_port=true must be an integer"),
])
def test_true_or_false_is_no_number_in_the_config(tmp_path, text, says):
    """TOML's true is Python's True, an int: taken, it ran 1 client (or port 1)."""
    from controller.daemon.config import ConfigError, load_config
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.toml")
    assert str(e.value) == says
