#!/usr/bin/env python3
"""Every CPU code path that this machine runs and that is chosen at run time
from CPUID (AVX2, AVX-VNNI, AVX-512 VNNI: integer matmul and blocked
attention) gives the same tokens and the same logprobs, bit for bit, end to
end through `actorlm serve` on the default model: greedy text, prefill and
decode, a batch of concurrent requests. The contract is the kernels'
(kernels/cpu/quantized_matmul.hpp, attention_block.hpp); this checks that
nothing between them and the client (norms, activations, sampling, the
scheduler's batching) breaks it.

Portable code (ACTORLM_CPU_ISA=portable: dequantized float products, for
CPUs without AVX2) is outside the contract: it agrees to float rounding, which
int8 activation quantization can turn into a different greedy token on a near
tie. This test prints how far it is from the others on the first prompt.

With only one x86 path here (an AVX2 CPU without AVX-VNNI) there is nothing to
compare: the test says so and passes; CI machines with AVX-512 compare three.

  python3 cpu_isa_identity_test.py path/to/actorlm
"""
import json
import os
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_process import ServerProcess  # noqa: E402

PROMPTS = ["Describe a cat as JSON.", "Write a haiku about the sea.", "What is 17 times 23?",
           "List three uses of copper, then explain which matters most and why."]


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def available_isas():
    flags = cpu_flags()
    isas = []
    if {"avx2", "fma", "f16c"} <= flags:
        isas.append("avx2")
        if "avx_vnni" in flags:
            isas.append("avx_vnni")
        if {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags:
            isas.append("avx512_vnni")
    return isas


def answers(binary, isa, prompts=PROMPTS):
    env = dict(os.environ, ACTORLM_CPU_ISA=isa)
    with ServerProcess(binary, env=env) as server:
        def ask(prompt):
            body = json.dumps({"model": "default", "messages": [{"role": "user", "content": prompt}],
                               "max_tokens": 40, "temperature": 0, "logprobs": True, "top_logprobs": 3}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
            r = json.load(urllib.request.urlopen(req, timeout=600))
            return [(t["token"], t["logprob"], [(x["token"], x["logprob"]) for x in t["top_logprobs"]])
                    for t in r["choices"][0]["logprobs"]["content"]]
        # Concurrently: the prompts share batches (mixed prefill and decode).
        with ThreadPoolExecutor(len(prompts)) as pool:
            return list(pool.map(ask, prompts))


def main():
    binary = sys.argv[1]
    isas = available_isas()
    print(f"x86 paths on this CPU: {isas or 'none'}")
    if len(isas) < 2:
        print("one path or none: nothing to compare here")
        return
    got = {isa: answers(binary, isa) for isa in isas}
    base = isas[0]
    for isa in isas[1:]:
        for prompt, a, b in zip(PROMPTS, got[base], got[isa]):
            # JSON floats round-trip exactly: equal here is equal bits.
            if a != b:
                first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
                sys.exit(f"FAIL: {isa} differs from {base} on {prompt!r} at token {first}: "
                         f"{a[first] if first < len(a) else None} against {b[first] if first < len(b) else None}")
        print(f"{isa}: {sum(len(a) for a in got[isa])} tokens and logprobs identical to {base}")
    portable = answers(binary, "portable", PROMPTS[:1])
    a, b = got[base][0], portable[0]
    gap = max(abs(x[1] - y[1]) for x, y in zip(a, b)) if a and b else 0.0
    print(f"portable (outside the contract): first prompt's tokens {'equal' if [x[0] for x in a] == [y[0] for y in b] else 'differ'}, "
          f"largest logprob gap over the common tokens {gap:.3f}")


if __name__ == "__main__":
    main()
