"""Boundary inputs a review (helper-95) found getting through: each kept here, red before its fix."""
import pytest
from click.testing import CliRunner

from controller.contract import MAX_BATCH
from controller.control.guard_config import GuardConfig, GuardConfigError
from controller.daemon.main import main


def _one_usage_line(result, prog: str = "spec-controller") -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: "), result.output
    return lines[0]


# --- [guard] thresholds: at most MAX_BATCH, as every other boundary --------------------------------------------------
@pytest.mark.parametrize("values,says", [
    ({"min_threshold": 10**20, "max_threshold": 10**20}, f"max_threshold=100000000000000000000 out of range (allowed 0 .. {MAX_BATCH})"),
    ({"max_threshold": MAX_BATCH + 1}, f"max_threshold={MAX_BATCH + 1} out of range (allowed 0 .. {MAX_BATCH})"),
    ({"fallback_threshold": 10**20}, "fallback_threshold=100000000000000000000 out of range"),
])
def test_a_guard_threshold_above_max_batch_is_refused(values, says):
    """min_threshold = max_threshold = 1e20 passed `config check`; the daemon applied threshold 1e20, every history row
    failed to write (Python int too large to convert to SQLite INTEGER) and SGLang's plugin refused every threshold."""
    with pytest.raises(GuardConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        GuardConfig.from_mapping(values)


def test_a_guard_threshold_above_max_batch_is_one_line_from_config_check():
    result = CliRunner().invoke(main, ["config", "check", "--set", "guard.min_threshold=100000000000000000000",
                                       "--set", "guard.max_threshold=100000000000000000000"])
    assert "max_threshold=100000000000000000000 out of range" in _one_usage_line(result)


def test_guard_thresholds_up_to_max_batch_are_taken():
    cfg = GuardConfig.from_mapping({"min_threshold": MAX_BATCH, "max_threshold": MAX_BATCH,
                                    "fallback_threshold": MAX_BATCH})
    assert (cfg.min_threshold, cfg.max_threshold, cfg.fallback_threshold) == (MAX_BATCH,) * 3
