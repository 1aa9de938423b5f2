"""Review: the router takes an engine only where SGLang's adaptive state has a steps-0 state to switch to."""
from types import SimpleNamespace

import pytest

from controller.plugin.failures import Failures
from controller.plugin.router import Router

GOOD = dict(speculative_algorithm="EAGLE3", speculative_eagle_topk=1, speculative_adaptive=True)


class Controller:
    """SGLang's AdaptiveController: _activate raises for a step count it holds no runtime state for."""

    def __init__(self, worker, steps):
        self.worker, self.candidate_steps = worker, steps

    def _activate(self, steps):
        if steps not in self.candidate_steps:
            raise ValueError(f"Missing adaptive runtime state for steps={steps}")
        self.worker.speculative_num_steps = steps


def worker(steps):
    w = SimpleNamespace(speculative_num_steps=max(steps), server_args=SimpleNamespace(**GOOD))
    w.adaptive_controller = Controller(w, steps)
    return w


def test_an_adaptive_config_without_steps_0_leaves_the_plugin_inert():
    """An engine started with --speculative-adaptive-config whose candidate steps lack 0 (e.g. [1, 3, 7] in every
    slot) has no off state: the router would try (and fail) to switch to 0 on every off batch while SGLang's EMA is
    switched off, so the threshold is silently not enforced and the engine stays at its initial steps."""
    r = Router(threshold=0, failures=Failures(), version=lambda: "0.5.17")
    w = worker([1, 3, 7])
    ema = []
    r.activate_step_by_batch(lambda wk, bs: ema.append(("sglang", bs)), w, 4)
    assert not r.active and "0" in r.inert_reason
    r.on_verify_complete_cpu(lambda wk, *a, **k: ema.append("ema"), w, [1], batch_size=1)
    assert ema == [("sglang", 4), "ema"]        # SGLang's own adaptive keeps running
    assert "activate" not in r.failures.places


def test_an_adaptive_config_with_steps_0_is_taken():
    r = Router(threshold=2, failures=Failures(), version=lambda: "0.5.17")
    w = worker([0, 3])
    r.activate_step_by_batch(lambda *a: pytest.fail("original called"), w, 4)
    assert r.active and r.k == 3 and w.speculative_num_steps == 0


def test_an_engine_started_with_the_fast_off_path_off_is_checked_at_start_too(monkeypatch):
    """off_path = steps0 (SPEC_CONTROLLER_FAST_OFF=0): the router was first checked at the first decode batch, so an
    engine the plugin does not steer (here: adaptive speculation off) answered set_internal_state with updated=True
    and its stats said nothing of it until traffic came."""
    from controller import contract
    from controller.plugin import warmsizes
    from controller.plugin.instance import Plugin
    monkeypatch.setattr(warmsizes, "unsupported_reason", lambda: "no kernel here")
    plug = Plugin({contract.ENV_FAST_OFF: "0"})
    plug.router.version = lambda: "0.5.17"
    w = worker([0, 3])
    w.server_args = SimpleNamespace(**{**GOOD, "speculative_adaptive": False})
    plug.after_init_cuda_graphs(None, w)
    assert plug.router.checked and plug.router.inert_reason.startswith("speculative_adaptive is off")
    assert "inactive" in plug.validate_own_keys({contract.THRESHOLD_KEY: 5})
    assert plug.stats()[1]["off_reason"] == contract.REASON_INACTIVE
