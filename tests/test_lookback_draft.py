"""The crafted look-back draft (bench/gpu/lookback_draft.py), the draft of issue 12 item 3's consistency
test, run through a numpy reference of SGLang's EAGLE3 layer (RMSNorm, neox RoPE, causal GQA attention
over a KV cache, bf16 weights and cache): its first draft token is right iff its own KV L positions back
was written for this sequence. If the crafting were wrong (rotation sign, the copied coordinates, the
successor power), the GPU test would prove nothing: these go red."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))
from lookback_draft import lookback_head, normalised, rope_freqs, with_constant_coordinate  # noqa: E402

VOCAB, HIDDEN, HEADS, KV, HD, L, THETA = 3000, 512, 4, 1, 128, 16, 10000.0
PROMPT, GEN = 40, 120


def bf16(x: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)


def rope(x: np.ndarray, pos: int) -> np.ndarray:
    """neox style over the whole head: pair k = dims (k, k + HD/2) rotated by pos * w_k."""
    half = HD // 2
    a = pos * rope_freqs(HD, THETA)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * np.cos(a) - x2 * np.sin(a), x2 * np.cos(a) + x1 * np.sin(a)], axis=-1)


class Draft:
    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.emb = with_constant_coordinate(rng.normal(0, 0.02, (VOCAB, HIDDEN)).astype(np.float32))
        self.nxt = np.concatenate([[3, 4, 5], rng.permutation(VOCAB - 3) + 3])
        t = lookback_head(self.emb, self.nxt, L, HEADS, KV, HD, THETA)
        self.w = {name.split(".")[-2]: bf16(a) for name, a in t.items()}

    def kv(self, token_in: int, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """What the draft writes at pos: input token t[pos+1] (fc is zero: the hidden half is zero)."""
        x = np.concatenate([normalised(self.emb[token_in][None])[0], np.zeros(HIDDEN, np.float32)])
        k = (self.w["k_proj"] @ x).reshape(KV, HD)
        v = (self.w["v_proj"] @ x).reshape(KV, HD)
        return bf16(rope(k, pos)), bf16(v)

    def propose(self, token_in: int, pos: int, keys: np.ndarray, values: np.ndarray) -> int:
        """The first draft token at pos, attending over keys/values[0..pos] (pos's own entry included)."""
        x = np.concatenate([normalised(self.emb[token_in][None])[0], np.zeros(HIDDEN, np.float32)])
        q = rope((self.w["q_proj"] @ x).reshape(HEADS, HD), pos)
        group, out = HEADS // KV, []
        for h in range(HEADS):
            s = keys[: pos + 1, h // group] @ q[h] / np.sqrt(HD)
            p = np.exp(s - s.max())
            out.append((p / p.sum()) @ values[: pos + 1, h // group])
        hidden = self.w["o_proj"] @ np.concatenate(out)
        return int(np.argmax(self.w["lm_head"] @ normalised(hidden[None])[0]))


def sequence(d: Draft, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    t = list(rng.integers(3, VOCAB, PROMPT))
    while len(t) < PROMPT + GEN:
        t.append(int(d.nxt[t[-1]]))
    return t


def cache(d: Draft, t: list[int]) -> tuple[np.ndarray, np.ndarray]:
    keys, values = np.zeros((len(t), KV, HD), np.float32), np.zeros((len(t), KV, HD), np.float32)
    for i in range(len(t) - 1):
        keys[i], values[i] = d.kv(t[i + 1], i)
    return keys, values


def checked_positions(t: list[int]) -> range:
    """Positions whose look-back token lies on the generated chain (j - L + 1 >= PROMPT)."""
    return range(PROMPT + L - 1, len(t) - 2)


D = Draft()


def test_consistent_kv_proposes_the_next_token_everywhere():
    t = sequence(D, 1)
    keys, values = cache(D, t)
    wrong = [j for j in checked_positions(t) if D.propose(t[j + 1], j, keys, values) != t[j + 2]]
    assert wrong == []


def test_kv_missing_for_an_off_stretch_makes_exactly_the_next_l_proposals_wrong():
    t = sequence(D, 2)
    keys, values = cache(D, t)
    s = PROMPT + 3 * L                       # speculation resumes at s after [s - 2L, s) decoded off
    keys[s - 2 * L:s], values[s - 2 * L:s] = 0.0, 0.0
    right = {j: D.propose(t[j + 1], j, keys, values) == t[j + 2] for j in range(s, len(t) - 2)}
    assert not any(right[j] for j in range(s, s + L))
    assert all(right[j] for j in range(s + L, len(t) - 2))


def test_kv_left_by_another_sequence_at_the_same_positions_is_stale_too():
    # a freed slot keeps the previous request's draft KV: its keys are the same (position only), its
    # values another token's
    t, other = sequence(D, 3), sequence(D, 4)
    keys, values = cache(D, t)
    ok, ov = cache(D, other)
    s = PROMPT + 3 * L
    keys[s - L:s], values[s - L:s] = ok[s - L:s], ov[s - L:s]
    assert not any(D.propose(t[j + 1], j, keys, values) == t[j + 2] for j in range(s, s + L))


def test_keys_written_at_the_wrong_position_break_it():
    # the plugin's KV writer must rotate keys by the token's own position: off by one is caught
    t = sequence(D, 5)
    keys, values = cache(D, t)
    s = PROMPT + 3 * L
    for i in range(s - L, s):
        keys[i], values[i] = D.kv(t[i + 1], i + 1)
    assert sum(D.propose(t[j + 1], j, keys, values) == t[j + 2] for j in range(s, s + L)) <= 1


def test_attention_picks_position_l_back_by_a_wide_margin():
    # the copy is of the KV entry exactly L back: the score there beats every other position by > 10 nats
    t = sequence(D, 6)
    keys, _ = cache(D, t)
    for j in checked_positions(t):
        x = np.concatenate([normalised(D.emb[t[j + 1]][None])[0], np.zeros(HIDDEN, np.float32)])
        q = rope((D.w["q_proj"] @ x).reshape(HEADS, HD), j)[0]
        s = keys[: j + 1, 0] @ q / np.sqrt(HD)
        assert int(np.argmax(s)) == j - L
        assert s[j - L] - np.max(np.delete(s, j - L)) > 10.0
