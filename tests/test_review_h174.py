"""helper-174's review of the draft-KV writer (controller/plugin/draftkv_graph.py) on CPU, with the stand-ins of
tests/test_draftkv_graph.py for torch.cuda's streams and events (a log of what each was issued on)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.test_draftkv_graph import coalescing, dedupe_logged, one_row, sided, squeezed, t


def failing(log, cuda):
    """A graph whose launch fails after the dedupe's copy into the static inputs was issued on the side stream."""
    def replay(self):
        log.append(("launch fails on", cuda.current))
        raise RuntimeError("launch failed")
    return type("G", (), {"replay": replay})()


def test_a_side_replay_that_fails_after_the_dedupe_is_covered_by_the_event_the_forward_stream_waits_for():
    """SideStream.replay set `pending` and then issued the dedupe (a copy into `loc`, the static input) and the launch
    on the side stream; a failed launch skipped `done.record`, so wait() made the forward stream wait on an event that
    covered none of it (never recorded: no wait at all on a GPU), and the next write refilled `loc` while the side
    stream's copy into it could still run. `done` is recorded after whatever was issued there, failure or not."""
    w, log, seen = coalescing(batches=2, sizes=(1, 2, 4), side=True)
    w.dedupe = dedupe_logged(w, log)
    w.graphs[2] = failing(log, w.side.cuda)
    w.write(*one_row(1, 20))
    with pytest.raises(RuntimeError):
        w.write(*one_row(2, 21))
    assert w.side.cuda.current == "forward" and w.side.pending
    after = squeezed(log)[squeezed(log).index(("dedupe on", "side")):]
    assert after == [("dedupe on", "side"), "inputs", ("launch fails on", "side"), ("done", "on", "side")]
    log.clear()
    w.write(*one_row(3, 22))           # the next window refills row 0 only after the side stream's work so far
    assert squeezed(log)[:2] == [("forward", "waits", "done"), "inputs"]


def test_a_side_replay_whose_dedupe_fails_still_records_its_event_and_restores_the_forward_stream():
    w, log, seen = coalescing(batches=2, sizes=(1, 2, 4), side=True)
    w.dedupe = lambda loc: 1 / 0
    w.write(*one_row(1, 20))
    with pytest.raises(ZeroDivisionError):
        w.write(*one_row(2, 21))
    assert squeezed(log)[-3:] == [("ready", "on", "forward"), ("side", "waits", "ready"), ("done", "on", "side")]
    assert w.side.cuda.current == "forward"
    log.clear()
    w.wait()
    assert log == [("forward", "waits", "done")] and not w.side.pending
