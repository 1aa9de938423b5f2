"""What the control API accepts: one check of every request (api.py reads it off the socket, this judges it), so
that a refused request reaches nothing. Each route declares the query and body keys it reads; integers are JSON
integers in a body, ASCII digits in a query or a Content-Length; a body is one JSON object. bench/fuzz.py found what
this refuses (bench/results/fuzz-2026-12-05.md)."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Callable, Mapping
from urllib.parse import parse_qsl, urlsplit

from policies.params import shown       # (a value in an error line, cut short: the policies' refusals' rule)

from ..numtext import WRITTEN, Unheld, held_float, int_text

MAX_BODY = 64 * 1024          # a command is a few hundred bytes
MAX_DEPTH = 64                # no body nests deeper than 2; refused before parsing, on every Python alike (3.13's
                              # parser took 5,000 levels that 3.11's refused with a RecursionError)
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Route:
    """An endpoint and the keys it reads: any other key, in the query or the body, is refused (ignored, a misspelt
    "param" switched the policy with its defaults, and any JSON object at all stopped the daemon at POST /stop)."""
    handler: Callable[[dict[str, str], dict], dict | list]
    query: frozenset[str] = frozenset()
    body: frozenset[str] = frozenset()


def json_int(value: Any, name: str) -> int:
    """A body's integer: a JSON integer, not a bool, a float or a string (int() read "1_0" as 10, and other
    scripts' digits)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be an integer, got {shown(value)}")
    return value


def query_int(text: str, name: str) -> int:
    """A query's integer, by numtext's rule (int() also took "+5", " 5", "1_0", other scripts' digits)."""
    if len(text.lstrip("-")) > 18 or (value := int_text(text)) is None:     # (18 digits: no bignum to compare)
        raise ApiError(400, f"{name} must be an integer, got {shown(text)} ({WRITTEN})")
    return value


def body_length(headers: Mapping[str, str]) -> int:
    if headers.get("Transfer-Encoding") is not None:     # (its chunks were left unread, then read as a request)
        raise ApiError(411, "Transfer-Encoding is not supported: send the body with a Content-Length")
    given = list(dict.fromkeys(v.strip() for v in getattr(headers, "get_all", lambda _: None)("Content-Length") or ()))
    if len(given) > 1:             # (the first was taken: the other's framing left bytes to be read as a request)
        raise ApiError(400, f"Content-Length given twice, {given[0][:20]} and {given[1][:20]}")
    raw = headers.get("Content-Length") or "0"
    if not re.fullmatch(r"[0-9]{1,18}", raw.strip()):    # digits only (int() took "+5", "1_0", " ")
        raise ApiError(400, f"bad Content-Length {shown(raw)}")
    length = int(raw)
    if length > MAX_BODY:
        raise ApiError(413, f"request body of {length} bytes is over the limit of {MAX_BODY}")
    return length


def _known(given, known: frozenset[str], where: str) -> None:
    unknown = sorted(set(given) - known)
    if unknown:
        known_ones = ", ".join(sorted(known)) or "none"
        raise ApiError(400, f"unknown key {shown(unknown[0])} in {where} (known: {known_ones})")


def _unique(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object whose keys are each given once (json.loads kept the last: {"threshold": 5, "threshold": 6} pinned
    6, where the query and specctl's --param refuse a key given twice)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ApiError(400, f"{shown(key)} given twice in the body")
        out[key] = value
    return out


def check(method: str, target: str, data: bytes, routes: Mapping[tuple[str, str], Route]
          ) -> tuple[Route, dict[str, str], dict]:
    """(the route, its query, its body) for a request whose body (data) was read whole; ApiError for anything else."""
    url = urlsplit(target)
    route = routes.get((method, url.path))
    if route is None:
        raise ApiError(404, f"no such endpoint: {method} {url.path[:200]}{'...' if len(url.path) > 200 else ''}")
    query: dict[str, str] = {}
    try:            # (strict: %ff was read as the key '\ufffd', which a refusal then named)
        pairs = parse_qsl(url.query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, f"the query of {method} {url.path} is not UTF-8 once percent-decoded") from None
    for key, value in pairs:
        if key in query:
            raise ApiError(400, f"{shown(key)} given twice in the query")
        query[key] = value
    _known(query, route.query, f"the query of {method} {url.path}")
    body = {}
    if data:
        if _too_deep(data):
            raise ApiError(400, "body is nested too deeply")
        try:        # (json.loads took UTF-16 and UTF-32 bytes too: JSON between systems is UTF-8, RFC 8259 8.1;
            text = data.decode("utf-8-sig")       # a UTF-8 byte order mark it may ignore, and json.loads did)
        except UnicodeDecodeError:
            raise ApiError(400, "body is not UTF-8 (a JSON body is UTF-8, RFC 8259)") from None
        try:
            body = json.loads(text, object_pairs_hook=_unique, parse_float=held_float)
        except Unheld as e:             # ({"params": {"c": 1e-400}} ran ucb at c=0)
            raise ApiError(400, f"body: {e}") from None
        except RecursionError:
            raise ApiError(400, "body is nested too deeply") from None
        except ValueError:             # (not JSON, an integer of over 4300 digits)
            raise ApiError(400, "body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "body must be a JSON object")
    _known(body, route.body, f"the body of {method} {url.path}")
    return route, query, body


def _too_deep(data: bytes) -> bool:
    """Whether the brackets outside JSON strings nest deeper than MAX_DEPTH."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKET)
    return max(accumulate(1 if c in b"[{" else -1 for c in brackets), default=0) > MAX_DEPTH
