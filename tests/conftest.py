import contextlib
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


LEFT_GRACE_S = 10.0        # what a thread or a child on its way out at the session's end is given before it counts


def left_running() -> list[str]:
    """This process's non-daemon threads but the main one, and its child processes that have not exited (a zombie
    is reaped by its Popen's next poll: not running)."""
    left = [f"thread {t.name!r}" for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    for task in os.listdir("/proc/self/task"):
        try:
            children = Path(f"/proc/self/task/{task}/children").read_text().split()
        except OSError:         # (a thread gone meanwhile)
            continue
        for pid in children:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if stat[stat.rindex(")") + 2] != "Z":
                left.append(f"child pid {pid} ({command.strip()[:120]})")
    return left


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_running():
    """The session (each xdist worker's) fails, as an error at its last test's teardown, where its tests left a
    non-daemon thread or a child process running: a daemon a test never stopped outlived the run (helper-163)."""
    yield
    deadline = time.monotonic() + LEFT_GRACE_S
    while (left := left_running()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"the tests left running: {'; '.join(left)}"


@pytest.fixture
def short_tmp():
    """A short directory (unix socket paths are limited to ~107 bytes)."""
    d = tempfile.mkdtemp(prefix="sc-", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def unheld_port() -> int:
    """A TCP port nothing on this host listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def _sglang_default_port_unheld(monkeypatch):
    # An engine's start refuses an SGLang port something holds, and on a GPU host SGLang itself serves on the default
    # (30000): twelve tests failed there. Their fake SGLang never binds, so any port nobody holds will do.
    monkeypatch.setattr("controller.daemon.engines.sglang_section.SGLANG_PORT", unheld_port())


# The modules that look for the service's socket and database (paths' find_*, specctl's); the daemon's preflight only
# names them in its refusals
UNIT_PATH_READERS = ("controller.paths", "controller.cli.common")
# preflight names the unit's paths in its refusals: imported here, it binds the real ones (first imported inside a test,
# under the fixture below, it kept that test's stand-in for every later test: tests/test_config_paths.py alone failed)
import controller.daemon.preflight  # noqa: E402,F401


@pytest.fixture(autouse=True)
def _service_paths_absent(monkeypatch, tmp_path):
    # On a host where the service is installed (a GPU host: where the torch tests are meant to run) specctl takes the
    # service's socket and database by default: fourteen tests failed there (newcomer-54). Tests about the service's
    # paths set their own.
    unit = tmp_path / "no-service"
    for module in UNIT_PATH_READERS:
        monkeypatch.setattr(f"{module}.UNIT_DB", unit / "spec-controller.db")
        monkeypatch.setattr(f"{module}.UNIT_SOCKET", unit / "control.sock")


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path):
    # Never touch the real user's or the service's state from a test.
    # (short: the default control socket under it must fit a unix socket's 107 bytes, which pytest's tmp_path may not)
    state = tempfile.mkdtemp(prefix="xs-", dir="/tmp")
    monkeypatch.setenv("XDG_STATE_HOME", state)
    for var in ("SPECCTL_SOCKET", "SPECCTL_DB", "STATE_DIRECTORY", "RUNTIME_DIRECTORY", "NOTIFY_SOCKET"):
        monkeypatch.delenv(var, raising=False)
    yield
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def sglang_eagle_utils(monkeypatch):
    """SGLang's _eagle_prefill_tail_tokens (the plugin's prompt writes import it): the request's first output token
    (no chunked request in the tests that use it)."""
    from types import ModuleType
    mod = ModuleType("sglang.srt.speculative.eagle_utils")
    mod._eagle_prefill_tail_tokens = lambda batch, next_ids: next_ids
    for name in ("sglang", "sglang.srt", "sglang.srt.speculative"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)


def fake_sglang_python(path, body: str = "exit 0", sglang: str | None = "0.5.17", plugin: bool = True,
                       platforms: tuple = ()):
    """An executable standing for the interpreter [sglang] python names: it answers the daemon's installed-packages
    question (engines/sglang_install.ASK, run with -c) as an interpreter with these packages would, and runs the
    shell `body` for anything else (sglang.launch_server)."""
    import json
    answer = json.dumps({"sglang": sglang, "plugins": ["spec_controller"] if plugin else [], "platforms": list(platforms)})
    path.write_text(f"#!/bin/sh\nif [ \"$1\" = -c ]; then echo '{answer}'; exit 0; fi\n{body}\n")
    path.chmod(0o755)
    return path


# SGLang's launch parser as a stand-in package (tests where no SGLang is installed): the flags the daemon's launch of a
# minimal [sglang] section passes, typed as SGLang types them, and one SGLang calls deprecated
STUB_SERVER_ARGS = """
import argparse
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        for flag in ("--model-path", "--speculative-algorithm", "--speculative-draft-model-path", "--host",
                     "--speculative-adaptive-config"):
            parser.add_argument(flag)
        for flag in ("--speculative-num-steps", "--speculative-num-draft-tokens", "--speculative-eagle-topk", "--port",
                     "--tp-size"):
            parser.add_argument(flag, type=int)
        parser.add_argument("--mem-fraction-static", type=float)
        parser.add_argument("--speculative-adaptive", action="store_true")
        parser.add_argument("--disable-cuda-graph", action="store_true", help="Deprecated: use --cuda-graph-mode.")
"""


# its launch_server: argparse over those flags (exit 2 and argparse's line on a refusal), then an exit 0 standing for a
# server that stopped before it was ready
STUB_LAUNCH_SERVER = """
import argparse, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="launch_server.py")
ServerArgs.add_cli_args(parser)
parser.parse_args(sys.argv[1:])
"""


def stub_sglang_python(path, version: str = "0.5.17"):
    """fake_sglang_python whose launchparse.py runs in this interpreter against STUB_SERVER_ARGS (a stand-in for
    SGLang's parser; tests/test_launchcfg.py runs the real one where an interpreter has SGLang)."""
    import sys
    root = path.parent / "stub-site"
    (root / "sglang" / "srt").mkdir(parents=True, exist_ok=True)
    (root / "sglang" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (root / "sglang" / "srt" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "server_args.py").write_text(STUB_SERVER_ARGS)
    (root / "sglang" / "launch_server.py").write_text(STUB_LAUNCH_SERVER)
    return fake_sglang_python(path, f'PYTHONPATH="{root}" exec "{sys.executable}" "$@"', sglang=version)


def scripted_socket(path, answer: bytes | None = None, read: bool = True, drops: int | None = None):
    """A unix socket standing for a daemon that sends each connection `answer` (None: nothing) and closes it, after
    reading the request or without (read=False: the unread bytes make the client's read ECONNRESET); after `drops`
    connections (None: never) it closes and unlinks itself, as a stopping daemon does. -> (listener, served: one
    entry a connection)."""
    import socket
    import threading
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(8)
    listener.settimeout(0.1)        # (the caller's close() does not wake an accept() blocked in this thread: it looks)
    served: list[int] = []

    def serve():
        while drops is None or len(served) < drops:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if read:
                conn.recv(65536)
            if answer:
                conn.sendall(answer)
            conn.close()
            served.append(1)
        listener.close()
        path.unlink()
    threading.Thread(target=serve, daemon=True).start()
    return listener, served


@contextlib.contextmanager
def repeat_filtered(clock=lambda: 0.0):
    """The spec_controller log's records that pass the daemon's RepeatFilter (a minute's interval, `clock`) while
    inside: a list filled as they are logged."""
    from controller.daemon.logs import RepeatFilter
    records: list = []
    handler = logging.Handler()
    handler.emit = records.append
    handler.addFilter(RepeatFilter(interval_s=60, clock=clock))
    logger = logging.getLogger("spec_controller")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def unremovable_left_over(path, monkeypatch, code: int) -> None:
    """A unix socket at `path` that nobody listens on (a crashed run's) and that unlink refuses with errno `code`
    (another user's in a sticky /tmp: EPERM; a read-only mount: EROFS)."""
    import errno
    import os
    import pathlib
    import socket
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(path))
    left.close()
    real_unlink = pathlib.Path.unlink

    def refuse(self, missing_ok=False):
        if self == path:
            raise (PermissionError if code in (errno.EPERM, errno.EACCES) else OSError)(code, os.strerror(code), str(self))
        return real_unlink(self, missing_ok=missing_ok)
    monkeypatch.setattr(pathlib.Path, "unlink", refuse)


@pytest.fixture
def offline(short_tmp):
    """A database and no daemon: specctl saves what it is told there (offline steering). -> (its args, the db)."""
    from state.db import open_store
    db = short_tmp / "off.db"
    open_store(db).conn.close()
    return ["--socket", str(short_tmp / "none.sock"), "--db", str(db)], db


def saved_settings(db) -> dict:
    """The settings an offline specctl saved in db (read-only, the connection closed)."""
    from state import queries
    from state.db import open_store
    store = open_store(db, readonly=True, check=False)
    try:
        return queries.settings(store)
    finally:
        store.conn.close()


def as_nobody(fn) -> object:
    """fn() in a forked child as the user nobody (65534) where the tests run as root (root passes every mode check),
    as themselves otherwise; its result (a literal: None, str, tuple, ...) comes back through a pipe."""
    import ast
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                               # (the child: no pytest from here on, os._exit whatever happens)
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            os.write(w, repr(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        answer = f.read()
    os.waitpid(pid, 0)
    return ast.literal_eval(answer)
