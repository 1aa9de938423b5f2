"""What a review (helper-108) of the day's refusals found getting through: each kept here, red before its fix."""
import os

import pytest
from click.testing import CliRunner

from controller.cli.main import cli
from controller.daemon.main import main


@pytest.mark.parametrize("tail", ["/.", "/..", "/./"])
def test_a_plot_path_ending_in_a_dot_component_is_a_directorys_name_refused_before_simulating(tmp_path, tail):
    """'x.png/.' passed the trailing-slash refusal: realpath dropped the '/.', the simulation ran and x.png was written
    ('wrote .../x.png/.'), where a shell's `>` refuses the name."""
    arg = f"{tmp_path}/x.png{tail}"
    res = CliRunner().invoke(cli, ["simulate", "--profile", "seed", "--concurrency", "4", "--seconds", "2",
                                   "--plot", arg])
    assert res.exit_code == 2 and res.stdout == "", res.output
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"specctl: cannot write plot {arg}: a directory's name"), line
    assert os.listdir(tmp_path) == []


def test_from_launch_output_ending_in_a_dot_component_writes_nothing(tmp_path, monkeypatch):
    """-o out.toml/. wrote out.toml, as -o out.toml/ did before paths.directory_name."""
    from controller.daemon import launchcfg
    monkeypatch.setattr(launchcfg, "convert", lambda *a: launchcfg.Converted({"model_path": "m"}, "0.5.17"))
    result = CliRunner().invoke(main, ["config", "from-launch", "-o", f"{tmp_path}/out.toml/.", "--", "python", "-m",
                                       "sglang.launch_server", "--model-path", "m"])
    assert result.exit_code == 1 and os.listdir(tmp_path) == [], result.output
    assert result.output.strip().splitlines()[-1] == (f"spec-controller: cannot write {tmp_path}/out.toml/.: a "
                                                      "directory's name (it ends in /.), not a file's; nothing written")
