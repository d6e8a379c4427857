#!/usr/bin/env python3
"""Two small LoRA adapters for the default model and what llama.cpp computes
with each, for tests/model/lora_llamacpp_test.cpp and the server's adapter
tests.

Each adapter is written with gguf-py (PyPI `gguf`) as llama.cpp's
convert_lora_to_gguf.py lays one out: general.type = adapter, adapter.type =
lora, adapter.lora.alpha, and per adapted matrix W a pair W.lora_a (ggml
shape {in, rank}) and W.lora_b ({rank, out}), float16. Rank 2 keeps the files
small (~230 KB each); the values are random but large enough that every
prompt's greedy output changes.
  - smollm2_a.gguf: attn_q and attn_v of every layer, alpha 4 (scale 2),
    values in +-0.12
  - smollm2_b.gguf: attn_k and attn_output of every layer, no alpha (scale 1),
    values in +-0.25

Writes tests/fixtures/lora/<name>.gguf and tests/fixtures/lora/llamacpp.json:
  {"llama_cpp_version", "model_sha256", "cases": [
     {"adapter": "a" | "b" | "", "prompt_ids": [...], "greedy_ids": [16 ints],
      "greedy_gap": [16 floats], "top": [[id, logit] x 20]}]}
greedy_ids: token-by-token argmax with the adapter applied at scale 1;
greedy_gap: top-1 minus top-2 logit at each of those steps; top: the 20
largest logits after the prompt.

Needs llama-cpp-python importable against a libllama built from the same
sdist (PYTHONPATH=<sdist> LLAMA_CPP_LIB_PATH=<llama.cpp>/build/bin, see
docs/BENCHMARKS.md), numpy and gguf.
Usage: python3 scripts/reference/lora_fixture.py [--adapters-only] [model.gguf]
  --adapters-only: write the two adapter files, not llama.cpp's outputs
"""
import hashlib
import json
import os
import sys

import numpy as np
import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "lora")
ARGS = [a for a in sys.argv[1:] if a != "--adapters-only"]
MODEL = ARGS[0] if ARGS else os.path.expanduser(
    "~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")
LAYERS, HIDDEN, KV = 30, 576, 192
RANK = 2
N_NEW = 16
SHAPES = {"attn_q": (HIDDEN, HIDDEN), "attn_k": (KV, HIDDEN), "attn_v": (KV, HIDDEN),
          "attn_output": (HIDDEN, HIDDEN)}  # (out, in)
ADAPTERS = {"a": (["attn_q", "attn_v"], 4.0, 1, 0.12), "b": (["attn_k", "attn_output"], 0.0, 2, 0.25)}
PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about autumn.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n",
]


def write_adapter(name, targets, alpha, seed, bound):
    rng = np.random.default_rng(seed)
    path = os.path.join(OUT, f"smollm2_{name}.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    if alpha:
        w.add_float32("adapter.lora.alpha", alpha)
    for layer in range(LAYERS):
        for t in targets:
            out, inp = SHAPES[t]
            # numpy [rank][in] is ggml {in, rank}; [out][rank] is {rank, out}.
            a = rng.uniform(-bound, bound, size=(RANK, inp)).astype(np.float16)
            b = rng.uniform(-bound, bound, size=(out, RANK)).astype(np.float16)
            w.add_tensor(f"blk.{layer}.{t}.weight.lora_a", a)
            w.add_tensor(f"blk.{layer}.{t}.weight.lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main():
    os.makedirs(OUT, exist_ok=True)
    paths = {name: write_adapter(name, *spec) for name, spec in ADAPTERS.items()}
    if "--adapters-only" in sys.argv:
        return
    import llama_cpp
    cases = []
    for adapter in ["", "a", "b"]:
        kwargs = {"lora_path": paths[adapter], "lora_scale": 1.0} if adapter else {}
        llm = llama_cpp.Llama(model_path=MODEL, n_ctx=512, n_threads=2, logits_all=True, seed=0,
                              verbose=False, **kwargs)
        for prompt in PROMPTS:
            ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
            llm.reset()
            llm.eval(ids)
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            order = np.argsort(-row)[:20]
            top = [[int(i), round(float(row[i]), 5)] for i in order]
            greedy, gaps = [], []
            for _ in range(N_NEW):
                row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
                o = np.argsort(-row)[:2]
                greedy.append(int(o[0]))
                gaps.append(round(float(row[o[0]] - row[o[1]]), 5))
                llm.eval([int(o[0])])
            cases.append({"adapter": adapter, "prompt_ids": ids, "greedy_ids": greedy, "greedy_gap": gaps,
                          "top": top})
            print(adapter or "-", repr(prompt[:30]), "->",
                  repr(llm.detokenize(greedy).decode("utf-8", "replace")[:60]))
        del llm
    out = {"llama_cpp_version": llama_cpp.__version__,
           "model_sha256": hashlib.sha256(open(MODEL, "rb").read()).hexdigest(),
           "cases": cases}
    dest = os.path.join(OUT, "llamacpp.json")
    with open(dest, "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
    print(f"wrote {dest} ({os.path.getsize(dest)} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
