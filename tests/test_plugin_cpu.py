"""The plugin's logic on CPU: routing, refusal reasons, validation, telemetry over real zmq.
Each test builds its own Plugin (no process-wide state)."""
import dataclasses
import logging
import sys
import time
from types import ModuleType, SimpleNamespace

import pytest
import zmq

from controller import contract
from controller.contract import FAST_OFF_KEY, SIM_ACC_KEY, THRESHOLD_KEY, decode
from controller.numtext import int_text
from controller.plugin import draftkv, fastoff, telemetry
from controller.plugin.instance import Plugin, state_output

GOOD = dict(speculative_algorithm="EAGLE3", speculative_eagle_topk=1, speculative_adaptive=True)


def active(plugin: Plugin, threshold: int = 8) -> Plugin:
    """As after the first decode batch of an engine the plugin accepted (K = 3)."""
    plugin.router.checked, plugin.router.k, plugin.router.threshold = True, 3, threshold
    return plugin


@pytest.fixture
def plug():
    return active(Plugin({}))


@pytest.fixture
def pull_address(short_tmp):
    """A real PULL socket where the plugin's telemetry goes (SPEC_CONTROLLER_TELEMETRY)."""
    addr = f"ipc://{short_tmp}/t.ipc"
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(addr)
    yield pull, addr
    pull.close(linger=0)


@pytest.fixture
def reporting():
    """Plugin(ENV_ADDRESS: addr) made active; their telemetry sockets closed after the test."""
    made: list[Plugin] = []

    def make(addr: str, **options) -> Plugin:
        made.append(active(Plugin({contract.ENV_ADDRESS: addr}, **options)))
        return made[-1]
    yield make
    for plug in made:
        plug.telemetry.close()


class Controller:
    def __init__(self, worker):
        self.worker, self.activated = worker, []

    def _activate(self, steps):
        self.activated.append(steps)
        self.worker.speculative_num_steps = steps


def worker():
    w = SimpleNamespace(speculative_num_steps=3)
    w.adaptive_controller = Controller(w)
    return w


def test_routes_by_threshold_and_switches_only_on_change(plug):
    w = worker()
    for bs in (4, 8, 9, 12, 2):
        plug.router.activate_step_by_batch(lambda *a: pytest.fail("original called"), w, bs)
    assert w.adaptive_controller.activated == [0, 3]      # 9 -> off, 2 -> back on; no redundant switches
    r = plug.router
    assert r.decisions == 5 and r.decision_ns >= r.switch_ns > 0 and r.switches == 2


def test_inert_plugin_passes_through(plug):
    plug.router.inert_reason = "not ours"
    calls = []
    plug.router.activate_step_by_batch(lambda w, bs: calls.append(bs), worker(), 99)
    plug.router.on_verify_complete_cpu(lambda w, *a, **k: calls.append("ema"), worker(), [1], batch_size=1)
    assert calls == [99, "ema"]


def test_active_plugin_switches_sglang_ema_off(plug):
    plug.router.on_verify_complete_cpu(lambda *a, **k: pytest.fail("EMA must not run"), worker(), [1, 2], batch_size=2)


@pytest.mark.parametrize("args,needle", [
    ({**GOOD, "speculative_algorithm": "STANDALONE"}, "EAGLE, EAGLE3 or NEXTN is supported"),
    ({**GOOD, "speculative_eagle_topk": 4}, "only topk=1"),
    ({**GOOD, "enable_dp_attention": True}, "DP attention"),
    ({**GOOD, "enable_two_batch_overlap": True}, "two-batch overlap"),
    ({**GOOD, "enable_pdmux": True}, "pdmux"),
    ({**GOOD, "speculative_adaptive": False}, "speculative_adaptive is off"),
    ({**GOOD, "attn_dp_size": 2}, "attn_dp_size=2: SGLang's adaptive speculation does not support attention DP"),
    ({**GOOD, "ep_join_mode": "scale"}, "counts a scale-up joiner as attention DP"),
    ({**GOOD, "pp_size": 2}, "pp_size=2: the plugin does not support pipeline parallelism"),
    ({**GOOD, "enable_multi_layer_eagle": True}, "multi-layer EAGLE"),
])
def test_unsupported_reasons(args, needle):
    assert needle in contract.unsupported_reason(args)
    assert needle in contract.unsupported_reason(SimpleNamespace(**args))


@pytest.mark.parametrize("algo", ["EAGLE", "EAGLE3", "eagle3", "Eagle", "NEXTN", "nextn"])
def test_algorithm_names_sglang_reads_as_eagle_are_accepted(algo):
    """SGLang upper-cases the name and runs NEXTN as EAGLE: a command saying so is one the plugin steers."""
    assert contract.unsupported_reason({**GOOD, "speculative_algorithm": algo}) is None


@pytest.mark.parametrize("algo", ["STANDALONE", "ngram", "FROZEN_KV_MTP", "EAGLE2", "", None, 3])
def test_other_algorithm_names_are_refused(algo):
    reason = contract.unsupported_reason({**GOOD, "speculative_algorithm": algo})
    assert reason == (f"speculative_algorithm {'is not set' if algo is None else f'={algo}'} "
                      "(EAGLE, EAGLE3 or NEXTN is supported)")


def test_single_rank_values_are_not_refused():
    assert contract.unsupported_reason({**GOOD, "attn_dp_size": 1, "pp_size": None, "ep_join_mode": "recover"}) is None


def test_an_out_of_tree_platform_is_refused_from_0_5_23(monkeypatch):
    assert "out-of-tree SGLang platform installed (npu_ext)" in contract.platform_unsupported_reason("0.5.23", ["npu_ext"])
    assert contract.platform_unsupported_reason("0.5.22", ["npu_ext"]) is None     # no platform worker before
    assert contract.platform_unsupported_reason("0.5.23", []) is None
    from importlib import metadata
    monkeypatch.setattr(metadata, "entry_points", lambda group: [SimpleNamespace(name="b"), SimpleNamespace(name="a")]
                        if group == contract.PLATFORM_PLUGINS_GROUP else [])
    assert contract.installed_platform_plugins() == ["a", "b"]


def test_supported_engine_and_version_range():
    assert contract.unsupported_reason(GOOD, "0.5.17") is None
    assert contract.unsupported_reason(GOOD, "0.5.23.post1") is None
    assert "outside the supported range 0.5.14 .. 0.5.23" in contract.unsupported_reason(GOOD, "0.5.24")
    assert "outside" in contract.unsupported_reason(GOOD, "0.5.13")
    assert "outside" in contract.unsupported_reason(GOOD, "garbage")


@pytest.mark.parametrize("value,ok", [(0, True), (64, True), (7.0, True), (-1, False), (2.5, False),
                                      (True, False), ("5", False), (1 << 21, False),
                                      (float("nan"), False), (float("inf"), False), (float("-inf"), False)])
def test_threshold_validation(value, ok):
    assert (contract.validate_threshold(value) is None) == ok


def test_state_output_fits_both_generations():
    @dataclasses.dataclass
    class New:
        updated: bool

    @dataclasses.dataclass
    class Old:               # 0.5.14: server_args is required
        updated: bool
        server_args: dict

    assert state_output(New, True).updated is True
    assert state_output(Old, False) == Old(False, {})


def test_telemetry_reaches_a_real_pull_socket(pull_address, reporting, monkeypatch):
    pull, addr = pull_address
    clock = iter([100.0, 100.02, 100.05])           # the intervals between decode results
    monkeypatch.setattr(telemetry, "time", SimpleNamespace(perf_counter=lambda: next(clock),
                                                           perf_counter_ns=time.perf_counter_ns, time=time.time))
    plug = reporting(addr, flush_s=60.0)
    tel = plug.telemetry
    batch = SimpleNamespace(reqs=[object()] * 6)
    spec = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=7)
    off = SimpleNamespace(speculative_num_draft_tokens=1, num_correct_drafts=0)
    tel.after_spec_result(None, None, spec, batch)          # first result: starts the clock only
    tel.before_prefill_result(None, batch, None)
    tel.after_spec_result(None, None, result=spec, batch=batch)
    tel.after_spec_result(None, None, off, batch)
    assert tel.pending and tel.sent == 0          # held back (fewer than a message's worth, < flush_s)
    tel.flush(object())                           # the scheduler went idle
    assert pull.poll(2000)
    a, b = decode(pull.recv())
    assert (a.batch_size, a.steps, a.tokens, a.decode_only) == (6, 3, 13, False)     # prefill in between
    assert a.step_s == pytest.approx(0.02) and b.step_s == pytest.approx(0.03)
    assert (b.steps, b.tokens, b.decode_only) == (0, 6, True)
    assert tel.calls == 3 and tel.ns > 0 and tel.sent == 2 and not tel.pending
    tel.flush(object())                           # nothing waiting: nothing sent
    assert not pull.poll(100)


