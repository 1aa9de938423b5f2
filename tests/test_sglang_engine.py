"""The daemon's SGLang engine adapter on CPU: start-time refusals, server flags, the telemetry
receiver on a real PULL socket, liveness probing against a local HTTP server, and the drain."""
import os
import re
import signal
import threading
import time
from types import SimpleNamespace

import pytest
import zmq

from controller import contract
from controller.daemon.engines.base import EngineError
from controller.daemon.engines import sglang as engine_module
from controller.daemon.engines.sglang import SGLangEngine, server_flags
from controller.daemon.engines.sglang_flags import shown
from tests.conftest import fake_sglang_python


def test_engine_refuses_unsupported_config_and_builds_flags():
    with pytest.raises(EngineError, match="only topk=1"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 4})
    with pytest.raises(EngineError, match="model_path is required"):
        SGLangEngine({"speculative_algorithm": "EAGLE3"})
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                        "tp_size": 2, "enable_metrics": True, "ready_timeout_s": 5})
    cmd = eng.command()
    assert cmd[1:5] == ["-W", "ignore:'python -m sglang.launch_server' is still supported:UserWarning", "-m",
                        "sglang.launch_server"] and cmd[5:] == eng.server_argv()
    assert ["--tp-size", "2"] == cmd[cmd.index("--tp-size"):cmd.index("--tp-size") + 2]
    assert "--enable-metrics" in cmd and "--speculative-adaptive" in cmd and "--ready-timeout-s" not in cmd
    assert "--speculative-num-draft-tokens" in cmd      # starts at the largest candidate (K + 1)
    assert server_flags({"a_b": [1, 2], "off": False}) == ["--a-b", "1", "2"]
    # a value that starts with '-' in the = form: '--served-model-name -foo' is refused by argparse (helper-52)
    assert server_flags({"served_model_name": "-foo", "n": -1, "m": 1}) == ["--served-model-name=-foo", "--n=-1",
                                                                           "--m", "1"]


def test_the_logged_launch_line_hides_the_api_keys():
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "api_key": "sk-secret",
                        "admin_api_key": "-adm", "extra_args": ["--api-key", "sk-other"]})
    cmd = eng.command()
    assert "sk-secret" in cmd and "--admin-api-key=-adm" in cmd          # SGLang gets them
    logged = " ".join(shown(cmd))
    assert "sk-secret" not in logged and "adm" not in logged.replace("--admin-api-key", "") and "sk-other" not in logged
    assert "--api-key *** " in logged and "--admin-api-key=***" in logged and "--model-path /m" in logged


@pytest.mark.parametrize("packages,needle", [
    ({}, None),
    ({"plugin": False}, "has sglang 0.5.17 but not spec-controller: SGLang would run without the plugin"),
    ({"sglang": None}, "has no sglang installed"),
    ({"sglang": "0.5.13"}, "outside the supported range"),
    ({"sglang": "0.5.23", "platforms": ("npu_ext",)}, "out-of-tree SGLang platform installed (npu_ext)"),
    ({"sglang": "0.5.22", "platforms": ("npu_ext",)}, None),
])
def test_another_interpreter_is_asked_what_it_has_installed_before_launching(short_tmp, packages, needle):
    """[sglang] python (from-launch --python): SGLang there without spec-controller would serve without the plugin,
    and the daemon would wait for telemetry that never comes."""
    python = fake_sglang_python(short_tmp / "python", **packages)
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "python": str(python)})
    if needle is None:
        eng.check_installed()
    else:
        with pytest.raises(EngineError, match=re.escape(needle)):
            eng.check_installed()


@pytest.mark.parametrize("body,needle", [("", "cannot ask what it has installed (No such file or directory)"),
                                         ("echo boom >&2; exit 3", "cannot ask what it has installed (exited 3: boom)"),
                                         ("echo hello", "cannot ask what it has installed (")])
def test_an_interpreter_that_cannot_answer_is_refused_in_one_line(short_tmp, body, needle):
    python = short_tmp / "python"
    if body:
        python.write_text(f"#!/bin/sh\n{body}\n")
        python.chmod(0o755)
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "python": str(python)})
    with pytest.raises(EngineError, match=re.escape(needle)):
        eng.check_installed()


def test_the_daemons_own_interpreter_answers_the_question_as_its_packages_are():
    """The question itself, run by a real Python: this venv has spec-controller's entry point (and no SGLang in CI)."""
    import importlib.metadata
    import sys

    from controller.daemon.engines.sglang_install import installed
    found = installed(sys.executable)
    assert "spec_controller" in found["plugins"]
    try:
        assert found["sglang"] == importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        assert found["sglang"] is None


@pytest.mark.parametrize("extra,needle", [({"attn_dp_size": 2}, "attention DP"), ({"pp_size": 2}, "pipeline"),
                                          ({"ep_join_mode": "scale"}, "scale-up joiner"),
                                          ({"elastic_ep_join_mode": "scale"}, "scale-up joiner")])
