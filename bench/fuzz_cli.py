"""Boundary 4 of bench/fuzz.py: specctl's command line, in process (click's CliRunner), no daemon running.

Seeded argument lists: every command and group, misspelt ones, options with odd values (empty, negative, nan, inf,
1e999, 1_0, Arabic-Indic digits, 5000 characters, paths that are directories, devices, missing), options given twice
or without their value, stray `--`. Invariants: no exception but SystemExit, no traceback, an exit code specctl
documents (0 .. 5, controller/cli/options.py); a usage error (2) is one line `specctl: ...`, or a group's help where it
was given no command. NUL bytes are left out: no shell can pass one in an argument."""
from __future__ import annotations

import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from click.testing import CliRunner  # noqa: E402

from controller.cli.main import cli  # noqa: E402

COMMANDS = [["status"], ["stop"], ["plot"], ["plot", "out.png"], ["policy"], ["policy", "list"], ["policy", "show"],
            ["policy", "set"], ["policy", "set", "fixed"], ["policy", "set", "bandit"], ["threshold"],
            ["threshold", "pin"], ["threshold", "unpin"], ["history"], ["bogus"], ["polcy"], ["pin"], [""],
            ["policy", "sett"], ["threshold", "pin", "5"]]
ODD = ["", "-", "--", "-1", "0", "1e999", "nan", "inf", "-inf", "1_0", "\u0663", "0x10", "99999999999999999999",
       "a" * 5000, "\u202e\u00e9", " 5", "5 ", "1.5", "65537", "true", "--json", "--help", "=", "k=v", "threshold=5",
       "=5", "threshold=", "threshold=nan", "threshold=1e999", "bogus=1", "c=-1"]
VALUED = ["--limit", "--timeout", "--last", "--bin", "--param", "--socket", "--db", "--seconds", "--seed", "--tick",
          "--repeats", "--concurrency", "--arrival-rate", "--profile", "--trace", "--policy"]
FLAGS = ["--json", "--no-wait", "--finite", "--version"]
# simulate runs a simulation when its arguments are valid: each of its cases ends on one of these, so it refuses
SIM_BAD = [["--seconds", "0"], ["--seconds", "nan"], ["--seed", "-1"], ["--tick", "inf"], ["--concurrency", ",,"],
           ["--repeats", "0"], ["--arrival-rate", "-1"], ["--profile", "/nonexistent/p.toml"], ["--policy", "nope"],
           ["--param", "bogus"], ["--trace", "/dev/null"], ["--concurrency", "1e999"]]


def paths(tmp: Path) -> list[str]:
    return ["/", "/dev/null", "/nonexistent/x", str(tmp), str(tmp / "missing.db"), str(tmp / "file.txt"),
            "relative/x", "a" * 300, "/proc/self/x"]


def args(rng: random.Random, tmp: Path) -> list[str]:
    pool = paths(tmp)
    out: list[str] = []
    for _ in range(rng.choice([0, 0, 1, 2])):
        out += [rng.choice(["--socket", "--db"]), rng.choice(pool + ODD)]
    simulate = rng.random() < 0.1
    out += ["simulate"] if simulate else rng.choice(COMMANDS)
    for _ in range(rng.randint(0, 4)):
        roll = rng.random()
        if roll < 0.5:
            name = rng.choice(VALUED)
            out += [name, rng.choice(pool if name in ("--socket", "--db") else ODD)]
        elif roll < 0.7:
            out.append(rng.choice(FLAGS))
        elif roll < 0.8 and len(out) > 1:
            out.pop(rng.randrange(len(out)))              # an option without its value, a group without its command
        else:
            out.append(rng.choice(ODD))
    if simulate:
        out = [a for a in out if a not in ("--help", "--version")] + rng.choice(SIM_BAD)
    return out


def problem(result) -> str | None:
    text = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return f"{type(result.exception).__name__}: {result.exception}"
    if "Traceback" in text:
        return "traceback in the output"
    if result.exit_code not in (0, 1, 2, 3, 4, 5):     # (5: `stop`, the daemon's final writes lost)
        return f"exit {result.exit_code}"
    if result.exit_code == 2 and not text.startswith("Usage:"):
        lines = text.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("specctl: "):
            return f"usage error not one 'specctl: ' line: {text[:300]!r}"
    return None


def run(seed: int, n: int) -> dict:
    rng = random.Random(seed)
    runner = CliRunner()
    violations: list[dict] = []
    codes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="fuzz-cli-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "file.txt").write_text("not a database\n")
        env = {"XDG_STATE_HOME": str(tmp / "state"), "SPECCTL_SOCKET": None, "SPECCTL_DB": None}
        cwd = os.getcwd()
        os.chdir(tmp)                                  # (plot's relative output lands here)
        try:
            for _ in range(n):
                argv = args(rng, tmp)
                result = runner.invoke(cli, argv, env=env)
                codes[str(result.exit_code)] = codes.get(str(result.exit_code), 0) + 1
                if (p := problem(result)) is not None:
                    violations.append({"boundary": "cli", "kind": argv[0] if argv else "", "problem": p[:300],
                                       "input": repr(argv)[:300]})
        finally:
            os.chdir(cwd)
    return {"cases": {"argv": n}, "total": n, "violations": violations, "detail": {"exit codes": codes}}
