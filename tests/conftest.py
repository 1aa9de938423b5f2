import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def short_tmp():
    """A short directory (unix socket paths are limited to ~107 bytes)."""
    d = tempfile.mkdtemp(prefix="sc-", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    # Never touch the real user's or the service's state from a test.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    for var in ("SPECCTL_SOCKET", "SPECCTL_DB", "STATE_DIRECTORY", "RUNTIME_DIRECTORY", "NOTIFY_SOCKET"):
        monkeypatch.delenv(var, raising=False)