def test_engine_refuses_what_adaptive_speculation_turns_off_before_launching(extra, needle):
    with pytest.raises(EngineError, match=needle):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", **extra})


def test_engine_checks_the_installed_sglang_and_its_platforms_before_launching(monkeypatch):
    import importlib.metadata

    from controller.daemon.engines import sglang_install
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.5.23")
    monkeypatch.setattr(sglang_install, "installed_platform_plugins", lambda: [])
    eng.check_installed()
    monkeypatch.setattr(sglang_install, "installed_platform_plugins", lambda: ["oot_npu"])
    with pytest.raises(EngineError, match="out-of-tree SGLang platform installed"):
        eng.check_installed()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.5.24")
    with pytest.raises(EngineError, match="outside the supported range"):
        eng.check_installed()


def test_the_daemons_own_interpreter_without_the_plugin_is_refused_as_another_would_be(monkeypatch):
    """SGLang beside a spec-controller whose entry point is not registered (run from a source tree on PYTHONPATH, not
    pip-installed): SGLang would serve without the plugin and the daemon wait for telemetry that never comes."""
    import importlib.metadata
    import sys

    from controller.daemon.engines import sglang_install
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.5.17")
    monkeypatch.setattr(sglang_install, "installed_platform_plugins", lambda: [])
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    eng.check_installed()                                   # this venv: spec-controller installed, entry point there
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [e for e in real(group=group)
                                                                           if e.name != "spec_controller"])
    with pytest.raises(EngineError, match=re.escape(f"this interpreter ({sys.executable}) has sglang 0.5.17 but not "
                                                    "spec-controller: SGLang would run without the plugin")):
        eng.check_installed()


def test_engine_receiver_unpacks_messages_of_several_samples(short_tmp):
    """The daemon side of the wire: samples in order, counters kept, garbage counted, never fatal."""
    from controller.contract import encode_stats, pack_sample
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
    assert eng.plugin_stats["sent"] == 3 and eng.plugin_stats["off_path"] == contract.OFF_PATHS[1]
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
        assert eng.probe(now=0.0) and eng.health(now=0.0)["ok"]
        answer["code"] = 503
        assert not eng.probe(now=10.0)
        h = eng.health(now=10.0)
        assert h["ok"] and h["detail"].startswith("running: /health_generate unanswered for 0 s (last: HTTP 503")
        assert not eng.probe(now=60.0) and eng.health(now=60.0)["ok"]
        answer["code"] = 200
        assert eng.probe(now=80.0) and eng.health(now=80.0)["ok"] and eng.health(now=80.0)["detail"] == "running"
        assert eng.health(now=500.0)["ok"]                        # (a pass: nothing counts until the next failure)
        answer["code"] = 503
        eng.probe(now=90.0)
        eng.probe(now=150.0)
        assert eng.health(now=150.0)["ok"]                         # 60 s < 100 s since the last success
        assert eng.health(now=190.0)["ok"]     # no probe since 150: nothing says it still fails (as after one alone)
        eng._probing_since = 165.0             # the next one started at 165 and still waits for its answer
        assert eng.health(now=184.0)["ok"]     # (waiting 19 s: an answer may still come, as from a busy scheduler)
        h = eng.health(now=190.0)              # waiting 25 s, past SGLang's own 20 s: hung by the clock
        assert not h["ok"] and h["detail"].startswith("hung: /health_generate unanswered for 100 s")
        eng._probing_since = None
        server.shutdown()
        server.server_close()
        eng.probe(now=200.0)                                       # refused connections count as failures
        assert not eng.health(now=200.0)["ok"] and "unanswered for 110 s" in eng.health(now=200.0)["detail"]
    finally:
        eng.proc.kill()
        eng.proc.wait()
    assert eng.health()["detail"].startswith("exited")


def test_one_failed_probe_is_no_hang_even_when_probes_are_further_apart_than_hang_after_s(sglang_http):
    """Counting to now whatever the probes said called one failed probe (a busy scheduler's 503) a hang as soon as
    hang_after_s passed, when probe_s >= hang_after_s left no second probe to confirm it: the daemon exited 1 and
    SGLang was restarted. It takes probes failing that long with no success between them (docs/sglang.md)."""
    server, answer = sglang_http.server, sglang_http.answer
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": server.server_address[1],
                        "probe_s": 300, "hang_after_s": 180})
    eng.proc = sglang_http.proc
    try:
        answer["code"] = 503
        assert not eng.probe(now=0.0)
        assert eng.health(now=181.0)["ok"] and eng.health(now=299.0)["ok"]       # was: hung at 180
        assert not eng.probe(now=300.0)
        assert not eng.health(now=300.0)["ok"]                                   # the second: 300 s, both failed
    finally:
        eng.proc.kill()
        eng.proc.wait()


