"""The experimental start-up warm-up (controller/plugin/warmsizes.py): the SGLang names it calls and the source facts
it rests on, in every wheel that has the kernel; which ranges it launches; and that a failure leaves the engine
serving (logged once). Its effect is a GPU measurement (bench/gpu/README next steps)."""
from types import SimpleNamespace

import pytest

from controller.contract import parse_version
from controller.plugin import warmsizes
from controller.plugin.instance import Plugin
from tests.sglang_wheels import VERSIONS, name_problems, source

WITH_KERNEL = [v for v in VERSIONS if parse_version(v) >= (0, 5, 16)]   # 0.5.14-0.5.15 have no such function


@pytest.mark.parametrize("version", WITH_KERNEL)
def test_the_warm_ups_sglang_names_hold(version):
    assert name_problems(source(version), warmsizes.CALLABLES, {}, facts=warmsizes.FACTS) == [], version


def test_the_check_can_fail():
    found = name_problems(source(WITH_KERNEL[0]), {f"{warmsizes.ALLOCATION}.assign_req_to_token_pool_func":
                                                   ("req_pool_indices", "batch_size", "req_to_token")}, {},
                          facts=((f"{warmsizes.ALLOCATION}.assign_req_to_token_pool", "no such line", "x"),))
    assert len(found) == 2


@pytest.mark.parametrize("max_bs, want", [(1, [1]), (2, [1, 2]), (100, [1, 2, 4, 8, 16, 32, 64, 128]),
                                          (128, [1, 2, 4, 8, 16, 32, 64, 128])])
def test_one_batch_size_per_power_of_two_range_up_to_the_largest(max_bs, want):
    assert warmsizes.ranges(max_bs) == want


@pytest.mark.parametrize("env, runs", [({}, False), ({warmsizes.ENV: "1"}, True), ({warmsizes.ENV: "0"}, False)])
def test_only_asked_for_and_a_failure_is_logged_not_raised(monkeypatch, env, runs):
    from controller.plugin import fastoff
    monkeypatch.setattr(fastoff, "build", lambda *a, **k: None)
    got = []
    def failing(worker, max_bs):
        got.append(max_bs)
        raise RuntimeError("no GPU here")
    monkeypatch.setattr(warmsizes, "warm", failing)
    plug = Plugin(env)
    w = SimpleNamespace(server_args=SimpleNamespace(max_running_requests=48))
    plug.after_init_cuda_graphs(None, w)          # must not raise: the engine serves without the warm-up
    assert got == ([48] if runs else [])
    assert plug.failures.places == ({"warm sizes"} if runs else set())
