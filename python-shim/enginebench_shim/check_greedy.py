"""Checks the model conversion: vLLM on the converted folder must generate the
same greedy text as transformers on the original GGUF.

Usage: python -m enginebench_shim.check_greedy MODEL_DIR [PROMPT]
Prints one JSON object {"transformers": ..., "vllm": ..., "equal": bool} and
exits 1 when the texts differ.
"""

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")

PROMPT = "The capital of France is"
MAX_TOKENS = 24


def transformers_greedy(prompt):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from enginebench_shim.prepare_model import gguf_path

    folder, name = os.path.split(gguf_path())
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, torch_dtype=torch.float32
    )
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
    return tok.decode(out[0][ids.shape[1]:], skip_special_tokens=True)


def vllm_greedy(model_dir, prompt):
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=512)
    out = llm.generate([prompt], SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0))
    return out[0].outputs[0].text


if __name__ == "__main__":
    model_dir = sys.argv[1]
    prompt = sys.argv[2] if len(sys.argv) > 2 else PROMPT
    hf = transformers_greedy(prompt)
    vl = vllm_greedy(model_dir, prompt)
    print(json.dumps({"prompt": prompt, "transformers": hf, "vllm": vl, "equal": hf == vl}))
    sys.exit(0 if hf == vl else 1)
