"""The fallback's "no samples" is the engine's silence, not the ingest thread's wait between folds (helper-150:
`spec-controller run --speed 1000` said healthy and never changed the threshold: its ingest thread folds samples every
50 ms of real time, 50 engine seconds at that clock, so every retune saw "no samples for 20 s" > fallback_after_s and
held; the C=8 phase, where speculation pays, ran 'never speculate' for good)."""
from __future__ import annotations

from controller.daemon.config import load_config
from controller.daemon.service import Service
from state.db import open_store
from state.writer import Writer
from tests.fakes import FakeEngine, feed, good


def _service(tmp_path) -> tuple[Service, FakeEngine, Writer]:
    cfg = load_config(None, {"storage": {"db": str(tmp_path / "s.db")}, "policy": {"name": "always"},
                             "guard": {"fallback_threshold": 0}})
    engine = FakeEngine()
    writer = Writer(open_store(cfg["storage"]["db"])).start()
    return Service(cfg, engine, writer), engine, writer


def test_samples_received_but_not_yet_folded_in_are_no_silence(tmp_path):
    service, engine, writer = _service(tmp_path)
    try:
        feed(service, [good(100.0)])
        service.retune()
        assert service.loop.threshold == engine.max_batch_size
        for i in range(1, 21):          # they arrive (the engine's thread); the ingest thread has not woken yet
            engine.t = 100.0 + i
            service.ingest.on_sample(good(engine.t))
        engine.t = 120.5
        service.retune()
        assert service.loop.threshold == engine.max_batch_size, "held as if the engine had gone quiet"
        assert engine.applied[-1] == engine.max_batch_size
    finally:
        writer.stop()


def test_an_engine_that_sends_nothing_still_falls_back(tmp_path):
    service, engine, writer = _service(tmp_path)
    try:
        feed(service, [good(100.0)])
        service.retune()
        engine.t = 111.0
        service.retune()
        assert service.loop.threshold == 0 and engine.applied[-1] == 0
    finally:
        writer.stop()
