"""Tests from the mutation pass over the changes since 52c28b6 (bench/results/mutation-keys-2026-12-05.md): each kills a
mutant the focused suite let through (its id in a comment). No SGLang needed, no timing assertions."""
import io
import json
import os
import re
import sys

import pytest

from controller.cli import client
from controller.cli.client import DaemonError, request
from controller.daemon.engines import sglang as engine_module
from controller.daemon.engines import sglang_install
from controller.daemon.engines.base import EngineError
from controller.daemon.engines.sglang import SGLangEngine
from controller.daemon.engines.sglang_flags import (admin_headers, given_keys, relay_masked, secret_key, shown,
                                                    shown_value)
from controller.daemon.launchcfg import write_whole
from controller.daemon.launchcmd import CommandError, path_notes, split_command
from tests.conftest import fake_sglang_python, scripted_socket

BASE = {"model_path": "/m", "speculative_algorithm": "EAGLE3"}


# --- sglang_flags: what counts as a key, what is shown ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["hf_token", "GOOGLE_APPLICATION_CREDENTIALS", "CLIENT_SECRET", "PASSWORD", "TOKEN",
                                  "KEYRING_PASS"])
def test_secret_named_variables_of_any_case_and_kind_are_shown_as_stars(name):        # F01 F02 F03 F13
    assert shown_value(f"env.{name}", "s3cr3t") == "***"
    assert path_notes({"env": {name: "/tmp/s3cr3t"}}) == []
    assert shown_value("env.NCCL_DEBUG", "INFO") == "INFO"


def test_the_shortest_abbreviations_argparse_takes_are_the_key_flags():                  # F05
    assert (secret_key("--ap"), secret_key("--ad=x"), secret_key("--a"), secret_key("--api-keys")) == \
        ("api_key", "admin_api_key", None, None)
    args = {**BASE, "extra_args": ["--ap", "sk-AP", "--ad=adm-AD"]}
    logged = " ".join(shown(SGLangEngine(args).command()))
    assert "sk-AP" not in logged and "adm-AD" not in logged and "--ap *** --ad=***" in logged
    assert admin_headers(args) == {"Authorization": "Bearer adm-AD"}


def test_a_key_flag_with_no_value_after_it_is_no_key_and_no_crash():                     # F08
    assert shown(["--model-path", "m", "--api-key"]) == ["--model-path", "m", "--api-key"]
    assert given_keys({"extra_args": ["--api-key"]}) == {"api_key": [], "admin_api_key": []}
    assert admin_headers({"extra_args": ["--api-key"]}) == {}


def test_an_empty_or_unset_key_in_the_table_is_no_key():                                 # F15
    assert given_keys({"api_key": "", "admin_api_key": None}) == {"api_key": [], "admin_api_key": []}
    assert admin_headers({"api_key": "", "admin_api_key": None}) == {}


def test_the_last_key_given_wins_over_the_tables_as_argparse_has_it():                   # F18
    assert admin_headers({"api_key": "sk-table", "extra_args": ["--api-key", "sk-first", "--api-key=sk-last"]}) == \
        {"Authorization": "Bearer sk-last"}
    assert given_keys({"api_key": "sk-table", "extra_args": ["--api-key", "sk-last"]})["api_key"] == \
        ["sk-table", "sk-last"]


def test_a_key_inside_another_is_masked_whole():                                          # F21
    out = io.BytesIO()
    relay_masked(io.BytesIO(b"api_key='sk-1234' admin='sk-1'\n"), ["sk-1", "sk-1234"], out)
    assert out.getvalue() == b"api_key='***' admin='***'\n"


# --- sglang_install: the interpreter's answer, the install hint ---------------------------------------------------
def _python(short_tmp, body: str):
    python = short_tmp / "python"
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    return str(python)


def test_the_answer_is_the_last_line_an_interpreter_prints(short_tmp):                   # I04
    answer = json.dumps({"sglang": "0.5.17", "plugins": ["spec_controller"], "platforms": []})
    assert sglang_install.interpreter_reason(_python(short_tmp, f"echo 'a warning from sitecustomize'; echo '{answer}'")) \
        is None


@pytest.mark.parametrize("answer", ['{"sglang": "0.5.23", "plugins": ["spec_controller"], "platforms": null}',
                                    '{"sglang": "0.5.23", "plugins": ["spec_controller"], "platforms": [1]}',
                                    '{"sglang": "0.5.23", "plugins": ["spec_controller", 2], "platforms": []}'])
