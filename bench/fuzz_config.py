"""Boundary 3 of bench/fuzz.py: the daemon's TOML config, mutated.

A valid config (a random subset of every section's keys, the guard's and a policy's parameters) is mutated: a key set
to a hostile value (wrong type, inf/nan, extremes, NUL, datetimes, arrays, tables), an unknown key or section, a
misspelt key, corrupted text, non-UTF-8 bytes. Each goes through `spec-controller config check --config F` in
process (click's CliRunner): exit 0 with one line, or exit 2 with one line `spec-controller: ...`, never another
exit code or an exception. A sample of the refused ones also goes through `spec-controller run --config F` as a
subprocess, which must refuse it the same way (exit 2, one line, no traceback; exit 1 with check's own line where its
start refuses a database's or socket's folder or file at its opening) before it starts anything."""
from __future__ import annotations

import datetime
import json
import os
import random
import subprocess
import sys
import tempfile
from dataclasses import fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from click.testing import CliRunner  # noqa: E402

from controller.control.guard_config import GuardConfig  # noqa: E402
from controller.daemon.config import DEFAULTS  # noqa: E402
from controller.daemon.main import main  # noqa: E402
from policies import POLICIES  # noqa: E402

HOSTILE = [float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 2**63 - 1, -2**63, -1, 0, 1.5, 0.0001, True, False,
           "", "x", "5", "\u0000", "a" * 5000, "\u202e\u00e9", [], [1, 2], {}, {"a": 1},
           datetime.datetime(1979, 5, 27, 7, 32, tzinfo=datetime.timezone.utc), datetime.date(2026, 12, 5),
           datetime.time(7, 32)]
BAD_PATHS = ["/nonexistent/dir/x.db", "/dev/null", "/", "relative/x", "a" * 5000, "/proc/1/x", "\u00e9/\u202e",
             "/tmp/" + "d" * 200 + "/x.sock"]
NAMES = ["sim", "sglang", "bandit", "fixed", "nope", "mixed-shift", "crossover-b", "../../etc/passwd", "/dev/null",
         "/nonexistent/p.toml", "x.json", "", "a" * 300, "/tmp",
         str(Path(sys.executable).resolve())]          # (a binary file)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else "inf" if v == float("inf") else "-inf" if v == float("-inf") else repr(v)
    if isinstance(v, (int, datetime.date, datetime.time)):
        return v.isoformat() if not isinstance(v, int) else str(v)
    if isinstance(v, str):
        return json.dumps(v)              # a TOML basic string for these (JSON's escapes are TOML's)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_text(cfg: dict) -> str:
    out = []
    for section, values in cfg.items():
        if not isinstance(values, dict):
            out.insert(0, f"{json.dumps(section)} = {toml_value(values)}")
            continue
        out.append(f"[{json.dumps(section)}]")
        out += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in values.items()]
    return "\n".join(out) + "\n"


def base(rng: random.Random) -> dict:
    cfg: dict = {}
    for section, values in DEFAULTS.items():
        keep = {k: v for k, v in values.items() if not isinstance(v, dict) and rng.random() < 0.5}
        if keep and section != "sglang":
            cfg[section] = keep
    cfg.setdefault("sim", {}).pop("trace", None)            # a trace beside a load is refused on purpose: no noise
    if rng.random() < 0.5:
        cfg["guard"] = {f.name: f.default for f in fields(GuardConfig) if rng.random() < 0.3}
    return cfg


