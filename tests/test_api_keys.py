"""An operator's SGLang API keys (--api-key, --admin-api-key; kept by config from-launch) never reach a log, an event
or a loosely readable file: the daemon's launch line, SGLang's own output (it logs its server_args whole), a reload's
warnings; and argparse's abbreviations of the flags count as the flags (helper-57's review of 068eccb..52c28b6)."""
import os
import re
import sys

import pytest

from controller.daemon.config import load_config
from controller.daemon.configdiff import restart_needed, shadowed
from controller.daemon.engines.base import EngineError
from controller.daemon.engines.sglang import SGLangEngine
from controller.daemon.engines.sglang_flags import admin_headers, shown
from tests.conftest import fake_sglang_python
from tests.daemon_proc import DaemonProc
from tests.test_faults_config import _events, _hup_and_wait

BASE = {"model_path": "/m", "speculative_algorithm": "EAGLE3"}


@pytest.mark.parametrize("extra,key,header", [
    (["--api", "sk-A"], "sk-A", "sk-A"),                       # SGLang 0.5.17 / 0.5.23 take these as --api-key
    (["--api-k=sk-B"], "sk-B", "sk-B"),
    (["--adm", "adm-C"], "adm-C", "adm-C"),                    # ... and as --admin-api-key
    (["--api-key", "sk-D", "--admin-api=adm-E"], "adm-E", "adm-E"),
    (["--a", "x"], None, None),                                # ambiguous (--alignment ...): SGLang refuses it
    (["--apix", "y"], None, None),
])
def test_abbreviated_key_flags_are_masked_and_sent_as_the_full_ones(extra, key, header):
    args = {**BASE, "extra_args": extra}
    logged = " ".join(shown(SGLangEngine(args).command()))
    assert admin_headers(args) == ({"Authorization": f"Bearer {header}"} if header else {})
    if key:
        assert key not in logged and "***" in logged, logged
    else:
        assert extra[-1] in logged


def test_sglangs_own_output_reaches_the_log_with_the_keys_masked(short_tmp, monkeypatch, capfd):
    """SGLang prints `server_args=ServerArgs(... api_key='...')` at start: the daemon relays its output with every
    value a key was given replaced by ***; the rest of the line as SGLang wrote it."""
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    admin = "a'b\"c"                            # Python's repr escapes its quote: 'a\\'b"c'
    line = f"server_args=ServerArgs(api_key={'sk-TOP'!r}, admin_api_key={admin!r})"
    body = f"cat <<'EOF'\n{line}\nEOF\necho 'extra sk-EXTRA on stderr' >&2; echo 'no key here'"
    fake = fake_sglang_python(short_tmp / "python", body)
    eng = SGLangEngine({**BASE, "python": str(fake), "api_key": "sk-TOP", "admin_api_key": admin,
                        "extra_args": ["--api-key=sk-EXTRA"]})
    eng.start(lambda s: None)
    assert eng.proc.wait(timeout=30) == 0
    eng.stop()
    err = capfd.readouterr().err
    assert "server_args=ServerArgs(api_key='***', admin_api_key='***')" in err, err
    assert "extra *** on stderr" in err and "no key here" in err
    assert not re.search("sk-TOP|sk-EXTRA|b.c", err), err


def test_without_a_key_sglangs_output_is_not_relayed(short_tmp, monkeypatch):
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    eng = SGLangEngine({**BASE, "python": str(fake_sglang_python(short_tmp / "python", "echo hi"))})
    eng.start(lambda s: None)
    assert eng.proc.stdout is None and eng._log_relay is None      # its output is the daemon's, as before
    eng.proc.wait(timeout=30)
    eng.stop()


@pytest.mark.parametrize("extra", ["--api-key sk-STR", ["--x", {"a": 1}], [True]])
def test_extra_args_that_are_not_a_list_of_words_are_refused_without_echoing_them(extra):
    with pytest.raises(EngineError, match=r"\[sglang\] extra_args must be a list of words") as err:
        SGLangEngine({**BASE, "extra_args": extra})
    assert "sk-STR" not in str(err.value)


