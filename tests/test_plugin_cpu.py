"""The plugin's logic on CPU: routing, refusal reasons, validation, telemetry over real zmq."""
import dataclasses
import time
import threading
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


@pytest.fixture
def daemon_pull(monkeypatch, short_tmp):
    """A real PULL socket where the plugin's telemetry goes (SPEC_CONTROLLER_TELEMETRY)."""
    addr = f"ipc://{short_tmp}/t.ipc"
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(addr)
    monkeypatch.setenv("SPEC_CONTROLLER_TELEMETRY", addr)
    yield pull
    pull.close(linger=0)


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
    assert state.decisions == 5 and state.decision_ns >= state.switch_ns > 0 and state.switches == 2


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


def test_telemetry_reaches_a_real_pull_socket(state, daemon_pull, monkeypatch):
    monkeypatch.setattr(plugin, "TELEMETRY_FLUSH_S", 60.0)    # a slow test machine must not flush early
    pull = daemon_pull
    batch = SimpleNamespace(reqs=[object()] * 6)
    spec = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=7)
    off = SimpleNamespace(speculative_num_draft_tokens=1, num_correct_drafts=0)
    plugin.after_spec_result(None, None, spec, batch)          # first result: starts the clock only
    time.sleep(0.01)
    plugin.before_prefill_result(None, batch, None)
    plugin.after_spec_result(None, None, result=spec, batch=batch)
    time.sleep(0.01)
    plugin.after_spec_result(None, None, off, batch)
    assert state.pending and state.sent == 0          # held back (fewer than a message's worth, < 50 ms)
    plugin.flush_telemetry(object())                   # the scheduler went idle
    assert pull.poll(2000)
    a, b = decode(pull.recv())
    assert (a.batch_size, a.steps, a.tokens, a.decode_only) == (6, 3, 13, False)     # prefill in between
    assert (b.steps, b.tokens, b.decode_only) == (0, 6, True) and 0.005 < b.step_s < 1.0
    assert state.telemetry_calls == 3 and state.telemetry_ns > 0 and state.sent == 2 and not state.pending
    plugin.flush_telemetry(object())                   # nothing waiting: nothing sent
    assert not pull.poll(100)


def test_telemetry_sends_full_messages_and_counters_without_idle(state, daemon_pull):
    pull = daemon_pull
    batch = SimpleNamespace(reqs=[object()] * 3)
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=2)
    for _ in range(1 + 256):                           # the first result only starts the clock
        plugin.after_spec_result(None, None, result, batch)
    got, counters = [], []
    while pull.poll(500):
        msg = decode(pull.recv())
        (counters.append if isinstance(msg, dict) else got.extend)(msg)
    assert len(got) == 256 == state.sent and not state.pending and state.dropped == 0
    assert all((s.batch_size, s.tokens) == (3, 5) for s in got)
    assert len(counters) == 1 and counters[0]["sent"] == 256       # every 256 samples


def test_telemetry_counts_a_full_queue_as_dropped(state, monkeypatch):
    class Full:
        def send(self, msg, flags):
            raise BlockingIOError
    state.sender, state.again = Full(), BlockingIOError
    batch = SimpleNamespace(reqs=[object()] * 2)
    result = SimpleNamespace(speculative_num_draft_tokens=1, num_correct_drafts=0)
    for _ in range(1 + 20):
        plugin.after_spec_result(None, None, result, batch)
    plugin.flush_telemetry()
    assert (state.sent, state.dropped, state.pending) == (0, 20, [])


def test_a_broken_telemetry_socket_is_logged_once_and_nothing_piles_up(state):
    class Broken:
        def send(self, msg, flags):
            raise OSError("socket closed")
    state.sender = Broken()
    batch = SimpleNamespace(reqs=[object()] * 2)
    result = SimpleNamespace(speculative_num_draft_tokens=1, num_correct_drafts=0)
    for _ in range(1 + 40):
        assert plugin.after_spec_result(None, None, result, batch) is None     # never raises into SGLang
    assert state.failed == {"telemetry"} and len(state.pending) < plugin.TELEMETRY_BATCH
    assert state.dropped == 32 and state.sent == 0


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


