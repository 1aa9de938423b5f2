"""Make a synthetic Llama target (random bf16 weights, made on the GPU), an EAGLE3 draft head and a
word-level tokenizer, so SGLang's server and sglang.bench_serving run with no download.

    python3 bench/gpu/mkmodel.py OUT_DIR [--hidden 3072 --layers 24 --inter 8192] [--crafted | --config-only]
Writes OUT_DIR/target (model + tokenizer) and OUT_DIR/eagle3.

--crafted: the same shapes and compute, but predictions with wide margins, for greedy-equality
tests (random weights give near-tied logits that flip with any numeric difference). Attention and
MLP outputs are zeroed (o_proj, down_proj), so the residual stream stays the token's embedding,
and the lm_head row of NEXT[u] is the embedding of u: the next token is NEXT[current] (written to
OUT_DIR/target/next.json), winning by ~60 logits to ~5. The EAGLE3 head passes the first captured
hidden state (the embedding of token t) through fc and predicts NEXT[NEXT[t]]: its first draft token
is always right, the later ones wrong, so about one draft per verify is accepted.

--crafted --lookback L: the same target (its embeddings get one large constant coordinate) with the
look-back draft of lookback_draft.py, whose first draft token is right iff its own KV L positions back was
written for this sequence: issue 12 item 3's consistency test (run it with one draft step).
"""
from __future__ import annotations

import argparse
import json
import os
import time

VOCAB = 32000


