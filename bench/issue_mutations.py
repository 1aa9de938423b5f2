"""The nine mutations of issue 15, each applied to a scratch copy of the working tree and followed by
the whole CPU suite; prints which tests fail (every mutation must turn the suite red).

    python bench/issue_mutations.py [--only N,N] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import scratch_copy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# (what, file, original text, mutated text)
MUTATIONS = [
    ("Thompson picks the worse arm (> -> < in choose_arm)", "policies/thompson.py",
     "return SPEC if draws[SPEC] > draws[OFF] else OFF", "return SPEC if draws[SPEC] < draws[OFF] else OFF"),
    ("the plugin routes bs < threshold (a batch at the threshold goes off)", "controller/plugin/router.py",
     "return speculates(batch_size, self.threshold)", "return batch_size < self.threshold"),
    ("the guard's stabilisation window takes max instead of min", "controller/control/guard.py",
     "            return min(values)", "            return max(values)"),
    ("the exploration budget compares with <= instead of <", "controller/control/guard.py",
     "self.explore_used < self.cfg.explore_share", "self.explore_used <= self.cfg.explore_share"),
    ("the monotone summary drops its keep-the-current-threshold rule", "policies/summary.py",
     "    if k == cur_k:\n        return current\n", ""),
    ("the oracle ignores the live accept length", "controller/sim/evaluate.py",
     "return self.profile.better_mode(batch_size, self.core.accept_length)",
     "return self.profile.better_mode(batch_size)"),
    ("a profile's better mode requires a 5 % margin", "controller/sim/profile.py",
     "return self.tok_per_s(batch_size, True, accept_length) > self.tok_per_s(batch_size, False, accept_length)",
     "return self.tok_per_s(batch_size, True, accept_length) > 1.05 * self.tok_per_s(batch_size, False, accept_length)"),
    ("set_threshold ignores SGLang's updated: false", "controller/daemon/engines/sglang.py",
     "        if not updated or not all(updated):\n            raise", "        if False:\n            raise"),
    # The writer's queue is unbounded since issue 16 (essential writes never wait), so put_nowait would be
    # equivalent there: the mutation that may drop them now is the samples' cap applied to them as well.
    ("the writer's essential writes are dropped like samples at a full queue", "state/writer.py",
     "    def _put(self, item: tuple) -> bool:\n        self.q.put(item)",
     "    def _put(self, item: tuple) -> bool:\n        if self.q.qsize() >= self.maxsize:\n            return False\n"
     "        self.q.put(item)"),
]


def run(index: int, workdir: Path) -> tuple[int, list[str]]:
    what, path, old, new = MUTATIONS[index]
    dest = workdir / f"m{index + 1}"
    scratch_copy(dest)
    text = (dest / path).read_text()
    assert text.count(old) == 1, f"mutation {index + 1}: {old!r} not found exactly once in {path}"
    (dest / path).write_text(text.replace(old, new))
    env = dict(os.environ, SGLANG_WHEEL_CACHE=os.environ.get("SGLANG_WHEEL_CACHE", ""))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not gpu", "-p", "no:cacheprovider",
                          "--tb=no", "-rf", "tests/"], cwd=dest, env=env, capture_output=True, text=True)
    failed = re.findall(r"^FAILED (\S+)", res.stdout, re.M)
    return res.returncode, failed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--workdir", default="/tmp/spec-controller-issue-mutations")
    args = ap.parse_args()
    picks = [int(x) - 1 for x in args.only.split(",") if x] or range(len(MUTATIONS))
    print("| # | mutation | suite | failing tests |\n|---|---|---|---|")
    for i in picks:
        code, failed = run(i, Path(args.workdir))
        verdict = "red" if code != 0 and failed else f"GREEN (exit {code})"
        names = ", ".join(f.split("::", 1)[1] if "::" in f else f for f in failed)
        print(f"| {i + 1} | {MUTATIONS[i][0]} | {verdict} ({len(failed)} failed) | {names} |", flush=True)


if __name__ == "__main__":
    main()