def test_telemetry_leaves_after_the_flush_interval_without_a_full_message(state, daemon_pull, monkeypatch):
    monkeypatch.setattr(plugin, "TELEMETRY_FLUSH_S", 0.0)      # every sample is past the interval
    batch = SimpleNamespace(reqs=[object()] * 2)
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=1)
    for _ in range(3):                                          # the first only starts the clock
        plugin.after_spec_result(None, None, result, batch)
    assert daemon_pull.poll(2000) and len(decode(daemon_pull.recv())) == 1
    assert daemon_pull.poll(2000) and len(decode(daemon_pull.recv())) == 1
    assert state.sent == 2 and not state.pending


def test_only_rank_0_reports(state, monkeypatch, daemon_pull):
    pull = daemon_pull
    monkeypatch.setattr(plugin, "_rank", lambda: 1)
    batch = SimpleNamespace(reqs=[object()] * 4)
    result = SimpleNamespace(speculative_num_draft_tokens=4, num_correct_drafts=3)
    for _ in range(5):
        plugin.after_spec_result(None, None, result, batch)
    assert state.sender is False and state.sent == 0
    assert not pull.poll(200)


def test_telemetry_codec_round_trip_and_refusal():
    from controller.telemetry import encode_stats, pack_sample
    [s] = decode(pack_sample(12.5, 64, 3, 150, 0.021, True))
    assert (s.t, s.batch_size, s.steps, s.tokens, s.step_s, s.decode_only) == (12.5, 64, 3, 150, 0.021, True)
    two = decode(pack_sample(1.0, 4, 0, 4, 0.01, False) + pack_sample(2.0, 8, 3, 20, 0.02, True))
    assert [(x.t, x.batch_size, x.tokens) for x in two] == [(1.0, 4, 4), (2.0, 8, 20)]
    stats = decode(encode_stats({"decisions": 10, "decision_ns": 2000, "sent": 9, "dropped": 1,
                                 "fast_off_batches": 7, "fast_off_graph_batches": 6, "off_fallbacks": 1}, 1))
    assert stats == {"decisions": 10, "decision_ns": 2000, "sent": 9, "dropped": 1, "fast_off_batches": 7,
                     "fast_off_graph_batches": 6, "off_fallbacks": 1, "telemetry_calls": 0, "telemetry_ns": 0,
                     "fast_off_cpu_ns": 0, "switches": 0, "switch_ns": 0, "off_path": "fast"}
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
def fast_state(state, monkeypatch):
    state.fast = plugin.fastoff.FastOff(attn_backend=None, graph_runner=None)
    ran = []

    def fake_run(worker, fast, batch, on_publish):
        ran.append((batch.seq_lens.shape[0], on_publish))
        fast.batches += 1
        return "fast-result"

    monkeypatch.setattr(plugin.fastoff, "run", fake_run)
    return state, ran


def routed_worker():
    w = worker()
    w.activate_step_by_batch = lambda bs: plugin.activate_step_by_batch(None, w, bs)
    return w


def test_off_batches_take_the_fast_path_and_on_batches_sglangs(fast_state):
    state, ran = fast_state
    rec, w = Recorder(), routed_worker()
    assert plugin.forward_batch_generation(rec.original, w, decode_batch(8), "pub") == "sglang-result"
    assert plugin.forward_batch_generation(rec.original, w, decode_batch(9), on_publish="pub") == "fast-result"
    assert ran == [(9, "pub")] and rec.calls == [("sglang", 8)] and state.fast.cpu_ns > 0
    assert w.adaptive_controller.activated == [0]         # the off batch ran in SGLang's steps-0 state
    for mode in ("extend", "idle"):                        # prefill and idle batches are never ours
        plugin.forward_batch_generation(rec.original, w, decode_batch(50, forward_mode=Mode(mode)))
    assert len(rec.calls) == 3 and len(ran) == 1


