#!/usr/bin/env python3
"""What the host tier's element type does to outputs: KV reloaded from RAM in `same`, `f16`
or `q8_0` against the same prompts computed (issue 19).

For each --hicache-dtype, a fresh `actorlm serve --threads 2 --kv-tokens 1024 --hicache-size 1`
(write-through) answers N prompts of ~600 tokens (greedy, 32 tokens, logprobs), each pushing
the one before out of the pool, then answers them all again in the same order: each prompt
now comes back from the host tier (checked in usage.cached_tokens). Reported per type: how many
of the N greedy outputs are identical, and |delta logprob| of the first token and over the
tokens both runs share (mean and max).

usage: hicache_drift_bench.py [--actorlm build/apps/actorlm] [--prompts 12]
"""
import argparse
import json
import os
import random
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
from server_process import ServerProcess  # noqa: E402

WORDS = ["harbour", "lantern", "copper", "meadow", "violet", "thunder", "saddle", "orchard", "glacier", "pepper"]


def complete(port, prompt):
    body = {"prompt": prompt, "max_tokens": 32, "temperature": 0, "logprobs": 1}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    c = out["choices"][0]
    return c["logprobs"]["tokens"], c["logprobs"]["token_logprobs"], out["usage"]["prompt_tokens_details"]["cached_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default="build/apps/actorlm")
    ap.add_argument("--prompts", type=int, default=12)
    a = ap.parse_args()
    rng = random.Random(7)
    prompts = [f"Notes {i}: " + " ".join(rng.choice(WORDS) for _ in range(500)) + "\nSummary of the notes:"
               for i in range(a.prompts)]
    print("| host tier type | identical greedy outputs (32 tokens) | first token: mean / max abs delta logprob "
          "| shared tokens: mean / max abs delta logprob | tokens from the host tier |")
    print("|---|---|---|---|---|")
    for dtype in ("same", "f16", "q8_0"):
        args = ["--threads", "2", "--kv-tokens", "1024", "--hicache-size", "1", "--hicache-dtype", dtype]
        with ServerProcess(a.actorlm, args) as s:
            first = [complete(s.port, p) for p in prompts]
            again = [complete(s.port, p) for p in prompts]
            hits = s.metrics()["actorlm_hicache_host_hit_tokens_total"]
        same, d_first, d_all = 0, [], []
        for (t0, l0, c0), (t1, l1, c1) in zip(first, again):
            if c0 >= 64 or c1 < 64:  # the prompts share their first words, never a block
                raise SystemExit(f"{dtype}: expected a cold run then a cached one, got cached {c0} then {c1}")
            same += t0 == t1
            d_first.append(abs(l0[0] - l1[0]))
            for x, y, u, v in zip(t0, t1, l0, l1):
                if x != y:
                    break
                d_all.append(abs(u - v))
        print(f"| {dtype} | {same}/{len(prompts)} | {sum(d_first) / len(d_first):.5f} / {max(d_first):.5f} | "
              f"{sum(d_all) / len(d_all):.5f} / {max(d_all):.5f} | {hits:.0f} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
