"""SGLang 0.5.19's decode allocation loop carried to 0.5.16-0.5.18 (controller/plugin/allocloop.py): which wheels have
the audited text, and that the real 0.5.17 function under the hook leaves exactly the state it leaves alone (its
source from the wheel, in a module of its own with recording stand-ins for the kernels it calls)."""
import importlib.util
import logging
from types import SimpleNamespace

import numpy as np
import pytest

from controller.contract import parse_version
from controller.plugin import allocloop
from controller.plugin.instance import Plugin
from tests.sglang_wheels import VERSIONS, source

SLOW_LOOP = "int(nxt_kv_lens_cpu[i])"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_audited_text_is_exactly_the_releases_with_the_slow_loop(version):
    src = source(version)
    try:
        text = src.text(allocloop.TARGET)
    except AssertionError:                 # 0.5.14-0.5.15: no such function, never registered there
        assert not allocloop.wanted({}, parse_version(version))
        return
    audited = allocloop.text_digest(text) in allocloop.AUDITED
    assert audited == (SLOW_LOOP in text) == allocloop.wanted({}, parse_version(version)), version


def real_function(tmp_path, calls: list):
    """0.5.17's alloc_for_spec_decode, from the wheel, in a module whose kernels record what they get."""
    stubs = ("from __future__ import annotations\n"
             "calls = []\n"
             "def alloc_token_slots(tree_cache, n):\n    calls.append(('alloc', n)); return 'slots'\n"
             "def assign_req_to_token_pool_func(*args):\n    calls.append(('assign', args[-1]))\n")
    path = tmp_path / "alloc517.py"
    path.write_text(stubs + source("0.5.17").text(allocloop.TARGET) + "\n")
    spec = importlib.util.spec_from_file_location("alloc517", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.calls = calls
    return module.alloc_for_spec_decode


def allocate(fn, reqs, nxt, needed=4):
    tree = SimpleNamespace(token_to_kv_pool_allocator=SimpleNamespace(page_size=1))
    return fn(tree, SimpleNamespace(req_to_token="rt"), reqs=reqs, req_pool_indices="idx", cur_kv_lens="cur",
              cur_kv_lens_cpu=None, nxt_kv_lens="nxt", nxt_kv_lens_cpu=np.asarray(nxt, dtype=np.int32),
              num_needed_tokens=needed, batch=None)


def requests(lens):
    return [SimpleNamespace(kv=SimpleNamespace(kv_allocated_len=n)) for n in lens]


@pytest.mark.parametrize("needed", [4, 0])
def test_the_hooked_real_function_leaves_the_state_sglangs_leaves(tmp_path, needed, caplog):
    plain_calls, hooked_calls = [], []
    plain_fn = real_function(tmp_path, plain_calls)
    (tmp_path / "b").mkdir()
    hooked_fn = real_function(tmp_path / "b", hooked_calls)
    plain, hooked = requests([5, 9, 3]), requests([5, 9, 3])
    allocate(plain_fn, plain, [7, 8, 6], needed)
    loop = allocloop.AllocLoop()
    with caplog.at_level(logging.INFO, logger="spec_controller.plugin"):
        allocate(lambda *a, **k: loop.around(hooked_fn, *a, **k), hooked, [7, 8, 6], needed)
    assert loop.applies and loop.batches == 1              # the audited text, read from the live function
    assert [r.kv.kv_allocated_len for r in hooked] == [r.kv.kv_allocated_len for r in plain] == [7, 9, 6]
    assert hooked_calls == plain_calls == ([("alloc", 4), ("assign", 3)] if needed else [])   # batch size 3 kept
    assert any("0.5.19's fix" in r.getMessage() for r in caplog.records)


def test_another_text_is_left_as_sglangs(tmp_path):
    calls = []
    fn = real_function(tmp_path, calls)
    changed = lambda *a, **k: fn(*a, **k)        # a wrapper: its source is not the audited text
    loop = allocloop.AllocLoop()
    reqs = requests([5])
    allocate(lambda *a, **k: loop.around(changed, *a, **k), reqs, [8])
    assert loop.applies is False and loop.batches == 0 and reqs[0].kv.kv_allocated_len == 8


@pytest.mark.parametrize("env, version, registered", [
    ({}, "0.5.17", True), ({}, "0.5.18", True), ({}, "0.5.19", False), ({}, "0.5.15", False),
    ({allocloop.ENV: "0"}, "0.5.17", False)])
def test_registered_for_the_releases_with_the_loop_unless_turned_off(monkeypatch, env, version, registered):
    from controller.plugin import instance
    monkeypatch.setattr(instance, "sglang_version", lambda: version)
    assert (allocloop.TARGET in Plugin(env).hooks()) is registered


def test_the_run_time_switch_and_its_refusal(tmp_path):
    from controller.contract import ALLOC_LOOP_KEY
    plug = Plugin({allocloop.ENV: "0"})                     # not registered, whatever SGLang is installed
    plug.apply_own_keys({ALLOC_LOOP_KEY: 0})
    calls = []
    fn = real_function(tmp_path, calls)
    reqs = requests([5, 9])
    allocate(lambda *a, **k: plug.alloc_loop.around(fn, *a, **k), reqs, [7, 8])
    assert plug.alloc_loop.batches == 0 and [r.kv.kv_allocated_len for r in reqs] == [7, 9]   # SGLang's own loop
    plug.apply_own_keys({ALLOC_LOOP_KEY: 1})
    allocate(lambda *a, **k: plug.alloc_loop.around(fn, *a, **k), reqs, [8, 10])
    assert plug.alloc_loop.batches == 1 and [r.kv.kv_allocated_len for r in reqs] == [8, 10]
    assert "not in this engine" in plug.validate_own_keys({ALLOC_LOOP_KEY: True})   # never registered here
    plug.alloc_loop.registered = True
    assert plug.validate_own_keys({ALLOC_LOOP_KEY: True}) is None
    plug.alloc_loop.applies = False                         # another text: cannot be switched on
    assert "not in this engine" in plug.validate_own_keys({ALLOC_LOOP_KEY: True})
    assert plug.stats()[0]["alloc_loop_batches"] == 1       # counted for status


class Counted(np.ndarray):
    """nxt_kv_lens_cpu whose element reads are counted (SGLang's slow loop reads one per request)."""
    reads = 0

    def __getitem__(self, i):
        Counted.reads += 1
        return super().__getitem__(i)


@pytest.mark.parametrize("hooked, reads", [(False, 3), (True, 0)])
def test_under_the_hook_sglangs_per_request_loop_reads_nothing(tmp_path, hooked, reads):
    fn, loop = real_function(tmp_path, []), allocloop.AllocLoop()
    call = (lambda *a, **k: loop.around(fn, *a, **k)) if hooked else fn
    tree = SimpleNamespace(token_to_kv_pool_allocator=SimpleNamespace(page_size=1))
    nxt = np.asarray([7, 8, 6], dtype=np.int32).view(Counted)
    Counted.reads = 0
    reqs = requests([5, 9, 3])
    call(tree, SimpleNamespace(req_to_token="rt"), reqs=reqs, req_pool_indices="idx", cur_kv_lens="cur",
         cur_kv_lens_cpu=None, nxt_kv_lens="nxt", nxt_kv_lens_cpu=nxt, num_needed_tokens=4, batch=None)
    assert Counted.reads == reads and [r.kv.kv_allocated_len for r in reqs] == [7, 9, 6]


def test_a_wrapped_function_or_one_without_source_is_left_as_it_is(tmp_path):
    import functools
    fn = real_function(tmp_path, [])
    seen = []

    @functools.wraps(fn)
    def other_plugin(*a, **k):                   # another hook in front: it would see no requests
        seen.append(len(list(k["reqs"])))
        return fn(*a, **k)
    loop = allocloop.AllocLoop()
    allocate(lambda *a, **k: loop.around(other_plugin, *a, **k), requests([5, 9]), [7, 8])
    assert loop.applies is False and seen == [2]
    namespace: dict = {}
    exec(compile("def no_source(*a, **k):\n    return None\n", "<generated>", "exec"), namespace)
    assert allocloop.AllocLoop._check(namespace["no_source"]) is False
