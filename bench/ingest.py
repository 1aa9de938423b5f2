"""Ingest benchmarks (not tests).

    python bench/ingest.py writer [--samples 500000] [--batch 256]   # the SQLite writer's throughput
    python bench/ingest.py live [--rate 500] [--seconds 30]          # the controller's own CPU per thread

`live` brings the daemon up as `spec-controller run` does (ingest, writer, control socket, jobs, the
serving loop) around an engine that hands it one sample at a time at --rate decode batches per
second, as SGLang's telemetry receiver does, and reads each thread's CPU clock. The feeding thread
stands for the engine and is reported apart.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller.contract import Sample, speculates  # noqa: E402
from controller.daemon.engines.base import Engine  # noqa: E402
from state.db import open_store  # noqa: E402
from state.writer import Writer  # noqa: E402


def writer_throughput(samples: int, batch: int) -> None:
    rows = [(i * 0.001, 1 + i % 64, 3 if i % 2 else 0, 2 * (1 + i % 64), 0.01, 1) for i in range(samples)]
    with tempfile.TemporaryDirectory() as d:
        db = open_store(Path(d) / "bench.db")
        w = Writer(db).start()
        t0 = time.perf_counter()
        for i in range(0, len(rows), batch):
            while not w.samples(rows[i:i + batch]):
                w.dropped -= len(rows[i:i + batch])   # the benchmark measures the writer: it waits, not drops
                time.sleep(0.001)
        w.flush(600)
        elapsed = time.perf_counter() - t0
        n = db.execute("SELECT count(*) FROM samples").fetchone()[0]
        w.stop()
    print(f"command: python bench/ingest.py writer --samples {samples} --batch {batch}")
    print(f"| samples | batch | seconds | samples/s |\n|---|---|---|---|\n| {n} | {batch} | {elapsed:.2f} | "
          f"{n / elapsed:,.0f} |")


class FeedEngine(Engine):
    """Decode batches at a fixed rate, handed over one by one (batch sizes 1..64, K = 3)."""

    name = "feed"
    spec_steps = 3

    def __init__(self, rate: float):
        self.rate = rate
        self.threshold = 0
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self.thread: threading.Thread | None = None
        self.on_sample_cpu = 0.0

    def start(self, on_sample) -> None:
        self.thread = threading.Thread(target=self._run, args=(on_sample,), name="engine-feed", daemon=True)
        self.thread.start()

    def _run(self, on_sample) -> None:
        period, i = 1.0 / self.rate, 0
        while not self._stop.is_set():
            i += 1
            lag = self._t0 + i * period - time.monotonic()
            if lag > 0 and self._stop.wait(lag):
                return
            bs = 1 + i % 64
            spec = speculates(bs, self.threshold)
            sample = Sample(self.now(), bs, 3 if spec else 0, bs * (3 if spec else 1), period, i % 10 != 0)
            t0 = time.thread_time()
            on_sample(sample)                  # the daemon's code that runs on the engine's thread
            self.on_sample_cpu += time.thread_time() - t0

    def wait_ready(self, timeout, cancel=None) -> bool:
        return True

    def set_threshold(self, threshold: int) -> None:
        self.threshold = threshold

    def now(self) -> float:
        return time.monotonic() - self._t0 + 1.0

    def health(self) -> dict:
        return {"ok": True, "engine": "feed", "detail": "running"}

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()


def _cpu(thread: threading.Thread) -> float:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, TypeError):
        return 0.0


def live_cpu(rate: float, seconds: float) -> None:
    from controller.daemon.config import load_config
    from controller.daemon.lifecycle import Daemon
    from controller.daemon.service import Service

    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        cfg = load_config(None, {"storage": {"db": f"{d}/s.db"}, "control": {"socket": f"{d}/c.sock"}})
        engine = FeedEngine(rate)
        writer = Writer(open_store(cfg["storage"]["db"])).start()
        service = Service(cfg, engine, writer)
        daemon = Daemon(cfg)
        engine.start(service.ingest.on_sample)
        server, sched, ingest = daemon._bring_up(engine, service)
        time.sleep(2.0)                                   # warm: every job has run once
        start = {t: _cpu(t) for t in threading.enumerate()}
        main0, wall0, total0 = time.thread_time(), time.monotonic(), service.stats.total
        hand0 = engine.on_sample_cpu
        threading.Timer(seconds, daemon.stop_flag.set).start()
        daemon._serve(engine, service, writer)
        wall, main_cpu, batches = time.monotonic() - wall0, time.thread_time() - main0, service.stats.total - total0
        rows = [(t.name, _cpu(t) - start.get(t, 0.0)) for t in threading.enumerate() if t.is_alive()]
        hand = engine.on_sample_cpu - hand0
        rows.append(("on_sample, on the engine's thread (check + hand-over)", hand))
        sched.shutdown(wait=True)
        engine.stop()
        service.ingest.stop()
        ingest.join(10)
        writer.stop()
        server.stop()
    rows.append(("main (serving loop)", main_cpu))
    feed = [r for r in rows if r[0] == "engine-feed"]
    own = sorted((r for r in rows if r[0] not in ("engine-feed", "MainThread") and r[1] > 0), key=lambda r: -r[1])
    print(f"command: python bench/ingest.py live --rate {rate:g} --seconds {seconds:g}")
    print(f"{batches} decode batches in {wall:.1f} s ({batches / wall:.0f}/s), handed over one at a time\n")
    print("| thread | CPU s | % of one core |\n|---|---|---|")
    for name, cpu in own:
        print(f"| {name} | {cpu:.3f} | {100 * cpu / wall:.2f} |")
    total = sum(c for _, c in own)
    print(f"| **controller, all threads** | {total:.3f} | **{100 * total / wall:.2f}** |")
    for name, cpu in feed:
        print(f"| ({name}: the stand-in engine, less on_sample) | {cpu - hand:.3f} | {100 * (cpu - hand) / wall:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("writer")
    w.add_argument("--samples", type=int, default=500_000)
    w.add_argument("--batch", type=int, default=256)
    lv = sub.add_parser("live")
    lv.add_argument("--rate", type=float, default=500.0)
    lv.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    if args.mode == "writer":
        writer_throughput(args.samples, args.batch)
    else:
        live_cpu(args.rate, args.seconds)


if __name__ == "__main__":
    main()
