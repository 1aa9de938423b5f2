"""The control API against hostile requests: what bench/fuzz.py (seed 1) found on a real daemon, each case kept here.

Every refusal is a 4xx with a status line and one line of JSON, and a refused command reaches nothing: the fake
service records every call it gets."""
import http.client
import io
import json
import logging
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from controller.daemon.api import ControlServer, _Handler, make_routes


class _Service:
    """What the routes call, each call recorded."""

    def __init__(self):
        self.calls = []

    class engine:
        @staticmethod
        def health():
            return {"ok": True}

    def status(self):
        return {"daemon": {"running": True}}

    def policy_info(self):
        return {"name": "bandit"}

    def pin(self, threshold):
        self.calls.append(("pin", threshold))
        return {"pinned": threshold is not None}

    def set_policy(self, name, params):
        self.calls.append(("policy", name, params))
        return {"name": name}


@pytest.fixture(scope="module")
def _server():
    """One server for the module (each stop waits out serve_forever's 0.5 s poll)."""
    where = Path(tempfile.mkdtemp(prefix="sc-", dir="/tmp"))
    service = _Service()
    server = ControlServer(where / "c.sock", service, on_stop=lambda: service.calls.append(("stop",)) or {},
                           read_timeout_s=0.5)
    server.start()
    yield where / "c.sock", service
    server.stop()
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def api(_server):
    _server[1].calls.clear()
    return _server


def _exchange(path, data: bytes, end: bool = True) -> bytes:
    """data sent on its own connection (end: our side shut after it), everything the daemon sent back."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(path))
    s.sendall(data)
    if end:
        s.shutdown(socket.SHUT_WR)
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    s.close()
    return out


def _answer(raw: bytes) -> tuple[int, dict, str]:
    """(status, headers, the error line) of the first answer; fails unless it is a status line and one line of JSON."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert sep and lines[0].startswith("HTTP/1.1 "), raw[:200]
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert headers["content-type"] == "application/json", raw[:200]
    error = json.loads(rest[:int(headers["content-length"])])["error"]
    assert "\n" not in error
    return int(lines[0].split()[1]), headers, error


def _post(path: str, body: bytes, *headers: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\n" + "".join(h + "\r\n" for h in headers)
            + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.mark.parametrize("nested", ids=["array", "in-a-key", "objects"], argvalues=[b"[" * 5000 + b"]" * 5000, b'{"threshold": ' + b"[" * 3000 + b"]" * 3000 + b"}",
                                    b'{"a": ' * 3000 + b"1" + b"}" * 3000])
def test_deeply_nested_json_is_refused_not_an_internal_error(api, nested, caplog):
    path, service = api
    status, _, error = _answer(_exchange(path, _post("/threshold/pin", nested)))
    assert (status, error) == (400, "body is nested too deeply")          # was 500 RecursionError, and a traceback
    assert service.calls == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("nested", ids=["array", "in-a-key", "objects"], argvalues=[
    b"[" * 200 + b"]" * 200, b'{"threshold": ' + b"[" * 200 + b"]" * 200 + b"}", b'{"a": ' * 200 + b"1" + b"}" * 200])
def test_nesting_any_parser_takes_is_refused_the_same_way(api, nested):
    """200 levels parse on every Python: the refusal was 'body must be a JSON object' (or the key's) there, and 5,000
    levels read the same on 3.13, whose parser takes them (3.11 and 3.12 raise RecursionError)."""
    path, service = api
    status, _, error = _answer(_exchange(path, _post("/threshold/pin", nested)))
    assert (status, error) == (400, "body is nested too deeply")
    assert service.calls == []


def test_brackets_inside_a_string_are_no_nesting(api):
    path, service = api
    body = json.dumps({"threshold": 5, "x": "[{" * 100 + '\\"' + "]}" * 100}).encode()
    status, _, error = _answer(_exchange(path, _post("/threshold/pin", body)))
    assert (status, error) == (400, "unknown key 'x' in the body of POST /threshold/pin (known: threshold)")
    assert service.calls == []


@pytest.mark.parametrize("request_bytes,status,says", ids=["garbage", "http-0.9", "put", "lower-case", "http-2",
                                                           "headers", "long-line"], argvalues=[
    (b"GARBAGE\r\n\r\n", 400, "Bad request syntax"),                       # was an HTML page, no status line
    (b"GET /status\r\n\r\n", 400, "expected METHOD PATH HTTP/1.1"),        # HTTP/0.9: was answered, no status line
    (b"PUT /status HTTP/1.1\r\n\r\n", 405, "Unsupported method ('PUT')"),  # was 501 and HTML
    (b"get /status HTTP/1.1\r\n\r\n", 405, "Unsupported method ('get')"),
    (b"GET /status HTTP/2.0\r\n\r\n", 400, "Invalid HTTP version (2.0)"),  # was 505 and HTML
    (b"GET /status HTTP/1.1\r\n" + b"X: y\r\n" * 150 + b"\r\n", 431, "Too many headers"),
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414, "URI Too Long"),     # (3.13: no "Request-" in the phrase)
])
def test_http_servers_own_refusals_are_a_4xx_with_one_line_of_json(api, request_bytes, status, says):
    path, service = api
    got, headers, error = _answer(_exchange(path, request_bytes))
    assert got == status and says in error
    assert headers["connection"] == "close"
    if status == 405:
        assert headers["allow"] == "GET, POST"
    assert service.calls == []


