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
