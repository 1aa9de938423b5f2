"""The real engine: SGLang's OpenAI-compatible server as a supervised child process.

A child (not in-process) because SGLang installs its own SIGTERM/SIGQUIT handlers in the process that runs its
server, and because the daemon must outlive an engine crash to record it and exit non-zero (systemd then restarts
both). The plugin inside SGLang's scheduler processes sends telemetry over zmq; thresholds go through SGLang's
/set_internal_state, i.e. the scheduler's request path, the same order on every TP rank."""
from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from ...contract import (ENV_ADDRESS, ENV_DRAFT_KV, ENV_INITIAL_THRESHOLD, ENV_LEAN_PREFILL, MAX_BATCH,
                         MAX_TELEMETRY_MESSAGE, PAYS_DRAFT, SAME_AT_ZERO, THRESHOLD_KEY, decode,
                         zero_saves_prefill_draft)
from ...numtext import plain
from ...outfile import write_private
from ...paths import socket_path_too_long, state_dir, systemd_dir
from ..intake import Undecodable
from ..sockprobe import NOBODY, who_listens
from .base import Engine, EngineError, EngineNotInstalled, SampleSink
from .child import NOT_STARTED, USAGE, DropWatch, bound_to_daemon, port_reason, telemetry_pull
from .sglang_env import KILLPG_ENV, plugin_env, user_env
from .sglang_flags import admin_headers, refused_hint, relay_masked, secrets_in, server_flags, shown
from .sglang_install import NoAnswer, interpreter_reason
from .sglang_section import OWN_DEFAULTS, checked_section, count, seconds

# what an HTTP exchange with SGLang may end in short of an answer (IncompleteRead, a bad status line: HTTPException)
NO_ANSWER = (OSError, urllib.error.URLError, http.client.HTTPException)

log = logging.getLogger("spec_controller.sglang")

STOP_QUIET_S = 0.5     # on stop, telemetry is read until quiet this long (the engine's drain reports last) ...
STOP_READ_S = 5.0      # ... or this long at most
FAILING_AFTER_S = 20.0  # a probe unanswered this long is failing (SGLang's /health_generate says 503 after ~20 s)

# SGLang 0.5.23 warns at every start that `python -m sglang.launch_server` is not its recommended entry point ("use
# sglang serve"): the daemon, not the operator, launches it so (the module every release since 0.5.17 has), and the
# line in the journal would ask the operator to change what they cannot. Only that warning is filtered.
QUIET_ENTRY_POINT = ("-W", "ignore:'python -m sglang.launch_server' is still supported:UserWarning")