@pytest.mark.parametrize("key", ["hang_after_s", "probe_s", "ready_timeout_s"])
@pytest.mark.parametrize("value", [-1, "soon", True, float("nan")])
def test_engine_refuses_bad_probe_settings(key, value):
    with pytest.raises(EngineError, match=rf"\[sglang\] {key} must be a number of seconds >= 0"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", key: value})


@pytest.mark.parametrize("value", [0, 0.0])
def test_a_ready_timeout_of_0_is_refused(value):
    """0 is 'none' for probe_s and hang_after_s; here config check said ok and every start failed at once, exit 1."""
    with pytest.raises(EngineError, match=r"\[sglang\] ready_timeout_s = 0 would end every start"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "ready_timeout_s": value})
    assert SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "hang_after_s": 0,
                         "probe_s": 0}).hang_after_s == 0.0


def test_a_ready_timeout_of_inf_is_no_limit():
    assert SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3",
                         "ready_timeout_s": float("inf")}).ready_timeout_s == float("inf")


DRAINING_ENGINE = """
import signal, sys, time, zmq
from controller.contract import pack_sample
push = zmq.Context.instance().socket(zmq.PUSH)
push.connect(sys.argv[1])
def drain(*_):
    time.sleep(0.5)                                   # SGLang finishes its running requests...
    push.send(pack_sample(9.0, 3, 0, 3, 0.01, True))  # ...and rank 0 reports those batches
    push.close(linger=2000)
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
print("ready", flush=True)
for _ in range(600):      # short sleeps: the kernel may hand SIGTERM to a zmq thread, and Python runs the
    time.sleep(0.1)       # handler only when the main thread next wakes (one long sleep hid it for 60 s)
"""


