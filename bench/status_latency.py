"""`specctl status` wall time against a live daemon (a benchmark, not a test).

    python bench/status_latency.py [--runs 30] [--specctl PATH]

Starts the daemon on the simulator twice, idle (--speed 1, 4 clients) and busy (--speed 50, the
default trace: thousands of samples a second through ingest), runs `specctl status` as a new
process each time, as an operator does, and prints the wall time of each run and of the
daemon's answer alone (a request from this process), then one status table.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.cli.client import DaemonError, DaemonUnreachable, request  # noqa: E402

SCENARIOS = {"idle": ["--speed", "1", "--concurrency", "4"], "busy": ["--speed", "50"]}


def start(workdir: Path, extra: list[str]) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("spec-controller")
    proc = subprocess.Popen([str(exe), "run", "--config", "/dev/null", "--db", str(workdir / "s.db"),
                             "--socket", str(workdir / "c.sock"), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            request(workdir / "c.sock", "GET", "/health")
            time.sleep(3)            # let samples flow before measuring
            return proc
        except (DaemonUnreachable, DaemonError):
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("daemon did not come up")


def measure(specctl: str, sock: Path, runs: int) -> tuple[list[float], list[float], str]:
    walls, answers, out = [], [], ""
    for _ in range(runs):
        t0 = time.perf_counter()
        res = subprocess.run([specctl, "--socket", str(sock), "status"], capture_output=True, text=True)
        walls.append((time.perf_counter() - t0) * 1e3)
        out = res.stdout
        t0 = time.perf_counter()
        request(sock, "GET", "/status")
        answers.append((time.perf_counter() - t0) * 1e3)
    return walls, answers, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--specctl", default=str(Path(sys.executable).with_name("specctl")))
    args = ap.parse_args()
    print(f"command: python bench/status_latency.py --runs {args.runs} --specctl {args.specctl}")
    print(f"{'daemon':<6} {'runs':>4} {'median ms':>10} {'p90 ms':>7} {'max ms':>7} {'daemon answer ms':>17}")
    table = ""
    for name, extra in SCENARIOS.items():
        with tempfile.TemporaryDirectory(prefix="sc-bench-", dir="/tmp") as d:
            proc = start(Path(d), extra)
            try:
                walls, answers, table = measure(args.specctl, Path(d) / "c.sock", args.runs)
            finally:
                request(Path(d) / "c.sock", "POST", "/stop")
                proc.wait(60)
        p90 = statistics.quantiles(walls, n=10)[-1]
        print(f"{name:<6} {len(walls):>4} {statistics.median(walls):>10.1f} {p90:>7.1f} {max(walls):>7.1f} "
              f"{statistics.median(answers):>17.2f}")
    print("\nthe last status printed:\n" + table)


if __name__ == "__main__":
    main()
