"""Review of 088cb3f..689c18f: the edges the change set missed."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("host, metrics", [("localhost", "127.0.0.1"), ("LocalHost", "0.0.0.0"),
                                           ("::1", "0:0:0:0:0:0:0:1"), ("0::", "127.0.0.1")])
def test_a_metrics_port_on_sglangs_port_under_another_spelling_of_its_address_is_refused(host, metrics):
    """[sglang] host = "localhost" (or the same address spelt otherwise) with [control] metrics_port = SGLang's port
    passed the check ecde535 added (a string comparison): SGLang bound 127.0.0.1:port, start_metrics failed after the
    engine had loaded, exit 1, restarted for ever - the case that commit meant to refuse."""
    from controller.daemon.config import ConfigError, load_config
    with pytest.raises(ConfigError, match="metrics_port=9100"):
        load_config(None, {"engine": {"kind": "sglang"}, "sglang": {"model_path": "/m", "port": 9100, "host": host},
                           "control": {"metrics_port": 9100, "metrics_addr": metrics}})


def test_an_unpin_of_nothing_while_the_engine_refuses_the_policys_threshold_does_not_say_it_unpinned(short_tmp):
    """`specctl threshold unpin` with nothing pinned (changed: false) while the engine refuses the policy's threshold:
    the refusal is still reported (exit 1), but the line said 'threshold unpinned (saved)': nothing was pinned, and
    nothing was saved."""
    from click.testing import CliRunner

    from controller.cli.main import cli
    from controller.daemon.api import ControlServer
    from tests.fakes import FakeEngine, feed, good, make_service
    engine = FakeEngine()
    svc, writer = make_service(short_tmp, policy="fixed", engine=engine)     # wants threshold 5
    feed(svc, [good(100.0 + i * 0.001) for i in range(5)])
    engine.fail_next = 1000
    svc.retune()
    server = ControlServer(short_tmp / "c.sock", svc)
    server.start()
    try:
        res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "c.sock"), "threshold", "unpin"])
        assert res.exit_code == 1 and res.output.startswith(
            "specctl: threshold was not pinned; nothing changed, but the engine has not taken the policy's threshold 5: "
            "SGLang did not answer; it runs 0"), res.output
        assert "unpinned (saved)" not in res.output
    finally:
        server.stop()
        writer.stop()


def test_an_unpin_refused_by_a_daemon_from_before_refused_threshold_prints_no_none(short_tmp, monkeypatch):
    """specctl updated, the daemon not yet restarted (its answer has `refused` but no `refused_threshold`, added in
    this change set): the refused unpin said 'the engine has not taken the policy's threshold None'."""
    from click.testing import CliRunner

    from controller.cli import steer
    from controller.cli.main import cli
    old = {"threshold": 3, "pinned": False, "exploit_threshold": 5, "trial": False, "changed": True, "pinned_at": None,
           "refused": "SGLang did not answer"}
    monkeypatch.setattr(steer, "call", lambda ctx, method, path, body=None, dropped=False: dict(old))
    res = CliRunner().invoke(cli, ["--socket", str(short_tmp / "c.sock"), "threshold", "unpin"])
    assert res.exit_code == 1 and "None" not in res.output, res.output
    assert res.output.startswith("specctl: threshold unpinned (saved), but the engine has not taken the policy's "
                                 "threshold: SGLang did not answer; it runs 3"), res.output


def test_an_answer_that_is_not_utf8_is_a_refused_threshold_not_an_escape():
    """e8412a7 made an answer cut short a refused threshold (EngineError); an answer whose body is not UTF-8 (a gzip
    body, a latin-1 page) raised UnicodeDecodeError, a ValueError but no JSONDecodeError, past set_threshold's
    handling: the retune failed with the loop believing the engine ran the new threshold (not reverted, no retry)."""
    import socket
    import threading

    from controller.daemon.engines.base import EngineError
    from controller.daemon.engines.sglang import SGLangEngine
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        bodies = [b"\x1f\x8b\x08\x00", b"[" * 100000]        # gzip's magic; nested past the recursion limit

        def serve():
            for body in bodies:
                conn, _ = srv.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        server = threading.Thread(target=serve, daemon=True)
        server.start()
        eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "port": port})
        for _ in bodies:
            with pytest.raises(EngineError, match="set_internal_state failed"):
                eng.set_threshold(4)
        server.join(10)