def test_a_reloads_warnings_show_the_keys_and_secret_variables_as_stars(tmp_path):
    def cfg(key, extra, token):
        return load_config(None, {"engine": {"kind": "sglang"}, "sglang": {
            "api_key": key, "extra_args": ["--admin-api-key", extra], "env": {"HF_TOKEN": token, "NCCL_DEBUG": key}}})
    lines = " ".join(restart_needed(cfg("sk-OLD", "adm-OLD", "hf-OLD"), cfg("sk-NEW", "adm-NEW", "hf-NEW")))
    assert "[sglang] api_key '***' -> '***'" in lines and "[sglang] env.HF_TOKEN '***' -> '***'" in lines
    assert "[sglang] extra_args ['--admin-api-key', '***'] -> ['--admin-api-key', '***']" in lines
    assert "[sglang] env.NCCL_DEBUG 'sk-OLD' -> 'sk-NEW'" in lines      # a variable not named as a secret: shown
    (tmp_path / "c.toml").write_text('[sglang]\napi_key = "sk-FILE"\n')
    assert shadowed(tmp_path / "c.toml", {"sglang": {"api_key": "sk-FLAG"}}) == [
        "[sglang] api_key '***' (overridden by the command line: '***')"]


def test_a_reload_of_a_changed_key_leaves_no_key_in_the_journal_or_the_events(short_tmp):
    d = DaemonProc(short_tmp, "--concurrency", "2", config_text='[engine]\nkind = "sim"\n[sglang]\napi_key = "sk-OLD-SECRET"\n')
    try:
        d.wait_socket()
        (short_tmp / "config.toml").write_text('[engine]\nkind = "sim"\n[sglang]\napi_key = "sk-NEW-SECRET"\n')
        got = _hup_and_wait(d, 2)
        assert any("[sglang] api_key '***' -> '***'" in line for line in got), got
    finally:
        d.stop()
    assert "SECRET" not in " ".join(_events(d.db, "reload")) and "SECRET" not in d.log_text()


@pytest.mark.parametrize("mode,kept", [(0o640, 0o640), (0o600, 0o600), (0o644, 0o640), (0o664, 0o660)])
def test_from_launch_output_keeps_the_mode_of_the_file_it_replaces_but_not_for_others(tmp_path, mode, kept):
    """chmod 640 for the service stays; what others could read goes once the file holds a key."""
    from controller.daemon.launchcfg import write_whole
    target = tmp_path / "config.toml"
    target.write_text("old\n")
    os.chmod(target, mode)
    write_whole(str(target), 'api_key = "k"\n', private=True)
    assert target.stat().st_mode & 0o777 == kept and target.read_text() == 'api_key = "k"\n'
    write_whole(str(target), "x\n")
    assert target.stat().st_mode & 0o777 == kept                # (no key: the mode as it is)
    new = tmp_path / "new.toml"
    write_whole(str(new), "x\n", private=True)
    assert new.stat().st_mode & 0o777 == 0o600
    write_whole(str(tmp_path / "plain.toml"), "x\n")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "plain.toml").stat().st_mode & 0o777 == 0o666 & ~umask


def test_from_launch_output_through_a_symbolic_link_writes_the_file_it_names(tmp_path):
    from controller.daemon.launchcfg import write_whole
    (tmp_path / "managed.toml").write_text("old\n")
    (tmp_path / "config.toml").symlink_to(tmp_path / "managed.toml")
    write_whole(str(tmp_path / "config.toml"), "new\n")
    assert (tmp_path / "config.toml").is_symlink() and (tmp_path / "managed.toml").read_text() == "new\n"