def test_a_body_shorter_than_its_content_length_is_refused_not_applied(api):
    path, service = api
    data = b'POST /threshold/pin HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n\r\n{"threshold": 5}'
    status, _, error = _answer(_exchange(path, data))        # our side ends after 16 of the 60 bytes
    assert (status, error) == (400, "request body of 16 bytes, shorter than its Content-Length 60")
    assert service.calls == []                                # was applied: the prefix parsed


def test_a_body_that_never_comes_is_a_408_once_the_read_times_out(api, caplog):
    path, service = api
    data = b'POST /threshold/pin HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n\r\n{"threshold": 5}'
    status, _, error = _answer(_exchange(path, data, end=False))      # kept open, the rest never sent
    assert (status, error) == (408, "request body not received within 0.5 s")     # was 500 and a traceback
    assert service.calls == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("request_bytes,says", ids=["stop", "policy", "pin", "unpin", "query", "twice", "params",
                                                    "not-utf8"],
                         argvalues=[
    (_post("/stop", b'{"nme": 1}'), "unknown key 'nme' in the body of POST /stop (known: none)"),   # stopped it
    (_post("/policy", b'{"name": "ucb", "param": {"c": 2}}'),       # was: ucb with its defaults, the typo unnoticed
     "unknown key 'param' in the body of POST /policy (known: name, params)"),
    (_post("/threshold/pin", b'{"threshold": 5, "Threshold": 6}'),
     "unknown key 'Threshold' in the body of POST /threshold/pin (known: threshold)"),
    (_post("/threshold/unpin", b'{"threshold": 5}'), "unknown key 'threshold' in the body of POST /threshold/unpin"),
    (b"GET /history?limt=5 HTTP/1.1\r\n\r\n", "unknown key 'limt' in the query of GET /history (known: limit)"),
    (b"GET /history?limit=5&limit=6 HTTP/1.1\r\n\r\n", "'limit' given twice in the query"),
    (b"GET /status;x HTTP/1.1\r\n\r\n", "no such endpoint: GET /status;x"),
    (b"GET /history?%ff=1 HTTP/1.1\r\n\r\n",      # (was "unknown key '\\ufffd'": a key never sent)
     "the query of GET /history is not UTF-8 once percent-decoded"),
])
def test_unknown_keys_are_refused_and_nothing_is_done(api, request_bytes, says):
    path, service = api
    status, _, error = _answer(_exchange(path, request_bytes))
    assert status in (400, 404) and error.startswith(says), error
    assert service.calls == []


@pytest.mark.parametrize("params", [[], "", 0, False, None, "x", [{"c": 1}]])
def test_params_that_are_not_an_object_are_refused(api, params):
    path, service = api
    body = json.dumps({"name": "ucb", "params": params}).encode()
    status, _, error = _answer(_exchange(path, _post("/policy", body)))
    assert status == 400 and error.startswith("params must be an object, got ")     # [], "", 0, false, null: taken
    assert service.calls == []


def test_params_left_out_are_none():
    service = _Service()
    make_routes(service)[("POST", "/policy")].handler({}, {"name": "ucb"})
    assert service.calls == [("policy", "ucb", {})]


@pytest.mark.parametrize("threshold", ["5", "1_0", "\u0663", " 7", 5.0, True, None, [5]])
def test_a_threshold_must_be_a_json_integer(api, threshold):
    path, service = api
    status, _, error = _answer(_exchange(path, _post("/threshold/pin", json.dumps({"threshold": threshold}).encode())))
    assert status == 400 and error.startswith("threshold must be an integer, got "), error
    assert service.calls == []                              # "1_0" pinned 10, "\u0663" pinned 3


@pytest.mark.parametrize("limit", ["+5", "%205", "1_0", "", "%D9%A3", "5.0", "05", "5%20", "-05"])
def test_a_query_limit_must_be_ascii_digits(api, limit):
    path, _ = api
    status, _, error = _answer(_exchange(path, f"GET /history?limit={limit} HTTP/1.1\r\n\r\n".encode()))
    assert status == 400 and error.startswith("limit must be an integer, got "), error


