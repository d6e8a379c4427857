#!/usr/bin/env python3
"""Running streams' gap between tokens under a backlog of long prompts: --itl-target-ms
against the fixed chunk (issue 38).

A fresh `actorlm serve` per scenario, alternated over rounds (reversed every other round).
`--streams` streams decode (greedy, ignore_eos) while `--loaders` clients send long prompts
(max_tokens 1) one after another, so every step beside the streams carries prefill:

  fixed    today's default: a mixed step prefills one --chunked-prefill-size (512) chunk
  target   --itl-target-ms T: a mixed step prefills what the measured step costs fit in T

Reported per scenario: the streams' inter-token gaps (p50, p99, max) and the backlog's
prompts finished and prompt tokens per second (what the target costs the backlog).

usage: itl_target_bench.py [--actorlm build/apps/actorlm] [--rounds 2] [--threads 2]
          [--target-ms 100] [--streams 3] [--stream-tokens 150] [--loaders 2] [--json OUT]
"""
import argparse
import json
import os
import random
import statistics
import sys
import threading
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "server"))
from serving_bench import WORDS, pct, run_one  # noqa: E402
from server_process import ServerProcess  # noqa: E402


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def run(binary, scenario, args):
    flags = ["--threads", str(args.threads)]
    if scenario == "target":
        flags += ["--itl-target-ms", str(args.target_ms)]
    with ServerProcess(binary, flags) as server:
        base = f"http://127.0.0.1:{server.port}"
        stop = threading.Event()
        loads = []

        def loader(k):
            rng = random.Random(500 + k)
            while not stop.is_set():
                body = {"prompt": words(rng, args.prompt_words), "max_tokens": 1, "temperature": 0, "stream": True,
                        "stream_options": {"include_usage": True}}
                loads.append(run_one(base, "/v1/completions", body, None))

        threads = [threading.Thread(target=loader, args=(k,), daemon=True) for k in range(args.loaders)]
        for t in threads:
            t.start()
        time.sleep(2.0)  # the backlog is under way before the streams start
        streams = [None] * args.streams

        def stream(i):
            body = {"prompt": f"Story {i}: once upon a time, in a land far away,", "max_tokens": args.stream_tokens,
                    "temperature": 0, "stream": True, "ignore_eos": True}
            streams[i] = run_one(base, "/v1/completions", body, None)

        started = time.perf_counter()
        runners = [threading.Thread(target=stream, args=(i,)) for i in range(args.streams)]
        for t in runners:
            t.start()
        for t in runners:
            t.join(900)
        wall = time.perf_counter() - started
        stop.set()
        for t in threads:
            t.join(900)
    gaps = []
    for rec in streams:
        if rec is None or rec["error"]:
            raise RuntimeError(f"a stream failed: {rec and rec['error']}")
        gaps += [b - a for a, b in zip(rec["chunks"], rec["chunks"][1:])]
    # Backlog prompts that finished while the streams ran (each is one prefill).
    done = [r for r in loads if not r["error"] and r["chunks"] and started <= r["end"] <= started + wall]
    prompt_tokens = sum(r["prompt_tokens"] or 0 for r in done)
    return {"scenario": scenario, "itl_p50": statistics.median(gaps), "itl_p99": pct(gaps, 99), "itl_max": max(gaps),
            "backlog_done": len(done), "backlog_prompt_tok_s": prompt_tokens / wall, "wall_s": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actorlm", default=os.path.join(here, "..", "build", "apps", "actorlm"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target-ms", type=int, default=100)
    ap.add_argument("--streams", type=int, default=3)
    ap.add_argument("--stream-tokens", type=int, default=150)
    ap.add_argument("--loaders", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=1200)
    ap.add_argument("--json")
    args = ap.parse_args()
    order = ["fixed", "target"]
    results = {s: [] for s in order}
    for r in range(args.rounds):
        for s in (order if r % 2 == 0 else order[::-1]):
            res = run(args.actorlm, s, args)
            results[s].append(res)
            print(f"round {r + 1} {s:6s}: ITL p50 {res['itl_p50'] * 1000:6.0f} ms  p99 {res['itl_p99'] * 1000:6.0f} ms  "
                  f"max {res['itl_max'] * 1000:6.0f} ms; backlog {res['backlog_done']} prompts, "
                  f"{res['backlog_prompt_tok_s']:.0f} prompt tok/s", flush=True)
    print("\nmedians over rounds:")
    for s in order:
        m = {k: statistics.median([x[k] for x in results[s]]) for k in ("itl_p50", "itl_p99", "itl_max",
                                                                        "backlog_prompt_tok_s")}
        print(f"  {s:6s}: ITL p50 {m['itl_p50'] * 1000:.0f} ms, p99 {m['itl_p99'] * 1000:.0f} ms, max "
              f"{m['itl_max'] * 1000:.0f} ms; backlog {m['backlog_prompt_tok_s']:.0f} prompt tok/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
