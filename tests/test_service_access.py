"""config check as root: the [sglang] paths the service's user cannot read are named (root reads everything, so a
0700 model directory passed and SGLang failed at start). Acted out with a real fork to another user; needs root."""
import os

import pytest

from controller.daemon.serviceaccess import paths_in, service_cannot_read

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
USER = "nobody"


@pytest.fixture
def model(short_tmp):
    """A model directory the way an operator leaves it: readable by all, under directories all may enter (/tmp/sc-*:
    pytest's own tmp_path sits in a 0700 directory of root's)."""
    os.chmod(short_tmp, 0o755)
    d = short_tmp / "model"
    d.mkdir(mode=0o755)
    (d / "config.json").write_text("{}")
    os.chmod(d / "config.json", 0o644)
    return d


def test_a_readable_model_says_nothing(model):
    assert service_cannot_read({"model_path": str(model)}, USER) == []


@pytest.mark.parametrize("lock", ["directory", "file inside"])
def test_a_model_the_user_cannot_read_is_named(model, lock):
    os.chmod(model if lock == "directory" else model / "config.json", 0o700 if lock == "directory" else 0o600)
    notes = service_cannot_read({"model_path": str(model), "speculative_draft_model_path": str(model.parent)}, USER)
    assert notes == [f"model_path = {model}: the service's user {USER} cannot read it (root can: config check runs as "
                     f"root); give it read access (e.g. chgrp -R {USER} and chmod -R g+rX)"]


def test_a_numeric_user_is_that_uids_account(model):
    """systemd takes User= as a UID too (the unit's drop-in may say User=65534)."""
    import pwd
    os.chmod(model, 0o700)
    uid = str(pwd.getpwnam(USER).pw_uid)
    assert [n.split(":")[1] for n in service_cannot_read({"model_path": str(model)}, uid)] == [
        f" the service's user {uid} cannot read it (root can"]


def test_a_model_under_a_directory_the_user_cannot_enter_is_named(model):
    os.chmod(model.parent, 0o700)
    assert len(service_cannot_read({"model_path": str(model)}, USER)) == 1


def test_only_absolute_paths_that_exist_here_are_looked_at(model):
    assert paths_in({"model_path": "meta-llama/Llama-3-8B", "tokenizer_path": "/nonexistent/x", "port": 3,
                     "speculative_draft_model_path": str(model), "host": "/not-a-path-key"}) == [
        ("speculative_draft_model_path", str(model))]


def test_lora_adapters_are_paths_too(model):
    """[sglang] lora_paths: a list of "/path" or "name=/path" (SGLang's --lora-paths), each one the service must read."""
    adapter = model.parent / "adapter"
    adapter.mkdir(mode=0o700)
    assert paths_in({"lora_paths": [f"sql={adapter}", str(model), "hub/adapter", 3]}) == [
        ("lora_paths", str(adapter)), ("lora_paths", str(model))]
    assert paths_in({"lora_paths": str(model)}) == [] and paths_in({"lora_paths": 3}) == []   # only a list's entries
    assert service_cannot_read({"lora_paths": [f"sql={adapter}", str(model)]}, USER) == [
        f"lora_paths = {adapter}: the service's user {USER} cannot read it (root can: config check runs as root); "
        f"give it read access (e.g. chgrp -R {USER} and chmod -R g+rX)"]


def test_extra_args_path_flags_are_paths_too(model):
    """[sglang] extra_args carries flags the table has no key for: --x-path V, --x-path=V, --x-paths V1 name=V2, each value
    the service must read; other flags' values (a port, a model id) are not looked at."""
    adapter = model.parent / "adapter"
    adapter.mkdir(mode=0o700)
    words = ["--tokenizer-path", str(model), "--port", str(model.parent), "--lora-paths", f"sql={adapter}",
             str(model), "--enable-lora", f"--chat-template-path={adapter}", str(model.parent), "--x-path", "org/id"]
    assert paths_in({"extra_args": words}) == [
        ("extra_args --tokenizer-path", str(model)), ("extra_args --lora-paths", str(adapter)),
        ("extra_args --lora-paths", str(model)), ("extra_args --chat-template-path", str(adapter))]
    assert paths_in({"extra_args": " ".join(words)}) == []          # not a list: refused elsewhere, no words here
    assert service_cannot_read({"extra_args": words}, USER) == [
        f"extra_args --{flag} = {adapter}: the service's user {USER} cannot read it (root can: config check runs as "
        f"root); give it read access (e.g. chgrp -R {USER} and chmod -R g+rX)" for flag in ("lora-paths",
                                                                                            "chat-template-path")]


