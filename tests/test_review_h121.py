"""helper-121's review of 6188fd5..eed2082: a number that --set wrote, refused because numtext's rule does not read it
(+5, 05, " 5"), is refused with that rule, in every section. The guard's hint had a number grammar of its own (signs,
spaces and leading zeros allowed): `--set guard.min_threshold=+5` was told "is text, not a number: write it unquoted
(min_threshold = 5)", though it was written unquoted, and `--set sim.concurrency=+5` "must be an integer" alone."""
import pytest
from click.testing import CliRunner

from controller.control.guard_config import GuardConfig, GuardConfigError
from controller.daemon.main import main


@pytest.mark.parametrize("setting", ["guard.min_threshold=+5", "guard.min_threshold=05", "guard.explore_share=+0.1",
                                     "sim.concurrency=+5", "control.metrics_port=+9464", "sim.speed=+2.5"])
def test_a_number_set_refuses_says_the_rule_not_write_it_unquoted(setting):
    res = CliRunner().invoke(main, ["config", "check", "--set", "policy.name=fixed", "--set", setting])
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "a '-' at most: no '+'" in res.output and "unquoted" not in res.output, res.output     # (numtext.written)


@pytest.mark.parametrize("raw,fix", [("5", "min_threshold = 5"), ("5.0", "min_threshold = 5")])
def test_a_guard_number_quoted_as_the_rule_writes_it_is_still_told_to_unquote_it(raw, fix):
    with pytest.raises(GuardConfigError, match=f"write it unquoted \\({fix}\\)"):
        GuardConfig.from_mapping({"min_threshold": raw})


def test_a_guard_float_quoted_as_set_writes_point_five_is_still_told_to_unquote_it():
    with pytest.raises(GuardConfigError, match=r"write it unquoted \(explore_share = 0.5\)"):
        GuardConfig.from_mapping({"explore_share": ".5"})