def _receiving_engine(short_tmp, script: str, *args: str) -> tuple[SGLangEngine, list]:
    """An SGLangEngine whose receiver reads a real zmq socket, and as its engine process `script` (sending to it)."""
    import subprocess
    import sys

    from tests.conftest import ROOT
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(f"ipc://{short_tmp}/d.ipc")
    got = []
    eng._rx = threading.Thread(target=eng._receive, args=(pull, got.append), daemon=True)
    eng._rx.start()
    eng.proc = subprocess.Popen([sys.executable, "-c", script, f"ipc://{short_tmp}/d.ipc", *args],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return eng, got


def test_stopping_the_engine_keeps_the_telemetry_of_its_drain(short_tmp):
    eng, got = _receiving_engine(short_tmp, DRAINING_ENGINE)
    assert eng.proc.stdout.readline().strip() == "ready"
    eng.stop(timeout=30)
    assert eng.proc.returncode == 0 and not eng._rx.is_alive()
    assert [s.t for s in got] == [9.0]


LAUNCHER_AND_SCHEDULER = """
import os, signal, subprocess, sys, time
if sys.argv[2] == "scheduler":        # SGLang's rank-0 scheduler: the process that sends, a child of the launcher
    import zmq
    from controller.contract import pack_sample
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(sys.argv[1])
    push.send(pack_sample(1.0, 3, 0, 3, 0.01, True))
    sys.stdin.read()                   # the launcher's end: the drain goes on a second after it
    time.sleep(1.0)
    push.send(pack_sample(9.0, 3, 0, 3, 0.01, True))
    push.close(linger=2000)
    sys.exit(0)
child = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[1], "scheduler", ""], stdin=subprocess.PIPE)
print(child.pid, flush=True)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))      # (its pipe to the scheduler closes with it)
for _ in range(600):
    time.sleep(0.1)
"""


def test_stopping_keeps_telemetry_the_scheduler_sends_after_the_launcher_exits(short_tmp):
    """The sender is SGLang's scheduler, a child of the launch process the daemon stops: its drain's last message
    may come after the launcher's exit and after STOP_QUIET_S of quiet. Read until the sender's connection is gone
    (it was lost after 0.5 s of quiet: the helper-165 flake's cause on a loaded host, made certain here)."""
    eng, got = _receiving_engine(short_tmp, LAUNCHER_AND_SCHEDULER, "launcher", LAUNCHER_AND_SCHEDULER)
    scheduler = int(eng.proc.stdout.readline())
    try:
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:      # (its first message: connected, handshake passed)
            time.sleep(0.05)
        eng.stop(timeout=30)
        assert eng.proc.returncode == 0 and not eng._rx.is_alive()
        assert [s.t for s in got] == [1.0, 9.0]
    finally:
        try:
            os.kill(scheduler, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_off_path_choice_reaches_the_plugins_environment():
    base = {"model_path": "/m", "speculative_algorithm": "EAGLE3"}
    # the default: the plugin writes the draft's KV while off (consistent when speculation resumes)
    assert SGLangEngine(base).plugin_env == {contract.ENV_DRAFT_KV: "1", contract.ENV_SYNC_DRAFT: "0",
                                             contract.ENV_LEAN_PREFILL: "1"}
    synced = SGLangEngine({**base, "off_path": "synced", "lean_prefill": False}).plugin_env
    assert synced == {contract.ENV_SYNC_DRAFT: "1", contract.ENV_DRAFT_KV: "0", contract.ENV_LEAN_PREFILL: "0"}
    assert SGLangEngine({**base, "off_path": "fast"}).plugin_env[contract.ENV_DRAFT_KV] == "0"
    assert SGLangEngine({**base, "off_path": "steps0"}).plugin_env[contract.ENV_FAST_OFF] == "0"
    assert SGLangEngine({**base, "off_path": "kv"}).plugin_env[contract.ENV_DRAFT_KV] == "1"
    assert "--off-path" not in SGLangEngine({**base, "off_path": "fast"}).command()
    assert "--lean-prefill" not in SGLangEngine({**base, "lean_prefill": False}).command()
    with pytest.raises(EngineError, match=r"off_path='quick' must be one of kv, synced, fast, steps0"):
        SGLangEngine({**base, "off_path": "quick"})
    with pytest.raises(EngineError, match="lean_prefill='yes' must be true or false"):
        SGLangEngine({**base, "lean_prefill": "yes"})


def test_the_env_table_reaches_sglang_but_not_over_what_the_daemon_sets():
    base = {"model_path": "/m", "speculative_algorithm": "EAGLE3"}
    eng = SGLangEngine({**base, "env": {"SPEC_CONTROLLER_DRAFT_KV_GRAPH": False, "CUDA_VISIBLE_DEVICES": 3,
                                        "NCCL_DEBUG": "WARN"}})
    assert eng.user_env == {"SPEC_CONTROLLER_DRAFT_KV_GRAPH": "0", "CUDA_VISIBLE_DEVICES": "3", "NCCL_DEBUG": "WARN"}
    for name, setting in ((contract.ENV_DRAFT_KV, "off_path"), (contract.ENV_FAST_OFF, "off_path"),
                          (contract.ENV_LEAN_PREFILL, "lean_prefill"), (contract.ENV_ADDRESS, "the daemon"),
                          (contract.ENV_INITIAL_THRESHOLD, "the daemon")):
        with pytest.raises(EngineError, match=f"env {name} is set by .*{setting}"):
            SGLangEngine({**base, "env": {name: "0"}})
    for bad in ("X=1", {"A=B": "1"}, {"A": [1]}, {"": "1"}):
        with pytest.raises(EngineError, match=r"\[sglang\] env"):
            SGLangEngine({**base, "env": bad})


def test_the_sglang_process_gets_the_plugins_the_daemons_and_the_env_tables_variables(short_tmp, monkeypatch):
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    # stands in for the interpreter that runs sglang.launch_server
    fake = fake_sglang_python(short_tmp / "python", f"env > {short_tmp}/env.txt")
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "python": str(fake),
                        "off_path": "fast", "env": {"SPEC_CONTROLLER_DRAFT_KV_GRAPH": False, "NCCL_DEBUG": "WARN"}},
                       initial_threshold=7)
    eng.start(lambda s: None)
    assert eng.proc.wait(timeout=30) == 0
    eng.stop()
    got = dict(line.split("=", 1) for line in (short_tmp / "env.txt").read_text().splitlines() if "=" in line)
    assert (got["SPEC_CONTROLLER_DRAFT_KV_GRAPH"], got["NCCL_DEBUG"], got[contract.ENV_DRAFT_KV]) == ("0", "WARN", "0")
    assert got[contract.ENV_INITIAL_THRESHOLD] == "7" and got[contract.ENV_ADDRESS] == f"ipc://{eng.ipc_path}"


@pytest.mark.parametrize("config, said, pays", [
    ({}, None, False),                                     # the default off path kv, lean prefill: skipped at any threshold
    ({"off_path": "fast"}, None, True),                    # lean prefill without the writer: 0 saves the pass
    ({"off_path": "steps0"}, None, True),
    ({"lean_prefill": False, "off_path": "fast"}, None, False),   # the pass runs at 0 too
    ({}, contract.PAYS_DRAFT, True),                       # the plugin's word wins (its writer failed: fast)
    ({"off_path": "fast"}, contract.SAME_AT_ZERO, False),  # (rejection sampling: the pass runs at 0 too)
    ({"off_path": "fast"}, 0, True),                       # a plugin before the field: the configuration
])
def test_the_engine_says_whether_threshold_0_saves_off_batches_prefills_the_draft(config, said, pays):
    """What the zero verdict of the bandit follows (policies.prefill_cost): the plugin's stats once they come, else
    the configuration."""
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", **config})
    if said is not None:
        eng.plugin_stats = contract.decode(contract.encode_stats({"prefills_pay_draft": said}, 1))
    assert eng.prefills_pay_draft() is pays


