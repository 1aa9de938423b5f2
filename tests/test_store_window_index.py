"""A windowed read of the samples (status's newest 60 s, a rollup's windows, plot's bins) visits the window's rows, not
the whole table. The type filters of 12-07 (queries.number: t BETWEEN -2**43 AND 2**43) gave SQLite a second range on
the indexed t, and it took that one's constants as the index's bounds: each scan ran from the oldest sample to the
window's end (2 M samples: status's sums 8 -> 136 ms, every 10 s rollup 4 -> 125 ms on the writer thread;
bench/results/store-reads-2026-12-07.md). Counted in SQLite's VM steps (a progress handler), not in time."""
import pytest

from state import queries, timeline
from state.db import open_store
from state.items import INSERTS
from state.retention import Rollups, rollup

N = 60_000          # one sample every 0.1 s: 6,000 s


@pytest.fixture
def store(short_tmp):
    db = open_store(short_tmp / "s.db")
    db.conn.executemany(INSERTS["samples"], [(i * 0.1, 8 + i % 100, i % 3, 30, 0.01, 1) for i in range(N)])
    return db


def _steps(db, fn) -> int:
    """SQLite VM steps (in hundreds) that fn's statements take."""
    count = [0]

    def tick():
        count[0] += 1
        return 0
    db.conn.set_progress_handler(tick, 100)
    try:
        fn()
    finally:
        db.conn.set_progress_handler(None, 0)
    return count[0]


def test_status_sums_of_the_newest_60_s_read_that_window(store):
    whole = _steps(store, lambda: queries.sample_sums(store, -1.0))
    window = _steps(store, lambda: queries.sample_sums(store))       # 600 of 60,000 samples
    assert queries.sample_sums(store)["batches"] == 601
    assert window * 20 < whole, (window, whole)


def test_a_rollup_window_in_the_middle_reads_that_window(store):
    whole = _steps(store, lambda: rollup(store, 0.0, 6000.0, 10.0, (8, 32, 256)))
    store.conn.execute("DELETE FROM aggregates")
    window = _steps(store, lambda: rollup(store, 3000.0, 3010.0, 10.0, (8, 32, 256)))
    assert window * 20 < whole, (window, whole)


def test_the_rollup_job_catching_up_one_window_reads_that_window(store):
    job = Rollups(10.0, (8, 32, 256))
    whole = _steps(store, lambda: job(store))                  # the first pass: every window so far
    store.conn.executemany(INSERTS["samples"], [(N * 0.1 + i * 0.1, 8, 0, 8, 0.01, 1) for i in range(100)])
    window = _steps(store, lambda: job(store))                 # the next: the one window completed since
    assert window * 20 < whole, (window, whole)


def test_plot_bins_of_the_last_100_s_read_those(store):
    whole = _steps(store, lambda: timeline.bins(store, 0.0, 6000.0, 10.0))
    window = _steps(store, lambda: timeline.bins(store, 5900.0, 6000.0, 1.0))
    assert len(timeline.bins(store, 5900.0, 6000.0, 1.0)) == 100
    assert window * 20 < whole, (window, whole)
