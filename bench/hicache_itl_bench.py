#!/usr/bin/env python3
"""What a HiCache load costs the streams that run beside it (issue 35).

A server with a small pool and a host tier runs a few streams (greedy, ignore_eos) while a
loader sends long prompts one after another (max_tokens 1). Before the streams start, each of
the loader's prompts is computed once; there are more of them than the pool holds, and the
loader takes them round-robin, so during the streams every one comes back from the host tier.
Scenarios, each in a fresh `actorlm serve`, alternated (reversed every other round):

  alone          the streams, no loader
  pool hits      the loader repeats one prompt, which stays in the pool: the same requests
                 with nothing to load (what a load is measured against)
  best_effort    loads, --hicache-prefetch-policy best_effort
  wait_complete  loads, --hicache-prefetch-policy wait_complete

Reported per scenario: the streams' inter-token gaps (p50, p99, max), the loader's requests
and their time to first token (p50), and the prompt tokens the host tier served. The loader's
prompts end one token past a whole 64-token block, so a load leaves one token to compute, as a
pool hit does: what differs between "pool hits" and the load rows is the load.

usage: hicache_itl_bench.py [--actorlm build/apps/actorlm] [--rounds 2] [--threads 2]
          [--streams 3] [--stream-tokens 200] [--prompts 4] [--prompt-words 1100]
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
from server_process import ServerProcess  # noqa: E402

WORDS = ["harbour", "lantern", "copper", "meadow", "violet", "thunder", "saddle", "orchard", "glacier", "pepper",
         "falcon", "marble", "ribbon", "canyon", "willow", "ember", "quartz", "tundra", "walnut", "beacon"]


def stream_times(port, prompt, max_tokens):
    """Arrival time of each streamed piece of text."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    times = []
    for line in r:
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        if any(c.get("text") for c in json.loads(line[5:]).get("choices", [])):
            times.append(time.perf_counter())
    conn.close()
    return times


def ttft(port, prompt):
    t0 = time.perf_counter()
    times = stream_times(port, prompt, 1)
    return (times[0] if times else time.perf_counter()) - t0


def host_hits(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("actorlm_hicache_host_hit_tokens_total"):
                return int(float(line.split()[-1]))
    return 0


def token_count(port, text):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/tokenize", data=json.dumps({"text": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["count"]


def block_aligned(binary, prompts, block=64):
    """Each prompt cut, a word at a time, to one token past a whole number of 64-token blocks: the
    tiers hold whole blocks, and the last prompt token is always computed, so a prompt loaded
    from a tier then computes one token, as a prompt the pool holds does."""
    out = []
    with ServerProcess(binary, []) as s:
        for p in prompts:
            head, tail = p.rsplit("\n", 1)
            words = head.split(" ")
            while token_count(s.port, " ".join(words) + "\n" + tail) % block != 1:
                words.pop()
            out.append(" ".join(words) + "\n" + tail)
    return out


def run(binary, scenario, args, loader_prompts, stream_prompts):
    flags = ["--kv-tokens", str(args.kv_tokens), "--hicache-size", "1"]
    if scenario in ("best_effort", "wait_complete"):
        flags += ["--hicache-prefetch-policy", scenario]
    prompts = loader_prompts[:1] if scenario == "pool hits" else loader_prompts
    with ServerProcess(binary, flags, threads=args.threads) as s:
        if scenario != "alone":
            for p in prompts:  # computed once; with several, each pushes an earlier one out
                ttft(s.port, p)
        hits_before = host_hits(s.port)
        stop = threading.Event()
        loads = []

        def loader():
            i = 0
            while not stop.is_set():
                loads.append(ttft(s.port, prompts[i % len(prompts)]))
                i += 1

        gaps = []

        def one_stream(p):
            t = stream_times(s.port, p, args.stream_tokens)
            gaps.extend(b - a for a, b in zip(t[1:], t[2:]))  # from the second token: decode only

        streams = [threading.Thread(target=one_stream, args=(p,)) for p in stream_prompts]
        for t in streams:
            t.start()
        feeder = threading.Thread(target=loader)
        if scenario != "alone":
            time.sleep(1.0)  # the streams are decoding before the first load
            feeder.start()
        for t in streams:
            t.join()
        stop.set()
        if scenario != "alone":
            feeder.join()
        gaps.sort()
        return {"scenario": scenario, "gaps": len(gaps), "itl_p50_ms": gaps[len(gaps) // 2] * 1e3,
                "itl_p99_ms": gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))] * 1e3, "itl_max_ms": gaps[-1] * 1e3,
                "loads": len(loads), "load_ttft_p50_s": statistics.median(loads) if loads else 0.0,
                "host_hit_tokens": host_hits(s.port) - hits_before}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default="build/apps/actorlm")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=3)
    ap.add_argument("--stream-tokens", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-words", type=int, default=1100)
    ap.add_argument("--kv-tokens", type=int, default=4096)
    ap.add_argument("--out")
    args = ap.parse_args()
    rng = random.Random(7)
    loader_prompts = [f"Record {i}: " + " ".join(rng.choice(WORDS) for _ in range(args.prompt_words)) + "\nLast word:"
                      for i in range(args.prompts)]
    loader_prompts = block_aligned(args.actorlm, loader_prompts)
    stream_prompts = [f"Story {i}: once upon a time, in a town by the sea," for i in range(args.streams)]
    scenarios = ["alone", "pool hits", "best_effort", "wait_complete"]
    results = []
    for r in range(args.rounds):
        for sc in (scenarios if r % 2 == 0 else scenarios[::-1]):
            res = run(args.actorlm, sc, args, loader_prompts, stream_prompts)
            res["round"] = r + 1
            results.append(res)
            print(json.dumps(res), flush=True)
    print("\n| scenario | ITL p50 ms | ITL p99 ms | ITL max ms | loads | load TTFT p50 s | host hit tokens |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for sc in scenarios:
        rs = [x for x in results if x["scenario"] == sc]

        def cell(k, f):
            return " / ".join(f.format(x[k]) for x in rs)
        print(f"| {sc} | {cell('itl_p50_ms', '{:.0f}')} | {cell('itl_p99_ms', '{:.0f}')} | {cell('itl_max_ms', '{:.0f}')} | "
              f"{cell('loads', '{}')} | {cell('load_ttft_p50_s', '{:.2f}')} | {cell('host_hit_tokens', '{}')} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