def test_a_sample_still_on_its_way_when_the_engine_has_stopped_is_read(short_tmp, monkeypatch):
    """What the engine sent just before it exited can reach the daemon's queue after the stop began (zmq's I/O thread
    hands it over): the receiver reads until the socket has been quiet, so the drain's last batches are kept."""
    eng, pull, push = receiver_pair(short_tmp, "late")
    got = []
    monkeypatch.setattr(engine_module, "STOP_QUIET_S", 2.0)     # room for a loaded CI host between the two steps
    eng._stop.set()                            # the stop has begun before the sample is in the queue
    rx = threading.Thread(target=eng._receive, args=(pull, got.append), daemon=True)
    rx.start()
    time.sleep(0.05)                           # the receiver has looked once and found the queue empty
    push.send(contract.pack_sample(7.0, 2, 0, 2, 0.01, True))
    push.close(linger=2000)
    rx.join(engine_module.STOP_READ_S + 1)
    assert not rx.is_alive() and [s.t for s in got] == [7.0]


def receiver_pair(short_tmp, name):
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.bind(f"ipc://{short_tmp}/{name}.ipc")
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(f"ipc://{short_tmp}/{name}.ipc")
    return eng, pull, push


def test_the_read_limit_counts_from_the_stop_not_from_the_receivers_start(short_tmp, monkeypatch):
    monkeypatch.setattr(engine_module, "STOP_READ_S", 1.0)
    monkeypatch.setattr(engine_module, "STOP_QUIET_S", 1.5)
    eng, pull, push = receiver_pair(short_tmp, "lim")
    got = []
    rx = threading.Thread(target=eng._receive, args=(pull, got.append), daemon=True)
    rx.start()
    time.sleep(1.5)                       # running longer than STOP_READ_S before any stop
    eng._stop.set()
    time.sleep(0.3)                       # the receiver has seen the stop and waits for quiet
    push.send(contract.pack_sample(7.0, 2, 0, 2, 0.01, True))
    push.close(linger=2000)
    rx.join(5)
    assert not rx.is_alive() and [s.t for s in got] == [7.0]


def test_a_sender_that_never_goes_quiet_cannot_hold_the_stop_past_stop_read_s(short_tmp, monkeypatch):
    monkeypatch.setattr(engine_module, "STOP_READ_S", 0.5)
    eng, pull, push = receiver_pair(short_tmp, "flood")
    done = threading.Event()
    def flood():
        while not done.is_set():
            push.send(contract.pack_sample(1.0, 2, 0, 2, 0.01, True))
            time.sleep(0.02)
    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    rx = threading.Thread(target=eng._receive, args=(pull, lambda s: None), daemon=True)
    rx.start()
    eng._stop.set()
    rx.join(3)
    alive = rx.is_alive()
    done.set()
    sender.join()
    push.close(linger=0)
    assert not alive


def test_the_default_quiet_window_is_a_wait():
    assert 0 < engine_module.STOP_QUIET_S < engine_module.STOP_READ_S


def test_stop_waits_for_a_quiet_window_longer_than_a_second(short_tmp, monkeypatch):
    monkeypatch.setattr(engine_module, "STOP_QUIET_S", 1.5)
    eng, pull, push = receiver_pair(short_tmp, "join")
    eng._rx = threading.Thread(target=eng._receive, args=(pull, lambda s: None), daemon=True)
    eng._rx.start()
    eng.stop()                            # no process: only the receiver's wind-down
    assert not eng._rx.is_alive()
    push.close(linger=0)


def test_the_receiver_ends_within_stop_read_s_whatever_the_quiet_window(short_tmp, monkeypatch):
    """A sender still connected holds the stop's reading to STOP_READ_S, which stop() joins for (+1 s): a quiet window
    longer than what is left of it (a poll of STOP_QUIET_S after the last) ran the receiver past the join (the suite's
    flake of the test above under load: 1.5 s polls ending at 6.0 s against a 6 s join)."""
    monkeypatch.setattr(engine_module, "STOP_QUIET_S", 4.0)
    monkeypatch.setattr(engine_module, "STOP_READ_S", 2.0)
    eng, pull, push = receiver_pair(short_tmp, "bounded")
    eng._rx = threading.Thread(target=eng._receive, args=(pull, lambda s: None), daemon=True)
    eng._rx.start()
    eng.stop()                            # joins for STOP_READ_S + 1 = 3 s; one 4 s poll outlasted it
    alive = eng._rx.is_alive()
    push.close(linger=0)
    eng._rx.join(10)
    assert not alive


