#!/usr/bin/env python3
"""Greedy continuations and teacher-forced top-1 tokens from llama.cpp
(llama-cpp-python, built from source: pip install --no-binary llama-cpp-python
llama-cpp-python) on the default model, for actorlm's agreement test.

Writes tests/fixtures/llamacpp/greedy.json:
  {"llama_cpp_version", "model_sha256", "cases": [
     {"prompt": str, "prompt_ids": [int], "greedy_ids": [32 ints],
      "top1": [int per position of prompt_ids + greedy_ids],   # argmax after each token
      "top2": [int ...], "gap": [float ...],                   # top1 - top2 logit
      "greedy_gap": [32 floats]}]}   # top1 - top2 logit at each greedy step
Position i of top1/top2/gap is llama.cpp's prediction for the token after
sequence[i], sequence = prompt_ids + greedy_ids, from one batched pass over
the sequence. greedy_ids and greedy_gap come from token-by-token decoding;
llama.cpp's own batched and one-token kernels round differently, so near ties
can differ between the two (counted in "llamacpp_self_mismatches"). Sampling is pure argmax: no
repeat penalty (llama-cpp-python's default 1.1 is not applied: we read logits).

Usage: python3 scripts/reference/llamacpp_greedy_fixture.py [model.gguf]
"""
import hashlib
import json
import os
import sys

import numpy as np
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
    "~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")
N_NEW = 32


def chat(user, system=None):
    s = ""
    if system:
        s += f"<|im_start|>system\n{system}<|im_end|>\n"
    return s + f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n",
    "1, 2, 3, 4, 5,",
    "The three primary colors are",
    "import numpy as np\n\n# compute the mean of an array\n",
    "Water boils at",
    "Here is a list of fruits:\n1. Apple\n2.",
    "In 1969, the first humans",
    "The quick brown fox",
    chat("What is the capital of Japan?"),
    chat("Write a haiku about autumn."),
    chat("Explain photosynthesis in one sentence.", "You are a concise science tutor."),
    chat("Translate 'good morning' into Spanish."),
    chat("List three programming languages."),
    chat("What is 12 times 7?"),
    chat("Give me a tip for better sleep.", "You are a helpful assistant."),
    "SELECT name, email FROM users WHERE",
    "<html>\n<head>\n<title>",
    "The mitochondria is the powerhouse of the cell. It produces energy in the form of ATP "
    "through a process called cellular respiration. This process involves several steps, "
    "including glycolysis, the Krebs cycle, and the electron transport chain. Each of these "
    "steps takes place in a different part of the cell and requires specific enzymes. In "
    "summary, cellular respiration",
    chat("Summarize the following text in one sentence: The city council met on Tuesday to "
         "discuss the new park. Residents spoke in favor of more trees, a playground, and "
         "better lighting. The council agreed to fund the project next year, pending a final "
         "budget review in the spring."),
    "Q: What is the largest planet in our solar system?\nA:",
]


def main():
    llm = llama_cpp.Llama(model_path=MODEL, n_ctx=1024, n_threads=2, logits_all=True,
                          seed=0, verbose=False)
    cases = []
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        greedy, greedy_gap = [], []
        for _ in range(N_NEW):
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            o = np.argsort(-row)[:2]
            t = int(o[0])
            greedy.append(t)
            greedy_gap.append(round(float(row[o[0]] - row[o[1]]), 5))
            llm.eval([t])
        seq = ids + greedy
        # Teacher forcing over the whole sequence in one fresh pass.
        llm.reset()
        llm.eval(seq)
        top1, top2, gap = [], [], []
        for i in range(len(seq)):
            row = np.asarray(llm.scores[i], dtype=np.float64)
            o = np.argsort(-row)[:2]
            top1.append(int(o[0]))
            top2.append(int(o[1]))
            gap.append(round(float(row[o[0]] - row[o[1]]), 5))
        mismatches = sum(top1[len(ids) - 1 + j] != t for j, t in enumerate(greedy))
        cases.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": greedy,
                      "greedy_gap": greedy_gap, "top1": top1, "top2": top2, "gap": gap,
                      "llamacpp_self_mismatches": mismatches})
        print(repr(prompt[:40]), "->", repr(llm.detokenize(greedy).decode("utf-8", "replace")[:60]))
    out = {"llama_cpp_version": llama_cpp.__version__,
           "model_sha256": hashlib.sha256(open(MODEL, "rb").read()).hexdigest(),
           "n_new": N_NEW, "cases": cases}
    dest = os.path.join(ROOT, "tests", "fixtures", "llamacpp", "greedy.json")
    with open(dest, "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
    print(f"wrote {dest} ({os.path.getsize(dest)} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
