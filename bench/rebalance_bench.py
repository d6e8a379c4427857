#!/usr/bin/env python3
"""Rebalancing by live migration on loopback: what spreading a burst of requests that share a
prefix buys, against leaving them where cache-aware routing put them.

A head over two nodes (each `--threads 1`, pinned to cores 0 and 1; a shared secret, so the KV
takes the data plane). N streams (greedy, 256 tokens each) whose prompts share a long prefix
arrive 50 ms apart: cache-aware routing sends every one to the node that holds the prefix.
With `--rebalance-interval` the head moves decoding ones to the idle node with their KV; without
it they all decode on one core. Per run: the time until the last stream ends, output tokens per
second over the run, each stream's inter-token gaps (p50 and p99 over all streams, the longest),
and the moves the head made. Runs alternate off / on.

usage: rebalance_bench.py [--actorlm build/apps/actorlm] [--rounds 2] [--streams 8]
                          [--interval 0.25] [--out docs/bench/rebalance.json]
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from failover_bench import SECRET, pct, start_cluster, stop, stream  # noqa: E402

PREFIX = ("You are the archivist of a small harbour town. Every answer starts from the harbour's "
          "logbooks: ships, tides, storms, the lighthouse keepers' notes and the market's prices. ") * 6


def one_run(binary, streams, interval):
    head_args = ["--rebalance-interval", str(interval)] if interval > 0 else []
    node_procs, addrs, (head, hport, hlines) = start_cluster(binary, ["--kv-tokens", "8192"], head_args)
    try:
        stamps = [[] for _ in range(streams)]
        bodies = [{"prompt": PREFIX + f"Question {i}: tell the story of voyage {i}.", "max_tokens": 256,
                   "temperature": 0, "ignore_eos": True} for i in range(streams)]
        threads = [threading.Thread(target=stream, args=(hport, bodies[i], stamps[i])) for i in range(streams)]
        t0 = time.time()
        for t in threads:
            t.start()
            time.sleep(0.05)
        for t in threads:
            t.join(900)
        wall = max(s[-1] for s in stamps if s) - t0
        gaps = [(b - a) * 1e3 for s in stamps for a, b in zip(s, s[1:])]
        moves = sum(1 for line in hlines if "moved from node" in line)
        tokens = sum(len(s) for s in stamps)
        return {"wall_s": wall, "tok_s": tokens / wall, "tokens": tokens, "itl_p50_ms": pct(gaps, 0.5),
                "itl_p99_ms": pct(gaps, 0.99), "longest_gap_ms": max(gaps), "moves": moves}
    finally:
        stop(head)
        for p, _, _ in node_procs:
            stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default="build/apps/actorlm")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--out", default="docs/bench/rebalance.json")
    a = ap.parse_args()
    with open(SECRET, "w") as f:
        f.write("rebalance bench secret 5e1f\n")
    runs = {"off": [], "on": []}
    for r in range(a.rounds):
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            res = one_run(a.actorlm, a.streams, a.interval if mode == "on" else 0)
            runs[mode].append(res)
            print(f"round {r} {mode}: {json.dumps({k: round(v, 1) for k, v in res.items()})}", flush=True)
    print(f"\n{a.streams} streams sharing a prefix, 256 tokens each, medians of {a.rounds} alternated rounds")
    print("| rebalancing | until the last ends (s) | output tok/s | ITL p50 (ms) | ITL p99 (ms) | longest gap (ms) | moves |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in ("off", "on"):
        m = {k: statistics.median(x[k] for x in runs[mode]) for k in runs[mode][0]}
        print(f"| {mode} | {m['wall_s']:.1f} | {m['tok_s']:.1f} | {m['itl_p50_ms']:.1f} | {m['itl_p99_ms']:.1f} | "
              f"{m['longest_gap_ms']:.0f} | {m['moves']:.0f} |")
    with open(a.out, "w") as f:
        json.dump({"streams": a.streams, "interval_s": a.interval, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
