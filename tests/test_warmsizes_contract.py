"""The start-up warm-up (controller/plugin/warmsizes.py, on by default): the SGLang names it calls and the source facts
it rests on, in every wheel that has the kernel; which ranges it launches; and that a failure leaves the engine
serving (logged once). Its effect is a GPU measurement (bench/results/h200-2026-12-03d call 2)."""
import sys
import types
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


@pytest.mark.parametrize("env, runs", [({}, True), ({warmsizes.ENV: "1"}, True), ({warmsizes.ENV: "0"}, False)])
def test_on_unless_turned_off_and_a_failure_is_logged_not_raised(monkeypatch, env, runs):
    from controller.plugin import fastoff
    monkeypatch.setattr(fastoff, "build", lambda *a, **k: None)
    monkeypatch.setattr(warmsizes, "unsupported_reason", lambda: None)
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


def test_an_error_in_the_support_check_is_a_failure_not_a_stopped_engine(monkeypatch):
    from controller.plugin import fastoff
    monkeypatch.setattr(fastoff, "build", lambda *a, **k: None)
    def broken():
        raise RuntimeError("CUDA error during import")
    monkeypatch.setattr(warmsizes, "unsupported_reason", broken)
    plug = Plugin({})
    plug.after_init_cuda_graphs(None, SimpleNamespace(server_args=SimpleNamespace(max_running_requests=48)))
    assert plug.failures.places == {"warm sizes"}


@pytest.mark.parametrize("configured, pool, want", [(48, 300, 48), (None, 300, 300), (None, None, 256), (0, 64, 64)])
def test_the_largest_batch_is_the_servers_else_the_request_pools(configured, pool, want):
    runner = SimpleNamespace(req_to_token_pool=SimpleNamespace(size=pool))
    w = SimpleNamespace(server_args=SimpleNamespace(max_running_requests=configured),
                        target_worker=SimpleNamespace(model_runner=runner))
    assert warmsizes.max_batch_size(w) == want


def test_an_sglang_with_the_kernel_is_supported(monkeypatch):
    stub_torch(monkeypatch, [])                      # an allocation module that has assign_req_to_token_pool_func
    assert warmsizes.unsupported_reason() is None


def test_an_sglang_without_the_kernel_is_skipped_not_a_failure(monkeypatch):
    from controller.plugin import fastoff
    monkeypatch.setattr(fastoff, "build", lambda *a, **k: None)
    monkeypatch.setitem(sys.modules, warmsizes.ALLOCATION, types.ModuleType(warmsizes.ALLOCATION))   # 0.5.15's shape
    assert "assign_req_to_token_pool_func" in warmsizes.unsupported_reason()
    monkeypatch.setattr(warmsizes, "warm", lambda *a: pytest.fail("warmed an SGLang without the kernel"))
    plug = Plugin({})
    plug.after_init_cuda_graphs(None, SimpleNamespace(server_args=SimpleNamespace(max_running_requests=48)))
    assert plug.failures.places == set()


class FakeTensor:
    """What warm() hands the kernel: dtype, length, element offset into its storage (8-byte elements: offset 1 is
    8 bytes off), contents (all the same value here), and which storage it is."""

    def __init__(self, n, dtype, value=0, offset=0, storage=None):
        self.n, self.dtype, self.value, self.offset = n, dtype, value, offset
        self.storage = storage if storage is not None else object()

    def __getitem__(self, s):
        return FakeTensor(self.n - s.start, self.dtype, self.value, self.offset + s.start, self.storage)

    def clone(self):
        return FakeTensor(self.n, self.dtype, self.value)


def stub_torch(monkeypatch, calls):
    torch = types.ModuleType("torch")
    torch.int64, torch.int32 = "int64", "int32"
    torch.zeros = lambda n, dtype, device: FakeTensor(n, dtype)
    devices = []

    class Device:
        def __init__(self, d):
            devices.append(d)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False
    torch.cuda = types.SimpleNamespace(device=Device, synchronize=lambda d: calls.append(("sync", d)))
    alloc = types.ModuleType(warmsizes.ALLOCATION)
    alloc.assign_req_to_token_pool_func = lambda *a: calls.append(a)
    monkeypatch.setitem(sys.modules, "torch", torch)
    for name in ("sglang", "sglang.srt", "sglang.srt.mem_cache"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, warmsizes.ALLOCATION, alloc)
    return devices


def test_the_warm_up_launches_each_range_at_both_alignments_with_nothing_to_write(monkeypatch):
    calls = []
    devices = stub_torch(monkeypatch, calls)
    req_to_token = FakeTensor(8, "int32")
    req_to_token.device = "cuda:3"
    w = SimpleNamespace(target_worker=SimpleNamespace(model_runner=SimpleNamespace(
        req_to_token_pool=SimpleNamespace(req_to_token=req_to_token))))
    assert warmsizes.warm(w, 48) == 14                                      # 7 ranges (64 covers 48), 2 each
    launches, sync = calls[:-1], calls[-1]
    assert sync == ("sync", "cuda:3") and devices == ["cuda:3"]
    assert [c[5] for c in launches] == [bs for bs in (1, 2, 4, 8, 16, 32, 64) for _ in range(2)]
    for rows, table, start, end, loc, bs in launches:
        assert table is req_to_token and rows.n == start.n == end.n == bs
        assert (rows.dtype, start.dtype, end.dtype, loc.dtype) == ("int64", "int32", "int32", "int64")
        assert start is not end and start.value == end.value == 0          # start == end: the kernel writes nothing
    assert [c[4].offset for c in launches[:2]] == [0, 1]                   # aligned, then 8 bytes off
    assert launches[0][4].storage is launches[1][4].storage                # one scratch buffer, two views
