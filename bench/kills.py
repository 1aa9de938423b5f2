"""The SIGKILL case of the fault campaign (bench/faults.py): a daemon killed at random points, again
and again, on one database; after each kill the database is checked, and at each start the restore."""
from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

from faultkit import db_checks

from controller.cli.client import DaemonError
from tests.daemon_proc import DaemonProc

Row = tuple[str, str, str, bool]


def _command(d: DaemonProc, rng: random.Random) -> tuple[str, object]:
    """One random operator command, acknowledged; (setting, value it must leave in the database)."""
    roll = rng.random()
    if roll < 0.5:
        value = rng.randint(0, 64)
        d.call("POST", "/threshold/pin", {"threshold": value})
        return "pinned", value
    if roll < 0.7:
        d.call("POST", "/threshold/unpin", {})
        return "pinned", None
    name = rng.choice(["ucb", "thompson", "bandit"])
    params = {"c": round(rng.uniform(0.5, 2.0), 3)} if name == "ucb" else {}
    d.call("POST", "/policy", {"name": name, "params": params})
    return "policy", {"name": name, "params": params}


def _restored(st: dict, expect: dict) -> bool:
    pinned, policy = expect.get("pinned"), expect.get("policy")
    ok = st["pinned"] == (pinned is not None) and (pinned is None or st["threshold"] == pinned)
    return ok and (policy is None or (st["policy"]["name"] == policy["name"]
                                      and all(st["policy"]["params"].get(k) == v for k, v in policy["params"].items())))


def _in_flight(d: DaemonProc, rng: random.Random, current) -> dict:
    """A pin sent and the daemon killed while it may be in flight; what the client saw."""
    out: dict = {}
    value = rng.choice([v for v in range(65) if v != current])

    def send() -> None:
        try:
            out["acked"] = d.call("POST", "/threshold/pin", {"threshold": value})
        except DaemonError:
            pass                                   # killed before it answered
    t = threading.Thread(target=send, daemon=True)
    t.start()
    time.sleep(rng.uniform(0, 0.01))
    d.proc.send_signal(signal.SIGKILL)
    t.join(10)
    return {"value": value, "acked": "acked" in out}


def _kill_once(d: DaemonProc, rng: random.Random, expect: dict, counts: dict) -> tuple[dict, dict | None]:
    """Commands, then a SIGKILL at a random point; (the acknowledged settings, the in-flight pin)."""
    acked = dict(_command(d, rng) for _ in range(rng.randint(1, 3)))     # the newest per setting
    counts["acks"] += len(acked)
    mode = rng.choice(["right after an ack", "after a random delay", "during a command"])
    flight = None
    if mode == "after a random delay":
        time.sleep(rng.uniform(0, 1.5))
    if mode == "during a command":
        flight = _in_flight(d, rng, acked.get("pinned", expect.get("pinned")))
    else:
        d.proc.send_signal(signal.SIGKILL)
    d.proc.wait(30)
    return acked, flight


def _check_kill(saved: dict, acked: dict, flight: dict | None, counts: dict) -> None:
    superseded = set()
    if flight is not None and saved.get("pinned") == flight["value"]:
        counts["flight_saved"] += 1
        superseded.add("pinned")                   # committed before the kill: it legitimately replaced the ack
    elif flight is not None:
        counts["flight_not"] += 1
        counts["flight_acked_lost"] += flight["acked"]
    counts["acks"] -= len(superseded & set(acked))
    counts["acks_kept"] += sum(saved.get(k) == v for k, v in acked.items() if k not in superseded)


def case_kills(work: Path, n: int, rng: random.Random) -> list[Row]:
    expect: dict = {}
    counts = dict(integrity=0, restored=0, acks=0, acks_kept=0, flight_saved=0, flight_not=0, flight_acked_lost=0)
    last, monotone = {"samples": 0, "max_decision": 0}, True
    for i in range(n + 1):
        d = DaemonProc(work, "--concurrency", str(rng.choice([1, 4, 16, 64])), speed=40)
        try:
            d.wait_socket(90)
            counts["restored"] += _restored(d.call("GET", "/status"), expect)
            if i == n:                                   # the last start only checks the restore
                assert d.stop() == 0
                break
            acked, flight = _kill_once(d, rng, expect, counts)
        finally:
            if d.proc.poll() is None:
                d.proc.kill()
            d.log.close()
        chk = db_checks(d.db)
        counts["integrity"] += chk["integrity"] == "ok"
        _check_kill(chk["settings"], acked, flight, counts)
        monotone &= chk["samples"] >= last["samples"] and chk["max_decision"] >= last["max_decision"]
        last = chk
        expect = {"pinned": chk["settings"].get("pinned"), "policy": chk["settings"].get("policy")}
    ok = (counts["integrity"] == n and counts["restored"] == n + 1 and counts["flight_acked_lost"] == 0
          and counts["acks_kept"] == counts["acks"] and monotone)
    observed = (f"integrity ok {counts['integrity']}/{n}; acknowledged commands found in the database "
                f"{counts['acks_kept']}/{counts['acks']} (the newest per setting); restored at the next start "
                f"{counts['restored']}/{n + 1}; killed during a pin: {counts['flight_saved']} saved, "
                f"{counts['flight_not']} not saved (of those, acknowledged: {counts['flight_acked_lost']}); "
                f"samples and decisions never went back: {monotone}")
    return [(f"{n} SIGKILLs at random points (after an ack, after 0-1.5 s, during a pin)",
             "integrity ok; every acknowledged pin/policy on disk and restored; nothing acknowledged is lost",
             observed, ok)]
