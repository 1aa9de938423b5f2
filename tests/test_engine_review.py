"""Supervision of the SGLang child and the telemetry boundary: faults found in review."""
import pytest

from controller.daemon.engines.base import EngineError
from controller.daemon.engines.sglang import SGLangEngine


@pytest.mark.parametrize("value", [float("inf"), 1e15])
def test_a_probe_interval_the_engine_takes_is_one_the_daemon_can_schedule(value):
    """[sglang] probe_s = inf passed the engine's check ("inf: no limit") and the daemon then failed in _bring_up,
    after SGLang had loaded for minutes: APScheduler's interval is a timedelta (OverflowError), exit 1, restarted, again."""
    from apscheduler.triggers.interval import IntervalTrigger
    try:
        eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "probe_s": value})
    except EngineError as e:                       # refused before anything launches: fine
        assert "probe_s" in str(e)
        return
    if eng.probe_s > 0:                            # what Daemon._bring_up schedules
        IntervalTrigger(seconds=eng.probe_s)

