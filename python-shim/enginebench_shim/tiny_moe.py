"""Writes a tiny mixture-of-experts checkpoint with random weights: the
MoE model that data-parallel tests run on CPU (a DP group of MoE ranks,
DP attention, expert parallel). Nothing is downloaded.

Shape: Mixtral (`MixtralForCausalLM`, a family vLLM's CPU build runs as
MoE through its CPU fused-MoE experts), 2 layers, hidden 64, 4 attention
heads of 64 (2 KV heads), 4 experts with top-2 routing, intermediate 128, the
bundled SmolLM2 tokenizer (its vocabulary, 49152 ids), weights in bfloat16
(~6 MB), tied embeddings. Tensor names are Mixtral's Hugging Face names
(`block_sparse_moe.gate`, `block_sparse_moe.experts.E.w1/w2/w3`), the ones
vLLM's Mixtral loader maps. The text it generates is noise; the point is
the engine's MoE and DP paths.

usage: python -m enginebench_shim.tiny_moe OUT_DIR TOKENIZER_DIR
(idempotent: an existing OUT_DIR/model.safetensors is kept)
"""
import json
import os
import shutil
import sys

LAYERS, HIDDEN, HEADS, KV_HEADS, EXPERTS, TOP_K, INTERMEDIATE = 2, 64, 4, 2, 4, 2, 128
# vLLM's CPU attention kernels take head sizes 32, 64, 80, ... (16 is
# refused: "Unsupported CPU attention configuration"): 64, set explicitly.
HEAD_DIM = 64
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def config(vocab, bos, eos):
    return {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "num_local_experts": EXPERTS,
        "num_experts_per_tok": TOP_K,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": "bfloat16",
        "router_aux_loss_coef": 0.0,
        "output_router_logits": False,
    }


def weights(vocab):
    import torch

    g = torch.Generator().manual_seed(31)

    def rnd(*shape):
        return (torch.randn(*shape, generator=g) * 0.05).to(torch.bfloat16)

    head = HEAD_DIM
    w = {"model.embed_tokens.weight": rnd(vocab, HIDDEN), "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
        w[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
        w[p + "self_attn.q_proj.weight"] = rnd(HEADS * head, HIDDEN)
        w[p + "self_attn.k_proj.weight"] = rnd(KV_HEADS * head, HIDDEN)
        w[p + "self_attn.v_proj.weight"] = rnd(KV_HEADS * head, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = rnd(HIDDEN, HEADS * head)
        w[p + "block_sparse_moe.gate.weight"] = rnd(EXPERTS, HIDDEN)
        for e in range(EXPERTS):
            x = p + f"block_sparse_moe.experts.{e}."
            w[x + "w1.weight"] = rnd(INTERMEDIATE, HIDDEN)
            w[x + "w2.weight"] = rnd(HIDDEN, INTERMEDIATE)
            w[x + "w3.weight"] = rnd(INTERMEDIATE, HIDDEN)
    return w


def main(out, tokenizer_dir):
    if os.path.isfile(os.path.join(out, "model.safetensors")):
        print(f"tiny MoE model already written: {out}")
        return
    from safetensors.torch import save_file

    tok = json.load(open(os.path.join(tokenizer_dir, "config.json")))
    vocab = tok["vocab_size"]
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in TOKENIZER_FILES:
        src = os.path.join(tokenizer_dir, name)
        if os.path.isfile(src):
            shutil.copy(src, tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config(vocab, tok.get("bos_token_id", 1), tok.get("eos_token_id", 2)), f, indent=2)
    save_file(weights(vocab), os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print(f"tiny MoE model written: {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