class SGLangEngine(Engine):
    name = "sglang"
    # The launch keys the daemon decides: the adaptive flags always (command), the draft's shape, host and port where
    # the config leaves them (sglang_section); from-launch tells an operator of these rather than refusing them
    DECIDES = frozenset({"speculative_adaptive", "speculative_adaptive_config", "speculative_num_steps",
                         "speculative_num_draft_tokens", "speculative_eagle_topk", "host", "port"})

    def __init__(self, args: dict, initial_threshold: int = 0):
        self.args, self.k = checked_section(args)
        self.host = str(self.args["host"])
        self.port = self.args["port"]
        self.max_batch_size = count(self.args, "max_running_requests", 256, 1, MAX_BATCH)
        self.initial_threshold = initial_threshold
        self.proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._rx: threading.Thread | None = None
        self._log_relay: threading.Thread | None = None
        self.plugin_stats: dict = {}
        self.undecodable = Undecodable()        # telemetry messages decode() refused: counted, and when and what
        # A live process whose scheduler stopped answering (e.g. ranks out of step) is as good as gone.
        self.plugin_env = plugin_env(self.args)
        self.user_env = user_env(self.args)
        self.ready_timeout_s = seconds(self.args, "ready_timeout_s", OWN_DEFAULTS["ready_timeout_s"])   # (lifecycle waits)
        self.probe_s = seconds(self.args, "probe_s", OWN_DEFAULTS["probe_s"], 86400.0)
        self.hang_after_s = seconds(self.args, "hang_after_s", OWN_DEFAULTS["hang_after_s"])
        self._failing_since: float | None = None
        self._last_probe: tuple[float, str] = (0.0, "")       # (monotonic time, what the last probe got)
        self._probing_since: float | None = None                # the start of the probe waiting for its answer
        run = systemd_dir("RUNTIME_DIRECTORY") or state_dir()
        self.ipc_path = run / "telemetry.ipc"
        self.adaptive_config = state_dir() / "adaptive.json"
        self.own_files = (("the engine's telemetry socket", self.ipc_path), ("SGLang's adaptive config", self.adaptive_config))

    @property
    def spec_steps(self) -> int:
        return self.k

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def server_argv(self) -> list[str]:
        """launch_server's arguments: the section's flags and the adaptive slot the plugin steers through."""
        return [*server_flags(self.args), "--speculative-adaptive", "--speculative-adaptive-config",
                str(self.adaptive_config)]

    def command(self) -> list[str]:
        return [self.args.get("python", sys.executable), *QUIET_ENTRY_POINT, "-m", "sglang.launch_server",
                *self.server_argv()]

    def check_installed(self) -> None:
        """Refuse before launching anything when the interpreter that would run SGLang ([sglang] python, else the
        daemon's) lacks SGLang or spec-controller's plugin, or its SGLang is unsupported (sglang_install)."""
        python = self.args.get("python") and str(self.args["python"])
        try:
            reason = interpreter_reason(python, {**os.environ, **self.user_env})
        except NoAnswer as e:
            raise EngineError(f"sglang engine: {e}") from None
        if reason:
            raise EngineNotInstalled(f"sglang engine: {reason}")

    def start(self, on_sample: SampleSink) -> None:
        if reason := port_reason(self.host, self.port):
            raise EngineError(f"sglang engine: {reason}")
        # (check_installed: run's preflight asked it moments ago, before the database; not asked twice per start)
        if too_long := socket_path_too_long(self.ipc_path):     # (was zmq's ZMQError out of the start, a traceback)
            raise EngineError(f"telemetry socket {self.ipc_path}: {too_long}; set RUNTIME_DIRECTORY to a shorter one")
        self.ipc_path.parent.mkdir(parents=True, exist_ok=True)
        self.adaptive_config.parent.mkdir(parents=True, exist_ok=True)
        # zmq's ipc bind unlinks whatever is at the path: only ever a socket (a crashed run's).
        if self.ipc_path.is_symlink() or (self.ipc_path.exists() and not self.ipc_path.is_socket()):
            raise EngineError(f"telemetry socket path {self.ipc_path} exists and is not a socket; refusing to remove it")
        if self.ipc_path.is_socket() and who_listens(self.ipc_path)[0] != NOBODY:     # (another daemon's: same state directory)
            raise EngineError(f"telemetry socket {self.ipc_path} is in use by another daemon's engine; give each daemon "
                              "its own state directory (XDG_STATE_HOME, or STATE_DIRECTORY and RUNTIME_DIRECTORY)")
        # One slot, candidate steps {0, K}: the plugin picks between them per batch.
        try:
            write_private(self.adaptive_config, json.dumps({"1": {"candidate_steps": [0, self.k]}}).encode())
        except OSError as e:
            raise EngineError(f"cannot write {self.adaptive_config}: {e.strerror} (a symbolic link there is refused)") \
                from None
        pull = telemetry_pull(f"ipc://{self.ipc_path}")
        self._rx = threading.Thread(target=self._receive, args=(pull, on_sample), name="telemetry", daemon=True)
        self._rx.start()
        env = {**os.environ, **self.plugin_env, **KILLPG_ENV, ENV_ADDRESS: f"ipc://{self.ipc_path}",
               ENV_INITIAL_THRESHOLD: str(self.initial_threshold), **self.user_env}
        cmd = self.command()
        log.info("starting SGLang: %s", " ".join(shown(cmd)))
        secrets = secrets_in(self.args)      # with any: its output passes through the daemon, the secrets masked
        piped = {}
        if secrets:                          # (unbuffered: its prints reach the relay as they are made)
            env.setdefault("PYTHONUNBUFFERED", "1")
            piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        # (the daemon's process group: SGLANG_KILLPG_ON_SCHEDULER_EXCEPTION is held off, sglang_env.KILLPG_ENV)
        self.proc = subprocess.Popen(bound_to_daemon(cmd), env=env, **piped)
        if secrets:
            self._log_relay = threading.Thread(target=relay_masked, args=(self.proc.stdout, secrets, sys.stderr),
                                               name="sglang-log", daemon=True)
            self._log_relay.start()

    def _receive(self, pull, on_sample: SampleSink) -> None:
        import zmq
        last_read_by, drops = None, DropWatch(pull)
        poller = zmq.Poller()
        poller.register(pull, zmq.POLLIN)
        poller.register(drops.monitor, zmq.POLLIN)
        while True:
            # once stopping: read until the sender's connection is gone (its last message comes before its end of
            # stream) and the socket has been quiet for STOP_QUIET_S, STOP_READ_S at most (quiet alone lost the
            # drain's message on a loaded host: zmq's I/O thread had not yet read it)
            stopping = self._stop.is_set()
            if stopping and last_read_by is None:
                last_read_by = time.monotonic() + STOP_READ_S
            wait_ms = 200 if not stopping else min(STOP_QUIET_S, max(0.0, last_read_by - time.monotonic())) * 1000
            ready = dict(poller.poll(int(wait_ms) + 1))    # (stopping: never past STOP_READ_S, what stop() joins for)
            for _ in range(drops.dropped() if drops.monitor in ready else 0):
                self.undecodable.refused(None, f"a message over {MAX_TELEMETRY_MESSAGE} bytes (or not zmq's) dropped "
                                              "its sender's connection")
            if stopping and (time.monotonic() > last_read_by or not ready and not drops.connected()):
                break
            if pull not in ready:
                continue
            try:
                raw = pull.recv(zmq.NOBLOCK)
                msg = decode(raw)
            except zmq.Again:
                continue
            except ValueError as e:
                self.undecodable.refused(raw, str(e))
                continue
            if isinstance(msg, dict):
                self.plugin_stats = msg
            else:
                self.undecodable.samples_came()
                for sample in msg:
                    on_sample(sample)
        drops.close()
        pull.close(linger=0)

    def _get(self, path: str, timeout: float = 5.0):
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as resp:
            return resp.status, resp.read()

    def wait_ready(self, timeout: float, cancel: threading.Event | None = None) -> bool:
        cancel = cancel or threading.Event()
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc is None or self.proc.poll() is not None or cancel.is_set():
                return False
            try:
                if self._get("/health", 2.0)[0] == 200:
                    return True
            except NO_ANSWER:
                pass
            cancel.wait(1.0)
        return False

    def not_ready_reason(self, timeout: float) -> str:
        code = self.proc.poll() if self.proc else None
        if code is None:
            return f"SGLang was not ready within {plain(timeout)} s ([sglang] ready_timeout_s)"
        if code in NOT_STARTED:
            return f"SGLang could not be started (code {code}; the line above says why)"
        if code == USAGE:
            return f"SGLang exited with code {code} before it was ready (argparse's: a launch flag refused?)"
        how = f"exited with code {code}" if code >= 0 else f"was killed by {signal.Signals(-code).name}"
        return f"SGLang {how} before it was ready (its own last lines, above in the log, say why)"

    def not_ready_code(self) -> int:
        """2 where SGLang exited 2 before it was ready: argparse's status, a flag or a value refused, which the next start
        would pass it again (launchcheck.not_ready_exit asks SGLang's parser to confirm it)."""
        return 2 if self.proc is not None and self.proc.poll() == USAGE else 1

    def set_threshold(self, threshold: int) -> None:
        body = json.dumps({"server_args": {THRESHOLD_KEY: int(threshold)}}).encode()
        req = urllib.request.Request(self.base_url + "/set_internal_state", data=body, method="POST",
                                     headers={"Content-Type": "application/json", **admin_headers(self.args)})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                answer = json.loads(resp.read() or b"null")
        except (*NO_ANSWER, ValueError, RecursionError) as e:    # (not JSON, not UTF-8, nested past the limit)
            raise EngineError(f"set_internal_state failed: {e}{refused_hint(e)}") from None
        updated = answer if isinstance(answer, list) else [answer.get("updated") if isinstance(answer, dict) else answer]
        if not updated or not all(updated):
            raise EngineError(f"SGLang refused threshold {threshold} (plugin inactive or invalid; see its log)")

    def now(self) -> float:
        return time.time()

    def prefills_pay_draft(self) -> bool:
        """What the plugin's stats say (contract PAYS_DRAFT); before the first, or from a plugin before it, the
        configuration: lean prefill without the KV writer (with it the pass is skipped at any threshold, without
        lean prefill it runs at 0 too)."""
        said = self.plugin_stats.get("prefills_pay_draft", 0)
        if said in (PAYS_DRAFT, SAME_AT_ZERO):
            return said == PAYS_DRAFT
        return zero_saves_prefill_draft(self.plugin_env.get(ENV_LEAN_PREFILL) == "1",
                                        self.plugin_env.get(ENV_DRAFT_KV) == "1")

    def probe(self, now: float | None = None) -> bool:
        """GET /health_generate: SGLang answers 200 once its scheduler returns output (at once when busy,
        after a 1-token request when idle) and 503 after ~20 s without it."""
        now = self._probing_since = time.monotonic() if now is None else now
        try:
            got = f"HTTP {self._get('/health_generate', timeout=60.0)[0]}"
        except urllib.error.HTTPError as e:
            got = f"HTTP {e.code}"
        except NO_ANSWER as e:
            got = str(getattr(e, "reason", e)) or type(e).__name__
        finally:
            self._probing_since = None
        ok = got == "HTTP 200"
        self._failing_since = None if ok else now if self._failing_since is None else self._failing_since
        self._last_probe = (now, got)
        return ok

    def unanswered_s(self, now: float | None = None) -> float:
        """From a run of failed probes' first start to its last's, or to now once the next has waited FAILING_AFTER_S."""
        first, since, now = self._failing_since, self._probing_since, time.monotonic() if now is None else now
        end = now if since is not None and now - since >= FAILING_AFTER_S else self._last_probe[0]
        return 0.0 if first is None else end - first        # (each read once: probe() runs in another thread)

    @property
    def bad_messages(self) -> int:
        """Telemetry messages decode() refused, this run."""
        return self.undecodable.count

    def health(self, now: float | None = None) -> dict:
        alive = self.proc is not None and self.proc.poll() is None
        detail = "running" if alive else f"exited with {self.proc.returncode if self.proc else '?'}"
        unanswered = self.unanswered_s(now)
        hung = alive and self.hang_after_s > 0 and unanswered >= self.hang_after_s
        if alive and self._failing_since is not None:
            detail = (f"{'hung' if hung else 'running'}: /health_generate unanswered for {unanswered:.0f} s "
                      f"(last: {self._last_probe[1]}; hang_after_s = {self.hang_after_s:.0f})")
        if alive and self._rx is not None and not self._rx.is_alive():
            hung, detail = True, "the telemetry receiver thread died"
        return {"ok": alive and not hung, "engine": "sglang", "url": self.base_url, "detail": detail, "k": self.k,
                "plugin": self.plugin_stats, "bad_telemetry": self.bad_messages, "telemetry": self.undecodable.stalled(),
                "unanswered_s": round(unanswered, 1)}

    def stop(self, timeout: float = 60.0) -> None:
        """SGLang's drain and exit, then its last telemetry, within `timeout` in all (what is left of the daemon's)."""
        end = time.monotonic() + timeout
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(max(0.0, timeout - STOP_READ_S - 1))     # (what comes after keeps its time)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:
                    self.proc.wait(max(1.0, end - time.monotonic()))
                except subprocess.TimeoutExpired:   # (stuck in the kernel: not waited for)
                    log.error("SGLang (pid %d) did not exit when killed", self.proc.pid)
        # Telemetry is received until SGLang is gone: its schedulers report the batches of its drain.
        self._stop.set()
        for thread in (self._rx, self._log_relay):
            if thread is not None:           # (the relay: SGLang's last lines, written by now)
                thread.join(min(STOP_READ_S + 1, max(0.0, end - time.monotonic())))