def test_an_interval_that_held_an_idle_pass_is_not_a_sample(pull_address, reporting, monkeypatch):
    """SGLang runs on_idle only with nothing running or in flight: the next result's interval held idle time (on the
    H200 a 4.9 s 'step' at batch 1 was rewarded and settled speculation as a loss everywhere above it)."""
    pull, addr = pull_address
    clock = iter([10.0, 10.01, 14.93, 14.94, 14.95])
    monkeypatch.setattr(telemetry, "time", SimpleNamespace(perf_counter=lambda: next(clock),
                                                           perf_counter_ns=time.perf_counter_ns, time=time.time))
    tel = reporting(addr, flush_s=60.0).telemetry
    batch = SimpleNamespace(reqs=[object()])
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=1)
    tel.after_spec_result(None, None, result, batch)       # starts the clock
    tel.after_spec_result(None, None, result, batch)       # 10 ms: a step
    tel.flush(object())                                    # idle: sends it, and ends the interval
    assert pull.poll(2000) and [s.step_s for s in decode(pull.recv())] == [pytest.approx(0.01)]
    tel.after_spec_result(None, None, result, batch)       # 4.92 s after the last result: restarts the clock
    tel.after_spec_result(None, None, result, batch)
    tel.after_spec_result(None, None, result, batch)
    tel.flush(object())
    assert pull.poll(2000) and [s.step_s for s in decode(pull.recv())] == [pytest.approx(0.01)] * 2
    assert not tel.failures.places          # the clock restarted: the result after the pass is no failure


def test_telemetry_sends_full_messages_and_counters_without_idle(pull_address, reporting):
    pull, addr = pull_address
    tel = reporting(addr, flush_s=60.0).telemetry
    batch = SimpleNamespace(reqs=[object()] * 3)
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=2)
    for _ in range(1 + 256):                           # the first result only starts the clock
        tel.after_spec_result(None, None, result, batch)
    got, counters = [], []
    while pull.poll(500):
        msg = decode(pull.recv())
        (counters.append if isinstance(msg, dict) else got.extend)(msg)
    assert len(got) == 256 == tel.sent and not tel.pending and tel.dropped == 0
    assert all((s.batch_size, s.tokens) == (3, 5) for s in got)
    assert len(counters) == 1 and counters[0]["sent"] == 256       # every 256 samples


def failing_sender(error: type[BaseException]) -> telemetry.TelemetrySender:
    class Sock:
        def send(self, msg, flags):
            raise error("socket closed")
    tel = Plugin({}).telemetry
    tel.sock, tel.again = Sock(), BlockingIOError
    return tel


def test_telemetry_counts_a_full_queue_as_dropped():
    tel = failing_sender(BlockingIOError)
    batch = SimpleNamespace(reqs=[object()] * 2)
    result = SimpleNamespace(speculative_num_draft_tokens=1, num_correct_drafts=0)
    for _ in range(1 + 20):
        tel.after_spec_result(None, None, result, batch)
    tel.flush()
    assert (tel.sent, tel.dropped, tel.pending) == (0, 20, [])


def test_a_broken_telemetry_socket_is_logged_once_and_nothing_piles_up():
    tel = failing_sender(OSError)
    batch = SimpleNamespace(reqs=[object()] * 2)
    result = SimpleNamespace(speculative_num_draft_tokens=1, num_correct_drafts=0)
    for _ in range(1 + 40):
        assert tel.after_spec_result(None, None, result, batch) is None     # never raises into SGLang
    assert tel.failures.places == {"telemetry"} and len(tel.pending) < telemetry.BATCH
    assert tel.dropped == 32 and tel.sent == 0


def test_a_broken_socket_at_an_idle_pass_never_raises_and_is_logged_with_its_cause(caplog):
    """flush runs in SGLang's idle loop: a send that fails there must not raise into it, and its one log line names the
    flush and carries the socket's error (what an operator reads to find why no samples arrive)."""
    tel = failing_sender(OSError)
    tel.flush_s = 60.0                                    # samples wait for the idle pass
    batch = SimpleNamespace(reqs=[object()] * 2)
    result = SimpleNamespace(speculative_num_draft_tokens=1, num_correct_drafts=0)
    for _ in range(1 + 2):
        tel.after_spec_result(None, None, result, batch)
    assert len(tel.pending) == 2 and not tel.failures.places
    with caplog.at_level(logging.ERROR, logger="spec_controller.plugin"):
        assert tel.flush(object()) is None
    assert tel.failures.places == {"telemetry flush"} and (tel.pending, tel.dropped) == ([], 2)
    [line] = [r for r in caplog.records if "telemetry flush failed" in r.getMessage()]
    assert "socket closed" in line.getMessage() and line.exc_info and line.exc_info[0] is OSError


def test_telemetry_failure_never_raises(plug, monkeypatch):
    monkeypatch.setattr(plug.telemetry, "emit", lambda r, b: 1 / 0)
    assert plug.telemetry.after_spec_result(None, None, object(), object()) is None
    assert "telemetry" in plug.failures.places


def test_telemetry_leaves_after_the_flush_interval_without_a_full_message(pull_address, reporting):
    pull, addr = pull_address
    tel = reporting(addr, flush_s=0.0).telemetry              # every sample is past the interval
    batch = SimpleNamespace(reqs=[object()] * 2)
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=1)
    for _ in range(3):                                          # the first only starts the clock
        tel.after_spec_result(None, None, result, batch)
    assert pull.poll(2000) and len(decode(pull.recv())) == 1
    assert pull.poll(2000) and len(decode(pull.recv())) == 1
    assert tel.sent == 2 and not tel.pending


def test_only_rank_0_reports(pull_address, reporting):
    pull, addr = pull_address
    tel = reporting(addr, rank=lambda: 1).telemetry
    batch = SimpleNamespace(reqs=[object()] * 4)
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=3)
    for _ in range(5):
        tel.after_spec_result(None, None, result, batch)
    assert tel.sock is False and tel.sent == 0
    assert not pull.poll(200)


def test_a_run_time_switch_reaches_status_at_the_next_idle_pass_without_a_batch(pull_address, reporting):
    """An idle engine sends no samples, so the counters that ride along with them never go out: a switch
    of the off path must still reach the daemon (the operator's `specctl status`) at once."""
    pull, addr = pull_address
    plug = reporting(addr, flush_s=60.0)
    plug.off_path.fast = fastoff.FastOff(None, None)
    plug.telemetry.flush(object())                       # idle, nothing switched: nothing sent
    assert not pull.poll(100)
    plug.apply_own_keys({FAST_OFF_KEY: 0})
    plug.telemetry.flush(object())
    assert pull.poll(2000)
    assert decode(pull.recv())["off_path"] == "steps-0 (fast path switched off)"
    plug.telemetry.flush(object())                       # sent once, not at every idle pass
    assert not pull.poll(100)
    other = reporting(addr, rank=lambda: 1)               # rank 1 reports nothing, even so
    other.apply_own_keys({FAST_OFF_KEY: 0})
    other.telemetry.flush(object())
    assert other.telemetry.sock is False and not pull.poll(100)


