"""Fuzz campaign over the daemon's boundaries with hostile or malformed input (not part of the test suite).

    .venv/bin/python bench/fuzz.py --seed 1 --cases 1000

1. api        the control API over the real socket of a real daemon (bench/fuzz_api.py, cases in fuzz_api_cases.py)
2. telemetry  the engine's telemetry messages through decode, the sample gate, ingest and the loop (fuzz_telemetry.py)
3. config     mutated TOML through `spec-controller config check` and `run` (fuzz_config.py)
4. cli        specctl's command line with odd arguments (fuzz_cli.py)

Each boundary runs --cases cases (telemetry: --telemetry-factor times as many messages: they cost microseconds),
drawn from random.Random(seed): the same seed sends the same inputs. Exit 1 on any invariant violation, each printed
once with its input (repeats counted); --json FILE keeps every one. Results: bench/results/fuzz-2026-12-05.md."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BOUNDARIES = ("api", "telemetry", "config", "cli")


def run_boundary(name: str, seed: int, cases: int) -> dict:
    if name == "api":
        import fuzz_api as module
    elif name == "telemetry":
        import fuzz_telemetry as module
    elif name == "config":
        import fuzz_config as module
    else:
        import fuzz_cli as module
    return module.run(seed, cases)


def distinct(violations: list[dict]) -> list[tuple[dict, int]]:
    """One of each (boundary, kind, problem's first words), with how often it came."""
    seen: dict[tuple, list] = {}
    for v in violations:
        key = (v["boundary"], v["kind"], " ".join(v["problem"].split()[:6]))
        seen.setdefault(key, [v, 0])[1] += 1
    return [(v, n) for v, n in seen.values()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=1000, help="cases per boundary")
    parser.add_argument("--telemetry-factor", type=int, default=20, help="telemetry messages per case")
    parser.add_argument("--only", choices=BOUNDARIES, action="append", help="this boundary only (repeatable)")
    parser.add_argument("--json", metavar="FILE", help="write every result and violation there")
    opts = parser.parse_args(argv)
    results, failed = {}, False
    for name in opts.only or BOUNDARIES:
        n = opts.cases * (opts.telemetry_factor if name == "telemetry" else 1)
        start = time.monotonic()
        res = run_boundary(name, opts.seed, n)
        res["seconds"] = round(time.monotonic() - start, 1)
        results[name] = res
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(res["cases"].items()))
        print(f"{name}: {res['total']} cases in {res['seconds']} s ({kinds}); {len(res['violations'])} violations"
              + (f"; {json.dumps(res['detail'])}" if res.get("detail") else ""), flush=True)
        for v, count in distinct(res["violations"]):
            failed = True
            print(f"  VIOLATION [{v['kind']}] x{count}: {v['problem'][:300]}\n      input: {v['input'][:200]}",
                  flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"seed": opts.seed, "cases": opts.cases, "results": results}, indent=1))
    print("FAILED: invariant violations above" if failed else "ok: no invariant violated")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