def test_platforms_and_plugins_must_be_lists_of_names(short_tmp, answer):                # I05 I06
    reason = sglang_install.interpreter_reason(_python(short_tmp, f"echo '{answer}'"))
    assert reason.endswith(f"cannot ask what it has installed (answered {answer!r})"), reason


def test_an_interpreter_killed_by_a_signal_is_said_so(short_tmp):                        # I07
    python = _python(short_tmp, "kill -9 $$")
    assert sglang_install.interpreter_reason(python) == \
        f"[sglang] python = {python}: cannot ask what it has installed (exited -9: no output)"


def test_the_last_line_of_a_failing_interpreters_stderr_is_said(short_tmp):              # I08
    python = _python(short_tmp, "echo 'Traceback (most recent call last):' >&2; echo 'ImportError: boom' >&2; exit 1")
    assert sglang_install.interpreter_reason(python).endswith("(exited 1: ImportError: boom)")


class _Dist:
    def __init__(self, direct_url):
        self.direct_url = direct_url

    def read_text(self, name):
        assert name == "direct_url.json"
        return self.direct_url


@pytest.mark.parametrize("dists,source", [
    ([_Dist('{"url": "file:///srv/my%20clone", "dir_info": {"editable": true}}')], "/srv/my clone"),      # I09
    ([_Dist('{"url": "https://github.com/o/spec-controller.git", "vcs_info": {"vcs": "git", "commit_id": "ab"}}')],
     "git+https://github.com/o/spec-controller.git"),                                                  # I10
    ([_Dist(None), _Dist('{"url": "file:///srv/clone", "dir_info": {}}')], "/srv/clone"),           # I11: an egg-info
    ([_Dist('{"dir_info": {}}')], "spec-controller"),                                                # I12: no url
    ([], "spec-controller"),
])
def test_the_install_source_read_from_pips_record(monkeypatch, dists, source):
    import importlib.metadata
    monkeypatch.setattr(importlib.metadata, "distributions", lambda **kw: iter(dists))
    assert sglang_install.install_source() == source


def test_the_missing_sglang_hint_installs_spec_controller_with_its_sglang_extra(monkeypatch):   # I13
    monkeypatch.setattr(sglang_install, "install_source", lambda: "/srv/my clone")
    found = {"sglang": None, "plugins": [], "platforms": []}
    assert sglang_install.installed_reason(found, "X", "/v/bin/python -m pip") == \
        "X has no sglang installed (/v/bin/python -m pip install '/srv/my clone[sglang]')"


def test_the_missing_sglang_hint_from_a_git_install_is_one_pip_reads(monkeypatch):
    """pip takes no extra after a URL ('URL[sglang]' would be cloned as that URL): 'NAME[extra] @ URL'."""
    monkeypatch.setattr(sglang_install, "install_source", lambda: "git+https://github.com/o/spec-controller.git")
    found = {"sglang": None, "plugins": [], "platforms": []}
    assert sglang_install.installed_reason(found, "X", "pip") == \
        "X has no sglang installed (pip install 'spec-controller[sglang] @ git+https://github.com/o/spec-controller.git')"


@pytest.mark.parametrize("python", ["", "  ", 3])
def test_an_empty_interpreter_is_refused_not_launched(python):                                   # I16
    """check_installed judged the daemon's own interpreter for python = "" while command() launched ""."""
    with pytest.raises(EngineError, match=r"\[sglang\] python must name an interpreter"):
        SGLangEngine({**BASE, "python": python})


def test_an_env_that_is_not_a_table_is_refused_without_repeating_it():
    with pytest.raises(EngineError) as err:
        SGLangEngine({**BASE, "env": "HF_TOKEN=hf_SECRET"})
    assert "hf_SECRET" not in str(err.value) and "[sglang] env must be a table" in str(err.value)


@pytest.mark.parametrize("text", ["python -m sglang.launch_server --model-path $1", "python -m sglang.launch_server --x $$",
                                  "python -m sglang.launch_server --y \"$@\""])
def test_the_shells_other_expansions_are_refused_in_a_pasted_line(text):
    with pytest.raises(CommandError, match="shell variables or substitutions"):
        split_command([text])
    assert path_notes({"served_model_name": text.split()[-1].strip('"')})      # and noted in a config


def test_another_plugin_is_not_spec_controllers(monkeypatch):                            # I14
    monkeypatch.setattr(sglang_install, "install_source", lambda: "/srv/c")
    found = {"sglang": "0.5.17", "plugins": ["other_plugin"], "platforms": []}
    assert sglang_install.installed_reason(found, "X", "pip") == \
        "X has sglang 0.5.17 but not spec-controller: SGLang would run without the plugin (pip install /srv/c)"