def test_the_install_hint_names_the_clone_this_was_installed_from():
    """spec-controller is not on PyPI: `pip install spec-controller` would fail. Installed from a clone (the README's
    way; CI's editable install of its checkout), the hint names that clone's directory."""
    import tomllib
    from pathlib import Path

    from controller.daemon.engines.sglang_install import install_source
    src = install_source()
    assert src != "spec-controller", "this suite runs from an install of a clone (README, .ci/run)"
    assert tomllib.loads((Path(src) / "pyproject.toml").read_text())["project"]["name"] == "spec-controller"
    assert (Path(src) / "controller" / "daemon" / "engines" / "sglang_install.py").is_file()


def test_the_question_is_asked_outside_the_working_directory(tmp_path, monkeypatch):
    """From a clone (config check run there), its spec_controller.egg-info answered for an interpreter that has no
    spec-controller: the service runs in /, and so is asked there."""
    import sys

    from controller.daemon.engines.sglang_install import PLUGINS_GROUP, installed
    egg = tmp_path / "spec_controller.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: spec-controller\nVersion: 0.1.0\n")
    (egg / "entry_points.txt").write_text(f"[{PLUGINS_GROUP}]\nspec_controller = controller.plugin:load\n")
    monkeypatch.chdir(tmp_path)
    base = getattr(sys, "_base_executable", sys.executable)       # (this venv's base: no spec-controller installed)
    assert "spec_controller" not in installed(base)["plugins"]


def test_the_keys_the_daemon_keeps_for_itself_are_its_own_settings_and_python():
    """server_flags leaves out OWN_KEYS (sglang_flags); the settings with defaults (OWN_DEFAULTS, engines/sglang_section.py, shown
    in the example config) are those and the interpreter: a new own setting added to one list only would reach SGLang
    as an unknown flag, or never be passed."""
    from controller.daemon.engines.sglang_flags import OWN_KEYS
    from controller.daemon.engines.sglang_section import OWN_DEFAULTS
    assert OWN_KEYS == set(OWN_DEFAULTS) | {"python"}


def test_a_port_another_server_holds_is_refused_before_anything_launches(short_tmp, monkeypatch):
    """An SGLang an earlier daemon left running (killed outside systemd) keeps the port: the new SGLang would fail to
    bind while the old one answered the daemon's readiness probe."""
    import socket
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    fake = fake_sglang_python(short_tmp / "python", f"touch {short_tmp}/launched")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "python": str(fake), "port": port})
        with pytest.raises(EngineError, match=f"port 127.0.0.1:{port} is in use: another server .*ss -ltnp"):
            eng.start(lambda s: None)
        assert eng.proc is None and not (short_tmp / "launched").exists()
    eng.start(lambda s: None)                  # the port free again: it launches
    assert eng.proc.wait(timeout=30) == 0 and (short_tmp / "launched").exists()
    eng.stop()


@pytest.mark.parametrize("sglang,line,daemon_exit", [
    # SGLang (a stand-in package: argparse over its flags) refuses the misspelt key; its parser, asked again, too
    ("stub", "SGLang exited with code 2 before it was ready (argparse's: a launch flag refused?); SGLang 0.5.17 refuses "
             "the [sglang] section's flags: unrecognized arguments: --modle-path /x ([sglang] modle_path)", 2),
    # an exit 2 its parser does not confirm (here: an interpreter that answers it nothing, as a wrapper script)
    ("exit 2", "SGLang exited with code 2 before it was ready (argparse's: a launch flag refused?); SGLang's parser, "
               "asked again, takes the flags: restarted", 1),
    ("exit 1", "SGLang exited with code 1 before it was ready (its own last lines, above in the log, say why)", 1),
])
def test_an_sglang_that_exits_at_start_ends_the_daemon_with_its_exit_code_named(short_tmp, sglang, line, daemon_exit):
    """A typo in [sglang] reaches SGLang as a flag it refuses (argparse: exit 2): the daemon's last line says SGLang
    exited and with what, not only that it was not ready; SGLang's own line stands above it. A refusal SGLang's parser
    confirms ends the daemon with 2, which the unit does not restart (the next start would pass the flag again); any
    other exit with 1."""
    import socket

    from tests.conftest import stub_sglang_python
    from tests.daemon_proc import DaemonProc
    with socket.socket() as s:                # a port nothing holds (the check refuses a held one first)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fake = stub_sglang_python(short_tmp / "python") if sglang == "stub" else fake_sglang_python(
        short_tmp / "python", f"echo 'launch_server: error: unrecognized arguments: --modle-path /x' >&2; {sglang}")
    config = (f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nspeculative_algorithm = "EAGLE3"\n'
              f'python = "{fake}"\nport = {port}\nmodle_path = "/x"\n')
    daemon = DaemonProc(short_tmp, config_text=config, speed=None,
                        env_extra={"STATE_DIRECTORY": str(short_tmp / "state"), "RUNTIME_DIRECTORY": str(short_tmp)})
    assert daemon.proc.wait(timeout=60) == daemon_exit
    log = daemon.log_text()
    assert "unrecognized arguments: --modle-path" in log
    assert log.splitlines()[-1] == f"spec-controller: {line}", log
    daemon.stop()


