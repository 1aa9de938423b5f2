"""`policy list` and `policy show` print a parameter the same way (helper-124: list said half_life_s=60, show 60.0),
and neither rounds a value (:g printed 1.23456789 as 1.23457)."""
import re

from click.testing import CliRunner

from controller.cli.main import cli


def lines_of(args: list[str], *command: str) -> list[str]:
    res = CliRunner().invoke(cli, [*args, *command])
    assert res.exit_code == 0, res.output
    return res.output.splitlines()


def test_list_and_show_print_the_same_number(offline):
    args, _ = offline
    assert CliRunner().invoke(cli, [*args, "policy", "set", "bandit", "--param", "scale=2",
                                    "--param", "half_life_s=1.23456789"]).exit_code == 0
    shown = dict(line.strip().split("=", 1) for line in lines_of(args, "policy", "show")[1:])
    assert shown["scale"] == "2" and shown["half_life_s"] == "1.23456789" and shown["accept_half_life_s"] == "4"
    listed = [line for line in lines_of(args, "policy", "list") if line.strip().startswith("accept_half_life_s=")]
    assert listed and all(re.match(r"\s+accept_half_life_s=4  \[0\.1 \.\. 3600\] ", line) for line in listed), listed
