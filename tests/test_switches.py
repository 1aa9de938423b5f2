"""The containment of SGLang's per-switch side effects (controller/switches.py), on CPU."""
import logging
from types import SimpleNamespace

from controller.plugin import switches
from controller.plugin.failures import Failures
from controller.plugin.router import Router
from controller.plugin.switches import ADAPTIVE_SOURCE, SwitchLogTrimmer


def active_router(threshold: int = 8) -> Router:
    r = Router(threshold, Failures())
    r.checked, r.k = True, 3
    return r


class Context:
    """Stands in for SGLang's RuntimeContext: override() appends to _overrides_log, as 0.5.17 does."""
    def __init__(self):
        self._overrides_log = []

    def override(self, source, **fields):
        self._overrides_log.append((source, dict(fields)))

    def resolved(self):
        out = {}
        for _, fields in self._overrides_log:
            out.update(fields)
        return out


def test_only_the_newest_switch_entry_is_kept_and_the_resolution_is_unchanged():
    ctx, untrimmed = Context(), Context()
    trim = SwitchLogTrimmer(ctx)
    for i in range(1000):
        steps = 3 if i % 2 else 0
        for c in (ctx, untrimmed):
            if i in (10, 500):
                c.override("hicache", hicache_ratio=2.0 + i)         # other overrides stay
            c.override(ADAPTIVE_SOURCE, speculative_num_steps=steps, speculative_num_draft_tokens=steps + 1)
        trim.after_switch()                                          # right after the switch, as the plugin does
    assert len(untrimmed._overrides_log) == 1002
    assert len(ctx._overrides_log) == 3 and trim.removed == 999
    assert ctx.resolved() == untrimmed.resolved()
    assert [s for s, _ in ctx._overrides_log] == ["hicache", "hicache", ADAPTIVE_SOURCE]


def test_a_newer_override_of_other_fields_is_never_dropped():
    ctx = Context()
    trim = SwitchLogTrimmer(ctx)
    ctx.override(ADAPTIVE_SOURCE, speculative_num_steps=3, speculative_num_draft_tokens=4)
    trim.after_switch()
    ctx.override(ADAPTIVE_SOURCE, speculative_num_steps=0)          # fewer fields: the old one still counts
    trim.after_switch()
    assert len(ctx._overrides_log) == 2 and trim.removed == 0
    ctx._overrides_log = []                                         # a republish replaces the list
    trim.after_switch()
    assert ctx._overrides_log == []


def test_plugin_trims_on_every_switch():
    st = active_router()
    ctx = Context()
    st.switch_log = SwitchLogTrimmer(ctx)
    worker = SimpleNamespace(speculative_num_steps=3)

    def activate(steps):                                           # what apply_runtime_state records
        worker.speculative_num_steps = steps
        ctx.override(ADAPTIVE_SOURCE, speculative_num_steps=steps, speculative_num_draft_tokens=steps + 1)
    worker.adaptive_controller = SimpleNamespace(_activate=activate)
    for i in range(400):
        st.activate_step_by_batch(lambda *a: None, worker, 7 if i % 2 else 9)   # crosses 8 every batch
    assert st.switches == 400 and len(ctx._overrides_log) == 1
    assert ctx._overrides_log[0][1]["speculative_num_steps"] == 3


def test_a_failing_trim_is_reported_once_and_switched_off():
    st = active_router()
    st.switch_log = SwitchLogTrimmer(object())                     # no _overrides_log: raises
    worker = SimpleNamespace(speculative_num_steps=3)
    worker.adaptive_controller = SimpleNamespace(_activate=lambda s: setattr(worker, "speculative_num_steps", s))
    st.activate_step_by_batch(lambda *a: None, worker, 9)
    assert st.switch_log is None and "switch log trim" in st.failures.places and worker.speculative_num_steps == 0


def test_switch_lines_are_dropped_other_lines_kept(caplog):
    logger = logging.getLogger(switches.WORKER_LOGGER)
    switches.quiet_switch_lines()
    switches.quiet_switch_lines()
    assert logger.filters.count(switches._FILTER) == 1
    with caplog.at_level(logging.INFO, logger=switches.WORKER_LOGGER):
        logger.info("Switch adaptive runtime state: steps 3 -> 0, draft_tokens 4 -> 1")
        logger.info("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]
    logger.removeFilter(switches._FILTER)
