"""The profile keys of the open loop (issue 13) exactly: defaults, bounds, the one-line refusals, and what
the profile derives from them (prompt and output lengths, prefill seconds, the rough capacity and the
open-loop rates, step times past the table)."""
from __future__ import annotations

import copy

import pytest

from controller.numtext import plain
from tests.test_profile_format import GOOD, parse, refused, with_value


def test_open_loop_defaults():
    p = parse(copy.deepcopy(GOOD))
    assert (p.prefill_s_per_token, p.max_prefill_tokens, p.output_len_range, p.prompt_len_range, p.arrival_rate) == (
        0.0, 16384, None, (128, 128), ())
    assert p.prompt_len_mean == 128.0 and p.output_len_expected == 256.0


@pytest.mark.parametrize("section,key,lo,hi,integer", [
    (None, "prefill_s_per_token", 0.0, 1.0, False), (None, "max_prefill_tokens", 1, 1 << 24, True)])
def test_open_loop_numbers_accept_both_bounds_and_refuse_just_outside(section, key, lo, hi, integer):
    for ok in (lo, hi):
        assert getattr(parse(with_value(section, key, ok)), key) == ok
    step = 1 if integer else 0.5
    kind = "an integer" if integer else "a number"
    for bad in (lo - step, hi + step):
        assert refused(with_value(section, key, bad)) == f"profile t.json: {key}={bad!r} must be {kind} in {plain(lo)} .. {plain(hi)}"


@pytest.mark.parametrize("key", ["output_len_range", "prompt_len_range"])
def test_length_ranges(key):
    assert getattr(parse(with_value("load", key, [1, 10000000])), key) == (1, 10000000)
    assert getattr(parse(with_value("load", key, [7, 7])), key) == (7, 7)
    where = "profile t.json [load]"
    assert refused(with_value("load", key, [9, 8])) == f"{where}: {key} must be [low, high] with low <= high"
    assert refused(with_value("load", key, [0, 8])) == f"{where}: {key}[0]=0 must be an integer in 1 .. 10000000"
    assert refused(with_value("load", key, [1, 10000001])) == f"{where}: {key}[1]=10000001 must be an integer in 1 .. 10000000"
    assert refused(with_value("load", key, [1.5, 8])) == f"{where}: {key}[0]=1.5 must be an integer in 1 .. 10000000"
    assert refused(with_value("load", key, [1, 2, 3])) == f"{where}: {key} must be a list of 2 numbers"


def test_arrival_rates():
    assert parse(with_value("load", "arrival_rate", [0.001, 1e6])).arrival_rate == (0.001, 1e6)
    where = "profile t.json [load]"
    assert refused(with_value("load", "arrival_rate", [0.0009])) == \
        f"{where}: arrival_rate[0]=0.0009 must be a number in 0.001 .. 1000000"
    assert refused(with_value("load", "arrival_rate", [1, 1000000.5])) == \
        f"{where}: arrival_rate[1]=1000000.5 must be a number in 0.001 .. 1000000"
    assert refused(with_value("load", "arrival_rate", [])) == f"{where}: arrival_rate must be a list of numbers"


def test_what_a_profile_derives_for_the_open_loop():
    p = parse(with_value("load", "output_len_range", [100, 301]) | {
        "prefill_s": 0.004, "prefill_s_per_request": 0.002, "prefill_s_per_token": 1e-5})
    assert p.output_len_expected == 200.5
    assert parse(with_value("load", "output_len_mean", 1) | {}).output_len_expected == 1.0
    q = parse(with_value("load", "prompt_len_range", [100, 301]))
    assert q.prompt_len_mean == 200.5
    assert p.prefill_seconds(3, 1000) == pytest.approx(0.004 + 3 * 0.002 + 1000 * 1e-5)
    # capacity: at max_batch_size 256, 64 .. 256 extrapolated: off 0.03 + 192 x 0.02 / 63, spec 0.08 + 192 x 0.065 / 63
    off = 0.03 + 192 * 0.02 / 63
    spec = 0.08 + 192 * 0.065 / 63
    assert p.step_seconds(256, False) == pytest.approx(off) and p.step_seconds(256, True) == pytest.approx(spec)
    tok_s = max(256 / off, 256 * 2.2 / spec)
    per_request = 200.5 / tok_s + 0.002 + 1e-5 * 128
    assert p.capacity_req_s() == pytest.approx(1 / per_request)
    cap = p.capacity_req_s()
    assert p.open_loop_rates() == tuple(float(f"{cap * f:.2g}") for f in (0.1, 0.5, 0.85))
    assert parse(with_value("load", "arrival_rate", [3, 9])).open_loop_rates() == (3.0, 9.0)


def test_a_one_row_table_is_flat():
    data = copy.deepcopy(GOOD)
    data["step_time"] = {"batch_size": [8], "off": [0.01], "spec": [0.02]}
    p = parse(data)
    assert p.step_seconds(1, False) == 0.01 and p.step_seconds(100, True) == 0.02
    two = parse(copy.deepcopy(GOOD))
    assert two.step_seconds(64, False) == 0.03 and two.step_seconds(65, False) == pytest.approx(0.03 + 0.02 / 63)


def test_the_rough_capacity_takes_the_better_mode_at_max_batch_size():
    data = copy.deepcopy(GOOD)
    data["step_time"] = {"batch_size": [1, 256], "off": [0.01, 0.1], "spec": [0.011, 0.11]}   # spec 2.2 x tokens
    p = parse(data)
    per_request = 256.0 / (256 * 2.2 / 0.11) + 0.001
    assert p.capacity_req_s() == pytest.approx(1 / per_request)
