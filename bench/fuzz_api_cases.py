"""Seeded hostile requests for the control API (bench/fuzz_api.py sends them over the daemon's socket).

Every case says what a correct daemon answers: `ok` (200), `refused` (a 4xx with one line of JSON, nothing
changed), `any` (either: a mutated request may still be a valid one). A connection whose request line is blank may
get no answer at all (fuzz_api.answers_expected). Each generator builds its input from `rng` alone."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass

POLICIES = ("fixed", "bandit", "ucb", "thompson", "always", "never")      # (model: scipy's import, slow)
GET_PATHS = ("/status", "/health", "/policy", "/policies", "/history")
POST_PATHS = ("/policy", "/threshold/pin", "/threshold/unpin", "/stop")
# values no integer field may take; strings included: a JSON body's integers are JSON integers
BAD_INTS = [None, True, False, 1.5, 5.0, -1, -10**30, 10**30, 10**6, 2**63, "5", "", "x", "1_0", "\u0663", " 7",
            "0x10", [], [5], {}, {"threshold": 5}, "\u0000", "\ud800", "a" * 5000, float("nan"), float("inf"),
            float("-inf"), 1e308]
# values no policy parameter may take (numeric strings are valid ones: specctl sends parameters as text)
BAD_PARAMS = [None, True, False, -1, 1.5, 10**30, float("nan"), float("inf"), [], {}, [1], "x", "", "1e999",
              "nan", 65537, "\u0000"]
BAD_OBJECTS = [None, [], 0, "", False, True, "x", [{}], 5, 1.5]      # where an object is wanted
HOSTILE_KEYS = ["nme", "param", "Threshold", "", "\u0000", "\u202e", "threshold ", "x" * 300, "__proto__"]
WRONG_METHOD = sorted(({("GET", p) for p in POST_PATHS} | {("POST", p) for p in GET_PATHS})
                      - {("GET", p) for p in GET_PATHS} - {("POST", p) for p in POST_PATHS})
METHODS = ["PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE", "get", "Post", "G\x00T",
           "X" * 300, "\u00e9"]


@dataclass
class Case:
    kind: str
    data: bytes
    expect: str                  # ok | refused | any
    half_close: bool = True      # shut our side after sending (the daemon then sees the end of the input)


def http(method: str, target: str, body: bytes | None = None, headers: tuple[str, ...] = (),
         length: str | None = None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: localhost", "Connection: close", *headers]
    if body is not None or length is not None:
        lines.append(f"Content-Length: {length if length is not None else len(body or b'')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogatepass") + (body or b"")


def dumps(obj) -> bytes:
    return json.dumps(obj).encode()          # NaN / Infinity literals included, as json.dumps writes them


def nested(depth: int, rng: random.Random) -> str:
    if rng.random() < 0.5:
        return "[" * depth + "]" * depth
    return '{"a": ' * depth + "1" + "}" * depth


def _bad_int(rng: random.Random):
    return rng.choice(BAD_INTS)


def pin(rng: random.Random) -> Case:
    roll = rng.random()
    if roll < 0.25:
        return Case("pin", http("POST", "/threshold/pin", dumps({"threshold": rng.randint(0, 64)})), "ok")
    if roll < 0.7:
        return Case("pin", http("POST", "/threshold/pin", dumps({"threshold": _bad_int(rng)})), "refused")
    if roll < 0.8:
        return Case("pin", http("POST", "/threshold/pin", dumps({})), "refused")
    extra = {"threshold": rng.randint(0, 64), rng.choice(HOSTILE_KEYS): rng.choice(BAD_INTS)}
    return Case("pin", http("POST", "/threshold/pin", dumps(extra)), "refused")      # an unknown key


def policy(rng: random.Random) -> Case:
    roll = rng.random()
    if roll < 0.15:
        body = {"name": "fixed", "params": {"threshold": rng.choice([0, 5, "5", 64])}}
        return Case("policy", http("POST", "/policy", dumps(body)), "ok")
    if roll < 0.25:
        return Case("policy", http("POST", "/policy", dumps({"name": rng.choice(POLICIES)})), "ok")
    if roll < 0.4:
        name = rng.choice([None, 5, True, [], {}, "", "nope", "FIXED", "fixed\u0000", "bandit ", "\ud800", "x" * 3000])
        return Case("policy", http("POST", "/policy", dumps({"name": name})), "refused")
    if roll < 0.6:
        body = {"name": rng.choice(POLICIES), "params": rng.choice(BAD_OBJECTS)}
        return Case("policy", http("POST", "/policy", dumps(body)), "refused")
    if roll < 0.8:
        body = {"name": "fixed", "params": {"threshold": rng.choice(BAD_PARAMS)}}
        return Case("policy", http("POST", "/policy", dumps(body)), "refused")
    if roll < 0.9:
        body = {"name": "ucb", "params": {rng.choice(HOSTILE_KEYS): 1.0}}
        return Case("policy", http("POST", "/policy", dumps(body)), "refused")
    body = {"name": "ucb", "params": {"c": 1.0}, rng.choice(HOSTILE_KEYS): {"c": 2.0}}
    return Case("policy", http("POST", "/policy", dumps(body)), "refused")          # a misspelt key


def unpin_and_stop(rng: random.Random) -> Case:
    roll = rng.random()
    if roll < 0.3:
        return Case("unpin", http("POST", "/threshold/unpin", rng.choice([None, b"{}"])), "ok")
    path = rng.choice(["/threshold/unpin", "/stop"])           # never a valid /stop: it would end the campaign
    body = rng.choice([dumps({rng.choice(HOSTILE_KEYS): 1}), dumps(rng.choice(BAD_OBJECTS)), b"{", b"nul",
                       nested(rng.choice([50, 2000, 20000]), rng).encode()])
    return Case("unpin/stop", http("POST", path, body), "refused")


def get_with_body(rng: random.Random) -> Case:
    path = rng.choice(GET_PATHS)
    if rng.random() < 0.3:
        return Case("get-body", http("GET", path, b"{}"), "ok")
    body = rng.choice([dumps({rng.choice(HOSTILE_KEYS): 1}), b"[1]", b"\xff\xfe", b"{'a': 1}", b"1" * 5000])
    return Case("get-body", http("GET", path, body), "refused")


def history(rng: random.Random) -> Case:
    if rng.random() < 0.25:
        return Case("history", http("GET", f"/history?limit={rng.randint(1, 10000)}"), "ok")
    bad = rng.choice(["0", "-1", "10001", "abc", "", "1.5", "1_0", "%D9%A3", "+5", "%205", "5%00", "9" * 30,
                      "9" * 5000, "1e3", "0x10", "%ff%fe", "5&limit=x"])
    query = rng.choice([f"limit={bad}", f"limit=5&{rng.choice(['x', 'lim', '', '%00'])}=1", "limit", f"{bad}=1"])
    return Case("history", http("GET", f"/history?{query}"), "refused")


def unknown_path(rng: random.Random) -> Case:
    if rng.random() < 0.3:                   # a known path with the other method
        return Case("path", http(*rng.choice(WRONG_METHOD)), "refused")
    target = rng.choice([
        "/" + "".join(rng.choice("abcxyz/%._-") for _ in range(rng.randint(1, 40))), "/status/", "/STATUS",
        "/st%61tus", "/status;x", "/threshold", "/threshold/pin/x", "*", "/\u00e9\u202e",
        "/" + "a" * 60000, "/status?x=1", "/health?" + "a=1&" * 200, "/policy#frag"])
    if target in ("/policy#frag",):         # (the fragment is not the path: GET /policy)
        return Case("path", http("GET", target), "ok")
    return Case("path", http(rng.choice(["GET", "POST"]), target), "refused")


def bad_method(rng: random.Random) -> Case:
    return Case("method", http(rng.choice(METHODS), rng.choice(GET_PATHS + POST_PATHS)), "refused")


def bad_line(rng: random.Random) -> Case:
    line = rng.choice([b"GARBAGE", b"GET", b"GET /status", b"GET /status HTTP/1.1 extra", b"GET /status HTTP/9.9",
                       b"GET /status HTTP/2.0", b"GET /status HTTP/1.1x", b"GET /status FOO/1.1", b"GET  /status",
                       b"GET /status HTTP/1", b"GET /status HTTP/0.9", b"\x00\x01\x02", b"GET /st\x00tus HTTP/1.1",
                       b"GET /status HTTP/1.1000000000000000000000", b"\xff" * 40])
    return Case("line", line + b"\r\nHost: x\r\n\r\n", "refused")


def bad_headers(rng: random.Random) -> Case:
    headers = rng.choice([("NoColonHere",), tuple(f"X-{i}: y" for i in range(150)), ("X: " + "a" * 70000,),
                          ("Transfer-Encoding: chunked",), ("X-\u00e9: \u00ff",), (" folded: line",),
                          ("Expect: 100-continue",), ("Content-Type: text/plain",), ("Connection: keep-alive",)])
    body = dumps({"threshold": "x"})          # refused whatever the headers do to it
    return Case("headers", http("POST", "/threshold/pin", body, headers=headers), "refused")


def length_lie(rng: random.Random) -> Case:
    body = dumps({"threshold": rng.randint(0, 64)})
    roll = rng.random()
    if roll < 0.4:       # says more than it sends, then ends: a truncated body, whatever its prefix parses as
        return Case("length", http("POST", "/threshold/pin", body, length=str(len(body) + rng.randint(1, 500))),
                    "refused")
    if roll < 0.6:       # says less: the prefix is not the object, the rest is no request
        return Case("length", http("POST", "/threshold/pin", body, length=str(rng.randint(1, len(body) - 1))),
                    "refused")
    length = rng.choice(["abc", "-5", "+5", "1_0", " ", "0x10", "1e3", "9" * 30, f"{len(body)}, {len(body)}",
                         "\u0663", str(70000)])
    return Case("length", http("POST", "/threshold/pin", body, length=length), "refused")


def bad_json(rng: random.Random) -> Case:
    path = rng.choice(["/threshold/pin", "/policy"])
    body = rng.choice([
        b"{", b"}", b"", b"{\"threshold\": }", b"{\"threshold\": NaN}", b"{\"threshold\": Infinity}",
        b"{\"threshold\": -Infinity}", b"{\"threshold\": 1e999}", b"{\"threshold\": 0.0000}", b"\xef\xbb\xbf{}",
        b"{\"threshold\": 1" + b"0" * 5000 + b"}", nested(rng.choice([100, 990, 1500, 30000]), rng).encode(),
        b'{"threshold": ' + nested(rng.choice([10, 3000]), rng).encode() + b"}",
        b'{"name": "fixed", "params": {"threshold": ' + nested(rng.choice([10, 3000]), rng).encode() + b"}}",
        b"\xff\xfe\x00\x00", bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))), b"[]", b"null",
        b'"' + b"a" * 63000 + b'"', b"{\"name\": \"" + b"\\u0000" * 2000 + b"\"}", b" " * 66000])
    return Case("json", http("POST", path, body), "refused")      # (b"": no body, so no threshold, no name)


def random_bytes(rng: random.Random) -> Case:
    data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    if rng.random() < 0.5:
        data = rng.choice([b"GET ", b"POST /policy ", b"POST /threshold/pin HTTP/1.1\r\n"]) + data
    return Case("random", data, "any")


MUTATION_TOKENS = [b"\r\n", b"\x00", b'"', b"{", b"}", b"[", b"9" * 20, b"-", b"NaN", b"\xff", b" ", b":", b"\r\n\r\n"]


def mutate(rng: random.Random) -> Case:
    valid = rng.choice([http("POST", "/threshold/pin", dumps({"threshold": rng.randint(0, 64)})),
                        http("POST", "/policy", dumps({"name": "fixed", "params": {"threshold": 7}})),
                        http("POST", "/threshold/unpin", b"{}"), http("GET", "/history?limit=3"),
                        http("GET", "/status")])
    data = bytearray(valid)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data))
        op = rng.randrange(4)
        if op == 0:
            data[at] = rng.randrange(256)
        elif op == 1:
            data[at:at] = rng.choice(MUTATION_TOKENS)
        elif op == 2:
            del data[at:at + rng.randint(1, 8)]
        else:
            data[at:at] = data[at:at + rng.randint(1, 16)]
    return Case("mutate", bytes(data), "any")


GENERATORS = [pin, pin, policy, policy, unpin_and_stop, get_with_body, history, unknown_path, bad_method, bad_line,
              bad_headers, length_lie, length_lie, bad_json, bad_json, random_bytes, mutate, mutate, mutate]


def case(rng: random.Random) -> Case:
    return rng.choice(GENERATORS)(rng)
