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


@pytest.fixture
def sglang_eagle_utils(monkeypatch):
    """SGLang's _eagle_prefill_tail_tokens (the plugin's prompt writes import it): the request's first output token
    (no chunked request in the tests that use it)."""
    from types import ModuleType
    mod = ModuleType("sglang.srt.speculative.eagle_utils")
    mod._eagle_prefill_tail_tokens = lambda batch, next_ids: next_ids
    for name in ("sglang", "sglang.srt", "sglang.srt.speculative"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