@pytest.mark.parametrize("limit", ["0", "10001"])
def test_a_query_limit_out_of_range_says_what_is_allowed(api, limit):
    """As every other refusal of a bound says it: 'out of range (allowed LO .. HI)'."""
    path, _ = api
    status, _, error = _answer(_exchange(path, f"GET /history?limit={limit} HTTP/1.1\r\n\r\n".encode()))
    assert status == 400 and error == f"limit {limit} out of range (allowed 1 .. 10000)", error


@pytest.mark.parametrize("length", ["+16", "1_6", "0x10", "16, 16"])
def test_content_length_must_be_digits(api, length):
    path, service = api
    data = f"POST /threshold/pin HTTP/1.1\r\nContent-Length: {length}\r\n\r\n".encode() + b'{"threshold": 5}'
    status, _, error = _answer(_exchange(path, data))
    assert (status, error) == (400, f"bad Content-Length {length!r}")
    assert service.calls == []                              # "+16" and "1_6" were read as 16


def test_two_content_lengths_that_differ_are_refused_not_one_of_them_taken(api):
    """Which one frames the body is ambiguous (RFC 9112 6.3: unrecoverable): the first was taken and the pin applied,
    and with the other one's bytes still to come they would be read as the next request."""
    path, service = api
    data = b'POST /threshold/pin HTTP/1.1\r\nContent-Length: 16\r\nContent-Length: 40\r\n\r\n{"threshold": 5}'
    status, headers, error = _answer(_exchange(path, data))
    assert (status, error) == (400, "Content-Length given twice, 16 and 40")
    assert service.calls == [] and headers.get("connection") == "close"
    same = b'POST /threshold/pin HTTP/1.1\r\nContent-Length: 16\r\nContent-Length: 16\r\n\r\n{"threshold": 5}'
    assert _exchange(path, same).startswith(b"HTTP/1.1 200 ") and service.calls == [("pin", 5)]   # (the same twice)


def test_a_chunked_body_is_refused_not_left_to_be_read_as_a_request(api):
    path, service = api
    data = b"POST /threshold/unpin HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n"
    status, _, error = _answer(_exchange(path, data))
    assert status == 411 and "Content-Length" in error
    assert service.calls == []                              # was: unpinned, then the chunks answered as requests


class _Gone(io.RawIOBase):
    """A connection whose client has hung up."""

    def writable(self):
        return True

    def write(self, data):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_client_gone_before_its_answer_is_no_error_and_no_traceback(caplog):
    handler = object.__new__(type("H", (_Handler,), {"routes": make_routes(_Service())}))
    handler.wfile, handler.rfile, handler.headers = _Gone(), io.BytesIO(), http.client.HTTPMessage()
    handler.path, handler.command, handler.requestline = "/health", "GET", "GET /health HTTP/1.1"
    handler.request_version, handler.close_connection = "HTTP/1.1", False
    handler._handle("GET")              # was: the write's BrokenPipeError logged as a failure, then raised again
    assert handler.close_connection
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_connection_reset_mid_request_is_no_traceback(short_tmp, capsys, caplog):
    server = ControlServer(short_tmp / "c.sock", _Service())
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:
        server.server.handle_error(None, "")          # where socketserver printed its traceback on stderr
    server.stop()
    assert "Traceback" not in capsys.readouterr().err
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_valid_requests_still_work(api):
    path, service = api
    assert _exchange(path, _post("/threshold/pin", b'{"threshold": 5}')).startswith(b"HTTP/1.1 200 ")
    assert _exchange(path, _post("/policy", b'{"name": "ucb", "params": {"c": "2"}}')).startswith(b"HTTP/1.1 200 ")
    assert _exchange(path, _post("/threshold/unpin", b"")).startswith(b"HTTP/1.1 200 ")
    assert _exchange(path, b"GET /history?limit=abc HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert _exchange(path, _post("/stop", b"{}")).startswith(b"HTTP/1.1 200 ")
    assert service.calls == [("pin", 5), ("policy", "ucb", {"c": "2"}), ("pin", None), ("stop",)]


@pytest.mark.parametrize("body,says", ids=["pin", "params", "name"], argvalues=[
    (b'{"threshold": 5, "threshold": 6}', "'threshold' given twice in the body"),     # was: pinned 6, last one won
    (b'{"name": "ucb", "params": {"c": 1, "c": 2}}', "'c' given twice in the body"),  # was: ucb with c=2
    (b'{"name": "ucb", "name": "never"}', "'name' given twice in the body"),
])
def test_a_key_given_twice_in_the_body_is_refused_as_in_the_query(api, body, says):
    path, service = api
    route = "/threshold/pin" if b"threshold" in body else "/policy"
    status, headers, error = _answer(_exchange(path, _post(route, body)))
    assert (status, error) == (400, says)
    assert service.calls == []
