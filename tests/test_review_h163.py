"""helper-163: small defects earlier sessions noticed and left alone, each test red before its fix."""
import pytest

from controller import numtext


@pytest.mark.parametrize("text, end", [
    ("1e-308", "(a float's least is 2.2e-308; under it a float keeps fewer digits)"),     # was 'read as 1e-308'
    ("-1.0e-310", "(a float's least is 2.2e-308; under it a float keeps fewer digits)"),
    ("3e-320", "(a float's least is 2.2e-308; under it a float keeps fewer digits: it would be read as 2.99997e-320)"),
    ("1e-400", "(a float's least is 2.2e-308: it would be read as 0)")])
def test_held_floats_refusal_says_what_it_would_be_read_as_only_where_that_differs(text, end):
    with pytest.raises(numtext.Unheld) as e:
        numtext.held_float(text)
    assert str(e.value) == f"{text} is closer to 0 than a number here can be {end}"


def test_sighup_applies_a_changed_min_free_mb(short_tmp):
    """[storage] min_free_mb was read at the start only: a reload named it 'not applied until a restart'. A floor
    above any disk's free space (1e9 MiB) must make status say the disk is nearly full right after the reload."""
    from tests.daemon_proc import DaemonProc
    from tests.test_faults_config import _hup_and_wait
    d = DaemonProc(short_tmp, "--concurrency", "2", config_text="[storage]\nmin_free_mb = 0\n")
    try:
        d.wait_socket()
        assert not any("nearly full" in p for p in d.call("GET", "/status")["daemon"]["problems"])
        (short_tmp / "config.toml").write_text("[storage]\nmin_free_mb = 1e9\n")
        got = _hup_and_wait(d, 1)
        assert got == ["guard, retention, min_free_mb and log level re-read"], got      # nothing left for a restart
        problems = d.call("GET", "/status")["daemon"]["problems"]
        assert any(p.startswith("database disk nearly full: ") and "under the 1e+09 MiB kept free" in p
                   for p in problems), problems
    finally:
        assert d.stop() == 0

