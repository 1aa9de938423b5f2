"""helper-94: a reload's warnings all went through one format string ("reload: %s: %s"), and the log's RepeatFilter
holds back a warning whose format string passed within the last minute. So of a reload that both needs a restart
and finds a file value under a flag, the journal showed the first warning only (`spec-controller run --config
c.toml --speed 5`, c.toml's [sim] concurrency and speed edited, SIGHUP: no word of speed); and a second reload within
a minute that needed a restart for another key said nothing at all. Each distinct warning passes; the same one
repeated within a minute is still held back and counted (README, "The unit")."""
import types

from controller.daemon.config import load_config
from controller.daemon.lifecycle import Daemon
from tests.conftest import repeat_filtered


class _Writer:
    def __init__(self):
        self.events = []

    def event(self, kind, text):
        self.events.append((kind, text))


def _logged(tmp_path, reloads):
    """The warnings that pass the daemon's RepeatFilter for each (file text, flags) reload, one clock tick apart."""
    config = tmp_path / "c.toml"
    config.write_text("[sim]\nconcurrency = 24\nspeed = 10\n")
    overrides = {"sim": {"speed": 5.0}}
    cfg = load_config(config, overrides)
    cfg["_overrides"] = overrides
    daemon = types.SimpleNamespace(cfg=cfg, started_cfg=load_config(config, overrides))
    now = [0.0]
    with repeat_filtered(lambda: now[0]) as records:
        for text in reloads:
            config.write_text(text)
            Daemon._reload_warnings(daemon, types.SimpleNamespace(writer=_Writer()), load_config(config, overrides))
            now[0] += 1.0
    return [r.getMessage() for r in records]


def test_every_warning_of_one_reload_reaches_the_log(tmp_path):
    got = _logged(tmp_path, ["[sim]\nconcurrency = 32\nspeed = 20\n"])
    assert got == ["reload: changed, not applied until a restart: [sim] concurrency 24 -> 32",
                   "reload: in the config file but overridden by the command line, not applied: "
                   "[sim] speed 20 (overridden by the command line: 5.0)"], got


def test_a_new_change_within_a_minute_is_said_and_the_same_one_again_is_held(tmp_path):
    got = _logged(tmp_path, ["[sim]\nconcurrency = 32\nspeed = 5\n",
                             "[sim]\nconcurrency = 32\nspeed = 5\n",          # the same again: held back
                             "[sim]\nconcurrency = 32\nspeed = 5\nseed = 3\n"])  # another key: said
    assert got == ["reload: changed, not applied until a restart: [sim] concurrency 24 -> 32",
                   "reload: changed, not applied until a restart: [sim] concurrency 24 -> 32; [sim] seed 0 -> 3"], got


def test_each_distinct_refused_reload_within_a_minute_reaches_the_log(tmp_path):
    """Two reloads refused for different reasons: the second's line was held back (one format string)."""
    config = tmp_path / "c.toml"
    config.write_text("[sim]\nconcurrency = 24\n")
    daemon = types.SimpleNamespace(cfg={**load_config(config), "_overrides": None})
    service = types.SimpleNamespace(writer=_Writer(), job_errors={}, job_failing={})
    with repeat_filtered() as records:
        for text in ("[sim\n", "[guard]\nmin_threshold = -1\n"):
            config.write_text(text)
            Daemon._reload(daemon, service)
    got = [r.getMessage() for r in records]
    assert len(got) == 2 and "not valid TOML" in got[0] and "min_threshold" in got[1], got
