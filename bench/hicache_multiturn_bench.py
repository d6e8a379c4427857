#!/usr/bin/env python3
"""Multi-turn conversations whose working set is 4x the KV pool: the pool alone, pool + host
tier, pool + host + disk tier (issue 19).

Each round makes fresh conversations: every one has its own ~600-token document, then turns
of a short question and a 16-token greedy answer; a turn's prompt is the whole conversation
so far. Turns go round-robin over the conversations, one request at a time, so a
conversation comes back only after all the others have pushed through the pool. The pool
(--kv-tokens) is a quarter of the conversations' final length summed.

Configurations, each a fresh `actorlm serve --threads 2`, alternated within a round:
  L1            the pool only
  L1+L2         a host tier holding the whole working set (--hicache-size)
  L1+L2½+L3     a host tier holding half of it, and a disk tier (--hicache-storage-dir)
each with --hicache-write-policy write_through and write_back where a tier exists. (A host
tier of half the working set alone gains nothing here: round-robin over more conversations
than fit is LRU's worst case, each one pushed out just before it comes back.)
Reported: wall time, requests/s, TTFT p50/p99 (streaming: time to the first token) over
turns 2 and later, and the fraction of their prompt tokens served from cache (any tier).

usage: hicache_multiturn_bench.py [--actorlm build/apps/actorlm] [--rounds 3]
          [--conversations 6] [--turns 4]
"""
import argparse
import http.client
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
from server_process import ServerProcess  # noqa: E402

WORDS = ["harbour", "lantern", "copper", "meadow", "violet", "thunder", "saddle", "orchard", "glacier", "pepper",
         "falcon", "marble", "ribbon", "canyon", "willow", "ember", "quartz", "tundra", "walnut", "beacon"]
KV_TOKEN_BYTES = 30 * 2 * 192 * 4  # the default model's f32 KV per token, all layers


def stream(port, prompt, max_tokens):
    """(seconds to the first token, whole answer text, usage)"""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    first, text, usage = None, "", None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[5:])
        if ev.get("usage"):
            usage = ev["usage"]
        for c in ev.get("choices", []):
            if c.get("text"):
                if first is None:
                    first = time.perf_counter() - t0
                text += c["text"]
    conn.close()
    return first if first is not None else time.perf_counter() - t0, text, usage


def conversations(rng, n, turns):
    docs = []
    for i in range(n):
        doc = f"Document {i} ({rng.random():.6f}): " + " ".join(rng.choice(WORDS) for _ in range(560))
        questions = [f"Question {t}: which word comes {rng.choice(['first', 'last', 'most often'])} "
                     f"after '{rng.choice(WORDS)}'?" for t in range(turns)]
        docs.append((doc, questions))
    return docs


def run(binary, args, convs, turns):
    with ServerProcess(binary, ["--threads", "2", *args]) as s:
        history = [doc for doc, _ in convs]
        ttfts, prompt_tokens, cached = [], 0, 0
        t0 = time.perf_counter()
        for t in range(turns):
            for i, (_, questions) in enumerate(convs):
                history[i] += f"\nUser: {questions[t]}\nAssistant:"
                first, text, usage = stream(s.port, history[i], 16)
                history[i] += text
                if t > 0:
                    ttfts.append(first)
                    prompt_tokens += usage["prompt_tokens"]
                    cached += usage["prompt_tokens_details"]["cached_tokens"]
        wall = time.perf_counter() - t0
        m = s.metrics()
    requests = turns * len(convs)
    return {"wall": wall, "rps": requests / wall, "p50": statistics.median(ttfts),
            "p99": sorted(ttfts)[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], "hit": cached / prompt_tokens,
            "host": m.get("actorlm_hicache_host_hit_tokens_total", 0),
            "disk": m.get("actorlm_hicache_storage_hit_tokens_total", 0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default="build/apps/actorlm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conversations", type=int, default=6)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--configs", help="comma-separated rows to run (e.g. 'L1,L1+L2½'); all when left out")
    a = ap.parse_args()
    rng = random.Random(19)
    # Sized on a first round's prompts: ~700 tokens of document and turns.
    final_tokens = a.conversations * (640 + 40 * a.turns)
    pool = max(1024, final_tokens // 4)
    whole_gb = final_tokens * 1.25 * KV_TOKEN_BYTES / 2**30
    half_gb = final_tokens / 2 * KV_TOKEN_BYTES / 2**30
    print(f"{a.conversations} conversations x {a.turns} turns, ~{final_tokens} tokens of working set, "
          f"pool {pool} tokens, host tier {whole_gb:.3f} GB or {half_gb:.3f} GB", file=sys.stderr)
    configs = [("L1", "-", [])]
    for policy in ("write_through", "write_back"):
        configs.append(("L1+L2", policy, ["--hicache-size", f"{whole_gb:.4f}", "--hicache-write-policy", policy]))
    for policy in ("write_through", "write_back"):
        configs.append(("L1+L2½+L3", policy, ["--hicache-size", f"{half_gb:.4f}", "--hicache-write-policy", policy,
                                              "--hicache-storage-dir", "{dir}"]))
    # A host tier of half the working set and no disk: round-robin over the conversations is plain
    # LRU's worst case (each one's blocks let go just before it comes back).
    configs.append(("L1+L2½", "write_through", ["--hicache-size", f"{half_gb:.4f}", "--hicache-write-policy",
                                                "write_through"]))
    if a.configs:
        wanted = a.configs.split(",")
        configs = [c for c in configs if c[0] in wanted]
    results = {i: [] for i in range(len(configs))}
    for rnd in range(a.rounds):
        convs = conversations(rng, a.conversations, a.turns)
        order = list(range(len(configs)))
        if rnd % 2:
            order.reverse()  # alternate which configuration runs first
        for i in order:
            name, policy, extra = configs[i]
            folder = tempfile.mkdtemp(prefix="actorlm-multiturn-")
            try:
                r = run(a.actorlm, ["--kv-tokens", str(pool), *[x.replace("{dir}", folder) for x in extra]],
                        convs, a.turns)
            finally:
                shutil.rmtree(folder)
            results[i].append(r)
            print(f"round {rnd}: {name} {policy}: {r['wall']:.1f} s, TTFT p50 {r['p50']:.2f} s p99 {r['p99']:.2f} s, "
                  f"cached {r['hit']:.1%} (host {r['host']:.0f}, disk {r['disk']:.0f} tokens)", file=sys.stderr)
    print("| tiers | write policy | wall time | requests/s | TTFT p50 (turn >= 2) | TTFT p99 | prompt tokens cached |")
    print("|---|---|---|---|---|---|---|")
    base = statistics.median(r["wall"] for r in results[0])
    for i, (name, policy, _) in enumerate(configs):
        med = {k: statistics.median(r[k] for r in results[i]) for k in ("wall", "rps", "p50", "p99", "hit")}
        print(f"| {name} | {policy} | {med['wall']:.1f} s ({base / med['wall']:.2f}x) | {med['rps']:.2f} | "
              f"{med['p50']:.2f} s | {med['p99']:.2f} s | {med['hit']:.1%} |")


if __name__ == "__main__":
    main()