def test_telemetry_codec_round_trip_and_refusal():
    from controller.contract import encode_stats, pack_sample
    [s] = decode(pack_sample(12.5, 64, 3, 150, 0.021, True))
    assert (s.t, s.batch_size, s.steps, s.tokens, s.step_s, s.decode_only) == (12.5, 64, 3, 150, 0.021, True)
    two = decode(pack_sample(1.0, 4, 0, 4, 0.01, False) + pack_sample(2.0, 8, 3, 20, 0.02, True))
    assert [(x.t, x.batch_size, x.tokens) for x in two] == [(1.0, 4, 4), (2.0, 8, 20)]
    stats = decode(encode_stats({"decisions": 10, "decision_ns": 2000, "sent": 9, "dropped": 1,
                                 "fast_off_batches": 7, "fast_off_graph_batches": 6, "off_fallbacks": 1}, 1, 0, (0, 5, 22)))
    assert stats == {"decisions": 10, "decision_ns": 2000, "sent": 9, "dropped": 1, "fast_off_batches": 7,
                     "fast_off_graph_batches": 6, "off_fallbacks": 1, "telemetry_calls": 0, "telemetry_ns": 0,
                     "fast_off_cpu_ns": 0, "switches": 0, "switch_ns": 0, "lean_prefills": 0,
                     "off_fallbacks_logprob": 0, "off_fallbacks_grammar": 0, "draft_kv_writes": 0,
                     "fast_off_target_ns": 0, "draft_kv_ns": 0, "draft_kv_prefill_ns": 0,
                     "draft_kv_prefill_eager": 0, "draft_kv_prefill_eager_ns": 0, "draft_kv_prefill_held": 0,
                     "lean_resolves": 0, "draft_kv_graph_writes": 0, "plain_off_batches": 0,
                     "draft_kv_prefill_writer_ns": 0,
                     "prefills_pay_draft": 0, "fast_off_lean_batches": 0, "alloc_loop_batches": 0,
                     "draft_kv_side_writes": 0, "draft_kv_graph_launches": 0, "draft_kv_prefill_direct": 0,
                     "off_path": "fast (draft not written while off)", "off_reason": "", "sglang": "0.5.22",
                     "off_path_evidence": "contract-checked against the 0.5.22 wheel, not measured on a GPU"}
    measured = decode(encode_stats({}, 3, 0, (0, 5, 17)))
    assert (measured["off_path"], measured["off_path_evidence"]) == ("fast, draft synced", "measured on a GPU")
    # a plugin of another release sends fewer (older) or more (newer) counters: the shared ones are read
    import struct
    fewer = struct.pack("<B" + "Q" * 13 + "BB3H", contract.KIND_STATS, *range(1, 14), 1, 0, 0, 5, 17)
    got = decode(fewer)
    assert [got[k] for k in contract.STATS_FIELDS[:13]] == list(range(1, 14))
    assert (got["off_fallbacks_logprob"], got["off_fallbacks_grammar"], got["sglang"]) == (0, 0, "0.5.17")
    n = len(contract.STATS_FIELDS)
    more = struct.pack("<B" + "Q" * (n + 2) + "BB3H", contract.KIND_STATS, *range(1, n + 3), 3, 0, 0, 5, 22)
    got = decode(more)
    assert [got[k] for k in contract.STATS_FIELDS] == list(range(1, n + 1)) and got["off_path"] == "fast, draft synced"
    # ... by position: the counters of a released plugin (the twenty-sixth session's 27) stay where they were
    released = ("decisions", "decision_ns", "switches", "switch_ns", "sent", "dropped", "telemetry_calls",
                "telemetry_ns", "fast_off_batches", "fast_off_graph_batches", "fast_off_cpu_ns", "off_fallbacks",
                "lean_prefills", "off_fallbacks_logprob", "off_fallbacks_grammar", "draft_kv_writes",
                "fast_off_target_ns", "draft_kv_ns", "draft_kv_prefill_ns", "draft_kv_prefill_eager",
                "draft_kv_prefill_eager_ns", "draft_kv_graph_writes", "prefills_pay_draft", "fast_off_lean_batches",
                "alloc_loop_batches", "draft_kv_side_writes", "draft_kv_graph_launches")
    assert contract.STATS_FIELDS[:len(released)] == released
    older = struct.pack("<B" + "Q" * len(released) + "BB3H", contract.KIND_STATS, *range(1, len(released) + 1),
                        4, 0, 0, 5, 17)
    got = decode(older)
    assert [got[k] for k in released] == list(range(1, len(released) + 1))
    assert got["draft_kv_prefill_held"] == got["lean_resolves"] == 0
    for bad in (fewer[:-1], bytes([contract.KIND_STATS]) + bytes(8), bytes([9]) + fewer[1:]):
        with pytest.raises(ValueError):
            decode(bad)
    old = decode(encode_stats({}, 0, contract.REASON_NO_CAPTURE_MODE, (0, 5, 14)))
    assert (old["sglang"], old["off_path_evidence"]) == ("0.5.14", "") and "capture_hidden_mode" in old["off_reason"]
    assert decode(encode_stats({}, 9, 99))["off_path"] == decode(encode_stats({}, 9, 99))["off_reason"] == "?"
    with pytest.raises(ValueError):
        decode(b"\x07garbage")
    with pytest.raises(ValueError, match="corrupt"):                  # a second sample without its kind
        decode(pack_sample(1.0, 4, 0, 4, 0.01, False) + b"\x09" + pack_sample(2.0, 8, 3, 20, 0.02, True)[1:])


class Mode:
    def __init__(self, name):
        self.name = name

    def is_extend(self):
        return self.name == "extend"

    def is_idle(self):
        return self.name == "idle"


class Lens:
    def __init__(self, n):
        self.shape = (n,)


def decode_batch(bs, **extra):
    fields = dict(forward_mode=Mode("decode"), is_extend_in_batch=False, seq_lens=Lens(bs),
                  spec_info=SimpleNamespace(bonus_tokens=[0] * bs), return_logprob=False, has_grammar=False,
                  return_hidden_states=False)
    return SimpleNamespace(**{**fields, **extra})


class Recorder:
    def __init__(self):
        self.calls = []

    def original(self, worker, batch, *args, **kwargs):
        self.calls.append(("sglang", batch.seq_lens.shape[0]))
        return "sglang-result"


@pytest.fixture
def fast(plug, monkeypatch):
    """The plugin with a built fast off path whose run() is recorded instead of launched."""
    plug.off_path.fast = fastoff.FastOff(attn_backend=None, graph_runner=None)
    ran = []

    def fake_run(worker, fast, batch, on_publish, sync_draft=False, kv_writer=None, grammar_barrier=None, lean=False,
                 before_write=None):
        ran.append((batch.seq_lens.shape[0], on_publish))
        fast.batches += 1
        return "fast-result"

    monkeypatch.setattr(fastoff, "run", fake_run)
    return plug, ran


def routed_worker(plug):
    w = worker()
    w.activate_step_by_batch = lambda bs: plug.router.activate_step_by_batch(None, w, bs)
    return w


def test_off_batches_take_the_fast_path_and_on_batches_sglangs(fast):
    plug, ran = fast
    rec, w, off = Recorder(), routed_worker(plug), plug.off_path
    assert off.forward_batch_generation(rec.original, w, decode_batch(8), "pub") == "sglang-result"
    assert off.forward_batch_generation(rec.original, w, decode_batch(9), on_publish="pub") == "fast-result"
    assert ran == [(9, "pub")] and rec.calls == [("sglang", 8)] and off.fast.cpu_ns > 0
    assert w.adaptive_controller.activated == [0]         # the off batch ran in SGLang's steps-0 state
    for mode in ("extend", "idle"):                        # prefill and idle batches are never ours
        off.forward_batch_generation(rec.original, w, decode_batch(50, forward_mode=Mode(mode)))
    assert len(rec.calls) == 3 and len(ran) == 1


WATERMARKED = SimpleNamespace(has_watermark_candidates=True)     # 0.5.22+: logprobs from the pre-watermark logits


@pytest.mark.parametrize("extra,counted", [(dict(return_logprob=True, sampling_info=WATERMARKED), (1, 0)),
                                           (dict(has_grammar=True), (0, 1)),
                                           (dict(return_logprob=True, has_grammar=True), (0, 1)),
                                           (dict(return_hidden_states=True), (0, 0)), (dict(spec_info=None), (0, 0))])
def test_off_batches_needing_verify_extras_fall_back_to_steps_0(fast, extra, counted):
    plug, ran = fast
    rec = Recorder()
    plug.off_path.forward_batch_generation(rec.original, routed_worker(plug), decode_batch(20, **extra))
    assert ran == [] and rec.calls == [("sglang", 20)] and plug.off_path.fallbacks == 1
    c = plug.off_path.counters()          # why, for the share of grammar / logprob traffic in status
    assert (c["off_fallbacks_logprob"], c["off_fallbacks_grammar"]) == counted
    plug.off_path.forward_batch_generation(rec.original, routed_worker(plug), decode_batch(20))
    assert len(ran) == 1 and plug.off_path.counters()["off_fallbacks"] == 1     # a plain off batch is fast