def tokenizer(path: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"w{i}": i for i in range(3, VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    from tokenizers import decoders
    tok.decoder = decoders.WordPiece(prefix="##")     # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(path)


SCALE = 0.5     # logit of the right token ~ SCALE * hidden * std / std ~ 30


def successor_table(vocab: int):
    """NEXT[u]: a random bijection on the ordinary ids (3..vocab-1); specials map to 3, 4, 5."""
    import torch
    g = torch.Generator().manual_seed(7)
    nxt = torch.empty(vocab, dtype=torch.long)
    nxt[3:] = torch.randperm(vocab - 3, generator=g) + 3
    nxt[:3] = torch.tensor([3, 4, 5])
    return nxt


def rows_for(successor, emb):
    """lm_head whose row successor[u] is (the sum of) emb[u]: argmax(lm_head @ emb[t]) = successor[t]."""
    import torch
    head = torch.zeros_like(emb, dtype=torch.float32)
    head.index_add_(0, successor.to(emb.device), emb.float())
    return (head * SCALE).to(emb.dtype)


def craft_target(model, constant_coordinate: bool = False):
    """Zero attention and MLP outputs and align lm_head with the successor table; returns it.
    constant_coordinate: embeddings' column 0 one constant (the look-back draft's positional query), and
    lm_head's column 0 one constant too, so that it shifts every logit alike."""
    import torch
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        if constant_coordinate:
            from lookback_draft import with_constant_coordinate
            emb.copy_(torch.from_numpy(with_constant_coordinate(emb.float().cpu().numpy())).to(emb.dtype))
        nxt = successor_table(model.config.vocab_size)
        model.lm_head.weight.copy_(rows_for(nxt, emb))
        if constant_coordinate:
            model.lm_head.weight[:, 0] = model.lm_head.weight[3:, 0].float().mean().to(emb.dtype)
    return nxt


def craft_head(t: dict, nxt, emb) -> None:
    """The EAGLE3 head's tensors (in place): fc passes the first captured hidden state through, the
    layer adds nothing, lm_head predicts NEXT[NEXT[t]] from the embedding of t."""
    import torch
    hidden = emb.shape[1]
    for name in ("midlayer.self_attn.o_proj.weight", "midlayer.mlp.down_proj.weight"):
        t[name] = torch.zeros_like(t[name])
    fc = torch.zeros(hidden, 3 * hidden, dtype=torch.bfloat16)
    fc[:, :hidden] = torch.eye(hidden, dtype=torch.bfloat16)
    t["fc.weight"] = fc
    t["lm_head.weight"] = rows_for(nxt[nxt], emb)


def write_eagle_config(eagle: str, args) -> None:
    H, I, D = args.hidden, args.inter, args.hidden // args.heads
    os.makedirs(eagle, exist_ok=True)
    layers = [1, args.layers // 2, args.layers - 4]
    with open(os.path.join(eagle, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
                   "intermediate_size": I, "num_hidden_layers": 1, "num_attention_heads": args.heads,
                   "num_key_value_heads": args.kv_heads, "head_dim": D, "vocab_size": VOCAB,
                   "draft_vocab_size": VOCAB, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
                   "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
                   "bos_token_id": 1, "eos_token_id": 2, "dtype": "bfloat16", "torch_dtype": "bfloat16",
                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers}}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=3072)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--inter", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=24)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--crafted", action="store_true")
    ap.add_argument("--lookback", type=int, default=0,
                    help="with --crafted: the look-back draft (lookback_draft.py) looking L positions back")
    ap.add_argument("--config-only", action="store_true",
                    help="configs and tokenizer only, for SGLang's --load-format dummy (random weights in place)")
    args = ap.parse_args()
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    t0 = time.time()
    target, eagle = os.path.join(args.out, "target"), os.path.join(args.out, "eagle3")
    head_dim = args.hidden // args.heads
    cfg = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.inter, num_hidden_layers=args.layers,
                      num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=head_dim,
                      vocab_size=VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-5, initializer_range=0.02,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    if args.config_only:
        cfg.dtype = "bfloat16"
        cfg.save_pretrained(target)
        tokenizer(target)
        write_eagle_config(eagle, args)
        per_layer = args.hidden * head_dim * (2 * args.heads + 2 * args.kv_heads) + 3 * args.hidden * args.inter
        print(json.dumps({"target_params": args.layers * per_layer + 2 * VOCAB * args.hidden, "load_format": "dummy",
                          "target": target, "eagle3": eagle}))
        return
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    nxt = None
    if args.crafted:
        nxt = craft_target(model, constant_coordinate=args.lookback > 0)
        embeddings = model.model.embed_tokens.weight.detach().cpu()
    model.save_pretrained(target, safe_serialization=True)
    if nxt is not None:
        with open(os.path.join(target, "next.json"), "w") as f:
            json.dump(nxt.tolist(), f)
    n = sum(p.numel() for p in model.parameters())
    del model
    tokenizer(target)

    os.makedirs(eagle, exist_ok=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    H, D, I = args.hidden, head_dim, args.inter

    def w(*shape, std=0.02):
        return (torch.randn(*shape, generator=g, device="cuda") * std).to(torch.bfloat16).cpu()

    ones = lambda k: torch.ones(k, dtype=torch.bfloat16)
    t = {
        "midlayer.self_attn.q_proj.weight": w(args.heads * D, 2 * H),
        "midlayer.self_attn.k_proj.weight": w(args.kv_heads * D, 2 * H),
        "midlayer.self_attn.v_proj.weight": w(args.kv_heads * D, 2 * H),
        "midlayer.self_attn.o_proj.weight": w(H, args.heads * D),
        "midlayer.mlp.gate_proj.weight": w(I, H), "midlayer.mlp.up_proj.weight": w(I, H),
        "midlayer.mlp.down_proj.weight": w(H, I),
        "midlayer.input_layernorm.weight": ones(H), "midlayer.hidden_norm.weight": ones(H),
        "midlayer.post_attention_layernorm.weight": ones(H),
        "fc.weight": w(H, 3 * H), "norm.weight": ones(H), "lm_head.weight": w(VOCAB, H),
    }
    if nxt is not None and args.lookback:
        from lookback_draft import lookback_head
        crafted = lookback_head(embeddings.float().numpy(), nxt.numpy(), args.lookback, args.heads, args.kv_heads, D)
        t.update({name: torch.from_numpy(a).to(torch.bfloat16) for name, a in crafted.items()})
        t["midlayer.mlp.down_proj.weight"] = torch.zeros_like(t["midlayer.mlp.down_proj.weight"])
    elif nxt is not None:
        craft_head(t, nxt, embeddings)
    save_file(t, os.path.join(eagle, "model.safetensors"), metadata={"format": "pt"})
    write_eagle_config(eagle, args)
    print(json.dumps({"target_params": n, "seconds": round(time.time() - t0, 1), "target": target, "eagle3": eagle}))


if __name__ == "__main__":
    main()
