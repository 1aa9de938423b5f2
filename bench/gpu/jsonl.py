"""One result line, printed with its tag (for the run's log) and appended to a JSON-lines file; and the rows read back."""
from __future__ import annotations

import json


def emit(tag: str, row: dict, path: str | None) -> None:
    print(f"{tag} " + json.dumps(row), flush=True)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def rows(path: str) -> list[dict]:
    """The rows of a results file (lines other than JSON objects skipped: a log's)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]