def test_the_relay_keeps_reading_when_the_daemon_has_no_stderr():
    """sys.stderr is None when the daemon starts with fd 2 closed: SGLang must not block on a full pipe (64 KiB)."""
    import subprocess
    import threading

    from controller.daemon.engines.sglang_flags import relay_masked
    child = subprocess.Popen([sys.executable, "-c", "import sys; [print('x' * 1000, 'k3y') for _ in range(500)]"],
                             stdout=subprocess.PIPE)
    relay = threading.Thread(target=relay_masked, args=(child.stdout, ["k3y"], None), daemon=True)
    relay.start()
    assert child.wait(timeout=30) == 0
    relay.join(10)
    assert not relay.is_alive() and child.stdout.closed


def test_a_relative_interpreter_is_asked_where_the_daemon_would_launch_it(short_tmp, monkeypatch):
    """The question runs in / (test_sglang_engine); a relative [sglang] python names a file in the daemon's working
    directory, where its Popen finds it."""
    from controller.daemon.engines.sglang_install import interpreter_reason
    fake_sglang_python(short_tmp / "py")
    monkeypatch.chdir(short_tmp)
    assert interpreter_reason("./py") is None


def test_an_interpreter_that_is_slow_to_answer_is_one_short_line(short_tmp, monkeypatch):
    from controller.daemon.engines import sglang_install
    monkeypatch.setattr(sglang_install, "ASK_TIMEOUT_S", 0.5)
    python = short_tmp / "python"
    python.write_text("#!/bin/sh\nexec sleep 5\n")
    python.chmod(0o755)
    with pytest.raises(sglang_install.NoAnswer) as e:       # (not a verdict: run exits 1, and the unit asks again)
        sglang_install.interpreter_reason(str(python))
    assert str(e.value) == f"[sglang] python = {python}: cannot ask what it has installed (no answer within 0.5 s)"


@pytest.mark.parametrize("script, code", [("exec sleep 5", 1), ("exit 3", 2)])
def test_run_refuses_an_interpreter_without_sglang_for_good_and_one_that_did_not_answer_for_now(short_tmp, monkeypatch,
                                                                                              script, code):
    """review-52: run's preflight made both exit 2, which the unit does not restart: a host slow at boot kept the
    service down. Not installed: 2 (config check's verdict); no answer in time: 1 (restarted, asked again)."""
    from controller.daemon.engines import sglang_install
    from controller.daemon.engines.sglang import SGLangEngine
    from controller.daemon.preflight import Fatal, check_installed
    monkeypatch.setattr(sglang_install, "ASK_TIMEOUT_S", 0.5)
    python = short_tmp / "python"
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(0o755)
    with pytest.raises(Fatal) as e:
        check_installed(SGLangEngine({**BASE, "python": str(python)}))
    assert e.value.code == code and "cannot ask what it has installed" in str(e.value), str(e.value)


@pytest.mark.parametrize("answer", ['{"sglang": "0.5.17", "plugins": null, "platforms": []}',
                                    '{"sglang": 5, "plugins": [], "platforms": []}', '[1]', 'hello'])
def test_an_answer_of_the_wrong_shape_is_refused_not_a_crash(short_tmp, answer):
    from controller.daemon.engines.sglang_install import interpreter_reason
    python = short_tmp / "python"
    python.write_text(f"#!/bin/sh\necho '{answer}'\n")
    python.chmod(0o755)
    assert interpreter_reason(str(python)).endswith(f"cannot ask what it has installed (answered {answer!r})")


def test_the_question_runs_with_the_environment_sglang_will_get(short_tmp):
    """[sglang.env]'s PYTHONPATH (say) decides what the interpreter finds: the question is asked under it."""
    python = short_tmp / "python"
    python.write_text('#!/bin/sh\necho "{\\"sglang\\": \\"$FAKE_VERSION\\", \\"plugins\\": [\\"spec_controller\\"], '
                      '\\"platforms\\": []}"\n')
    python.chmod(0o755)
    SGLangEngine({**BASE, "python": str(python), "env": {"FAKE_VERSION": "0.5.17"}}).check_installed()
    with pytest.raises(EngineError, match="outside the supported range"):
        SGLangEngine({**BASE, "python": str(python), "env": {"FAKE_VERSION": "0.5.13"}}).check_installed()


