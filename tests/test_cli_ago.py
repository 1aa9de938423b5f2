"""controller.cli.common.ago: the durations `specctl status` prints (uptime, last change)."""
from __future__ import annotations

import pytest

from controller.cli.common import ago


@pytest.mark.parametrize("seconds, text", [(-3, "0 s"), (0.4, "0 s"), (42, "42 s"), (89.4, "89 s"),
                                           (92, "1 min 32 s"), (599.9, "9 min 59 s"), (600, "10 min"),
                                           (3599, "59 min"), (5399, "89 min"), (5400, "1.5 h"), (172800, "2 d")])
def test_durations_read_as_people_say_them_and_never_round_up_a_unit(seconds, text):
    assert ago(seconds) == text
