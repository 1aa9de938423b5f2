"""systemd/config.example.toml agrees with the code: every key it shows exists, every default it
shows is the code's (controller/daemon/config.py DEFAULTS, GuardConfig), every key is shown, and
the flags it names are the `run` command's."""
import dataclasses
import re
import tomllib
from pathlib import Path

from controller.control.guard_config import GuardConfig
from controller.daemon.config import DEFAULTS, FLAGS, FREE_FORM
from controller.daemon.setpairs import parse_set
from controller.daemon.main import run

EXAMPLE = Path(__file__).resolve().parent.parent / "systemd" / "config.example.toml"
LINE = re.compile(r"^(?P<off>#\s*)?(?P<key>[a-z_]+)\s*=\s*(?P<value>[^#]+?)\s*(?:#\s*(?P<note>.*))?$")


def shown() -> dict[tuple[str, str], tuple[bool, object, str]]:
    """(section, key) -> (commented out?, value, note) for each `key = value` line."""
    out, section = {}, None
    for raw in EXAMPLE.read_text().splitlines():
        if raw.startswith("["):
            section = raw.strip("[] ")
            continue
        m = LINE.match(raw.strip())
        if section and m:
            out[(section, m["key"])] = (bool(m["off"]), tomllib.loads(f"v = {m['value']}")["v"], m["note"] or "")
    return out


def code_defaults() -> dict[tuple[str, str], object]:
    out = {(s, k): v for s, keys in DEFAULTS.items() if (s,) not in FREE_FORM
           for k, v in keys.items() if (s, k) not in FREE_FORM}
    out.update({("guard", f.name): f.default for f in dataclasses.fields(GuardConfig)})
    return out


def test_every_key_is_shown_and_every_shown_key_exists():
    lines = {k for k in shown() if k[0] not in ("sglang", "policy.params")}
    assert lines == set(code_defaults())


def test_every_default_shown_is_the_codes():
    defaults = code_defaults()
    for key, (commented, value, note) in shown().items():
        if key not in defaults:
            continue
        if commented:
            assert value == defaults[key], f"{key}: example shows {value!r}, the code's default is {defaults[key]!r}"
        elif value != defaults[key]:
            m = re.search(r"\(default: ([^)]+)\)", note)
            assert m, f"{key}: a live value other than the default must name the default"
            assert tomllib.loads(f"v = {m[1]}")["v"] == defaults[key], key


def test_the_flags_named_are_the_run_commands():
    header = EXAMPLE.read_text().split("[engine]")[0]
    opts = {p.name: p.opts[0] for p in run.params}
    for param, (section, key) in FLAGS.items():
        assert opts[param] in header, f"{opts[param]} ({section}.{key}) not named in the example"
    assert "--set SECTION.KEY=VALUE" in header


def test_set_reaches_every_key():
    for (section, key), value in code_defaults().items():
        text = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
        assert parse_set([f"{section}.{key}={text}"]) == {section: {key: value}}
    assert parse_set(["policy.params.c=1.5", "sim.profile=seed"]) == {"policy": {"params": {"c": 1.5}},
                                                                    "sim": {"profile": "seed"}}


def test_the_sglang_engines_own_keys_are_shown_with_their_defaults():
    from controller.daemon.engines.sglang_flags import OWN_KEYS
    from controller.daemon.engines.sglang_section import OWN_DEFAULTS
    own = {k: v for (section, k), v in shown().items() if section == "sglang" and k in OWN_KEYS}
    assert set(own) == OWN_KEYS                                  # every one of them shown
    for key, (commented, value, _) in own.items():
        assert commented, f"sglang.{key} is set in the example: it must only show the default"
        if key in OWN_DEFAULTS:
            assert value == OWN_DEFAULTS[key], f"sglang.{key}: example {value!r}, code {OWN_DEFAULTS[key]!r}"

