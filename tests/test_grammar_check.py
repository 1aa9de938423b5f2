"""bench/gpu/grammar_check.py's pure logic (grammar-constrained outputs of the off engine against the no-spec
engine and the forced sequence): the sequence and its regex (read with Python's re over the crafted
tokenizer's strings, as the grammar backend reads the concatenated tokens), a mask one step late leaving it,
the request bodies, the comparison and the exit status; and loads.py's throughput regex."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
import grammar_check as gc  # noqa: E402
import loads  # noqa: E402
from logprob_check import Malformed  # noqa: E402

VOCAB = 200
NXT = [3, 4, 5] + [3 + (7 * u + 11) % (VOCAB - 3) for u in range(3, VOCAB)]   # a successor map on 3 .. 199


def text(tokens: list[int]) -> str:
    """What the grammar backend matches: mkmodel.py's word tokens "w<id>", concatenated."""
    return "".join(f"w{t}" for t in tokens)


def test_the_expected_output_is_the_chain_with_a_forced_jump_every_nth_token():
    tokens, forced = gc.expected(50, NXT, 12, 4, i=0)
    assert forced == [k % 4 == 3 for k in range(12)]
    u = 50
    for t, f in zip(tokens, forced):
        assert (t in gc.FORCED and t != NXT[u]) if f else t == NXT[u]     # a jump changes the output
        u = t
    plain, none = gc.expected(50, NXT, 12, 4, i=2)                      # every third request: unconstrained
    assert not any(none) and plain[0] == NXT[50]


def test_a_forced_token_unlike_the_chains_takes_the_next_literal():
    chain = list(NXT)             # 100 -> 101 -> 102 -> 150 -> FORCED[3]: the chain's 4th token is the literal
    chain[100], chain[101], chain[102], chain[150] = 101, 102, 150, gc.FORCED[3]   # request 0's rotation picks
    tokens, forced = gc.expected(100, chain, 4, 4, i=0)
    assert tokens == [101, 102, 150, gc.FORCED[4]] and forced == [False, False, False, True]


def test_no_token_is_a_proper_prefix_of_a_forced_literal():
    """Each forced literal is then the only token its position allows ("w1", "w2" are no tokens: ids 1, 2
    are <s> and </s>)."""
    words = {f"w{n}" for n in range(3, 32000)}
    for t in gc.FORCED:
        literal = f"w{t}"
        assert [w for w in words if literal.startswith(w) and w != literal] == []


@pytest.mark.parametrize("i", [0, 1, 3, 4])
def test_the_regex_accepts_the_expected_output_and_any_continuation(i):
    tokens, forced = gc.expected(77, NXT, 16, 4, i)
    rx = re.compile(gc.regex(tokens, forced))
    assert rx.fullmatch(text(tokens)) and rx.fullmatch(text(tokens + [5, 123]))
    assert not rx.fullmatch(text(tokens[:5]))                # it does not end before the output does


def late(tokens: list[int], forced: list[bool], last: int) -> list[int]:
    """What an engine whose mask lags one step would choose: at position k the mask of position k - 1
    (a forced literal allows that token alone; a free position any token, the chain's wins)."""
    out, u = [], last
    for k in range(len(tokens)):
        f = forced[k - 1] if k else False
        t = tokens[k - 1] if f else NXT[u]
        out.append(t)
        u = t
    return out


def test_a_mask_one_step_late_leaves_the_expected_output_and_the_regex():
    tokens, forced = gc.expected(77, NXT, 16, 4, 0)
    wrong = late(tokens, forced, 77)
    assert wrong != tokens and not re.compile(gc.regex(tokens, forced)).fullmatch(text(wrong))


