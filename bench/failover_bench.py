#!/usr/bin/env python3
"""Failover on loopback: how long a stream waits when its node dies, and what stream
resume costs.

1. Node loss to next token. A head over two nodes (each `--threads 1`, pinned to cores 0
   and 1 when there are two). N streams (greedy, 300 tokens, prompts of about P tokens) run;
   once every stream has T tokens, the node serving about half of them is killed (SIGKILL).
   For each stream, its longest pause between two tokens from the kill on: for the streams
   that were on that node (taken to be the streams with the longest pauses, as many as the
   head logged moves), the wait the move costs (detection, routing, the prefill of prompt +
   output so far on the other node, in its batch); for the others, the disturbance to them.
   Rounds alternate which node dies; p50/p99 over all.
2. Resume's cost. One `actorlm serve` (2 threads), 16 concurrent streams of 200 tokens,
   output tokens/s with `--stream-resume-window 30` against without, rounds alternated.

usage: failover_bench.py [--actorlm build/apps/actorlm] [--rounds 3] [--streams 8]
                         [--prompt-words 300] [--out docs/bench/failover.json]
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SECRET = os.path.join(tempfile.mkdtemp(prefix="actorlm-failover-bench-"), "secret")


def start(args, port_pattern, cpu=None):
    if cpu is not None and os.cpu_count() and os.cpu_count() >= 2:
        args = ["taskset", "-c", str(cpu), *args]
    p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.time() + 120
    port = None
    while time.time() < deadline and port is None:
        line = p.stderr.readline()
        if not line and p.poll() is not None:
            raise SystemExit(f"exited early: {args}")
        lines.append(line)
        m = re.search(port_pattern, line)
        if m and int(m.group(1)) > 0:
            port = int(m.group(1))
    threading.Thread(target=lambda: [lines.append(x) for x in p.stderr], daemon=True).start()
    return p, port, lines


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGCONT)
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def nodes(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/nodes", timeout=30) as r:
        return {n["address"]: n for n in json.loads(r.read())["nodes"]}


def stream(port, body, stamps):
    """Streams a completion; appends each text chunk's arrival time to stamps."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
    r = conn.getresponse()
    for raw in r:
        line = raw.decode().strip()
        if line.startswith("data: {") and '"text":"' in line and '"text":""' not in line:
            stamps.append(time.time())
    conn.close()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def start_cluster(binary, node_args=(), head_args=()):
    """Two nodes (one thread each, pinned to cores 0 and 1) and a head over them, joined.
    Returns ([(proc, port, lines)] of the nodes, their addresses, (head proc, port, lines))."""
    node_procs = []
    for cpu in (0, 1):
        p, port, lines = start([binary, "node", "--port", "0", "--threads", "1", "--secret-file", SECRET, *node_args],
                               r"listening on 127\.0\.0\.1:(\d+)", cpu)
        node_procs.append((p, port, lines))
    addrs = [f"127.0.0.1:{port}" for _, port, _ in node_procs]
    head = start([binary, "serve", "--port", "0", "--threads", "1", "--secret-file", SECRET,
                  *[a for x in addrs for a in ("--node", x)], *head_args], r"http://127\.0\.0\.1:(\d+)")
    deadline = time.time() + 30
    while not all(n["alive"] for n in nodes(head[1]).values()):
        if time.time() > deadline:
            raise SystemExit("nodes did not join")
        time.sleep(0.2)
    return node_procs, addrs, head


