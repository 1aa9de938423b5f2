"""helper-126's mutation pass over the changes of 2026-12-06 since 0e6f09d (bench/results/mutation-today-2026-12-06o.md):
a test for each mutant that survived the existing tests and is not equivalent. Each was checked green on the code and
red with its mutant."""
import difflib
import os
import threading
import time
from dataclasses import fields

import pytest

from controller.control.guard_config import GuardConfig
from controller.daemon.config import DEFAULTS, RENAMED, ConfigError, load_config
from controller.daemon.lifecycle import Daemon
from controller.daemon.ownfiles import OwnFiles
from controller.sim.core import SimCore
from tests.conftest import as_nobody
from tests.test_own_files import own_files
from tests.test_switch_step import stub_profile

NO_THREAD = "can't start new thread"        # (RuntimeError's text where a process may start no more threads)


def _refused(tmp_path, text: str) -> str:
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(f)
    return str(err.value)


@pytest.mark.parametrize("text,line", [
    # CN1: 'min' scores 0.571 against [engine]'s only key, 'kind': under CUTOFF (0.6), so no hint
    ("[engine]\nmin = 1\n", "config: unknown key 'min' in [engine] (known: kind)"),
    # CN3: 'decisions' scores exactly 0.6 against 'retention_decisions_s' (2 * 9 / 30): at the cutoff is close
    ("[storage]\ndecisions = 5\n", "config: unknown key 'decisions' in [storage] (did you mean 'retention_decisions_s'? "
                                   "known: "),
    # CN5: 'retention_max_samples' scores 0.976 as itself and 0.789 as its old name 'retention_max_rows' (matched after
    # it): its score is the higher, not the last, or 'retention_samples_s' (0.821) would be named
    ("[storage]\nretention_max_sample = 5\n", "config: unknown key 'retention_max_sample' in [storage] (did you mean "
                                              "'retention_max_samples'? known: "),
    # CN11: scored as difflib.get_close_matches scores (the candidate seq1, the name seq2; the ratio is not symmetric):
    # the other way round 'min_changes' scores 0.632 against 'min_gain' and got it named
    ("[guard]\nmin_changes = 1\n", "config: [guard] unknown guard setting 'min_changes' (known: min_threshold, "),
])
def test_the_hint_scores_as_get_close_matches_does(tmp_path, text, line):
    key = text.split("\n")[1].split(" =")[0]
    section = text.split("]")[0][1:]
    message = _refused(tmp_path, text)
    assert message.startswith(line), message
    # (get_close_matches agrees, its cutoff the same; a renamed key's old name is matched too)
    renamed = {old: new for (s, old), new in RENAMED.items() if s == section}
    names = [f.name for f in fields(GuardConfig)] if section == "guard" else [*DEFAULTS[section], *renamed]
    first = difflib.get_close_matches(key, names, n=1)
    assert [renamed.get(n, n) for n in first] == ([line.split("'")[3]] if "did you mean" in line else [])


def test_the_first_speculative_step_of_a_run_is_not_a_switch_step():
    """SC1, SC5: first_step_stub is a speculative step after an off one; the simulator's first step, after none, drafts
    as every later one does (_spoke None: no step yet)."""
    core = SimCore(stub_profile(True), seed=0)
    core.set_load(4)
    core._pending_prefill = 0
    assert [core.step(True).tokens for _ in range(2)] == [16, 16]
    core.step(False)
    assert core.step(True).tokens == 4


def _changed_unprivileged(files: OwnFiles, parent) -> str | None:
    """files.changed() as a user that cannot search the state directory (root searches any: a child as nobody)."""
    if os.geteuid() != 0:
        return files.changed()
    parent.chmod(0o711)                        # (nobody may pass through the test's folder, not into state/)
    return as_nobody(files.changed)           # (None or a str)


def test_an_unsearchable_state_directory_is_no_proof_of_removal_for_root_too(short_tmp):
    """OF3: only a symlink loop (ELOOP) among lstat's other errors is removal; a directory whose search permission went
    (EACCES) still holds the files. (test_own_files' test of it is skipped as root: here a child process as nobody.)"""
    files, db, _ = own_files(short_tmp)
    state = db.parent
    state.chmod(0o600)
    try:
        assert _changed_unprivileged(files, short_tmp) is None
    finally:
        state.chmod(0o700)
    assert files.changed() is None


def test_a_control_server_whose_thread_cannot_start_is_closed(short_tmp, monkeypatch):
    """LC4, LC5: the control server's own thread refused (the first start after its socket was bound): the start-up
    error names that refusal (not an AttributeError of a retune ticker not yet started) and the socket is not left
    behind."""
    real = threading.Thread.start

    def start(self):
        if self.name == "control-api":
            raise RuntimeError(NO_THREAD)
        real(self)
    monkeypatch.setattr(Daemon, "_signals", lambda self: None)        # (signal handlers: the main thread's only)
    monkeypatch.setattr(threading.Thread, "start", start)
    cfg = load_config(None, {"engine": {"kind": "sim"}, "sim": {"concurrency": 2, "speed": 20.0},
                             "storage": {"db": str(short_tmp / "s.db")},
                             "control": {"socket": str(short_tmp / "c.sock")}})
    before = set(threading.enumerate())
    with pytest.raises(Exception, match=NO_THREAD) as e:
        Daemon(cfg).run()
    assert "AttributeError" not in str(e.value)
    assert not (short_tmp / "c.sock").exists(), "the control socket was left behind"
    end = time.monotonic() + 10
    while [t for t in threading.enumerate() if t not in before and t.is_alive() and t.name in ("retune", "ingest")] \
            and time.monotonic() < end:
        time.sleep(0.05)
    assert [t.name for t in threading.enumerate() if t not in before and t.is_alive()
            and t.name in ("retune", "ingest")] == []
