#!/usr/bin/env python3
"""Time to first token of a long prompt after a restart, with and without the KV cache's disk tier.

For each round: a fresh prompt of ~2,000 tokens, max_tokens 1, on `actorlm serve --threads 2`.
  computed   a server without --hicache-storage-dir (what any restart costs today)
  from disk  a server with --hicache-storage-dir, restarted after the prompt was served once
             (the page cache is dropped first when the machine allows it, so the blocks are
             read from the device)
Rounds alternate the two; medians are reported.

usage: hicache_restart_bench.py [--actorlm build/apps/actorlm] [--rounds 3] [--tokens 2000]
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
from server_process import ServerProcess  # noqa: E402


def ttft(port, prompt):
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return time.perf_counter() - t0, out["usage"]


def drop_page_cache():
    try:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default="build/apps/actorlm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=2000)
    a = ap.parse_args()
    rng = random.Random(11)
    words = ["harbour", "lantern", "copper", "meadow", "violet", "thunder", "saddle", "orchard", "glacier", "pepper"]
    computed, from_disk, loaded, dropped = [], [], [], []
    for _ in range(a.rounds):
        prompt = f"{rng.random()} " + " ".join(rng.choice(words) for _ in range(a.tokens))
        with ServerProcess(a.actorlm) as s:
            t, usage = ttft(s.port, prompt)
            computed.append(t)
        folder = tempfile.mkdtemp(prefix="actorlm-hicache-bench-")
        try:
            with ServerProcess(a.actorlm, ["--hicache-storage-dir", folder]) as s:
                ttft(s.port, prompt)
            dropped.append(drop_page_cache())
            with ServerProcess(a.actorlm, ["--hicache-storage-dir", folder]) as s:
                t, usage = ttft(s.port, prompt)
                from_disk.append(t)
                loaded.append(usage["prompt_tokens_details"]["cached_tokens"] / usage["prompt_tokens"])
        finally:
            shutil.rmtree(folder)
        print(f"computed {computed[-1]:.2f} s, from disk {from_disk[-1]:.2f} s "
              f"({loaded[-1]:.1%} of {usage['prompt_tokens']} tokens loaded)", file=sys.stderr)
    print(f"| prompt tokens | TTFT after restart, computed | TTFT after restart, from disk | speed-up | "
          f"tokens from disk | page cache dropped |")
    print("|---|---|---|---|---|---|")
    print(f"| {usage['prompt_tokens']} | {statistics.median(computed):.2f} s | {statistics.median(from_disk):.2f} s | "
          f"{statistics.median(computed) / statistics.median(from_disk):.1f}x | {statistics.median(loaded):.1%} | "
          f"{'yes' if all(dropped) else 'no (not permitted here)'} |")


if __name__ == "__main__":
    main()