def test_status_shows_why_off_batches_took_steps_0_and_their_share():
    from controller.cli.pluginlines import plugin_lines
    plugin = {"off_path": "fast (draft not written while off)", "fast_off_batches": 300, "fast_off_graph_batches": 300,
              "off_fallbacks": 100, "off_fallbacks_logprob": 60, "off_fallbacks_grammar": 30, "decisions": 0,
              "decision_ns": 0, "telemetry_ns": 0, "telemetry_calls": 0, "fast_off_cpu_ns": 0, "sglang": "0.5.17",
              "off_reason": "", "off_path_evidence": "measured on a GPU"}
    line = next(x for x in plugin_lines(plugin) if x.startswith("off path:"))
    assert "100 on steps-0 (25% of off batches: 60 logprobs, 30 grammar, 10 other)" in line
    quiet = next(x for x in plugin_lines({**plugin, "off_fallbacks": 0}) if x.startswith("off path:"))
    assert "on steps-0 (" not in quiet and "0 on steps-0" in quiet
    assert "(300 on CUDA graphs)" in line                  # no lean step taken: not mentioned
    lean = next(x for x in plugin_lines({**plugin, "fast_off_lean_batches": 280}) if x.startswith("off path:"))
    assert "(300 on CUDA graphs, 280 lean)" in lean
    cost = lambda extra: next(x for x in plugin_lines({**plugin, **extra}) if x.startswith("plugin cost:"))
    assert "allocations" not in cost({}) and "; 900 decode allocations by SGLang 0.5.19's loop" in cost(
        {"alloc_loop_batches": 900})


def test_fast_path_failure_is_logged_once_and_sglang_takes_over(fast, monkeypatch):
    plug, _ = fast
    monkeypatch.setattr(fastoff, "run", lambda *a, **k: 1 / 0)
    rec, off = Recorder(), plug.off_path
    assert off.forward_batch_generation(rec.original, routed_worker(plug), decode_batch(30)) == "sglang-result"
    assert "fast off" in plug.failures.places and off.fast is None
    off.forward_batch_generation(rec.original, routed_worker(plug), decode_batch(30))
    assert rec.calls == [("sglang", 30), ("sglang", 30)]


def test_fast_path_can_be_switched_off_at_run_time(fast):
    plug, ran = fast
    assert plug.validate_own_keys({FAST_OFF_KEY: 0}) is None      # JSON false arrives as 0
    plug.apply_own_keys({FAST_OFF_KEY: 0, THRESHOLD_KEY: 2})
    rec = Recorder()
    plug.off_path.forward_batch_generation(rec.original, routed_worker(plug), decode_batch(30))
    assert ran == [] and rec.calls == [("sglang", 30)] and plug.router.threshold == 2


@pytest.mark.parametrize("ours,needle", [
    ({THRESHOLD_KEY: -1}, "out of range (allowed 0 .. "),
    ({THRESHOLD_KEY: 4, FAST_OFF_KEY: "yes"}, "true or false"),
    ({FAST_OFF_KEY: 2}, "true or false"),
    ({SIM_ACC_KEY: 2.5}, "experiment knob"),
])
def test_own_keys_are_validated_together(plug, ours, needle):
    assert needle in plug.validate_own_keys(ours)


def test_fast_path_cannot_be_enabled_where_it_was_not_built(plug):
    plug.off_path.fast = None
    assert "not available" in plug.validate_own_keys({FAST_OFF_KEY: True})


def test_simulated_acceptance_knob_needs_the_experiments_switch():
    plug = active(Plugin({"SPEC_CONTROLLER_EXPERIMENTS": "1"}))
    assert plug.validate_own_keys({SIM_ACC_KEY: 2.5}) is None
    assert plug.validate_own_keys({SIM_ACC_KEY: -1}) is None
    assert "1 .. 64" in plug.validate_own_keys({SIM_ACC_KEY: 0.5})


def test_stats_say_which_off_path_runs_and_status_shows_it(plug):
    from controller.cli.status import render_status
    tel = plug.telemetry
    plug.router.version = lambda: "0.5.20"
    assert decode(tel.stats_message())["off_path"] == "steps-0"            # never built
    plug.off_path.fast = fastoff.FastOff(None, None, batches=120, graph_batches=118)
    plug.off_path.fallbacks = 3
    stats = decode(tel.stats_message())
    assert (stats["off_path"], stats["fast_off_batches"], stats["off_fallbacks"]) == \
        ("fast (draft not written while off)", 120, 3)
    plug.apply_own_keys({FAST_OFF_KEY: 0})
    assert decode(tel.stats_message())["off_path"] == "steps-0 (fast path switched off)"
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 3, "healthy": True},
          "engine": {"engine": "sglang", "detail": "running", "plugin": stats}, "threshold": 8}
    out = render_status(st)
    assert "off path:    fast (draft not written while off), 120 fast batches (118 on CUDA graphs), 3 on steps-0" \
        in out
    assert "sglang:      0.5.20; off path fast, contract-checked against the 0.5.20 wheel, not measured on a GPU" in out
    kv = render_status({**st, "engine": {**st["engine"], "plugin": {**stats, "off_path": contract.OFF_PATHS[4]}}})
    assert "sglang:      0.5.20; off path kv, contract-checked" in kv         # the setting's name, as configured
    steps0 = {**stats, "off_path": "steps-0", "off_reason": contract.OFF_REASONS[contract.REASON_0_5_16],
              "sglang": "0.5.16", "off_path_evidence": ""}
    assert ("sglang:      0.5.16; off path steps-0: SGLang 0.5.16: no get_server_return_hidden_states_mode"
            in render_status({**st, "engine": {**st["engine"], "plugin": steps0}}))
    st["engine"]["plugin"] = {**stats, "decisions": 10, "decision_ns": 609_600, "switches": 2, "switch_ns": 600_000}
    assert "plugin cost: decision 1.2 us, telemetry - us per batch; 300.0 us per state switch (2 switches)" \
        in render_status(st)
    assert "plugin cost: decision - us, telemetry - us per batch; - us per state switch (0 switches)" in out
    assert "off launch:  0.0 us CPU per fast off batch: target forward 0.0, draft KV writes 0.0" in out
    split = {**stats, "fast_off_cpu_ns": 120 * 1_500_000, "fast_off_target_ns": 120 * 600_000,
             "draft_kv_ns": 120 * 400_000, "lean_prefills": 10, "draft_kv_prefill_ns": 10 * 900_000}
    assert ("off launch:  1500.0 us CPU per fast off batch: target forward 600.0, draft KV writes 400.0; "
            "prompt KV writes 900.0 us per prefill") in render_status({**st, "engine": {**st["engine"], "plugin": split}})
    assert "written eagerly" not in render_status({**st, "engine": {**st["engine"], "plugin": split}})
    assert "graphed writer" not in render_status({**st, "engine": {**st["engine"], "plugin": split}})
    assert "prompt KV writes 900.0 us per prefill (350.0 of it in the graphed writer)" in render_status(
        {**st, "engine": {**st["engine"], "plugin": {**split, "draft_kv_prefill_writer_ns": 10 * 350_000}}})
    assert "(350.0 of it in the graphed writer) (9 straight into the graphs' inputs)" in render_status(
        {**st, "engine": {**st["engine"], "plugin": {**split, "draft_kv_prefill_writer_ns": 10 * 350_000,
                                                      "draft_kv_prefill_direct": 9}}})
    split.update(draft_kv_prefill_eager=2, draft_kv_prefill_eager_ns=2 * 4_000_000)
    assert "prompt KV writes 900.0 us per prefill (2 written eagerly, 4000.0 us each)" in \
        render_status({**st, "engine": {**st["engine"], "plugin": split}})
    assert "held until" not in render_status({**st, "engine": {**st["engine"], "plugin": split}})
    split.update(draft_kv_prefill_held=7)
    assert "(2 written eagerly, 4000.0 us each) (7 held until the next decode's forward)" in \
        render_status({**st, "engine": {**st["engine"], "plugin": split}})
    assert "draft KV written" not in out
    kv = {**stats, "off_path": "fast, draft KV written", "draft_kv_writes": 97}
    assert "fast, draft KV written, 120 fast batches" in render_status({**st, "engine": {**st["engine"], "plugin": kv}})
    assert "gather" not in render_status({**st, "engine": {**st["engine"], "plugin": kv}})
    assert "120 fast batches (118 on CUDA graphs, 96 without the draft extras' gather), 3 on steps-0" in \
        render_status({**st, "engine": {**st["engine"], "plugin": {**kv, "lean_resolves": 96}}})
    assert "non-speculative" not in render_status({**st, "engine": {**st["engine"], "plugin": kv}})
    assert "120 fast batches (118 on CUDA graphs, 100 as non-speculative batches), 3 on steps-0" in \
        render_status({**st, "engine": {**st["engine"], "plugin": {**kv, "plain_off_batches": 100}}})
    assert "draft KV written by the plugin for 97 batches" in render_status({**st, "engine": {**st["engine"], "plugin": kv}})
    assert "from CUDA graphs" not in render_status({**st, "engine": {**st["engine"], "plugin": kv}})
    assert "draft KV written by the plugin for 97 batches (90 from CUDA graphs)" in \
        render_status({**st, "engine": {**st["engine"], "plugin": {**kv, "draft_kv_graph_writes": 90}}})
    assert ("for 97 batches (90 from CUDA graphs, 88 of them beside the next forward on a side stream)" in
            render_status({**st, "engine": {**st["engine"], "plugin": {**kv, "draft_kv_graph_writes": 90,
                                                                      "draft_kv_side_writes": 88}}}))
    coalesced = {**kv, "draft_kv_graph_writes": 90, "draft_kv_graph_launches": 12}
    assert "(90 from CUDA graphs, coalesced into 12 replays)" in \
        render_status({**st, "engine": {**st["engine"], "plugin": coalesced}})
    assert "coalesced" not in render_status({**st, "engine": {**st["engine"], "plugin": {
        **coalesced, "draft_kv_graph_launches": 90}}})          # one replay per write: nothing to say