@pytest.mark.parametrize("extra", [dict(return_logprob=True), dict(has_grammar=True),
                                   dict(return_hidden_states=True), dict(spec_info=None)])
def test_off_batches_needing_verify_extras_fall_back_to_steps_0(fast_state, extra):
    state, ran = fast_state
    rec = Recorder()
    plugin.forward_batch_generation(rec.original, routed_worker(), decode_batch(20, **extra))
    assert ran == [] and rec.calls == [("sglang", 20)] and state.off_fallbacks == 1


def test_fast_path_failure_is_logged_once_and_sglang_takes_over(fast_state, monkeypatch):
    state, _ = fast_state
    monkeypatch.setattr(plugin.fastoff, "run", lambda *a: 1 / 0)
    rec = Recorder()
    assert plugin.forward_batch_generation(rec.original, routed_worker(), decode_batch(30)) == "sglang-result"
    assert "fast off" in state.failed and state.fast is None
    plugin.forward_batch_generation(rec.original, routed_worker(), decode_batch(30))
    assert rec.calls == [("sglang", 30), ("sglang", 30)]


def test_fast_path_can_be_switched_off_at_run_time(fast_state):
    state, ran = fast_state
    assert plugin.validate_own_keys({plugin.FAST_OFF_KEY: 0}) is None      # JSON false arrives as 0
    plugin.apply_own_keys({plugin.FAST_OFF_KEY: 0, plugin.THRESHOLD_KEY: 2})
    rec = Recorder()
    plugin.forward_batch_generation(rec.original, routed_worker(), decode_batch(30))
    assert ran == [] and rec.calls == [("sglang", 30)] and state.threshold == 2


@pytest.mark.parametrize("ours,needle", [
    ({plugin.THRESHOLD_KEY: -1}, "out of range"),
    ({plugin.THRESHOLD_KEY: 4, plugin.FAST_OFF_KEY: "yes"}, "true or false"),
    ({plugin.FAST_OFF_KEY: 2}, "true or false"),
    ({plugin.SIM_ACC_KEY: 2.5}, "experiment knob"),
])
def test_own_keys_are_validated_together(state, ours, needle):
    assert needle in plugin.validate_own_keys(ours)


def test_fast_path_cannot_be_enabled_where_it_was_not_built(state):
    state.fast = None
    assert "not available" in plugin.validate_own_keys({plugin.FAST_OFF_KEY: True})


def test_simulated_acceptance_knob_needs_the_experiments_switch(state, monkeypatch):
    monkeypatch.setenv("SPEC_CONTROLLER_EXPERIMENTS", "1")
    assert plugin.validate_own_keys({plugin.SIM_ACC_KEY: 2.5}) is None
    assert plugin.validate_own_keys({plugin.SIM_ACC_KEY: -1}) is None
    assert "1 .. 64" in plugin.validate_own_keys({plugin.SIM_ACC_KEY: 0.5})


def test_fast_off_only_on_the_version_it_was_written_for():
    assert plugin.fastoff.version_supported(plugin.parse_version("0.5.17"))
    assert not plugin.fastoff.version_supported(plugin.parse_version("0.5.14"))


def test_read_done_event_moves_to_the_runner_the_scheduler_waits_on():
    target = SimpleNamespace(war_fastpath_read_done_event="ev")
    draft = SimpleNamespace(war_fastpath_read_done_event=None)
    plugin.fastoff._hand_over_read_done_event(SimpleNamespace(war_fastpath_runner=draft), target)
    assert draft.war_fastpath_read_done_event == "ev" and target.war_fastpath_read_done_event is None
    plugin.fastoff._hand_over_read_done_event(SimpleNamespace(war_fastpath_runner=draft), target)
    assert draft.war_fastpath_read_done_event == "ev"     # nothing recorded this step: nothing to move