def test_requests_carry_the_regex_two_in_three_and_logprobs_on_every_other_constrained_one():
    tokens, forced = gc.expected(77, NXT, 8, 4, 0)
    bodies = [gc.request([9, 9], i, tokens, forced, 0.8, 1000) for i in range(6)]
    assert ["regex" in b["sampling_params"] for b in bodies] == [True, True, False, True, True, False]
    assert [bool(b.get("return_logprob")) for b in bodies] == [True, False, False, False, True, False]
    assert [b["sampling_params"]["sampling_seed"] for b in bodies] == list(range(1000, 1006))
    lean = [gc.request([9, 9], i, tokens, forced, 0.8, 1000, logprobs=False) for i in range(6)]
    assert not any("return_logprob" in b for b in lean)     # --no-logprobs: batches stay lean-eligible
    assert ["regex" in b["sampling_params"] for b in lean] == [True, True, False, True, True, False]
    greedy = gc.request([9], 0, tokens, forced, 0.0, 1000)["sampling_params"]
    assert "sampling_seed" not in greedy and greedy["max_new_tokens"] == 8 and greedy["ignore_eos"] is True


def reply(ids, logprobs=None, finish=None):
    meta = {"finish_reason": finish or {"type": "length"}}
    if logprobs is not None:
        meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, ids)]
    return {"output_ids": ids, "meta_info": meta}


def test_parse_reads_the_chosen_tokens_logprobs_and_refuses_what_is_not_theirs():
    assert gc.parse(reply([4, 5], [-0.0, -0.5]), 2, True) == ([4, 5], [-0.0, -0.5])
    assert gc.parse(reply([4, 5]), 2, False) == ([4, 5], None)
    for bad in (reply([4, 5], [-0.1]), {"meta_info": {}}, reply([4], [0.5]),
                {"output_ids": [4], "meta_info": {"output_token_logprobs": [[-0.1, 7, None]]}}):
        with pytest.raises(Malformed):
            gc.parse(bad, 1, True)


def test_run_all_counts_aborted_and_refused_requests_as_errors(monkeypatch):
    jobs = gc.jobs_for([[3, 7], [3, 8], [3, 9]], NXT, 4, 4)

    def post(port, path, body):
        i = body["input_ids"][-1] - 7
        if i == 0:
            return reply(jobs[0][2], [-0.0] * 4)
        if i == 1:
            return reply([1], finish={"type": "abort", "message": "token not allowed"})
        raise OSError("HTTP Error 400")
    monkeypatch.setattr(gc, "post", post)
    out = gc.run_all(1, jobs, 0.0, 0, 2)
    assert out[0] == (jobs[0][2], [-0.0] * 4)
    assert out[1].startswith("aborted: token not allowed") and out[2].startswith("OSError")


def test_compare_and_status_say_which_engine_left_the_expected_output():
    jobs = gc.jobs_for([[3, 7], [3, 8], [3, 9]], NXT, 4, 4)
    good = [(j[2], [-0.0] * 4 if gc.request([0], j[0], j[2], j[3], 0, 0).get("return_logprob") else None)
            for j in jobs]
    row = gc.compare(jobs, good, good)
    assert (row["constrained"], row["forced"], row["tokens"], row["logprob_compared"]) == (2, 2, 12, 4)
    assert gc.status([row]) == 0 and row["first_divergence"] is None
    off = list(good)
    off[1] = (good[1][0][:3] + [5], None)                     # engine B left the sequence at position 3
    row_b = gc.compare(jobs, good, off)
    assert (row_b["expected_mismatch_b"], row_b["ab_mismatch"], row_b["first_divergence"]) == (1, 1, "prompt1@3")
    assert gc.status([row, row_b]) == 1
    assert gc.status([gc.compare(jobs, good, ["aborted: x", *good[1:]])]) == 1
    assert gc.status([gc.compare(jobs, off, good)]) == 3       # the reference itself did not follow it
    lp = list(good)
    lp[0] = (good[0][0], [-0.0, -0.25, -0.0, -0.0])
    assert gc.compare(jobs, good, lp)["max_abs_diff_logprob"] == 0.25


def test_the_throughput_regex_constrains_every_fourth_token_to_w10_to_w19_and_never_ends():
    rx = re.compile(loads.GRAMMAR_REGEX)
    assert rx.fullmatch(text([500, 7, 31999, 12] * 3)) and not rx.fullmatch(text([500, 7, 31999, 20]))
    assert not rx.fullmatch(text([500, 7, 31999, 123]))     # w12 followed by '3': not a token boundary
    assert rx.fullmatch(text([500, 7, 31999, 19, 4, 5, 6, 10]))