AUTH = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils.auth import AuthLevel, decide_request_auth
out = []
for argv, headers in json.load(sys.stdin):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv)               # the keys as SGLang's own parser leaves them
    out.append([decide_request_auth(method="POST", path="/set_internal_state", authorization_header=h,
                                    api_key=args.api_key, admin_api_key=args.admin_api_key,
                                    auth_level=AuthLevel.ADMIN_OPTIONAL).allowed for h in headers])
print(json.dumps(out))
"""


def test_sglangs_own_rule_lets_the_daemons_threshold_through():
    """The header admin_headers builds, judged by SGLang's decide_request_auth itself (test_actuation's stand-in server
    restates the rule), against the keys SGLang's parser reads from the daemon's launch line (abbreviations, the last
    of several: argparse's)."""
    import json
    import subprocess

    from tests.test_launchcfg import SGLANG_PYTHON
    if SGLANG_PYTHON is None:
        pytest.skip("needs an interpreter with SGLang (SPEC_CONTROLLER_SGLANG_PYTHON)")
    configs = [{}, {"api_key": "sk-a"}, {"admin_api_key": "adm"}, {"api_key": "sk-a", "admin_api_key": "adm"},
               {"extra_args": ["--api", "sk-b"]}, {"api_key": "sk-a", "extra_args": ["--adm=adm-c"]},
               {"api_key": "sk-a", "extra_args": ["--api-key", "sk-last"]}]
    cases = [[SGLangEngine({**BASE, **c}).server_argv(), [admin_headers({**BASE, **c}).get("Authorization"),
                                                          "Bearer wrong"]] for c in configs]
    done = subprocess.run([SGLANG_PYTHON, "-c", AUTH], input=json.dumps(cases), capture_output=True, text=True,
                          timeout=120)
    allowed = json.loads(done.stdout.strip().splitlines()[-1])
    assert [ours for ours, _ in allowed] == [True] * len(configs), list(zip(configs, allowed))
    assert [wrong for _, wrong in allowed] == [c == {} for c in configs]        # (a check that can refuse)


def test_a_token_in_the_environment_is_a_secret_too():
    """[sglang.env] HF_TOKEN (from `export HF_TOKEN=...` before the launch command): the header of the written config
    masks it, the file is made private and the note says so, SGLang's output is relayed masked."""
    from controller.daemon.engines.sglang_flags import secrets_in
    from controller.daemon.launchcfg import Converted, operator_notes, toml_text
    header = toml_text(Converted({"model_path": "m"}, "0.5.17"),
                       ["export HF_TOKEN=hf_abc NCCL_DEBUG=INFO\npython -m sglang.launch_server --model-path m"])
    assert "hf_abc" not in header and "'HF_TOKEN=***' NCCL_DEBUG=INFO python" in header.splitlines()[1]
    table = {"model_path": "m", "env": {"HF_TOKEN": "hf_abc", "NCCL_DEBUG": "INFO"}, "api_key": "sk"}
    assert secrets_in(table) == ["sk", "hf_abc"]
    assert secrets_in({"model_path": "m", "env": {"NCCL_DEBUG": "INFO"}}) == []
    assert any("a secret is in the config" in n for n in operator_notes({}, {"env": {"HF_TOKEN": "hf_abc"}}))
    assert operator_notes({}, {"env": {"NCCL_DEBUG": "INFO"}}) == []


def test_sglangs_output_is_relayed_masked_for_a_token_alone(short_tmp, monkeypatch, capfd):
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(short_tmp / "run"))
    monkeypatch.setenv("STATE_DIRECTORY", str(short_tmp / "state"))
    fake = fake_sglang_python(short_tmp / "python", 'echo "token is $HF_TOKEN"')
    eng = SGLangEngine({**BASE, "python": str(fake), "env": {"HF_TOKEN": "hf_xyz"}})
    eng.start(lambda s: None)
    assert eng.proc.wait(timeout=30) == 0
    eng.stop()
    err = capfd.readouterr().err
    assert "token is ***" in err and "hf_xyz" not in err, err


