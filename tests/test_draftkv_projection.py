"""controller/plugin/draftkv's k, v projection with torch (skipped where torch is absent, as in CI): the k and v rows
of the draft's qkv weight give forward_prepare_native's k and v, and the start-up check falls back to SGLang's own
path where they would not (another row layout, a rotary kernel that refuses the one-head q, a quantised linear).
The attention is a stand-in with SGLang's forward_prepare_native (llama.py, three lines); on the GPU the engine
runs the same check against SGLang's own modules and logs which projection it uses."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from controller.plugin import draftkv  # noqa: E402

HEADS, KV_HEADS, HEAD, WIDTH = 6, 2, 8, 24      # q is not twice kv: a slice at the wrong row shows


class UnquantizedLinearMethod:          # SGLang's plain linear (the name is what the writer checks)
    pass


class QKVProj:
    def __init__(self, weight, bias=None, method=UnquantizedLinearMethod):
        self.weight, self.bias, self.quant_method, self.skip_bias_add = weight, bias, method(), False

    def __call__(self, x):
        return torch.nn.functional.linear(x, self.weight, self.bias), None


class NeoxRope:
    """RoPE as SGLang's forward_native: q and k rotated per head, any head counts."""
    def __init__(self, head_size=HEAD, refuse_one_head=False):
        self.head_size, self.refuse = head_size, refuse_one_head

    def _rotate(self, positions, x):
        n = x.shape[0]
        x = x.reshape(n, -1, self.head_size).float()
        half = self.head_size // 2
        freq = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
        angle = positions.float()[:, None] * freq[None, :]
        cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
        a, b = x[..., :half], x[..., half:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).reshape(n, -1)

    def __call__(self, positions, q, k):
        if self.refuse and q.shape[-1] == self.head_size:
            raise RuntimeError("one query head")
        return self._rotate(positions, q).to(q.dtype), self._rotate(positions, k).to(k.dtype)


class Attention:
    def __init__(self, proj, rope=None, order=("q", "k", "v")):
        self.qkv_proj, self.rotary_emb = proj, rope or NeoxRope()
        self.q_size, self.kv_size, self.order = HEADS * HEAD, KV_HEADS * HEAD, order

    def forward_prepare_native(self, positions, hidden_states):     # SGLang's, for the rows in self.order
        qkv, _ = self.qkv_proj(hidden_states)
        sizes = {"q": self.q_size, "k": self.kv_size, "v": self.kv_size}
        parts = dict(zip(self.order, qkv.split([sizes[n] for n in self.order], dim=-1)))
        q, k = self.rotary_emb(positions, parts["q"], parts["k"])
        return q, k, parts["v"]


def attention(bias: bool = False, **kw) -> Attention:
    gen = torch.Generator().manual_seed(1)
    rows = HEADS * HEAD + 2 * KV_HEADS * HEAD
    weight = torch.randn((rows, WIDTH), generator=gen).to(torch.bfloat16)
    b = torch.randn(rows, generator=gen).to(torch.bfloat16) if bias else None
    return Attention(QKVProj(weight, b, kw.pop("method", UnquantizedLinearMethod)), **kw)


def inputs(n: int = 5):
    gen = torch.Generator().manual_seed(2)
    return torch.arange(n, dtype=torch.int64) * 31, torch.randn((n, WIDTH), generator=gen).to(torch.bfloat16)


@pytest.mark.parametrize("bias", [False, True])
def test_the_k_v_rows_give_sglangs_k_and_v(bias):
    attn = attention(bias)
    project, name = draftkv.kv_projection(attn)
    assert name == "sliced"
    positions, hidden = inputs()
    k, v = project(positions, hidden)
    _, k0, v0 = attn.forward_prepare_native(positions, hidden)
    assert k.shape == k0.shape and v.shape == v0.shape
    assert torch.allclose(k.float(), k0.float(), atol=0.05) and torch.allclose(v.float(), v0.float(), atol=0.05)
    assert not torch.allclose(k.float(), v.float(), atol=0.05)      # k rotated, v not: the rows are told apart


def test_another_row_layout_falls_back_to_sglangs_own_path():
    attn = attention(order=("k", "v", "q"))
    project, name = draftkv.kv_projection(attn)
    assert name.startswith("native (the sliced k, v differ")
    positions, hidden = inputs()
    k, v = project(positions, hidden)
    _, k0, v0 = attn.forward_prepare_native(positions, hidden)
    assert torch.equal(k, k0) and torch.equal(v, v0)


def test_a_rotary_kernel_refusing_the_one_head_q_falls_back():
    _, name = draftkv.kv_projection(attention(rope=NeoxRope(refuse_one_head=True)))
    assert name == "native (the sliced k, v failed: RuntimeError: one query head)"


def test_a_quantised_or_unknown_linear_is_not_sliced():
    class Fp8LinearMethod:
        pass
    assert draftkv.sliced_kv(attention(method=Fp8LinearMethod)) is None
    assert draftkv.kv_projection(attention(method=Fp8LinearMethod))[1].startswith("native (qkv_proj is not")


def test_the_check_compares_against_sglangs_k_and_v():
    attn = attention()
    assert draftkv.same_kv(attn, draftkv.native_kv(attn))
    wrong = lambda positions, hidden: tuple(t + 1 for t in draftkv.native_kv(attn)(positions, hidden))  # noqa: E731
    assert not draftkv.same_kv(attn, wrong)