def fake_sglang(monkeypatch, version: str, by_daemon: bool = True) -> list:
    """sglang and its hook registry as modules (what load() imports), recording registrations; by_daemon: the
    environment the daemon starts SGLang with (its initial threshold set)."""
    if by_daemon:
        monkeypatch.setenv(contract.ENV_INITIAL_THRESHOLD, "0")
    else:
        monkeypatch.delenv(contract.ENV_INITIAL_THRESHOLD, raising=False)
        monkeypatch.delenv(contract.ENV_ADDRESS, raising=False)
    registered = []
    sglang = ModuleType("sglang")
    sglang.__version__ = version
    registry = ModuleType("sglang.srt.plugins.hook_registry")
    registry.HookType = SimpleNamespace(AROUND="AROUND", AFTER="AFTER", BEFORE="BEFORE")
    registry.HookRegistry = SimpleNamespace(register=lambda target, hook, kind: registered.append((target, kind)))
    for name, module in (("sglang", sglang), ("sglang.srt", ModuleType("sglang.srt")),
                         ("sglang.srt.plugins", ModuleType("sglang.srt.plugins")),
                         ("sglang.srt.plugins.hook_registry", registry)):
        monkeypatch.setitem(sys.modules, name, module)
    return registered


def test_load_registers_every_hook_once_per_process(monkeypatch):
    import controller.plugin as entry
    from controller.plugin.support import HOOK_TARGETS
    monkeypatch.setattr(entry, "_loaded", [])
    registered = fake_sglang(monkeypatch, "0.5.17")
    entry.load()
    entry.load()                                           # SGLang may call it again: idempotent
    from controller.plugin import allocloop                # 0.5.17: plus SGLang 0.5.19's allocation loop
    lean = {t for t in HOOK_TARGETS if t.endswith(("._resolve_spec_extras", "._forward_isolation"))}   # where asked
    assert len(lean) == 2
    assert sorted(t for t, _ in registered) == sorted([*(t for t in HOOK_TARGETS if t not in lean), allocloop.TARGET])
    assert isinstance(entry._loaded[0], Plugin)


def test_an_sglang_the_daemon_did_not_start_is_left_alone(monkeypatch):
    """helper-89: installed beside an SGLang that an operator starts by hand (--speculative-adaptive), the plugin took
    it over at threshold 0: speculation off for good, steered by nobody. Either of the daemon's variables is a start
    by spec-controller (or a deliberate one: the bench scripts set the initial threshold)."""
    import controller.plugin as entry
    monkeypatch.setattr(entry, "_loaded", [])
    registered = fake_sglang(monkeypatch, "0.5.17", by_daemon=False)
    entry.load()
    assert registered == [] and entry._loaded == [None]
    monkeypatch.setattr(entry, "_loaded", [])
    monkeypatch.setenv(contract.ENV_ADDRESS, "ipc:///run/spec-controller/t.ipc")
    entry.load()
    assert registered and isinstance(entry._loaded[0], Plugin)


def test_load_refuses_beside_an_out_of_tree_platform_and_registers_nothing(monkeypatch):
    import controller.plugin as entry
    monkeypatch.setattr(entry, "_loaded", [])
    monkeypatch.setattr(contract, "installed_platform_plugins", lambda: ["oot"])
    registered = fake_sglang(monkeypatch, "0.5.23")
    entry.load()
    assert registered == [] and entry._loaded == [None]


@pytest.mark.parametrize("value,loads", [("0", False), ("false", False), (" Off ", False), ("NO", False),
                                         ("1", True), ("true", True)])
def test_the_plugins_opt_out_takes_the_words_an_operator_writes(monkeypatch, value, loads):
    """SPEC_CONTROLLER_PLUGIN=false in a unit file left the plugin steering every adaptive engine (only "0" was off)."""
    import controller.plugin as entry
    monkeypatch.setattr(entry, "_loaded", [])
    monkeypatch.setenv("SPEC_CONTROLLER_PLUGIN", value)
    registered = fake_sglang(monkeypatch, "0.5.17")
    entry.load()
    assert bool(registered) is loads and isinstance(entry._loaded[0], Plugin) is loads


def test_every_on_by_default_switch_reads_false_as_off():
    plug = Plugin({contract.ENV_FAST_OFF: "false", contract.ENV_DRAFT_KV: "off", contract.ENV_LEAN_OFF: "No"})
    assert not plug.off_path.enabled and not plug.off_path.draft_kv and not plug.off_path.lean_off
    assert Plugin({contract.ENV_FAST_OFF: "true"}).off_path.enabled
    assert Plugin({contract.ENV_FAST_OFF: "maybe"}).off_path.enabled          # (not a switch word: the default)


def test_every_off_by_default_switch_reads_true_as_on():
    """helper-92: SPEC_CONTROLLER_SYNC_DRAFT=true (and the other experiments) was silently off: only "1" was on."""
    from controller.plugin import plainoff
    plug = Plugin({contract.ENV_SYNC_DRAFT: "true", contract.ENV_LEAN_RESOLVE: " Yes "})
    assert plug.off_path.sync_draft and plug.off_path.resolve.enabled
    plain = Plugin({contract.ENV_SYNC_DRAFT: "false", contract.ENV_LEAN_RESOLVE: "maybe"})
    assert not plain.off_path.sync_draft and not plain.off_path.resolve.enabled
    assert plainoff.wanted({plainoff.ENV: "on"}, "0.5.17") and not plainoff.wanted({plainoff.ENV: "off"}, "0.5.17")


def test_load_refuses_an_unsupported_version_and_registers_nothing(monkeypatch):
    import controller.plugin as entry
    monkeypatch.setattr(entry, "_loaded", [])
    registered = fake_sglang(monkeypatch, "0.5.99")
    entry.load()
    assert registered == [] and entry._loaded == [None]