def mutated(rng: random.Random) -> tuple[str, dict | bytes]:
    cfg = base(rng)
    roll = rng.random()
    if roll < 0.3:
        section = rng.choice([s for s in DEFAULTS if s not in ("sglang", "guard")])
        key = rng.choice([k for k, v in DEFAULTS[section].items() if not isinstance(v, dict)])
        names = BAD_PATHS if key in ("db", "socket") else NAMES if isinstance(DEFAULTS[section][key], str) else []
        value = rng.choice(names) if names and rng.random() < 0.5 else rng.choice(HOSTILE)
        cfg.setdefault(section, {})[key] = value
        return "value", cfg
    if roll < 0.5:
        cfg["guard"] = {rng.choice([f.name for f in fields(GuardConfig)]): rng.choice(HOSTILE)}
        return "guard", cfg
    if roll < 0.62:
        name = rng.choice(sorted(POLICIES))
        specs = POLICIES[name].PARAMS
        key = rng.choice([p.name for p in specs] + ["bogus"]) if specs else "bogus"
        cfg["policy"] = {"name": name, "params": {key: rng.choice(HOSTILE)}}
        return "params", cfg
    if roll < 0.72:
        section = rng.choice(list(DEFAULTS) + ["bogus", "Sim", ""])
        target = cfg.setdefault(section, {}) if rng.random() < 0.8 else cfg
        target[rng.choice(["bogus", "sped", "", "\u0000", "speed ", "x" * 300])] = rng.choice(HOSTILE[:8])
        return "unknown key", cfg
    if roll < 0.8:
        cfg[rng.choice(list(DEFAULTS))] = rng.choice(HOSTILE[:20])       # a section that is not a table
        return "section type", cfg
    if roll < 0.95:
        data = bytearray(toml_text(cfg).encode() or b"[sim]\n")
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            data[at:at + rng.randint(0, 3)] = rng.choice([b"=", b"[", b"]", b'"', b"\n", b"\x00", b"#", b"'''",
                                                           bytes([rng.randrange(256)]), b"= 1", b"\\u"])
        return "text", bytes(data)
    return "bytes", bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))


def lines_ok(text: str, code: int) -> str | None:
    lines = [line for line in text.splitlines() if not line.startswith("spec-controller: note: ")]
    if "Traceback" in text:
        return "traceback"
    if code == 2 and (len(lines) != 1 or not lines[0].startswith("spec-controller: ")):
        return f"not one 'spec-controller: ' line: {text[:300]!r}"
    if code == 0 and len(lines) != 1:
        return f"ok, but not one line: {text[:300]!r}"
    return None


def same_at_opening(res: subprocess.CompletedProcess, check_text: str) -> bool:
    """run's exit 1 with check's line: what check refuses of the database's and socket's folders and files, run's start
    refused at their opening, exit 1 (since 648bef0); since helper-172 run exits 2 on what no restart changes, so this
    is left for a check that refuses what run retries (preflight.store_refusal)."""
    said = [line for line in (res.stdout + res.stderr).splitlines() if not line.startswith("spec-controller: note: ")]
    checked = [line for line in check_text.splitlines() if not line.startswith("spec-controller: note: ")]
    return res.returncode == 1 and len(said) == 1 and said == checked


def run(seed: int, n: int, subprocess_share: float = 0.08) -> dict:
    rng = random.Random(seed)
    runner = CliRunner()
    violations: list[dict] = []
    kinds: dict[str, int] = {}
    outcomes = {"accepted": 0, "refused": 0, "run_subprocess": 0}
    with tempfile.TemporaryDirectory(prefix="fuzz-cfg-") as tmp:
        env = dict(os.environ, XDG_STATE_HOME=tmp)
        path = Path(tmp) / "c.toml"
        for _ in range(n):
            kind, cfg = mutated(rng)
            also_run = rng.random() < subprocess_share        # (drawn for every case: the inputs never hang on results)
            kinds[kind] = kinds.get(kind, 0) + 1
            data = cfg if isinstance(cfg, bytes) else toml_text(cfg).encode("utf-8", "surrogatepass")
            path.write_bytes(data)
            result = runner.invoke(main, ["config", "check", "--config", str(path)], env=env)
            text = result.output                      # (click 8.2+: stdout and stderr as the terminal shows them)
            bad = None
            if result.exception is not None and not isinstance(result.exception, SystemExit):
                bad = f"{type(result.exception).__name__}: {result.exception}"
            elif result.exit_code not in (0, 2):
                bad = f"exit {result.exit_code}: {text[:300]!r}"
            else:
                bad = lines_ok(text, result.exit_code)
            outcomes["accepted" if result.exit_code == 0 else "refused"] += 1
            if bad:
                violations.append({"boundary": "config", "kind": kind, "input": repr(data[:200]), "problem": bad[:300]})
                continue
            if result.exit_code == 2 and also_run:
                outcomes["run_subprocess"] += 1
                res = subprocess.run([sys.executable, "-m", "controller.daemon", "run", "--config", str(path)],
                                     cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
                same = res.returncode == 2 or same_at_opening(res, text)
                problem = (None if same else f"run exit {res.returncode}") or lines_ok(res.stdout + res.stderr, 2)
                if problem:
                    violations.append({"boundary": "config", "kind": f"run: {kind}", "input": repr(data[:200]),
                                       "problem": f"{problem}: {(res.stdout + res.stderr)[-300:]!r}"})
    return {"cases": kinds, "total": sum(kinds.values()), "violations": violations, "detail": outcomes}
