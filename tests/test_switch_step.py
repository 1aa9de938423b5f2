"""The first speculative step after an off one (the switch step) drafts from SGLang's zeroed stub: the off path keeps
the draft's KV, not its next proposal, so that step accepts ~1 token a request whatever the traffic (H100
bench/results/h100-2026-12-06g: 125 switch steps at 1.00, every later step of a run 2.00). The simulator models it
(`[acceptance] first_step_stub`) so that policies can be tried against it on CPU. A learner rule that kept those
steps out of the shared accept length was tried on the GPU and not kept (the same README, section 3)."""
import pytest

from controller.sim.core import SimCore
from controller.sim.profile import ProfileError, load_profile, parse_profile


def stub_profile(stub: bool):
    data = {"name": "stub", "spec_steps": 3, "noise": 0.0, "max_batch_size": 32,
            "step_time": {"batch_size": [1, 32], "off": [0.005, 0.006], "spec": [0.008, 0.012]},
            "acceptance": {"mean_accept_length": 4.0, "spread": 0.0, "first_step_stub": stub}}
    return parse_profile(data, "test profile")


@pytest.mark.parametrize("stub", [True, False])
def test_the_simulator_models_the_switch_step(stub):
    """first_step_stub: a speculative step right after an off one delivers one token a request; the steps after it,
    and every step of a profile without it, the profile's acceptance (4.0 here: every draft right)."""
    core = SimCore(stub_profile(stub), seed=0)
    core.set_load(4)
    core._pending_prefill = 0
    core.step(False)
    assert [core.step(True).tokens for _ in range(3)] == ([4, 16, 16] if stub else [16, 16, 16])
    core.step(False)
    assert core.step(True).tokens == (4 if stub else 16)


def test_first_step_stub_is_checked_and_off_by_default():
    assert load_profile("h200-2b6").first_step_stub is False
    data = {"name": "x", "spec_steps": 3, "step_time": {"batch_size": [1], "off": [0.005], "spec": [0.008]},
            "acceptance": {"mean_accept_length": 2.0, "first_step_stub": "yes"}}
    with pytest.raises(ProfileError, match="first_step_stub='yes' must be true or false"):
        parse_profile(data, "test profile")