def test_lean_prefill_skips_the_draft_only_while_nothing_speculates(monkeypatch):
    plug = active(Plugin({contract.ENV_LEAN_PREFILL: "0"}), threshold=0)
    monkeypatch.setattr(fastoff, "stub_draft_input", lambda worker, ids, *stubs: ("stub", ids))
    original = lambda worker, batch, hidden, ids: ("draft forward", ids)
    off = plug.off_path
    assert off.draft_extend_for_prefill(original, None, None, None, [7]) == ("draft forward", [7])   # not lean
    assert plug.validate_own_keys({contract.LEAN_PREFILL_KEY: True}) is None
    plug.apply_own_keys({contract.LEAN_PREFILL_KEY: True})
    assert off.draft_extend_for_prefill(original, None, None, None, [7]) == ("stub", [7])
    plug.router.threshold = 1                           # some batch sizes speculate: their draft must be ready
    assert off.draft_extend_for_prefill(original, None, None, None, [7]) == ("draft forward", [7])
    assert off.lean_prefills == 1
    assert "true or false" in plug.validate_own_keys({contract.LEAN_PREFILL_KEY: 1.5})
    default = Plugin({}).off_path                                                     # the measured defaults
    assert default.lean_prefill and default.draft_kv and default.capture_hidden and not default.sync_draft
    assert not Plugin({contract.ENV_DRAFT_KV: "0"}).off_path.capture_hidden


def test_a_synced_draft_needs_graphs_that_return_hidden_states(fast):
    plug, ran = fast
    assert "cannot run the draft" in plug.validate_own_keys({contract.SYNC_DRAFT_KEY: True})   # built without
    plug.off_path.fast.with_hidden = True
    assert plug.validate_own_keys({contract.SYNC_DRAFT_KEY: True}) is None
    plug.apply_own_keys({contract.SYNC_DRAFT_KEY: True})
    assert decode(plug.telemetry.stats_message())["off_path"] == "fast, draft synced"
    synced = Plugin({contract.ENV_SYNC_DRAFT: "1"}).off_path
    assert synced.sync_draft and synced.capture_hidden and synced.can_sync()


def test_the_synced_draft_reaches_the_fast_path(fast, monkeypatch):
    plug, _ = fast
    calls = []
    monkeypatch.setattr(fastoff, "run", lambda worker, f, batch, pub, sync=False, kv=None, **_: calls.append(sync) or "fast")
    plug.off_path.fast.with_hidden, plug.off_path.sync_draft = True, True
    plug.off_path.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30))
    plug.off_path.fast.with_hidden = False           # graphs without hidden states: never asked to sync
    plug.off_path.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30))
    assert calls == [True, False]


def test_the_draft_kv_writer_reaches_the_fast_path_and_lean_prefills(fast, monkeypatch):
    plug, _ = fast
    off, writer, calls = plug.off_path, object(), []
    monkeypatch.setattr(fastoff, "run", lambda worker, f, batch, pub, sync=False, kv=None, **_: calls.append((sync, kv)) or "fast")
    assert "cannot write the draft's KV" in plug.validate_own_keys({contract.DRAFT_KV_KEY: True})   # no writer
    off.fast.with_hidden, off.kv_writer = True, writer
    assert plug.validate_own_keys({contract.DRAFT_KV_KEY: True}) is None
    plug.apply_own_keys({contract.DRAFT_KV_KEY: True})
    assert decode(plug.telemetry.stats_message())["off_path"] == "fast, draft KV written"
    off.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30))
    plug.apply_own_keys({contract.SYNC_DRAFT_KEY: True})        # SGLang's own draft extend wins where both are set
    off.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30))
    assert calls == [(False, writer), (True, None)] and off.kv_writes == 1
    plug.apply_own_keys({contract.SYNC_DRAFT_KEY: False, contract.LEAN_PREFILL_KEY: True})
    written = []
    monkeypatch.setattr(draftkv, "write_prefill",
                        lambda w, batch, hidden, ids: written.append((w, batch, hidden, ids)) or batch != "idle")
    monkeypatch.setattr(fastoff, "stub_draft_input", lambda draft, ids, *stubs: ("stub", ids))
    original = lambda worker, batch, hidden, ids, *a, **k: ("draft forward", ids)
    plug.router.threshold = 0                           # nothing speculates: the draft's prompt pass is skipped,
    from controller.plugin import promptkv
    clock = iter([10, 35, 50, 60])                      # around each prompt write: their CPU, for status
    monkeypatch.setattr(promptkv, "time", SimpleNamespace(perf_counter_ns=lambda: next(clock)))
    assert off.draft_extend_for_prefill(original, None, "batch", "hidden", [7]) == ("stub", [7])
    assert written == [(writer, "batch", "hidden", [7])] and off.kv_writes == 2   # but its KV written
    assert off.draft_extend_for_prefill(original, None, "idle", "hidden", [7]) == ("stub", [7])
    assert off.kv_writes == 2                                   # an idle batch writes nothing
    assert off.counters()["draft_kv_prefill_ns"] == 35
    assert (off.counters()["draft_kv_prefill_eager"], off.counters()["draft_kv_prefill_eager_ns"]) == (1, 25)  # eager
    # a multimodal prompt (mm_input_embeds): the draft embeds it its own way, so it runs
    assert off.draft_extend_for_prefill(original, None, "batch", "hidden", [7], "mm") == ("draft forward", [7])
    assert off.draft_extend_for_prefill(original, None, "batch", "hidden", [7], mm_input_embeds="mm") \
        == ("draft forward", [7]) and len(written) == 2
    env = Plugin({contract.ENV_DRAFT_KV: "1"}).off_path
    assert env.draft_kv and env.capture_hidden and not env.sync_draft


def test_a_prefill_whose_kv_write_fails_runs_the_draft_and_the_writer_is_dropped(fast, monkeypatch):
    plug, _ = fast
    off = plug.off_path
    off.fast.with_hidden, off.kv_writer, off.draft_kv, off.lean_prefill = True, object(), True, True
    plug.router.threshold = 0

    def boom(*a):
        raise RuntimeError("no pool")

    monkeypatch.setattr(draftkv, "write_prefill", boom)
    original = lambda worker, batch, hidden, ids: ("draft forward", ids)
    assert off.draft_extend_for_prefill(original, None, None, None, [7]) == ("draft forward", [7])
    assert off.kv_writer is None and decode(plug.telemetry.stats_message())["off_path"] == "fast (draft not written while off)"
    # at TP > 1 the other ranks' writers ran collectives this one did not: the failure is raised, not hidden
    off.kv_writer, off.tp_size = object(), 2
    with pytest.raises(RuntimeError, match="no pool"):
        off.draft_extend_for_prefill(original, None, None, None, [7])


def test_an_unsupported_draft_falls_back_to_sglangs_draft_extend(plug):
    off = plug.off_path
    off.draft_kv, off.fast = True, fastoff.FastOff(attn_backend=None, graph_runner=None, with_hidden=True)
    w = worker()
    w.draft_worker = SimpleNamespace(draft_runner=SimpleNamespace(model=object()))
    off._build_writer(w)
    assert off.kv_writer is None and off.sync_draft       # consistent still, at SGLang's cost, and said so
    stats = decode(plug.telemetry.stats_message())
    assert stats["off_path"] == "fast, draft synced" and stats["off_reason"].startswith("the plugin cannot write")
    from controller.cli.status import render_status
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 3, "healthy": True},
          "engine": {"engine": "sglang", "detail": "running", "plugin": stats}, "threshold": 8}
    assert "the plugin cannot write this draft's KV" in render_status(st)


def test_the_kv_writer_supports_a_one_layer_eagle3_draft_on_a_plain_pool_only():
    def draft(layers=1, pool="MHATokenToKVPool", **inner_extra):
        layer = SimpleNamespace(hidden_norm=1, input_layernorm=1,
                                self_attn=SimpleNamespace(forward_prepare_native=1, attn=1))
        inner = SimpleNamespace(embed_tokens=1, fc=1, input_norm=None, fc_norm=None, num_aux_hidden_states=3,
                                layers=[layer] * layers, **inner_extra)
        model = type("LlamaForCausalLMEagle3", (), {})()
        model.model = inner
        return SimpleNamespace(model=model, token_to_kv_pool=type(pool, (), {})(), dcp_size=1)
    assert draftkv.unsupported_reason(draft()) is None
    assert isinstance(draftkv.build(draft()), draftkv.DraftKVWriter)
    assert "2 layers" in draftkv.unsupported_reason(draft(layers=2))
    assert "SWAKVPool" in draftkv.unsupported_reason(draft(pool="SWAKVPool"))
    assert "multimodal" in draftkv.unsupported_reason(draft(is_mrope_enabled=True))
    assert "not LlamaForCausalLMEagle3" in draftkv.unsupported_reason(SimpleNamespace(model=object()))
    with pytest.raises(ValueError, match="2 layers"):
        draftkv.build(draft(layers=2))


