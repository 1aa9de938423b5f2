"""bench/gpu/penalty_check.py's pure logic (the off engine against the no-spec engine, with penalties):
the chain's cycles and the prompts that lap them, the batched request bodies, replies that stop early,
the comparison cut to common lengths, the control's effect and the exit status."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
import penalty_check as pc  # noqa: E402
from logprob_check import Malformed  # noqa: E402


def test_cycles_of_a_successor_map_shortest_first_specials_left_out():
    # 0..2 are specials mapping into the ordinary ids; 3 -> 3 is a fixed point, 4 -> 5 -> 4, 6 -> 7 -> 8 -> 6
    nxt = [3, 4, 5, 3, 5, 4, 7, 8, 6]
    assert pc.cycles(nxt) == [[3], [4, 5], [6, 7, 8]]


def test_cycles_of_a_map_that_is_not_a_bijection_are_found_once():
    nxt = [0, 0, 0, 4, 5, 4, 4]      # 3 -> 4 -> 5 -> 4, 6 -> 4: one cycle, reached twice
    assert pc.cycles(nxt) == [[4, 5]]


def test_prompts_end_on_short_cycles_the_output_laps_twice_starts_spread():
    found = [[3], [4, 5], [6, 7, 8], list(range(9, 60))]
    batch = [[100 + i] * 4 for i in range(6)]
    out = pc.cycle_prompts(batch, found, output_len=8, use=2)
    assert [ids[:-1] for ids in out] == [ids[:-1] for ids in batch]     # only the last token changes
    assert [ids[-1] for ids in out] == [3, 4, 3, 5, 3, 4]               # cycles 3 and 4-5, starts along them
    assert [ids[-1] for ids in pc.cycle_prompts(batch[:2], [list(range(9, 60))], 8)] == [9, 10]   # none short
    assert pc.cycle_prompts(batch, [], 8) == batch


def test_request_params_odd_ones_stop_at_the_biased_eos():
    even = pc.params(0, 64, 0.0, 1000, pc.PENALTIES, eos=2)
    odd = pc.params(1, 64, 0.8, 1000, pc.PENALTIES, eos=2)
    assert even == {"temperature": 0.0, "max_new_tokens": 64, **pc.PENALTIES, "ignore_eos": True}
    assert odd == {"temperature": 0.8, "max_new_tokens": 64, **pc.PENALTIES, "sampling_seed": 1001,
                   "logit_bias": {"2": 100.0}, "ignore_eos": False}
    assert pc.PENALTIES == {"frequency_penalty": 0.5, "presence_penalty": 0.5, "repetition_penalty": 1.2,
                            "min_new_tokens": 8}
    assert pc.NEUTRAL == {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
                          "min_new_tokens": 0}


def test_a_group_is_one_batched_call_numbered_from_its_first_request():
    b = pc.body([[5, 6], [7, 8]], first=2, new_tokens=4, temperature=0.8, seed=10, penalties=pc.NEUTRAL, eos=2, top=5)
    assert b["input_ids"] == [[5, 6], [7, 8]] and b["return_logprob"] is True and b["top_logprobs_num"] == 5
    assert [p["sampling_seed"] for p in b["sampling_params"]] == [12, 13]
    assert [p["ignore_eos"] for p in b["sampling_params"]] == [True, False]


def reply(ids: list[int], top: int = 1) -> dict:
    return {"output_ids": ids, "meta_info": {"output_token_logprobs": [[-0.1, t, None] for t in ids],
                                             "output_top_logprobs": [[[-0.1, t, None]][:top] for t in ids]}}


def test_replies_that_stop_early_are_parsed_at_their_length_others_must_be_full():
    assert pc.parse_reply(reply([7, 2]), 1, 4, top=1)[0] == [7, 2]          # odd: stopped at EOS
    with pytest.raises(Malformed):
        pc.parse_reply(reply([7, 2]), 0, 4, top=1)                          # even: ignore_eos, must be 4 long
    with pytest.raises(Malformed):
        pc.parse_reply(reply([]), 1, 4, top=1)
    with pytest.raises(Malformed):
        pc.parse_reply(reply([1, 2, 3, 4, 5]), 1, 4, top=1)


def test_run_all_sends_groups_in_order_and_refuses_a_short_answer(monkeypatch):
    calls = []

    def post(port, path, body):
        calls.append((port, path, len(body["input_ids"]), body["sampling_params"][0]["max_new_tokens"]))
        return [reply([9, 9]) for _ in body["input_ids"]]
    monkeypatch.setattr(pc, "post", post)
    out = pc.run_all(1, [[1]] * 5, 2, 2, 0.0, 0, pc.PENALTIES, 2, 1)
    assert calls == [(1, "/generate", 2, 2), (1, "/generate", 2, 2), (1, "/generate", 1, 2)] and len(out) == 5
    monkeypatch.setattr(pc, "post", lambda port, path, body: [reply([9, 9])])
    with pytest.raises(Malformed):
        pc.run_all(1, [[1]] * 2, 2, 2, 0.0, 0, pc.PENALTIES, 2, 1)


def parsed(ids: list[int], lp: float = -0.5, top: dict | None = None) -> tuple:
    return ids, [lp] * len(ids), [dict(top or {t: lp}) for t in ids]


def test_the_comparison_cuts_to_common_lengths_and_counts_those_that_differ():
    a = [parsed([1, 2, 3]), parsed([4, 2])]
    b = [parsed([1, 2, 3]), parsed([4, 2, 2, 2])]
    r = pc.row(0.0, a, b, control=[parsed([1, 1, 1]), parsed([4, 2])])
    assert r["length_mismatch_prompts"] == 1 and r["token_mismatch_prompts"] == 0 and r["compared"] == 5
    assert r["tokens"] == 5 and r["max_abs_diff"] == 0.0 and r["effect_prompts"] == 1 and r["check"] == "penalty"


def test_the_effect_counts_tokens_lengths_and_moved_logprobs():
    base = parsed([1, 2])
    assert pc.effect([base], [parsed([1, 2])]) == 0
    assert pc.effect([base], [parsed([1, 3])]) == 1                     # another token
    assert pc.effect([base], [parsed([1])]) == 1                        # another length
    assert pc.effect([base], [parsed([1, 2], lp=-0.6)]) == 1            # a moved logprob
    assert pc.effect([parsed([1], top={1: -0.5, 9: -3.0})], [parsed([1], top={1: -0.5, 9: -3.5})]) == 1
    assert pc.effect([parsed([1], top={1: -0.5, 9: -3.0})], [parsed([1], top={1: -0.5, 8: -3.0})]) == 1


def test_status_vacuous_beats_everything_then_differences_with_fail_above():
    ok = {"effect_prompts": 3, "max_abs_diff": 0.0, "max_abs_diff_top": 0.0, "token_mismatch_prompts": 0,
          "length_mismatch_prompts": 0}
    assert pc.status([ok], 0.0) == 0 and pc.status([ok, {**ok, "effect_prompts": 0}], None) == 3
    assert pc.status([{**ok, "max_abs_diff_top": 1e-3}], 1e-4) == 1
    assert pc.status([{**ok, "max_abs_diff_top": 1e-3}], None) == 0
    assert pc.status([{**ok, "length_mismatch_prompts": 1}], 1.0) == 1


def test_main_compares_both_engines_and_the_control(monkeypatch, tmp_path, capsys):
    """A and B answer the penalized requests alike, A's neutral run differs: exit 0, one line and JSON row
    per temperature; the prompts end on the chain's cycle (3 -> 3)."""
    chain = tmp_path / "next.json"
    chain.write_text("[3, 4, 5, 3" + "".join(f", {i + 1}" for i in range(4, 99)) + ", 4]")
    seen = []

    def post(port, path, body):
        seen.append((port, body["sampling_params"][0]["repetition_penalty"], [ids[-1] for ids in body["input_ids"]]))
        neutral = body["sampling_params"][0]["repetition_penalty"] == 1.0
        return [reply([3, 3] if j % 2 == 0 else [2]) if not neutral else reply([3, 2][:2 - j % 2])
                for j in range(len(body["input_ids"]))]
    monkeypatch.setattr(pc, "post", post)
    out = tmp_path / "rows.jsonl"
    monkeypatch.setattr(sys, "argv", ["penalty_check.py", "--port-a", "1", "--port-b", "2", "--chain", str(chain),
                                      "--prompts", "4", "--batch", "2", "--output-len", "2", "--vocab", "100",
                                      "--top", "1", "--temperatures", "0", "--out", str(out), "--fail-above", "0"])
    assert pc.main() == 0
    assert [(p, r) for p, r, _ in seen] == [(1, 1.2), (1, 1.2), (2, 1.2), (2, 1.2), (1, 1.0), (1, 1.0)]
    assert all(last == [3, 3] for _, _, last in seen)
    line = capsys.readouterr().out
    assert line.startswith("PENALTY temp=0 prompts=4 ") and "effect_prompts=4" in line and "cycles=[1]" in line
    assert out.read_text().count('"check": "penalty"') == 1


def test_logprob_check_stops_when_port_b_refuses_the_pin(monkeypatch, capsys):
    """--pin-b that the engine refuses: nothing is compared (the pair would not be what the row says)."""
    import logprob_check as lc
    calls = []
    monkeypatch.setattr(lc, "set_threshold", lambda port, value: calls.append((port, value)) or False)
    monkeypatch.setattr(lc, "post", lambda *a, **k: pytest.fail("compared after a refused pin"))
    monkeypatch.setattr(sys, "argv", ["logprob_check.py", "--port-a", "1", "--port-b", "2", "--pin-b", "0"])
    assert lc.main() == 2 and calls == [(2, 0)]
    assert "refused threshold 0" in capsys.readouterr().err
