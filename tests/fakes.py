"""An engine whose clock, answers and stalls the test controls, and a Service built around it on a
real SQLite store: faults injected at the engine's side of the daemon."""
from __future__ import annotations

import threading
from pathlib import Path

from controller.contract import Sample
from controller.daemon.config import load_config
from controller.daemon.engines.base import Engine, EngineError
from controller.daemon.service import Service
from state import queries
from state.db import open_store
from state.room import Room
from state.writer import Writer


class FakeEngine(Engine):
    name = "fake"
    max_batch_size = 64
    spec_steps = 3

    def __init__(self):
        self.t = 100.0
        self.applied: list[int] = []
        self.fail_next = 0                     # set_threshold raises EngineError this many times
        self.hold = threading.Event()          # set_threshold waits for it while `stall` is on
        self.hold.set()
        self.entered = threading.Event()       # set when set_threshold is called
        self.ok = True

    def start(self, on_sample) -> None:
        pass

    def wait_ready(self, timeout, cancel=None) -> bool:
        return True

    def stall(self) -> None:
        self.hold.clear()

    def set_threshold(self, threshold: int) -> None:
        self.entered.set()
        self.hold.wait(60)
        if self.fail_next:
            self.fail_next -= 1
            raise EngineError("SGLang did not answer")
        self.applied.append(threshold)

    def now(self) -> float:
        return self.t

    def health(self) -> dict:
        return {"ok": self.ok, "engine": "fake", "detail": "running" if self.ok else "gone"}

    def stop(self, timeout: float = 30.0) -> None:
        pass


def make_service(tmp: Path, policy: str = "thompson", engine: Engine | None = None, **storage):
    cfg = load_config(None, {"storage": {"db": str(tmp / "s.db"), **storage}, "policy": {"name": policy}})
    st = cfg["storage"]
    db = open_store(st["db"])
    newest_t = queries.last_engine_time(db)
    writer = Writer(db, room=Room(st["db"], st["min_free_mb"])).start()      # (as the daemon's)
    return Service(cfg, engine or FakeEngine(), writer, newest_t), writer


def good(t: float, bs: int = 4, spec: bool = True) -> Sample:
    return Sample(t, bs, 3 if spec else 0, bs * 3 if spec else bs, 0.02 if spec else 0.01, True)


def feed(service: Service, samples) -> None:
    """Through the daemon's boundary, then one ingest pass (as its thread does), then to disk."""
    for s in samples:
        service.ingest.on_sample(s)
    service.ingest.step(final=True)
    assert service.writer.flush(10)