def test_extra_args_path_flags_stop_where_sglangs_parser_stops(model):
    """A single-value flag takes one word, a list flag runs to the next flag whatever it is; --x-paths=name=V is an
    entry too, a single flag's value keeps its '=', other flags' =values are not looked at; words need not be str."""
    adapter, odd = model.parent / "adapter", model.parent / "a=b"
    adapter.mkdir(mode=0o700)
    odd.mkdir()
    assert paths_in({"extra_args": ["--tokenizer-path", str(model), str(adapter), "--lora-paths", str(model),
                                    "--port", 30000, str(model.parent), f"--lora-paths=sql={adapter}",
                                    f"--served-model-name={model}", f"--chat-template-path={odd}"]}) == [
        ("extra_args --tokenizer-path", str(model)), ("extra_args --lora-paths", str(model)),
        ("extra_args --lora-paths", str(adapter)), ("extra_args --chat-template-path", str(odd))]


def test_config_check_says_it(model, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from controller.daemon import serviceaccess
    from controller.daemon.main import main
    from tests.conftest import stub_sglang_python
    monkeypatch.setattr(serviceaccess, "SERVICE_USER", USER)
    os.chmod(model, 0o700)
    python = stub_sglang_python(tmp_path / "s")
    (tmp_path / "c.toml").write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "{model}"\n'
                                     f'speculative_algorithm = "EAGLE3"\npython = "{python}"\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    said = f"note: model_path = {model}: the service's user {USER} cannot read it"
    assert res.exit_code == 0 and said in res.stderr, res.output


def test_no_such_user_says_nothing(model):
    os.chmod(model, 0o700)
    assert service_cannot_read({"model_path": str(model)}, "no-such-user-spec") == []


def test_a_config_the_user_cannot_read_is_named(model, short_tmp):
    config = short_tmp / "c.toml"
    config.write_text("")
    os.chmod(config, 0o600)
    assert service_cannot_read({}, USER, config=str(config)) == [
        f"the config {config}: the service's user {USER} cannot read it (root can: config check runs as root); "
        f"give it read access (e.g. chgrp -R {USER} and chmod -R g+rX)"]


def test_a_path_that_hangs_is_given_up_on(model, monkeypatch):
    """(a stale NFS mount: the child never answers) one note after the timeout, the child killed, nothing left."""
    from controller.daemon import serviceaccess
    monkeypatch.setattr(serviceaccess, "unreadable", lambda paths: __import__("time").sleep(60))
    notes = service_cannot_read({"model_path": str(model)}, USER, timeout_s=0.5)
    assert notes == [f"could not ask as {USER} whether it reads the [sglang] paths and the config (no answer in 0.5 s)"]


def test_config_check_notes_a_path_that_does_not_exist_here(tmp_path):
    """helper-91: a missing absolute model_path passed config check; SGLang then exited at every start, restarted every
    5 s. A note (exit 0: a mount made before the service starts is fine), only for absolute paths (a model id is none)."""
    from click.testing import CliRunner

    from controller.daemon.main import main
    from tests.conftest import stub_sglang_python
    python = stub_sglang_python(tmp_path / "s")
    gone = "/nonexistent-spec-controller-test/draft"      # (not under /tmp: path_notes says PrivateTmp there)
    (tmp_path / "c.toml").write_text(f'[engine]\nkind = "sglang"\n[sglang]\nmodel_path = "org/name"\n'
                                     f'speculative_algorithm = "EAGLE3"\nspeculative_draft_model_path = "{gone}"\n'
                                     f'python = "{python}"\n')
    res = CliRunner().invoke(main, ["config", "check", "--config", str(tmp_path / "c.toml")])
    notes = [line for line in res.stderr.splitlines() if "does not exist here" in line]
    assert res.exit_code == 0 and notes == [
        f"spec-controller: note: speculative_draft_model_path = {gone} does not exist here: SGLang cannot start on it "
        "(the unit restarts it every 5 s until it does; fine for a mount made before the service starts)"], res.output