@pytest.mark.parametrize("host", ["192.0.2.1", "::ffff:192.0.2.1"])      # (TEST-NET-1: not this host's)
def test_an_address_not_this_hosts_is_said_as_such_not_as_a_port_in_use(host):
    from controller.daemon.engines.child import port_reason
    reason = port_reason(host, 30000)
    where = f"[{host}]" if ":" in host else host
    assert reason.startswith(f"SGLang's address {where}:30000 cannot be bound (") and "in use" not in reason, reason


def test_not_ready_says_a_timeout_an_exit_code_or_the_signal_that_killed_sglang(short_tmp, monkeypatch):
    import signal
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": 1,
                        "python": str(fake_sglang_python(short_tmp / "python", "sleep 30"))})
    monkeypatch.setattr("controller.daemon.engines.sglang.port_reason", lambda host, port: None)
    eng.start(lambda s: None)
    assert not eng.wait_ready(0.5)
    assert eng.not_ready_reason(0.5) == "SGLang was not ready within 0.5 s ([sglang] ready_timeout_s)"
    eng.proc.send_signal(signal.SIGKILL)
    eng.proc.wait(timeout=10)
    assert eng.not_ready_reason(0.5).startswith("SGLang was killed by SIGKILL before it was ready")
    eng.stop()


def test_sglang_does_not_outlive_a_daemon_killed_outright(short_tmp):
    """Outside systemd nothing else would stop it: a daemon killed with SIGKILL (or by the OOM killer) must not leave
    SGLang holding the GPU and the port the next daemon needs (the kernel's parent-death signal, set before the exec;
    SIGKILL: a busy SGLang drains on SIGTERM for as long as requests come)."""
    import os
    import signal
    import socket
    import time

    from tests.daemon_proc import DaemonProc
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fake = fake_sglang_python(short_tmp / "python", f"echo $$ > {short_tmp}/sglang.pid; exec sleep 120")
    config = (f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nspeculative_algorithm = "EAGLE3"\n'
              f'python = "{fake}"\nport = {port}\n')
    daemon = DaemonProc(short_tmp, config_text=config, speed=None,
                        env_extra={"STATE_DIRECTORY": str(short_tmp / "state"), "RUNTIME_DIRECTORY": str(short_tmp)})
    pid_file = short_tmp / "sglang.pid"
    end = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < end:
        time.sleep(0.05)
    sglang = int(pid_file.read_text())
    os.kill(sglang, 0)                                   # SGLang runs, the daemon waits for it to be ready
    assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    end = time.monotonic() + 10
    while time.monotonic() < end:
        try:
            os.kill(sglang, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(sglang, signal.SIGKILL)
        pytest.fail("SGLang outlived the daemon")


def test_the_launch_stub_runs_the_command_in_its_own_pid_or_says_in_one_line_why_not(short_tmp):
    import os
    import subprocess

    from controller.daemon.engines.child import bound_to_daemon
    done = subprocess.run(bound_to_daemon(["sh", "-c", "echo $$ $PPID"]), capture_output=True, text=True, timeout=30)
    ppid = int(done.stdout.split()[1])
    assert done.returncode == 0 and ppid == os.getpid()          # exec'd in the stub's process, the daemon's child
    gone = subprocess.run(bound_to_daemon([str(short_tmp / "missing")]), capture_output=True, text=True, timeout=30)
    assert gone.returncode == 127 and gone.stderr == \
        f"spec-controller: cannot run {short_tmp / 'missing'}: No such file or directory\n"
    (short_tmp / "plain").write_text("x")
    denied = subprocess.run(bound_to_daemon([str(short_tmp / "plain")]), capture_output=True, text=True, timeout=30)
    assert denied.returncode == 126 and "Permission denied" in denied.stderr
    # ignored signals are not passed on: a shell pipeline in SGLang's place behaves as it would without the stub
    piped = subprocess.run(bound_to_daemon(["sh", "-c", "grep SigIgn /proc/self/status"]), capture_output=True,
                           text=True, timeout=30)
    assert int(piped.stdout.split()[1], 16) & ((1 << 12) | (1 << 24)) == 0, piped.stdout     # SIGPIPE 13, SIGXFSZ 25


def test_sglang_started_from_a_thread_that_ends_is_not_bound_to_it(tmp_path):
    """The kernel's signal follows the thread that forked: bound from a worker thread, SGLang would die with it."""
    import subprocess
    import threading
    import time

    from controller.daemon.engines.child import bound_to_daemon
    got, marker = [], tmp_path / "running"

    def start_and_end():                            # (the thread ends once the command runs: the stub is past prctl)
        got.append(subprocess.Popen(bound_to_daemon(["sh", "-c", f"touch {marker}; exec sleep 30"])))
        end = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < end:
            time.sleep(0.01)
    worker = threading.Thread(target=start_and_end)
    worker.start()
    worker.join()
    child = got[0]
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=1.0)                 # alive after its starting thread ended
    finally:
        child.kill()
        child.wait()


