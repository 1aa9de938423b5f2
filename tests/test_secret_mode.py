"""A config that holds an API key or a token and that other users may read: `config check` says so and how to fix
it (helper-73: the README's install left a key in a 0644 /etc/spec-controller/config.toml, with ok)."""
import os

import pytest
from click.testing import CliRunner

from controller.daemon.launchcmd import private_steps, secret_mode_note
from controller.daemon.main import main
from tests.conftest import stub_sglang_python

SECTION = '[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "/m"\nspeculative_algorithm = "EAGLE3"\n'


@pytest.mark.parametrize("extra,mode,said", [
    ('[sglang.env]\nHF_TOKEN = "hf_x"\n', 0o644, True), ('[sglang.env]\nHF_TOKEN = "hf_x"\n', 0o640, False),
    ('[sglang.env]\nHF_TOKEN = "hf_x"\n', 0o604, True), ('[sglang.env]\nHF_TOKEN = "hf_x"\n', 0o602, True),
    ('[sglang.env]\nPATH_EXTRA = "/x"\n', 0o644, False),
    ('', 0o644, False),
])
def test_config_check_notes_a_secret_others_may_read(tmp_path, extra, mode, said):
    python = stub_sglang_python(tmp_path / "stub")
    path = tmp_path / "c.toml"
    path.write_text(SECTION + f'python = "{python}"\n' + extra)
    os.chmod(path, mode)
    res = CliRunner().invoke(main, ["config", "check", "--config", str(path)])
    assert res.exit_code == 0, (res.output, res.exception)
    note = (f"spec-controller: note: {path} holds an API key or a token and other users may "
            f"{'read' if mode & 0o004 else 'change'} it (mode {mode:o}): sudo chown root:spec-controller {path} && "
            f"sudo chmod 640 {path}")
    assert (note in res.stderr) is said, res.stderr
    assert "sk-1" not in res.output and "hf_x" not in res.output


def test_the_steps_fix_the_file_itself_and_install_a_staged_copy():
    etc = "/etc/spec-controller/config.toml"
    assert private_steps(etc) == private_steps(etc, staged=True) == (
        f"sudo chown root:spec-controller {etc} && sudo chmod 640 {etc}")
    assert private_steps("my config.toml") == (
        "sudo chown root:spec-controller 'my config.toml' && sudo chmod 640 'my config.toml'")
    assert private_steps("my config.toml", staged=True) == (
        f"sudo install -m 640 -o root -g spec-controller 'my config.toml' {etc}")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file another group")
def test_a_group_other_than_the_services_counts_as_others(tmp_path):
    import grp
    path = tmp_path / "c.toml"
    path.write_text("x")
    os.chmod(path, 0o640)
    other = next(g for g in grp.getgrall() if g.gr_name not in ("root", "spec-controller"))
    os.chown(path, -1, other.gr_gid)
    assert secret_mode_note(path, {"api_key": "k"}) == [
        f"{path} holds an API key or a token and group {other.gr_name} may read it (mode 640): "
        f"sudo chown root:spec-controller {path} && sudo chmod 640 {path}"]
    os.chown(path, -1, 0)
    assert secret_mode_note(path, {"api_key": "k"}) == []          # (root's group: root alone, as a rule)


def test_an_api_key_counts_as_a_secret(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("x")
    os.chmod(path, 0o644)
    assert secret_mode_note(path, {"api_key": "k"}) != [] and secret_mode_note(path, {"admin_api_key": "k"}) != []
    assert secret_mode_note(path, {"extra_args": ["--api-key", "k"]}) != [] and secret_mode_note(path, {}) == []


def test_a_refusal_that_quotes_the_command_shows_its_key_as_stars(tmp_path):
    """argparse quotes the words it refuses: an SGLang that does not know --api-key (the stand-in) names it."""
    python = stub_sglang_python(tmp_path / "stub")
    path = tmp_path / "c.toml"
    path.write_text(SECTION + f'python = "{python}"\napi_key = "sk-SECRET"\n'
                    'extra_args = ["--admin-api-key=sk-SECRET-2"]\n')      # (one key the start of the other)
    res = CliRunner().invoke(main, ["config", "check", "--config", str(path)])
    assert res.exit_code == 2 and "unrecognized arguments: --api-key *** --admin-api-key=***" in res.output, res.output
    assert "SECRET" not in res.output and "***-2" not in res.output


def test_no_file_or_an_unreadable_one_says_nothing(tmp_path):
    assert secret_mode_note(None, {"api_key": "k"}) == []
    assert secret_mode_note(tmp_path / "absent.toml", {"api_key": "k"}) == []


def test_a_mistyped_key_flag_and_a_short_key_are_masked_as_words():
    """helper-74: argparse quotes exactly the flags it does not know (--api_key); a one-letter key starred every 'a'."""
    from controller.daemon.engines.sglang_flags import masked, shown
    assert masked("unrecognized arguments: --api_key s3cret", ["--api_key", "s3cret"]) == \
        "unrecognized arguments: --api_key ***"
    assert masked("argument --port: invalid int value: 'x' (key a)", ["--api-key", "a", "--port", "x"]) == \
        "argument --port: invalid int value: 'x' (key ***)"
    assert shown(["--skip-tokenizer-init", "--tokenizer-path", "/t", "--hf-token", "abc", "--apikey=zz",
                  "--secret-file", "--port", "1"]) == ["--skip-tokenizer-init", "--tokenizer-path", "/t", "--hf-token",
                                                       "***", "--apikey=***", "--secret-file", "--port", "1"]


def test_the_daemons_own_keys_ending_in_path_are_no_paths():
    from controller.daemon.engines.base import EngineError
    from controller.daemon.engines.sglang import SGLangEngine
    with pytest.raises(EngineError) as e:
        SGLangEngine({"model_path": "/m", "speculative_algorithm": "EAGLE3", "off_path": ""})
    assert "name a path" not in str(e.value)


def test_sglangs_own_refusal_of_a_mistyped_key_is_masked_in_the_journal():
    """The daemon relays SGLang's output masked by secrets_in: a key under a name SGLang does not know ([sglang]
    apikey, extra_args --api_key) is what SGLang's argparse then prints whole."""
    import io

    from controller.daemon.engines.sglang_flags import relay_masked, secrets_in
    secrets = secrets_in({"model_path": "/m", "apikey": "sk-AAA", "extra_args": ["--api_key", "sk-BBB"]})
    out = io.BytesIO()
    relay_masked(io.BytesIO(b"launch_server.py: error: unrecognized arguments: --apikey sk-AAA --api_key sk-BBB\n"),
                 secrets, out)
    assert out.getvalue() == b"launch_server.py: error: unrecognized arguments: --apikey *** --api_key ***\n"


def test_a_progress_bars_carriage_returns_reach_the_journal_as_they_come():
    """tqdm redraws with \\r alone; read by line, SGLang's loading bar reached the journal only once it finished."""
    import os
    import threading

    from controller.daemon.engines.sglang_flags import relay_masked

    class Sink:
        def __init__(self):
            self.data, self.got = b"", threading.Event()

        def write(self, b):
            self.data += b
            self.got.set()

        def flush(self):
            pass
    read_end, write_end = os.pipe()
    sink = Sink()
    relay = threading.Thread(target=relay_masked, args=(os.fdopen(read_end, "rb"), ["sk-Z"], sink), daemon=True)
    relay.start()
    os.write(write_end, b"Loading 10% sk-Z\r")
    try:
        assert sink.got.wait(10), "nothing relayed while the bar was still drawing"
        assert sink.data == b"Loading 10% ***\r"
    finally:
        os.close(write_end)
        relay.join(10)
