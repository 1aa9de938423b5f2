"""SGLang's own adaptive rule as a baseline policy (policies/sglang_ema.py): slots, warm-up, update
interval, hysteresis, the threshold it implies, its saved state."""
from __future__ import annotations

import pytest

from policies import PolicyError, Sample, Snapshot, make_policy


def ema_feed(p, n: int, accepted: float, bs: int = 4, t0: float = 0.0) -> None:
    for i in range(n):
        p.observe(Sample(t0 + i, bs, 2, round(bs * (1 + accepted)), 0.01, True))


def test_sglang_ema_slots_and_their_schedule():
    p = make_policy("sglang-ema")
    assert p.state() == {"slots": [[1, 1.0, 0]] * 4, "live": 0}          # every slot starts at K
    assert [p.slot_of(bs) for bs in (0, 1, 7, 8, 31, 32, 63, 64, 1000)] == [0, 0, 0, 1, 1, 2, 2, 3, 3]
    ema_feed(p, 14, accepted=0.0)                 # EMA 0.8^14 = 0.04, but no decision before batch 15
    assert p.slots[0] == [1, pytest.approx(0.8 ** 14), 14]
    ema_feed(p, 1, accepted=0.0)                  # batch 15: the first update after 10 warm-up batches
    assert p.slots[0][0] == 0 and p.live == 0
    ema_feed(p, 4, accepted=0.0)                  # off: the EMA is not fed
    assert p.slots[0][:2] == [0, pytest.approx(0.8 ** 15)]
    ema_feed(p, 1, accepted=0.0)                  # batch 20: probes K again
    assert p.slots[0][0] == 1 and p.slots[1] == [1, 1.0, 0]
    p.observe(Sample(30.0, 0, 0, 0, 0.01, True))  # no batch: ignored
    assert p.slots[0][2] == 20


def test_sglang_ema_drops_only_below_its_hysteresis():
    p = make_policy("sglang-ema")
    ema_feed(p, 35, accepted=0.4, bs=5)           # EMA tends to 0.4 > 0.5 - 0.25: on at every update
    assert p.slots[0][0] == 1 and p.slots[0][1] == pytest.approx(0.4, abs=0.01)
    q = make_policy("sglang-ema", {"down_hysteresis": 0.0})
    ema_feed(q, 35, accepted=0.4, bs=5)           # 0.4 <= 0.5: off at batch 35 (on again at 40, to probe)
    assert q.slots[0][0] == 0
    r = make_policy("sglang-ema", {"ema_alpha": 1.0, "warmup_batches": 0, "update_interval": 1})
    ema_feed(r, 1, accepted=0.25)                 # exactly at 0.5 - 0.25: off
    assert r.slots[0][0] == 0


def test_sglang_ema_threshold_follows_the_live_slot():
    p = make_policy("sglang-ema")
    p.slots = [[1, 1.0, 0], [0, 0.3, 0], [1, 1.0, 0], [1, 1.0, 0]]
    p.live = 1                                    # the live slot (8 .. 31) is off: it wins over the others
    d = p.decide(Snapshot(0.0, 0, 256))
    assert (d.threshold, d.reason) == (7, "EMA slots speculating: [1, 32, 64]")
    p.live = 3
    assert p.decide(Snapshot(0.0, 0, 256)).threshold == 256
    p.slots = [[0, 0.0, 0]] * 4
    assert p.decide(Snapshot(0.0, 9, 256)).reason == "EMA slots speculating: none"


def test_sglang_ema_state_round_trips_and_is_checked():
    p = make_policy("sglang-ema")
    ema_feed(p, 12, accepted=0.5, bs=40)
    q = make_policy("sglang-ema")
    q.load_state(p.state())
    assert q.state() == p.state() == {"slots": p.slots, "live": 2}
    q.load_state({"slots": p.slots, "live": 6})
    assert q.live == 2
    q.load_state({"slots": p.slots})
    assert q.live == 0
    for bad, n in (({"slots": [[1, 1.0, 0]] * 2}, 2), ({}, 0), ({"slots": [[1, 1.0]] * 4}, 4)):
        with pytest.raises(PolicyError) as err:
            q.load_state(bad)
        assert str(err.value) == f"policy sglang-ema: saved state has {n} slots, expected 4"


def test_sglang_ema_feeds_only_speculative_batches_of_a_speculating_slot():
    p = make_policy("sglang-ema")
    p.observe(Sample(0.0, 1, 0, 1, 0.01, True))               # off batch: counted, not fed
    assert p.slots[0] == [1, 1.0, 1]
    p.observe(Sample(0.0, 2, 1, 3, 0.01, True))               # one draft step, half accepted: fed
    assert p.slots[0] == [1, pytest.approx(0.8 + 0.2 * 0.5), 2]


def test_sglang_ema_first_update_comes_update_interval_after_warm_up():
    p = make_policy("sglang-ema", {"warmup_batches": 3, "update_interval": 5})
    ema_feed(p, 7, accepted=0.0)
    assert p.slots[0][0] == 1
    ema_feed(p, 1, accepted=0.0)                               # batch 8 = 3 + 5
    assert p.slots[0][0] == 0