@pytest.mark.parametrize("yaml,table,refused", [
    ("model-path: /m\napi-key: sk-yaml\n", {}, "api_key"),
    ("'admin_api_key': adm\n", {}, "admin_api_key"),
    ("admin-api-key: adm\n", {"api_key": "sk"}, "admin_api_key"),    # SGLang would then want the file's admin key
    ("api-key: sk-yaml\n", {"api_key": "sk"}, None),                 # [sglang]'s wins (command line over config)
    ("api-key: sk-yaml\n", {"extra_args_key": ["--api-key", "sk"]}, None),
    ("# api-key: old\n  api-key: nested\nlog-level: info\n", {}, None),
    ("api-key: sk-yaml\n", {"config_key": True}, "api_key"),       # [sglang] config = "FILE": a --config too
])
def test_a_key_only_in_a_config_yaml_is_refused_before_sglang_starts(tmp_path, yaml, table, refused):
    """SGLang merges `--config FILE` under its command line, so a key there guards /set_internal_state while the
    daemon, which reads no YAML, would send no key (every threshold refused with 401) and relay nothing masked."""
    (tmp_path / "sg.yaml").write_text(yaml)
    extra = ["--config", str(tmp_path / "sg.yaml"), *table.pop("extra_args_key", [])]
    args = {"model_path": "/m", "speculative_algorithm": "EAGLE3", "extra_args": extra, **table}
    if args.pop("config_key", False):
        args.update(config=extra[1], extra_args=[])
    if refused:
        with pytest.raises(EngineError, match=f"--config .*sg.yaml sets {refused}: set it in \\[sglang\\] instead"):
            SGLangEngine(args)
    else:
        SGLangEngine(args)


def test_a_missing_config_yaml_is_left_to_sglang(tmp_path):
    """(SGLang's own refusal names it at the start; the daemon reads the file only for keys.)"""
    eng = SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3",
                        "extra_args": ["--config", str(tmp_path / "missing.yaml")]})
    cmd = eng.command()
    assert cmd[cmd.index("--config") + 1] == str(tmp_path / "missing.yaml")


def test_a_config_yaml_that_is_a_fifo_or_too_big_is_one_line_not_a_hang(tmp_path):
    """The --config YAML was read whole with read_text (the one operator-named file paths.read_text_file did not
    cover): a FIFO there hung `config check` and `run` for good, /dev/zero was read until memory ran out."""
    import os
    import subprocess
    import sys

    from controller.paths import TEXT_FILE_LIMIT
    fifo, big = tmp_path / "sg.yaml", tmp_path / "big.yaml"
    os.mkfifo(fifo)
    big.write_bytes(b"#" * (TEXT_FILE_LIMIT + 1))
    for path, why in ((fifo, "not a regular file"), (big, "larger than 16 MiB")):
        (tmp_path / "c.toml").write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\n'
                                         f'speculative_algorithm = "EAGLE3"\nextra_args = ["--config", "{path}"]\n')
        done = subprocess.run([sys.executable, "-m", "controller.daemon", "config", "check", "--config",
                               str(tmp_path / "c.toml")], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "st")})
        assert (done.returncode, done.stderr) == (2, f"spec-controller: sglang engine: [sglang]'s --config {path}: "
                                                     f"cannot read ({why})\n")
    big.write_bytes(b"# latin-1 \xe9\napi-key: sk-yaml\n")           # (not UTF-8: still looked into, as before)
    with pytest.raises(EngineError, match="big.yaml sets api_key"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "extra_args": ["--config", str(big)]})


@pytest.mark.parametrize("word", ["--port", "--port=30001", "--host", "--host=0.0.0.0"])
def test_extra_args_may_not_move_the_port_or_host_the_daemon_reaches(word):
    """argparse's last word wins: SGLang would serve where the daemon's probe and threshold changes never look."""
    with pytest.raises(EngineError, match=f"extra_args {word.partition('=')[0]}: set \\[sglang\\] "
                                          f"{word.partition('=')[0][2:]} instead"):
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "extra_args": [word, "30001"]})
