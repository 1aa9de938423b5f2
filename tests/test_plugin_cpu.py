"""The plugin's logic on CPU: routing, refusal reasons, validation, telemetry over real zmq."""
import dataclasses
import time
from types import SimpleNamespace

import pytest
import zmq

from controller import plugin
from controller.engines.sglang import SGLangEngine, server_flags
from controller.engines.base import EngineError
from controller.telemetry import decode

GOOD = dict(speculative_algorithm="EAGLE3", speculative_eagle_topk=1, speculative_adaptive=True)


@pytest.fixture
def state(monkeypatch):
    st = plugin.PluginState()
    st.checked, st.k, st.threshold = True, 3, 8
    monkeypatch.setattr(plugin, "STATE", st)
    return st


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


def test_routes_by_threshold_and_switches_only_on_change(state):
    w = worker()
    for bs in (4, 8, 9, 12, 2):
        plugin.activate_step_by_batch(lambda *a: pytest.fail("original called"), w, bs)
    assert w.adaptive_controller.activated == [0, 3]      # 9 -> off, 2 -> back on; no redundant switches
    assert state.decisions == 5 and state.decision_ns > 0


def test_inert_plugin_passes_through(state):
    state.inert_reason = "not ours"
    calls = []
    plugin.activate_step_by_batch(lambda w, bs: calls.append(bs), worker(), 99)
    plugin.on_verify_complete_cpu(lambda w, *a, **k: calls.append("ema"), worker(), [1], batch_size=1)
    assert calls == [99, "ema"]


def test_active_plugin_switches_sglang_ema_off(state):
    plugin.on_verify_complete_cpu(lambda *a, **k: pytest.fail("EMA must not run"), worker(), [1, 2], batch_size=2)


@pytest.mark.parametrize("args,needle", [
    ({**GOOD, "speculative_algorithm": "STANDALONE"}, "only EAGLE/EAGLE3"),
    ({**GOOD, "speculative_eagle_topk": 4}, "only topk=1"),
    ({**GOOD, "enable_dp_attention": True}, "DP attention"),
    ({**GOOD, "enable_two_batch_overlap": True}, "two-batch overlap"),
    ({**GOOD, "enable_pdmux": True}, "pdmux"),
    ({**GOOD, "speculative_adaptive": False}, "speculative_adaptive is off"),
])
def test_unsupported_reasons(args, needle):
    assert needle in plugin.unsupported_reason(args)
    assert needle in plugin.unsupported_reason(SimpleNamespace(**args))


def test_supported_engine_and_version_range():
    assert plugin.unsupported_reason(GOOD, "0.5.17") is None
    assert plugin.unsupported_reason(GOOD, "0.5.23.post1") is None
    assert "outside the supported range 0.5.14 .. 0.5.23" in plugin.unsupported_reason(GOOD, "0.5.24")
    assert "outside" in plugin.unsupported_reason(GOOD, "0.5.13")
    assert "outside" in plugin.unsupported_reason(GOOD, "garbage")


@pytest.mark.parametrize("value,ok", [(0, True), (64, True), (7.0, True), (-1, False), (2.5, False),
                                      (True, False), ("5", False), (1 << 21, False)])
def test_threshold_validation(value, ok):
    assert (plugin.validate_threshold(value) is None) == ok


def test_state_output_fits_both_generations():
    @dataclasses.dataclass
    class New:
        updated: bool

    @dataclasses.dataclass
    class Old:               # 0.5.14: server_args is required
        updated: bool
        server_args: dict

    assert plugin.state_output(New, True).updated is True
    assert plugin.state_output(Old, False) == Old(False, {})


def test_telemetry_reaches_a_real_pull_socket(state, monkeypatch, short_tmp):
    addr = f"ipc://{short_tmp}/t.ipc"
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(addr)
    monkeypatch.setenv("SPEC_CONTROLLER_TELEMETRY", addr)
    batch = SimpleNamespace(reqs=[object()] * 6)
    spec = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=7)
    off = SimpleNamespace(speculative_num_draft_tokens=1, num_correct_drafts=0)
    plugin.after_spec_result(None, None, spec, batch)          # first result: starts the clock only
    time.sleep(0.01)
    plugin.before_prefill_result(None, batch, None)
    plugin.after_spec_result(None, None, result=spec, batch=batch)
    time.sleep(0.01)
    plugin.after_spec_result(None, None, off, batch)
    assert pull.poll(2000)
    a, b = decode(pull.recv()), decode(pull.recv())
    assert (a.batch_size, a.steps, a.tokens, a.decode_only) == (6, 3, 13, False)     # prefill in between
    assert (b.steps, b.tokens, b.decode_only) == (0, 6, True) and 0.005 < b.step_s < 1.0
    pull.close(linger=0)


def test_telemetry_failure_never_raises(state, monkeypatch):
    monkeypatch.setattr(plugin, "_emit", lambda r, b: 1 / 0)
    assert plugin.after_spec_result(None, None, object(), object()) is None
    assert "telemetry" in state.failed


def test_engine_refuses_unsupported_config_and_builds_flags():
    with pytest.raises(EngineError, match="only topk=1"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 4})
    with pytest.raises(EngineError, match="model_path is required"):
        SGLangEngine({"speculative_algorithm": "EAGLE3"})
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                        "tp_size": 2, "enable_metrics": True, "ready_timeout_s": 5})
    cmd = eng.command()
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    assert ["--tp-size", "2"] == cmd[cmd.index("--tp-size"):cmd.index("--tp-size") + 2]
    assert "--enable-metrics" in cmd and "--speculative-adaptive" in cmd and "--ready-timeout-s" not in cmd
    assert "--speculative-num-draft-tokens" in cmd      # starts at the largest candidate (K + 1)
    assert server_flags({"a_b": [1, 2], "off": False}) == ["--a-b", "1", "2"]


def test_entry_point_is_registered():
    from importlib.metadata import entry_points
    eps = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    if "spec_controller" not in eps:
        pytest.fail("package not installed (pip install -e .): the sglang plugin entry point is missing")
    assert eps["spec_controller"] == "controller.plugin:load"


def test_only_rank_0_reports(state, monkeypatch, short_tmp):
    addr = f"ipc://{short_tmp}/r.ipc"
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(addr)
    monkeypatch.setenv("SPEC_CONTROLLER_TELEMETRY", addr)
    monkeypatch.setattr(plugin, "_rank", lambda: 1)
    batch = SimpleNamespace(reqs=[object()] * 4)
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=3)
    for _ in range(5):
        plugin.after_spec_result(None, None, result, batch)
    assert state.sender is False and state.sent == 0
    assert not pull.poll(200)
    pull.close(linger=0)


def test_telemetry_codec_round_trip_and_refusal():
    from controller.telemetry import encode_stats, pack_sample
    s = decode(pack_sample(12.5, 64, 3, 150, 0.021, True))
    assert (s.t, s.batch_size, s.steps, s.tokens, s.step_s, s.decode_only) == (12.5, 64, 3, 150, 0.021, True)
    assert decode(encode_stats(10, 2000, 9, 1)) == {"decisions": 10, "decision_ns": 2000, "sent": 9, "dropped": 1}
    with pytest.raises(ValueError):
        decode(b"\x07garbage")
