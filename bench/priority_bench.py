#!/usr/bin/env python3
"""An urgent request's time to first token under a flood of less urgent ones (issue 38).

A fresh `actorlm serve` per scenario, alternated over rounds (reversed every other round):

  alone     probes only: the urgent request's unloaded TTFT
  flood     probes beside `--flood` closed-loop clients sending long prompts, every request
            of the same priority (--enable-priority-scheduling off): what the queue does today
  priority  the same flood at priority 0, probes at priority 10, with
            --enable-priority-scheduling (an urgent request goes first in the queue and, when no
            place is free, sends the least urgent running request back to wait)

A probe is a short prompt with a few output tokens, streamed, sent every `--probe-interval`
seconds. The server runs `--max-running-requests` below the flood's concurrency, so requests
queue. Reported per scenario: probe TTFT p50 / p99 / max, the flood's output tokens a second
while the probes ran and its TTFT p50, and the engine's preemptions. The goal (issue 38): priority's p99 at most 1.5x
alone's.

usage: priority_bench.py [--actorlm build/apps/actorlm] [--rounds 2] [--threads 2]
          [--flood 12] [--max-running 4] [--probes 15] [--json OUT]
"""
import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.request

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "server"))
from serving_bench import WORDS, pct, run_one  # noqa: E402
from server_process import ServerProcess  # noqa: E402


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def run(binary, scenario, args):
    flags = ["--threads", str(args.threads), "--max-running-requests", str(args.max_running)]
    if scenario == "priority":
        flags += ["--enable-priority-scheduling", *args.priority_flags.split()]
    base_priority = {"priority": 0} if scenario == "priority" else {}
    urgent = {"priority": 10} if scenario == "priority" else {}
    with ServerProcess(binary, flags) as server:
        base = f"http://127.0.0.1:{server.port}"
        stop = threading.Event()
        flood_records = []

        def flood_client(k):
            rng = random.Random(1000 + k)
            while not stop.is_set():
                body = {"prompt": words(rng, args.flood_words), "max_tokens": args.flood_tokens, "temperature": 0,
                        "stream": True, "ignore_eos": True, **base_priority}
                flood_records.append(run_one(base, "/v1/completions", body, None))

        clients = []
        if scenario != "alone":
            clients = [threading.Thread(target=flood_client, args=(k,), daemon=True) for k in range(args.flood)]
            for c in clients:
                c.start()
            time.sleep(args.warmup)  # the queue fills before the first probe
        rng = random.Random(7)
        probes = []
        started = time.perf_counter()
        for _ in range(args.probes):
            body = {"prompt": words(rng, args.probe_words), "max_tokens": args.probe_tokens, "temperature": 0,
                    "stream": True, **urgent}
            t = time.perf_counter()
            rec = run_one(base, "/v1/completions", body, None)
            if rec["error"] or not rec["chunks"]:
                raise RuntimeError(f"a probe failed: {rec['error']}")
            probes.append(rec["chunks"][0] - rec["start"])
            time.sleep(max(0.0, args.probe_interval - (time.perf_counter() - t)))
        wall = time.perf_counter() - started
        preemptions = metric(server.port, "actorlm_preemptions_total")
        stop.set()
        for c in clients:
            c.join(600)
    done = [r for r in flood_records if not r["error"] and r["chunks"]]
    # Tokens streamed while the probes ran: requests straddle the window's ends.
    in_window = sum(started <= t <= started + wall for r in flood_records for t in r["chunks"])
    return {"scenario": scenario, "probe_ttft_s": probes, "ttft_p50": statistics.median(probes),
            "ttft_p99": pct(probes, 99), "ttft_max": max(probes), "flood_tok_s": in_window / wall,
            "flood_ttft_p50": statistics.median([r["chunks"][0] - r["start"] for r in done]) if done else None,
            "preemptions": preemptions}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actorlm", default=os.path.join(here, "..", "build", "apps", "actorlm"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--flood", type=int, default=12, help="closed-loop flood clients")
    ap.add_argument("--flood-words", type=int, default=300)
    ap.add_argument("--flood-tokens", type=int, default=48)
    ap.add_argument("--max-running", type=int, default=4)
    ap.add_argument("--probes", type=int, default=15)
    ap.add_argument("--probe-words", type=int, default=40)
    ap.add_argument("--probe-tokens", type=int, default=4)
    ap.add_argument("--probe-interval", type=float, default=1.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--priority-flags", default="", help="more server flags for the priority scenario")
    ap.add_argument("--scenarios", default="alone,flood,priority")
    ap.add_argument("--json")
    args = ap.parse_args()
    order = args.scenarios.split(",")
    results = {s: [] for s in order}
    for r in range(args.rounds):
        for s in (order if r % 2 == 0 else order[::-1]):
            res = run(args.actorlm, s, args)
            results[s].append(res)
            print(f"round {r + 1} {s:8s}: probe TTFT p50 {res['ttft_p50'] * 1000:7.0f} ms  p99 "
                  f"{res['ttft_p99'] * 1000:7.0f} ms  max {res['ttft_max'] * 1000:7.0f} ms; flood "
                  f"{res['flood_tok_s']:.1f} output tok/s, preemptions {res['preemptions']:.0f}", flush=True)
    alone_p99 = statistics.median([x["ttft_p99"] for x in results["alone"]]) if "alone" in results else float("nan")
    print("\nmedians over rounds (p99 against alone's p99):")
    for s in order:
        p50 = statistics.median([x["ttft_p50"] for x in results[s]])
        p99 = statistics.median([x["ttft_p99"] for x in results[s]])
        print(f"  {s:8s}: TTFT p50 {p50 * 1000:7.0f} ms, p99 {p99 * 1000:7.0f} ms ({p99 / alone_p99:.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
