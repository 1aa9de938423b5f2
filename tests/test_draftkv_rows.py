"""controller/plugin/draftkv.prompt_rows on CPU: the positions and tail rows a prefill's draft-KV write uses, against
SGLang's own per-request loop (EagleDraftWorker._draft_extend_for_prefill walks each request's extend from its prefix
on, its last row taking the tail token). The write itself runs torch on a GPU (bench/gpu/run_consistency.sh)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from controller.plugin.draftkv import prompt_rows


def per_request(extend_lens, prefix_lens):
    positions, ends, start = [], [], 0
    for length, prefix in zip(extend_lens, prefix_lens):
        positions += range(prefix, prefix + length)
        start += length
        ends.append(start - 1)
    return positions, ends


def test_a_batch_of_a_fresh_prompt_a_cached_prefix_and_a_later_chunk():
    rows = prompt_rows([3, 2, 4], [0, 5, 8])
    assert rows.dtype == np.int64
    assert rows.tolist() == [0, 1, 2, 5, 6, 8, 9, 10, 11] + [2, 4, 8]


@pytest.mark.parametrize("seed", range(50))
def test_rows_match_the_per_request_walk(seed):
    rng = random.Random(seed)
    requests = [(rng.randint(1, 40), rng.randint(0, 3000)) for _ in range(rng.randint(1, 12))]
    lens, prefix = [r[0] for r in requests], [r[1] for r in requests]
    positions, ends = per_request(lens, prefix)
    assert prompt_rows(lens, prefix).tolist() == positions + ends


def test_lengths_that_do_not_pair_up_are_refused():
    with pytest.raises(ValueError, match="3 extend lengths but 2 prefix lengths"):
        prompt_rows([1, 2, 3], [0, 0])


def test_rows_written_into_a_given_buffer_count_the_last_rows_from_the_offset():
    """write_prompt's form: into a (pinned) buffer longer than the rows, each request's last row counted from the
    rows already buffered in the graphed writer (offset); what lies past the rows is left alone."""
    buffer = np.full(16, -7, dtype=np.int64)
    got = prompt_rows([3, 2, 4], [0, 5, 8], out=buffer, offset=10)
    assert np.shares_memory(got, buffer) and got.size == 12
    assert buffer.tolist() == [0, 1, 2, 5, 6, 8, 9, 10, 11] + [12, 14, 18] + [-7] * 4