def test_rejection_sampling_keeps_the_draft_in_step(plug, monkeypatch):
    """A verify by rejection sampling weighs drafts by the draft's probabilities: no fast path, no lean prefill."""
    monkeypatch.setattr(fastoff, "build", lambda *a, **k: pytest.fail("must not capture"))
    w = worker()
    w.server_args = SimpleNamespace(speculative_use_rejection_sampling=True)
    plug.router.threshold = 0
    plug.off_path.after_init_cuda_graphs(None, w)
    assert plug.off_path.fast is None and decode(plug.telemetry.stats_message())["off_reason"].startswith(
        "speculative_use_rejection_sampling")
    original = lambda worker, batch, hidden, ids: ("draft forward", ids)
    assert plug.off_path.lean_prefill          # the default, but not with rejection sampling
    assert plug.off_path.draft_extend_for_prefill(original, None, None, None, [7]) == ("draft forward", [7])



def test_with_the_kv_writer_a_prefill_into_a_batch_that_will_not_speculate_skips_the_draft(fast, monkeypatch):
    plug, _ = fast
    off = plug.off_path
    off.fast.with_hidden, off.kv_writer, off.draft_kv, off.lean_prefill = True, "writer", True, True
    monkeypatch.setattr(draftkv, "write_prefill", lambda w, batch, hidden, ids: True)
    monkeypatch.setattr(fastoff, "stub_draft_input", lambda draft, ids, *stubs: ("stub", ids))
    original = lambda worker, batch, hidden, ids, *a, **k: ("draft forward", ids)
    two_new = SimpleNamespace(extend_lens=[40, 60])
    worker = SimpleNamespace(speculative_num_steps=0, adaptive_controller=SimpleNamespace(_activate=lambda s: None))
    plug.router.threshold = 8
    plug.router.activate_step_by_batch(lambda w, bs: None, worker, 20)     # a busy server: batches of 20 run off
    assert off.draft_extend_for_prefill(original, None, two_new, "hidden", [7, 8]) == ("stub", [7, 8])
    assert off.lean_prefills == 1 and off.kv_writes == 1
    plug.router.activate_step_by_batch(lambda w, bs: None, worker, 6)      # 6 + 2 = 8 <= 8: they will speculate
    assert off.draft_extend_for_prefill(original, None, two_new, "hidden", [7, 8]) == ("draft forward", [7, 8])
    plug.router.activate_step_by_batch(lambda w, bs: None, worker, 7)      # 7 + 2 = 9 > 8: off
    assert off.draft_extend_for_prefill(original, None, two_new, "hidden", [7, 8]) == ("stub", [7, 8])
    off.draft_kv = False         # without the writer the prompt's draft KV would stay stale: only at threshold 0
    plug.router.activate_step_by_batch(lambda w, bs: None, worker, 20)
    assert off.draft_extend_for_prefill(original, None, two_new, "hidden", [7, 8]) == ("draft forward", [7, 8])
    assert off.lean_prefills == 2 and off.kv_writes == 2


@pytest.mark.parametrize("threshold, last, joining, kv, skips", [
    (0, 100, 1, False, True), (0, 0, 1, True, True),          # nothing speculates: always lean
    (8, 20, 1, False, False),                                 # no writer: a stale prompt is not an option
    (8, 20, 1, True, True), (8, 7, 1, True, False), (8, 7, 2, True, True), (8, 0, 9, True, True),
    (8, 0, 8, True, False)])
def test_the_lean_prefill_rule(threshold, last, joining, kv, skips):
    assert contract.prefill_skips_draft(threshold, last, joining, kv) is skips


def test_prompt_writes_a_graph_held_are_not_counted_eager(fast, monkeypatch):
    """The status splits the prompt writes' CPU by whether a CUDA graph held them (GraphedKVWriter.replays moved)."""
    from types import SimpleNamespace
    from controller.plugin import promptkv
    plug, _ = fast
    off = plug.off_path
    writer = SimpleNamespace(replays=0, side_replays=0, launches=0, direct_prompts=0)
    off.fast.with_hidden, off.kv_writer, off.kv_graph, off.use_kv_graph = True, "eager", writer, True
    plug.apply_own_keys({contract.DRAFT_KV_KEY: True, contract.SYNC_DRAFT_KEY: False, contract.LEAN_PREFILL_KEY: True})
    plug.router.threshold = 0

    def write(w, batch, hidden, ids):
        w.replays += batch == "small"          # the graphed writer replays only where a graph holds the rows
        return True
    monkeypatch.setattr(draftkv, "write_prefill", write)
    monkeypatch.setattr(fastoff, "stub_draft_input", lambda draft, ids, *stubs: ("stub", ids))
    clock = iter([0, 100, 200, 5200])
    monkeypatch.setattr(promptkv, "time", SimpleNamespace(perf_counter_ns=lambda: next(clock)))
    original = lambda *a, **k: "draft forward"
    assert off.draft_extend_for_prefill(original, None, "small", "hidden", [7]) == ("stub", [7])
    assert off.draft_extend_for_prefill(original, None, "huge", "hidden", [7]) == ("stub", [7])
    got = off.counters()
    assert (got["draft_kv_prefill_ns"], got["draft_kv_prefill_eager"], got["draft_kv_prefill_eager_ns"]) == (5100, 1, 5000)
    assert got["draft_kv_prefill_held"] == 0                    # written at once


def test_the_stats_say_whether_threshold_0_saves_prefills_the_draft_and_go_out_once_the_path_is_decided(plug,
                                                                                                          monkeypatch):
    """What the daemon's zero verdict follows (contract PAYS_DRAFT): lean prefill without the KV writer, and no
    rejection sampling (each as draft_extend_for_prefill decides it); announced at the first idle pass after start."""
    off = plug.off_path
    said = lambda: decode(plug.telemetry.stats_message())["prefills_pay_draft"]
    off.kv_writer, off.draft_kv, off.lean_prefill, off.rejection = None, True, True, False
    assert said() == contract.PAYS_DRAFT                  # no writer: above 0 a prefill runs the pass, at 0 it skips it
    off.kv_writer = "writer"
    assert said() == contract.SAME_AT_ZERO                # the writer: skipped at any threshold
    off.draft_kv = False                                  # writes switched off at run time: the pass again
    assert said() == contract.PAYS_DRAFT
    off.lean_prefill = False
    assert said() == contract.SAME_AT_ZERO                # runs at 0 too
    off.lean_prefill, off.rejection = True, True
    assert said() == contract.SAME_AT_ZERO
    off.rejection, plug.router.inert_reason = False, "not ours"        # an inert plugin: SGLang's path everywhere
    assert said() == contract.SAME_AT_ZERO
    monkeypatch.setattr(fastoff, "build", lambda *a, **k: None)
    plug.telemetry.stats_due = False
    plug.hooks()["sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.init_cuda_graphs"][0](None, worker())
    assert plug.telemetry.stats_due


@pytest.mark.parametrize("raw, threshold", [("7", 7), (" 12 ", 0), ("012", 0), ("0", 0),
                                            (str(contract.MAX_BATCH), contract.MAX_BATCH),
                                            ("-3", 0), ("x", 0), ("\u00b2", 0), (str(contract.MAX_BATCH + 1), 0),
                                            ("9" * 5000, 0)])     # (int() of 5,000 digits raises)
def test_the_engine_starts_at_the_daemons_threshold_or_at_0_with_a_warning(raw, threshold, caplog):
    with caplog.at_level(logging.WARNING, logger="spec_controller.plugin"):
        plug = Plugin({contract.ENV_INITIAL_THRESHOLD: raw})
    assert plug.router.threshold == threshold
    warned = [r.getMessage() for r in caplog.records if contract.ENV_INITIAL_THRESHOLD in r.getMessage()]
    assert len(warned) == (0 if raw.strip() == str(threshold) else 1)
    if warned:          # it says why: not a number at all, or a number out of range
        why = "out of range" if int_text(raw) is not None else ": not a non-negative integer;"     # (numtext's)
        assert why in warned[0] and "starting at 0" in warned[0] and len(warned[0]) < 300, warned