def test_no_interpreter_named_is_the_daemons_own_and_its_pip(monkeypatch):               # I17
    monkeypatch.setattr(sglang_install, "own_installed", lambda: {"sglang": None, "plugins": [], "platforms": []})
    monkeypatch.setattr(sglang_install, "install_source", lambda: "/srv/c")
    own = f"this interpreter ({sys.executable}) has no sglang installed ({sys.executable} -m pip install '/srv/c[sglang]')"
    assert sglang_install.interpreter_reason(None) == own


def test_the_question_runs_with_the_daemons_environment_too(short_tmp, monkeypatch):    # S01
    """[sglang.env] is added to the daemon's environment (as the launch gets it), not in place of it."""
    monkeypatch.setenv("SC_TEST_VERSION", "0.5.17")
    python = _python(short_tmp, 'echo "{\\"sglang\\": \\"$SC_TEST_VERSION\\", \\"plugins\\": [\\"spec_controller\\"], '
                                '\\"platforms\\": []}"')
    SGLangEngine({**BASE, "python": python, "env": {"OTHER": "1"}}).check_installed()


# --- the SGLang engine: the relay's start and stop, user_env's refusal ------------------------------------------------
def _started(short_tmp, monkeypatch, body: str, **args) -> SGLangEngine:
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    eng = SGLangEngine({**BASE, "python": str(fake_sglang_python(short_tmp / "python", body)), **args})
    eng.start(lambda s: None)
    return eng


def test_a_relayed_sglang_runs_unbuffered_unless_the_env_table_says_otherwise(short_tmp, monkeypatch, capfd):  # S04
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    eng = _started(short_tmp, monkeypatch, 'echo "unbuffered=$PYTHONUNBUFFERED"', api_key="sk-U")
    assert eng.proc.wait(timeout=30) == 0
    eng.stop()
    # (a directory of its own: zmq closes the first engine's telemetry socket in a thread of its own after stop(), so
    # a second start at once on the same path could find it still in use)
    (short_tmp / "second").mkdir()
    eng = _started(short_tmp / "second", monkeypatch, 'echo "unbuffered=$PYTHONUNBUFFERED"', api_key="sk-U",
                   env={"PYTHONUNBUFFERED": "0"})
    assert eng.proc.wait(timeout=30) == 0
    eng.stop()
    err = capfd.readouterr().err
    assert "unbuffered=1\n" in err and "unbuffered=0\n" in err, err


def test_stop_returns_once_sglangs_last_lines_are_relayed(short_tmp, monkeypatch, capfd):                    # S06
    """A child of SGLang's that outlives it holds the pipe: stop() waits for the relay (up to STOP_READ_S + 1 s), not
    only for the telemetry receiver (whose quiet window is made short here)."""
    monkeypatch.setattr(engine_module, "STOP_QUIET_S", 0.01)
    eng = _started(short_tmp, monkeypatch, "(sleep 1; echo 'last line sk-L') & exit 0", api_key="sk-L")
    assert eng.proc.wait(timeout=30) == 0
    eng.stop()
    assert not eng._log_relay.is_alive()
    assert "last line ***" in capfd.readouterr().err


def test_a_secret_named_variable_of_the_wrong_kind_is_refused_without_its_value():                         # S07
    with pytest.raises(EngineError) as err:
        SGLangEngine({**BASE, "env": {"HF_TOKEN": ["hf-SECRET"]}})
    assert "hf-SECRET" not in str(err.value) and "'HF_TOKEN' = '***'" in str(err.value)


# --- launchcmd: pasted lines as a shell reads them -------------------------------------------------------------------
@pytest.mark.parametrize("command,expected", [
    (["# only a comment here"], ({}, None, [], [])),                                                        # W02
    (["export A=1\nsglang serve /m --tp 2"], ({"A": "1"}, None, ["--model-path", "/m", "--tp", "2"], [])),  # W03
    (['python -m sglang.launch_server --model-path "a;b" --x "c\nd"'], ({}, "python", ["--model-path", "a;b", "--x",
                                                                                         "c\nd"], [])),     # W06
    (["python -m sglang.launch_server --model-path m;# started by hand"], ({}, "python", ["--model-path", "m"], [])),  # W07
    (["sglang", "serve"], ({}, None, [], [])),                                                              # W09
])
def test_pasted_lines_more_shapes(command, expected):
    assert split_command(command) == expected


