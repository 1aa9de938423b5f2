"""Make a synthetic Llama target (random bf16 weights, made on the GPU), an EAGLE3 draft head and a
word-level tokenizer, so SGLang's server and sglang.bench_serving run with no download.

    python3 bench/gpu/mkmodel.py OUT_DIR [--hidden 3072 --layers 24 --inter 8192]
Writes OUT_DIR/target (model + tokenizer) and OUT_DIR/eagle3.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=3072)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--inter", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=24)
    ap.add_argument("--kv-heads", type=int, default=8)
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
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(target, safe_serialization=True)
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
    save_file(t, os.path.join(eagle, "model.safetensors"), metadata={"format": "pt"})
    layers = [1, args.layers // 2, args.layers - 4]
    with open(os.path.join(eagle, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
                   "intermediate_size": I, "num_hidden_layers": 1, "num_attention_heads": args.heads,
                   "num_key_value_heads": args.kv_heads, "head_dim": D, "vocab_size": VOCAB,
                   "draft_vocab_size": VOCAB, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
                   "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
                   "bos_token_id": 1, "eos_token_id": 2, "dtype": "bfloat16", "torch_dtype": "bfloat16",
                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers}}, f, indent=1)
    print(json.dumps({"target_params": n, "seconds": round(time.time() - t0, 1), "target": target, "eagle3": eagle}))


if __name__ == "__main__":
    main()