def test_environment_integers_follow_numtexts_rule_and_are_shown_cut():
    """As every integer an operator writes (controller/numtext.py): ' 7 ' and '07' were read as 7 here only."""
    from controller.plugin.instance import env_int, shown
    assert [env_int(x) for x in ("123456789", " 7 ", "07", "1234567890", "\u00b2", "-1", "", "0", "\u0663",
                                 "\uff13")] == \
        [123456789, None, None, 1234567890, None, -1, None, 0, None, None]   # (Arabic-Indic, full-width 3: not ASCII)
    assert shown("abc") == "'abc'" and shown("x" * 40) == repr("x" * 40)
    assert shown("x" * 41) == repr("x" * 40) + "... (41 characters)"


def test_a_held_prompt_is_staged_after_the_next_decodes_forward_and_before_anything_else_reads_the_draft(
        fast, monkeypatch):
    """spec_controller_defer_prompt_kv (promptkv): a lean prefill's draft-KV rows wait until the next off decode's
    forward is queued, go in before that decode's own rows, and before any other batch that touches the draft."""
    plug, _ = fast
    off, writer, log = plug.off_path, object(), []
    off.fast.with_hidden, off.kv_writer = True, writer
    assert "not in this engine: not started" in plug.validate_own_keys({contract.DEFER_PROMPT_KV_KEY: True})
    off.prompts.why_not = None                       # what the start finds in a TP 1 engine without outside readers
    assert plug.validate_own_keys({contract.DEFER_PROMPT_KV_KEY: True}) is None
    plug.apply_own_keys({contract.DRAFT_KV_KEY: True, contract.SYNC_DRAFT_KEY: False, contract.LEAN_PREFILL_KEY: True,
                         contract.DEFER_PROMPT_KV_KEY: True})
    plug.router.threshold = 0
    monkeypatch.setattr(draftkv, "prompt_rows_of", lambda batch, hidden, ids, keep=False:
                        None if batch == "idle" else log.append(("held", batch, keep)) or ("rows", batch))
    monkeypatch.setattr(draftkv, "stage_prefill", lambda w, rows: log.append(("staged", rows[1], w is writer)))
    monkeypatch.setattr(draftkv, "write_prefill", lambda *a: pytest.fail("written at once while deferred"))
    monkeypatch.setattr(fastoff, "stub_draft_input", lambda draft, ids, *stubs: ("stub", ids))

    def run(worker, f, batch, pub, sync=False, kv=None, grammar_barrier=None, lean=False, before_write=None):
        log.append("decode forward queued")
        before_write()                               # fastoff.run: after the forward, before its own write
        log.append("decode rows")
        return "fast"
    monkeypatch.setattr(fastoff, "run", run)
    draft_pass = lambda *a, **k: "draft forward"
    hidden = SimpleNamespace(shape=(5, 12288), element_size=lambda: 2)     # the target's aux hidden states (bf16)
    assert off.draft_extend_for_prefill(draft_pass, None, "p1", hidden, [7]) == ("stub", [7])
    assert off.draft_extend_for_prefill(draft_pass, None, "p2", hidden, [7]) == ("stub", [7])   # held beside p1
    assert off.draft_extend_for_prefill(draft_pass, None, "idle", hidden, [7]) == ("stub", [7])  # nothing to hold
    assert off.forward_batch_generation(Recorder().original, routed_worker(plug), decode_batch(30)) == "fast"
    assert log == [("held", "p1", True), ("held", "p2", True),      # back to back: neither extend pays a write
                   "decode forward queued", ("staged", "p1", True), ("staged", "p2", True), "decode rows"]
    assert off.kv_writes == 3 and not off.prompts.holding()
    assert off.counters()["draft_kv_prefill_held"] == 2          # p1, p2 waited; "idle" had nothing to hold
    del log[:]                                       # a batch that speculates: the held rows before SGLang's batch
    off.draft_extend_for_prefill(draft_pass, None, "p3", hidden, [7])
    plug.router.threshold = 64
    off.forward_batch_generation(lambda *a, **k: log.append("speculating batch"), routed_worker(plug), decode_batch(30))
    assert log == [("held", "p3", True), ("staged", "p3", True), "speculating batch"]
    del log[:]                                       # a failed staging: recorded, the writer dropped, SGLang goes on
    plug.router.threshold = 0
    off.draft_extend_for_prefill(draft_pass, None, "p4", hidden, [7])
    monkeypatch.setattr(draftkv, "stage_prefill", lambda w, rows: (_ for _ in ()).throw(RuntimeError("boom")))
    off.forward_batch_generation(lambda *a, **k: log.append("sglang batch"), routed_worker(plug),
                                 decode_batch(30, is_extend_in_batch=True))
    assert off.kv_writer is None and not off.prompts.holding() and "sglang batch" in log
    assert "draft KV prefill" in plug.failures.places and off.reason == contract.REASON_KV_WRITE_FAILED
    del log[:]                                       # switched off with a prompt held: it goes in before the next
    off.kv_writer = writer
    monkeypatch.setattr(draftkv, "stage_prefill", lambda w, rows: log.append(("staged", rows[1], w is writer)))
    off.draft_extend_for_prefill(draft_pass, None, "p5", hidden, [7])
    monkeypatch.setattr(draftkv, "write_prefill", lambda w, batch, hidden, ids: log.append(("written", batch)) or True)
    plug.apply_own_keys({contract.DEFER_PROMPT_KV_KEY: False})
    off.draft_extend_for_prefill(draft_pass, None, "p6", hidden, [7])
    assert log == [("held", "p5", True), ("staged", "p5", True), ("written", "p6")] and not off.prompts.holding()
    assert off.counters()["draft_kv_prefill_held"] == 5          # p3, p4, p5 as well; p6 was written at once


def test_an_engine_whose_draft_pool_has_outside_readers_writes_its_prompts_at_once(plug, caplog):
    """The hierarchical cache and disaggregation copy the draft's KV outside the plugin's flushes: no held rows."""
    from controller.plugin import offpath
    for args, tp in ((SimpleNamespace(enable_hierarchical_cache=True), 1),
                     (SimpleNamespace(disaggregation_mode="prefill"), 1), (SimpleNamespace(), 2)):
        off = offpath.OffPath(plug.router, plug.failures, defer_prompt_kv=True)
        off.after_init_cuda_graphs(None, SimpleNamespace(server_args=SimpleNamespace(tp_size=tp, **vars(args))))
        assert off.prompts.why_not and off.prompts.defer
    assert len([r for r in caplog.records if "not held" in r.getMessage()]) == 3
    off.after_init_cuda_graphs(None, SimpleNamespace(server_args=SimpleNamespace(tp_size=1)))
    assert off.prompts.why_not is None


def test_a_prompt_writes_share_in_the_graphed_writer_is_counted_at_once_and_held(monkeypatch):
    """draft_kv_prefill_writer_ns: of the prompt writes' CPU, what the graphed writer's write() took (its write_ns
    before and after), written at once or staged later; an eager writer has no such count (0)."""
    from controller.plugin import promptkv

    def spend(w, ns):
        w.write_ns += ns
        return True
    monkeypatch.setattr(draftkv, "write_prefill", lambda w, batch, hidden, ids: spend(w, 300))
    monkeypatch.setattr(draftkv, "stage_prefill", lambda w, rows: spend(w, 200))
    monkeypatch.setattr(draftkv, "prompt_rows_of", lambda batch, hidden, ids, keep=False: ("rows", batch))
    graphed, eager = SimpleNamespace(write_ns=5000, replays=0), SimpleNamespace()
    writes = promptkv.PromptWrites()
    writes.why_not = None
    assert writes.write(graphed, "p1", "hidden", [7])
    assert writes.counters()["draft_kv_prefill_writer_ns"] == 300          # not the writer's 5,000 before it
    writes.defer = True
    writes.write(graphed, SimpleNamespace(extend_lens=[4]), SimpleNamespace(shape=(4, 12), element_size=lambda: 2), [7])
    assert writes.stage() and writes.counters()["draft_kv_prefill_writer_ns"] == 500
    writes.defer = False
    monkeypatch.setattr(draftkv, "write_prefill", lambda w, batch, hidden, ids: True)
    assert writes.write(eager, "p3", "hidden", [7]) and writes.counters()["draft_kv_prefill_writer_ns"] == 500
