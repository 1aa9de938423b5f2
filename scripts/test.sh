#!/usr/bin/env bash
# The README's test command: a fresh virtualenv, the package with its test extras, the whole suite.
# GPU tests are marked `gpu` and skipped here; "no tests collected" counts as a failure. Two pytest-xdist
# workers (CI's two cores; PYTEST_WORKERS=0 runs in one process, e.g. to read a failure's output in order).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
set +e
.venv/bin/python -m pytest -m "not gpu" -n "${PYTEST_WORKERS:-2}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "no tests were collected: failing" >&2
  exit 1
fi
exit "$rc"