def test_tp_ranks_use_the_fast_path_only_if_all_built_it():
    ranks = [True, False]                       # rank 1 failed to capture its graphs
    group_min = lambda v: min(1 if ok else 0 for ok in ranks)
    assert [plugin.fastoff.all_ranks_agree(ok, group_min) for ok in ranks] == [False, False]
    ranks = [True, True]
    assert [plugin.fastoff.all_ranks_agree(ok, group_min) for ok in ranks] == [True, True]


def test_capture_failure_leaves_steps_0_and_says_so(state, monkeypatch):
    monkeypatch.setattr(plugin, "_sglang_version", lambda: "0.5.17")
    monkeypatch.setattr(plugin.fastoff, "build", lambda w: 1 / 0)
    monkeypatch.setattr(plugin.fastoff, "all_ranks_agree", lambda ok: ok)
    plugin.after_init_cuda_graphs(None, worker())
    assert state.fast is None and "fast off capture" in state.failed


def test_fast_path_is_not_built_on_other_versions(state, monkeypatch):
    monkeypatch.setattr(plugin, "_sglang_version", lambda: "0.5.23")
    monkeypatch.setattr(plugin.fastoff, "build", lambda w: pytest.fail("must not capture"))
    plugin.after_init_cuda_graphs(None, worker())
    assert state.fast is None


def test_stats_say_which_off_path_runs_and_status_shows_it(state):
    from controller.cli import render_status
    assert decode(plugin.stats_message())["off_path"] == "steps-0"            # never built
    state.fast = plugin.fastoff.FastOff(None, None, batches=120, graph_batches=118)
    state.off_fallbacks = 3
    stats = decode(plugin.stats_message())
    assert (stats["off_path"], stats["fast_off_batches"], stats["off_fallbacks"]) == ("fast", 120, 3)
    plugin.apply_own_keys({plugin.FAST_OFF_KEY: 0})
    assert decode(plugin.stats_message())["off_path"] == "steps-0 (fast path switched off)"
    st = {"daemon": {"running": True, "pid": 1, "uptime_s": 3, "healthy": True},
          "engine": {"engine": "sglang", "detail": "running", "plugin": stats}, "threshold": 8}
    out = render_status(st)
    assert "off path:    fast, 120 fast batches (118 on CUDA graphs), 3 on steps-0" in out
    st["engine"]["plugin"] = {**stats, "decisions": 10, "decision_ns": 609_600, "switches": 2, "switch_ns": 600_000}
    assert "plugin cost: decision 1.2 us, telemetry - us per batch; 300.0 us per state switch (2 switches)" \
        in render_status(st)
    assert "plugin cost: decision - us, telemetry - us per batch; - us per state switch (0 switches)" in out
    assert "off launch:  0.0 us CPU per fast off batch (SGLang's own decode launch)" in out


def test_engine_receiver_unpacks_messages_of_several_samples(short_tmp):
    """The daemon side of the wire: samples in order, counters kept, garbage counted, never fatal."""
    from controller.telemetry import encode_stats, pack_sample
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    ctx = zmq.Context.instance()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind(f"ipc://{short_tmp}/e.ipc")
    push.connect(f"ipc://{short_tmp}/e.ipc")
    got = []
    rx = threading.Thread(target=eng._receive, args=(pull, got.append), daemon=True)
    rx.start()
    push.send(pack_sample(1.0, 4, 0, 4, 0.01, True) + pack_sample(2.0, 8, 3, 20, 0.02, True))
    push.send(b"\x07garbage")
    push.send(encode_stats({"sent": 3}, 1))
    push.send(pack_sample(3.0, 16, 3, 40, 0.03, False))
    deadline = time.monotonic() + 5
    while (len(got) < 3 or not eng.plugin_stats) and time.monotonic() < deadline:
        time.sleep(0.01)
    eng._stop.set()
    rx.join(5)
    assert [s.t for s in got] == [1.0, 2.0, 3.0] and eng.bad_messages == 1
    assert eng.plugin_stats["sent"] == 3 and eng.plugin_stats["off_path"] == "fast"
    push.close(linger=0)