def loss_round(binary, rnd, n_streams, words, first_tokens):
    node_procs, addrs, (head, hport, hlines) = start_cluster(binary)
    try:
        filler = " ".join(f"word{k}" for k in range(words))
        stamps = [[] for _ in range(n_streams)]
        bodies = [{"prompt": f"Stream {rnd}.{i}: {filler} Now a story:", "max_tokens": 300, "temperature": 0,
                   "ignore_eos": True} for i in range(n_streams)]
        threads = [threading.Thread(target=stream, args=(hport, bodies[i], stamps[i])) for i in range(n_streams)]
        for t in threads:
            t.start()
        while min(len(s) for s in stamps) < first_tokens:
            time.sleep(0.01)
        victim = rnd % 2
        mark = len(hlines)
        killed_at = time.time()
        node_procs[victim][0].kill()
        for t in threads:
            t.join(600)
        moved = sum(1 for line in hlines[mark:] if "going on at node" in line)
        # Each stream's longest pause from the kill on: tokens the lost node
        # produced before it died may still reach the client just after, so
        # "the first token after the kill" would not measure the move.
        gaps = []
        for s in stamps:
            pauses = [b - max(a, killed_at) for a, b in zip(s, s[1:]) if b > killed_at]
            if pauses:
                gaps.append(max(pauses))
        # The streams that moved are those with the longest pauses (n = moved).
        gaps.sort()
        return {"victim": victim, "moved": moved, "moved_waits_s": gaps[len(gaps) - moved:],
                "stayed_waits_s": gaps[:len(gaps) - moved]}
    finally:
        stop(head)
        for p, _, _ in node_procs:
            stop(p)


def resume_round(binary, window, n_streams=16):
    args = [binary, "serve", "--port", "0", "--threads", "2"] + (["--stream-resume-window", str(window)] if window else [])
    p, port, _ = start(args, r"http://127\.0\.0\.1:(\d+)")
    try:
        stamps = [[] for _ in range(n_streams)]
        bodies = [{"prompt": f"Resume cost {i}: a story about the sea.", "max_tokens": 200, "temperature": 0,
                   "ignore_eos": True} for i in range(n_streams)]
        t0 = time.time()
        threads = [threading.Thread(target=stream, args=(port, bodies[i], stamps[i])) for i in range(n_streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        took = time.time() - t0
        return sum(len(s) for s in stamps) / took
    finally:
        stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default="build/apps/actorlm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--prompt-words", type=int, default=300)
    ap.add_argument("--first-tokens", type=int, default=40)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    with open(SECRET, "w") as f:
        f.write("failover bench secret 5c1d\n")
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?")
    out = {"cpu": model, "loss": [], "resume": []}
    for rnd in range(a.rounds):
        r = loss_round(a.actorlm, rnd, a.streams, a.prompt_words, a.first_tokens)
        out["loss"].append(r)
        print(f"loss round {rnd}: node {r['victim']} killed, {r['moved']} stream(s) moved; longest pause after the kill: "
              f"moved {[round(x, 3) for x in r['moved_waits_s']]} s, stayed {[round(x, 3) for x in r['stayed_waits_s']]} s",
              flush=True)
    for rnd in range(a.rounds):
        for window in ((30, 0) if rnd % 2 else (0, 30)):
            tps = resume_round(a.actorlm, window)
            out["resume"].append({"window": window, "tokens_per_s": tps})
            print(f"resume round {rnd}: window {window}: {tps:.1f} output tokens/s", flush=True)
    moved = [x for r in out["loss"] for x in r["moved_waits_s"]]
    stayed = [x for r in out["loss"] for x in r["stayed_waits_s"]]
    on = [r["tokens_per_s"] for r in out["resume"] if r["window"]]
    off = [r["tokens_per_s"] for r in out["resume"] if not r["window"]]
    print(f"\n{model}: node loss to next token, moved streams (n={len(moved)}): p50 {pct(moved, 0.5):.3f} s, "
          f"p99 {pct(moved, 0.99):.3f} s; streams that stayed (n={len(stayed)}): p50 {pct(stayed, 0.5):.3f} s, "
          f"p99 {pct(stayed, 0.99):.3f} s")
    print(f"stream resume on: {statistics.median(on):.1f} tokens/s against {statistics.median(off):.1f} off "
          f"({statistics.median(on) / statistics.median(off):.3f}x, medians of {len(on)})")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
