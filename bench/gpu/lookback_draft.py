"""A crafted EAGLE3 draft whose proposal depends on its OWN KV cache, L positions back (issue 12 item 3):
the test that the draft is consistent after an off -> on switch needs a draft that goes wrong when the KV
written while speculation was off is missing. (The clear-margin head of mkmodel.py --crafted zeroes its
attention output: any KV, stale or not, gives the same proposal.)

The target (mkmodel.py --crafted) continues every sequence along the successor table: t[i+1] = NEXT[t[i]].
Its embeddings get one constant coordinate (column 0 = the embeddings' std) so that the draft can form
position-only queries; every token's target logits shift by the same amount, so the target is unchanged.

The draft at position j (EAGLE3: input token t[j+1], the target's hidden states at j):
- fc is zero, so the residual is zero and only attention reaches the output;
- one query head per KV group reads the constant coordinate and the KV head's keys read it too: with
  SGLang's neox RoPE the score of key i for query j is lam * sum_k cos(w_k (j - i - L)) over the 12
  fastest rotary pairs, peaked at j - i = L with >= 20 nats to its neighbours (>= 40 beyond): attention copies the value
  of position j - L;
- that value is the embedding of the token at j - L + 1 (coordinates 1 .. kv_heads*head_dim of the input
  embeds), o_proj copies it into the same hidden coordinates, and lm_head maps it to NEXT^(L+1) of that
  token: t[j+2], the right first draft token, winning by ~25 logits;
- so the proposal is right iff the draft KV at j - L holds what the draft wrote there for this sequence.
  Positions decoded while the draft was skipped (stale or zero KV) give wrong proposals for the L positions
  after speculation resumes. Later draft steps (K > 1) add their outputs to the residual and are ambiguous:
  run the consistency test with K = 1 (speculative_num_steps 1, 2 draft tokens).
Numpy only (float32 arrays named as in the checkpoint); mkmodel.py converts them to bf16.
"""
from __future__ import annotations

import numpy as np

PAIRS = 12            # the fastest rotary pairs carry the positional query (the slow ones add height, no contrast)
GAP_NATS = 20.0       # score margin of the peak over its neighbours (j - i = L +- 1); >= 40 beyond them
LOGIT = 30.0          # the right token's logit (others ~N(0, 1) at hidden 4096)
CONSTANT = 3.0        # column 0 = CONSTANT * sqrt(hidden) * std: it holds 90 % of every embedding's energy,
                      # so RMSNorm leaves it nearly the same for every token (keys' heights within ~0.2 %)


def rope_freqs(head_dim: int, theta: float) -> np.ndarray:
    """inv_freq of pair k (dims k and k + head_dim/2, neox style): theta^(-2k/head_dim)."""
    return theta ** (-2.0 * np.arange(head_dim // 2) / head_dim)


def scores_scale(head_dim: int, theta: float) -> float:
    """lam such that the peak beats distance L +- 1 by GAP_NATS (softmax scale 1/sqrt(head_dim) included)."""
    w = rope_freqs(head_dim, theta)[:PAIRS]
    return GAP_NATS / float(np.sum(1.0 - np.cos(w)))


def normalised(emb: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """RMSNorm with unit weight, per token (what input_layernorm hands the draft's qkv)."""
    return emb / np.sqrt(np.mean(emb.astype(np.float64) ** 2, axis=1, keepdims=True) + eps).astype(np.float32)


def with_constant_coordinate(emb: np.ndarray) -> np.ndarray:
    """The target's embeddings with column 0 set to one large constant (CONSTANT)."""
    out = emb.astype(np.float32).copy()
    out[:, 0] = CONSTANT * np.sqrt(emb.shape[1]) * float(np.std(emb))
    return out


def power(nxt: np.ndarray, n: int) -> np.ndarray:
    """NEXT applied n times."""
    out = np.arange(len(nxt))
    for _ in range(n):
        out = nxt[out]
    return out


def lookback_head(emb: np.ndarray, nxt: np.ndarray, lookback: int, heads: int, kv_heads: int,
                  head_dim: int, theta: float = 10000.0) -> dict[str, np.ndarray]:
    """The draft's tensors (float32, checkpoint names). emb: the target's embeddings, already
    with_constant_coordinate; nxt: the successor table."""
    vocab, hidden = emb.shape
    n_d = kv_heads * head_dim                     # hidden coordinates 1 .. n_d carry the copied embedding
    if n_d + 1 > hidden or heads % kv_heads:
        raise ValueError("lookback draft needs kv_heads*head_dim < hidden and heads divisible by kv_heads")
    half, group = head_dim // 2, heads // kv_heads
    w = rope_freqs(head_dim, theta)[:PAIRS]
    amp = np.sqrt(scores_scale(head_dim, theta) * np.sqrt(head_dim))    # q and k amplitude per pair
    q = np.zeros((heads * head_dim, 2 * hidden), np.float32)
    k = np.zeros((kv_heads * head_dim, 2 * hidden), np.float32)
    v = np.zeros((kv_heads * head_dim, 2 * hidden), np.float32)
    o = np.zeros((hidden, heads * head_dim), np.float32)
    for g in range(kv_heads):
        qh, kh = g * group * head_dim, g * head_dim      # the group's first query head, its KV head
        # query pair k = amp * exp(-i w L) (re at dim k, im at dim k + half), key pair = amp: the rotated
        # dot product is amp^2 cos(w (j - i - L)); both read the constant input coordinate 0
        q[qh + np.arange(PAIRS), 0] = amp * np.cos(w * lookback)
        q[qh + half + np.arange(PAIRS), 0] = -amp * np.sin(w * lookback)
        k[kh + np.arange(PAIRS), 0] = amp
        cols = 1 + g * head_dim + np.arange(head_dim)
        v[kh + np.arange(head_dim), cols] = 1.0            # the value: the input token's normalised embedding
        o[cols, qh + np.arange(head_dim)] = 1.0            # copied into the same hidden coordinates
    # the output hidden is e = the copied coordinates; after the final norm (over all of hidden) the row
    # s * e scores s * sqrt(hidden) * |e|: s per token makes the right row score LOGIT
    e = normalised(emb)[:, 1:1 + n_d]
    scale = LOGIT / (np.sqrt(hidden) * np.linalg.norm(e, axis=1, keepdims=True))
    head = np.zeros((vocab, hidden), np.float32)
    np.add.at(head[:, 1:1 + n_d], power(nxt, lookback + 1), e * scale)
    return {
        "midlayer.self_attn.q_proj.weight": q, "midlayer.self_attn.k_proj.weight": k,
        "midlayer.self_attn.v_proj.weight": v, "midlayer.self_attn.o_proj.weight": o,
        "fc.weight": np.zeros((hidden, 3 * hidden), np.float32), "lm_head.weight": head,
    }
