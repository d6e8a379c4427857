#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python, built from source) on the default model, same
measurements as bench/cpu_decode_bench: prefill tokens/s for 128 and 512
tokens, and single-sequence decode tokens/s after a 128-token context.

Usage: python3 scripts/bench/llamacpp_decode.py [threads]
"""
import os
import sys
import time

import llama_cpp

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
model = os.path.expanduser("~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")
llm = llama_cpp.Llama(model_path=model, n_ctx=1024, n_threads=threads, n_threads_batch=threads,
                      n_batch=512, verbose=False)
print(f"llama.cpp {llama_cpp.__version__}, {threads} threads")
for n in (128, 512):
    toks = [100 + (i * 37) % 40000 for i in range(n)]
    llm.reset(); llm.eval(toks)  # warm-up
    llm.reset()
    t = time.perf_counter(); llm.eval(toks); s = time.perf_counter() - t
    print(f"  prefill {n:4d} tokens: {s:.3f} s = {n / s:.0f} tokens/s")
ctx = [200 + (i * 13) % 40000 for i in range(128)]
llm.reset(); llm.eval(ctx)
steps = 32
t = time.perf_counter()
for s in range(steps):
    llm.eval([300])
s = time.perf_counter() - t
print(f"  decode batch  1 (context 128): {1000 * s / steps:.1f} ms/step, {steps / s:.1f} tokens/s")