def test_the_launch_filters_sglangs_entry_point_warning_and_nothing_else(tmp_path):
    """SGLang 0.5.23 warns at every start that `python -m sglang.launch_server` is not its recommended entry point: the
    daemon's launch (its -W) silences that warning alone (checked on the real 0.5.23: the line gone from --help's
    output; here with the message as 0.5.23 words it, beside another UserWarning that must stay)."""
    import subprocess
    import sys
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3"})
    flags = eng.command()[1:eng.command().index("-m")]
    code = ("import warnings\n"
            "warnings.warn(\"'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
            "recommended entrypoint.\\n  Example: sglang serve --model-path <model> [options]\", UserWarning)\n"
            "warnings.warn('python -m sglang.launch_server is slow', UserWarning)\n"
            "warnings.warn(\"'python -m sglang.launch_server' is still supported\", DeprecationWarning)\n")
    out = subprocess.run([sys.executable, *flags, "-W", "always::DeprecationWarning", "-c", code], capture_output=True,
                         text=True, check=True).stderr
    assert "recommended entrypoint" not in out, out
    assert "is slow" in out and "DeprecationWarning: 'python -m sglang.launch_server' is still supported" in out, out


@pytest.mark.parametrize("name, value, said", [
    ("SPEC_CONTROLLER_DRAFT_KV_GRAPH", 0.0, "must be one of 0 / false"),      # TOML's 0.0 is "0.0": the default, unheard
    ("SPEC_CONTROLLER_LEAN_OFF", "disabled", "must be one of 0 / false"),
    ("SPEC_CONTROLLER_DRAFTKV_GRAPH", "0", "not a variable the plugin reads"),   # a typo did nothing
    ("SPEC_CONTROLLER_DRAFT_KV_COALESCE", "65", "must be an integer 0 .. 64"),
    ("SPEC_CONTROLLER_DRAFT_KV_COALESCE", "eight", "must be an integer 0 .. 64"),
    ("SPEC_CONTROLLER_PLUGIN", False, "the daemon.s engine runs the plugin"),
])
def test_env_refuses_a_spec_controller_variable_the_plugin_would_not_read(name, value, said):
    with pytest.raises(EngineError, match=f"env {name} = .*: {said}"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "env": {name: value}})


@pytest.mark.parametrize("name, value, sent", [
    ("SPEC_CONTROLLER_LEAN_OFF", " Off ", " Off "), ("SPEC_CONTROLLER_PLAIN_OFF", True, "1"),
    ("SPEC_CONTROLLER_DRAFT_KV_COALESCE", 4, "4"), ("SPEC_CONTROLLER_DRAFT_KV_COALESCE", "0", "0"),
    ("SPEC_CONTROLLER_EXPERIMENTS", "yes", "yes"), ("SPEC_CONTROLLER_PLUGIN", True, "1")])
def test_env_passes_what_the_plugin_reads(name, value, sent):
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "env": {name: value}})
    assert eng.user_env == {name: sent}


def test_every_variable_the_plugin_reads_is_known_to_the_env_check():
    """A switch added to the plugin but not to envwords would be refused in [sglang] env as unknown."""
    import re
    from pathlib import Path
    from controller import envwords
    from controller.daemon.engines.sglang_env import DAEMON_ENV
    source = "".join(p.read_text() for p in Path(contract.__file__).parent.rglob("*.py"))
    read = set(re.findall(r'"(SPEC_CONTROLLER_[A-Z_]+)"', source)) - {"SPEC_CONTROLLER_SGLANG_PYTHON"}
    known = envwords.OPERATOR_SWITCHES | {envwords.PLUGIN_ENV, contract.ENV_DRAFT_KV_COALESCE} | set(DAEMON_ENV)
    assert read and read <= known, read - known


def test_a_telemetry_socket_path_too_long_for_a_unix_socket_is_one_line_at_the_start(monkeypatch, short_tmp):
    """Was zmq's ZMQError out of start() (a traceback); nothing launched, the path left alone."""
    run = short_tmp / ("r" * (110 - len(str(short_tmp))))
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(run))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    fake = fake_sglang_python(short_tmp / "python", f"touch {short_tmp}/launched")
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "python": str(fake)})
    with pytest.raises(EngineError, match=r"telemetry socket .*telemetry.ipc: too long for a unix socket \(\d+ bytes, at most 107\)"):
        eng.start(lambda s: None)
    assert eng.proc is None and not (short_tmp / "launched").exists() and not run.exists()
