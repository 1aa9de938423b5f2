"""One result line, printed with its tag (for the run's log) and appended to a JSON-lines file."""
from __future__ import annotations

import json


def emit(tag: str, row: dict, path: str | None) -> None:
    print(f"{tag} " + json.dumps(row), flush=True)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