@pytest.fixture
def sglang_http():
    """A local HTTP server answering SGLang's /health and /health_generate with a settable status, and
    a live process standing for the SGLang child: the engine adapter's supervision logic, without a GPU."""
    import http.server
    import subprocess
    import sys
    answer = {"code": 200}

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(answer["code"] if self.path in ("/health", "/health_generate") else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield SimpleNamespace(server=server, answer=answer, proc=proc, port=server.server_address[1])
    proc.kill()
    proc.wait()
    server.shutdown()
    server.server_close()


def test_waiting_for_the_engine_ends_when_the_daemon_is_asked_to_stop(sglang_http):
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": sglang_http.port})
    eng.proc = sglang_http.proc
    assert eng.wait_ready(30)
    cancel = threading.Event()
    cancel.set()                                   # SIGTERM during a long engine start
    assert not eng.wait_ready(30, cancel=cancel)


def test_engine_that_stops_answering_is_reported_gone_after_hang_after_s(sglang_http):
    """A live SGLang process whose scheduler no longer answers /health_generate (the symptom of ranks
    out of step) must read as gone, so the daemon exits and systemd restarts it. One failed probe
    never does; a success in between resets the count."""
    server, answer = sglang_http.server, sglang_http.answer
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": server.server_address[1],
                        "hang_after_s": 100})
    eng.proc = sglang_http.proc
    try:
        assert eng.probe(now=0.0) and eng.health()["ok"]
        answer["code"] = 503
        assert not eng.probe(now=10.0)
        h = eng.health()
        assert h["ok"] and h["detail"].startswith("running: /health_generate unanswered for 0 s (last: HTTP 503")
        assert not eng.probe(now=60.0) and eng.health()["ok"]
        answer["code"] = 200
        assert eng.probe(now=80.0) and eng.health()["ok"] and eng.health()["detail"] == "running"
        answer["code"] = 503
        eng.probe(now=90.0)
        eng.probe(now=150.0)
        assert eng.health()["ok"]                                  # 60 s < 100 s since the last success
        eng.probe(now=190.0)
        h = eng.health()
        assert not h["ok"] and h["detail"].startswith("hung: /health_generate unanswered for 100 s")
        server.shutdown()
        server.server_close()
        eng.probe(now=200.0)                                       # refused connections count as failures
        assert not eng.health()["ok"] and "unanswered for 110 s" in eng.health()["detail"]
    finally:
        eng.proc.kill()
        eng.proc.wait()
    assert eng.health()["detail"].startswith("exited")


@pytest.mark.parametrize("value", [-1, "soon", True])
def test_engine_refuses_bad_probe_settings(value):
    with pytest.raises(EngineError, match=r"\[sglang\] hang_after_s must be a number of seconds >= 0"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "hang_after_s": value})


DRAINING_ENGINE = """
import signal, sys, time, zmq
from controller.telemetry import pack_sample
push = zmq.Context.instance().socket(zmq.PUSH)
push.connect(sys.argv[1])
def drain(*_):
    time.sleep(0.5)                                   # SGLang finishes its running requests...
    push.send(pack_sample(9.0, 3, 0, 3, 0.01, True))  # ...and rank 0 reports those batches
    push.close(linger=2000)
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
print("ready", flush=True)
time.sleep(60)
"""


def test_stopping_the_engine_keeps_the_telemetry_of_its_drain(short_tmp):
    import subprocess
    import sys
    from tests.conftest import ROOT
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(f"ipc://{short_tmp}/d.ipc")
    got = []
    eng._rx = threading.Thread(target=eng._receive, args=(pull, got.append), daemon=True)
    eng._rx.start()
    eng.proc = subprocess.Popen([sys.executable, "-c", DRAINING_ENGINE, f"ipc://{short_tmp}/d.ipc"],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert eng.proc.stdout.readline().strip() == "ready"
    eng.stop(timeout=30)
    assert eng.proc.returncode == 0 and not eng._rx.is_alive()
    assert [s.t for s in got] == [9.0]
