"""What README.md, .gitignore and pyproject.toml say, held to the code: the daemon's flags, the live
status window, the walkthrough's clean start, the files its commands write, the license metadata."""
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(start: str, end: str) -> str:
    return README[README.index(start):README.index(end, README.index(start))]


def test_the_configuration_section_names_every_flag_of_spec_controller_run():
    from controller.daemon.main import run
    text = _section("### Configuration", "## Faults it survives")
    flags = {opt for p in run.params for opt in p.opts if opt.startswith("--")}
    assert flags and not {f for f in flags if f"`{f}" not in text}, flags


def test_the_status_window_is_the_live_one():
    from controller.daemon.livestats import LiveStats
    said = re.search(r"Status figures \([^)]*\) cover the last (\d+) engine seconds", README)
    assert said and float(said.group(1)) == LiveStats().window_s


def test_the_walkthrough_says_how_to_start_clean_before_its_first_command():
    before = README[:README.index("```sh")]
    assert "restores" in before and "rm -rf ~/.local/state/spec-controller" in before
    assert "XDG_STATE_HOME" in before


@pytest.mark.parametrize("name", ["out.png", "demo.png", "daemon.log"])
def test_files_the_readme_commands_write_are_ignored(name):
    assert name in README
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    res = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT)
    assert res.returncode == 0, f"{name} is not ignored"


def test_the_license_is_an_spdx_string_and_the_backend_takes_it():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    backend = next(r for r in meta["build-system"]["requires"] if r.startswith("setuptools"))
    floor = re.search(r">=\s*(\d+)", backend)
    assert floor and int(floor.group(1)) >= 77, backend      # setuptools 77: project.license as SPDX


def test_every_link_to_a_section_of_the_readme_names_one():
    """`](#anchor)` as GitHub makes a heading's anchor (lower case, punctuation dropped, each space a '-'): a renamed
    section left a reference to one that no longer exists ('"Config" under Robustness', helper-182)."""
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", README, flags=re.M)}
    linked = set(re.findall(r"\]\(#([^)]+)\)", README))
    assert linked and not linked - anchors, linked - anchors