@pytest.mark.parametrize("command,needle", [
    (["vllm serve m --tp 2"], "not an SGLang launch command: vllm serve m"),                                # W01
    (["export HF_HOME\npython -m sglang.launch_server --model-path m"],
     "may only export variables (export NAME=value), got: export HF_HOME"),                                 # W04
    (["python -m sglang.launch_server --chat-template 'a\\'; echo done"], "go on after the launch command (echo done)"),  # W05
])
def test_pasted_lines_more_refusals(command, needle):
    with pytest.raises(CommandError) as err:
        split_command(command)
    assert needle in str(err.value), str(err.value)


def test_a_braced_variable_is_named_as_one_no_shell_expands():                          # W13
    assert path_notes({"served_model_name": "${MODEL}"}) == [
        "served_model_name = ${MODEL}: the service passes it as written, no shell expands the $ in it"]


# --- from-launch's output file ---------------------------------------------------------------------------------------
def test_a_replaced_files_owner_and_group_are_given_back(tmp_path, monkeypatch):        # C03
    target = tmp_path / "config.toml"
    target.write_text("old\n")
    before = target.stat()
    calls = []
    monkeypatch.setattr(os, "chown", lambda path, uid, gid: calls.append((os.path.basename(path), uid, gid)))
    write_whole(str(target), "new\n", private=True)
    assert calls == [(f".config.toml.{os.getpid()}.partial", before.st_uid, before.st_gid)]


def test_a_file_whose_owner_cannot_be_kept_is_still_written(tmp_path, monkeypatch):     # C04
    target = tmp_path / "config.toml"
    target.write_text("old\n")
    os.chmod(target, 0o640)

    def refuse(*a):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "chown", refuse)
    write_whole(str(target), 'api_key = "k"\n', private=True)
    assert target.read_text() == 'api_key = "k"\n' and target.stat().st_mode & 0o777 == 0o640


def test_a_file_without_a_key_keeps_what_others_may_do(tmp_path):                       # C06
    target = tmp_path / "config.toml"
    target.write_text("old\n")
    os.chmod(target, 0o644)
    write_whole(str(target), "new\n")
    assert target.stat().st_mode & 0o777 == 0o644


# --- specctl's client: a dropped connection --------------------------------------------------------------------------
def test_an_answer_cut_inside_its_headers_is_said_as_such_and_not_asked_again(short_tmp):   # N02
    listener, served = scripted_socket(short_tmp / "cut.sock", b"HTTP/1.1 200 OK\r\nContent-")
    try:
        with pytest.raises(DaemonError, match=re.escape("gave no usable answer (connection closed before the answer's "
                                                        "headers)")):
            request(short_tmp / "cut.sock", "GET", "/status")
    finally:
        listener.close()


def test_a_dropped_read_is_asked_again_after_a_pause(short_tmp, monkeypatch):             # N05
    monkeypatch.setattr(client, "DROPPED_RETRY_S", 0.3)
    pauses = []
    real = client.time.sleep
    monkeypatch.setattr(client.time, "sleep", lambda s: (pauses.append(s), real(s)))
    listener, served = scripted_socket(short_tmp / "d.sock")
    try:
        with pytest.raises(DaemonError, match="every time for 0.3 s"):
            request(short_tmp / "d.sock", "GET", "/status")
    finally:
        listener.close()
    assert pauses and set(pauses) == {0.1}


# --- a server the daemon could not reach over HTTP (helper-66: --grpc-mode passed config check) -------------------
@pytest.mark.parametrize("extra", [{"grpc_mode": True}, {"smg_grpc_mode": True}, {"encoder_only": True},
                                   {"extra_args": ["--grpc-mode"]}, {"extra_args": ["--smg-grpc-mode=true"]}])
def test_a_server_without_http_is_refused(extra):
    with pytest.raises(EngineError) as err:
        SGLangEngine({**BASE, **extra})
    assert "SGLang then serves no HTTP API" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("extra", [{"ssl_certfile": "/etc/ssl/c.pem", "ssl_keyfile": "/etc/ssl/k.pem"},
                                   {"ssl_keyfile": "/etc/ssl/k.pem"},
                                   {"extra_args": ["--ssl-certfile", "/etc/ssl/c.pem", "--ssl-keyfile=/etc/ssl/k.pem"]}])
def test_a_server_that_serves_https_only_is_refused(extra):
    """helper-84: from-launch took --ssl-certfile / --ssl-keyfile and config check said ok; SGLang then serves HTTPS
    only and the daemon's http:// health probe never saw it ready (exit 1 after ready_timeout_s, restarted)."""
    with pytest.raises(EngineError) as err:
        SGLangEngine({**BASE, **extra})
    assert "SGLang then serves HTTPS only" in str(err.value) and "\n" not in str(err.value)


def test_grpc_mode_off_is_fine():
    assert SGLangEngine({**BASE, "grpc_mode": False}).args["grpc_mode"] is False
