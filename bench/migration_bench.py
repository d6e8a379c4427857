#!/usr/bin/env python3
"""Live migration on loopback: how long moving a running request with its KV takes, against
its KV size, and what its stream sees.

A head over two nodes (each `--threads 1`, pinned to cores 0 and 1 when there are two; a
shared secret, so the KV takes the data plane). For each prompt length, one greedy stream
(its prompt, 400 tokens) runs alone; once it has T tokens, the node it is on is drained
(POST /nodes/{id}/drain) and then taken back. Per move: the head's own figure (freeze,
reservation, copy and commit: "moved ... in T ms"), the rows and bytes copied, and the
stream's longest pause from the drain on (the move as its client sees it, one decode step
included). For comparison, the same stream's pause when its node is killed instead and it
fails over (the prompt and output computed again on the other node). Rounds alternate.

usage: migration_bench.py [--actorlm build/apps/actorlm] [--rounds 3]
                          [--prompt-words 200,500,1000] [--out docs/bench/migration.json]
(each word of the filler is about 4 tokens: 1000 words fill about half the nodes' 8,192 rows)
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from failover_bench import SECRET, nodes, start_cluster, stop, stream  # noqa: E402


def post(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, "{}", {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def one_round(binary, words, first_tokens, kill):
    node_procs, addrs, (head, hport, hlines) = start_cluster(binary, ["--kv-tokens", "8192"])
    try:
        filler = " ".join(f"word{k}" for k in range(words))
        stamps = []
        body = {"prompt": f"{filler} Now a story:", "max_tokens": 400, "temperature": 0, "ignore_eos": True}
        t = threading.Thread(target=stream, args=(hport, body, stamps))
        t.start()
        while len(stamps) < first_tokens:
            if not t.is_alive():
                raise SystemExit(f"the stream ended after {len(stamps)} tokens (prompt too long for the context?)")
            time.sleep(0.005)
        view = nodes(hport)
        victim = max(view, key=lambda a: view[a]["in_flight"])
        mark = len(hlines)
        at = time.time()
        if kill:
            node_procs[addrs.index(victim)][0].kill()
        else:
            code, _ = post(hport, f"/nodes/{victim}/drain")
            if code != 200:
                raise SystemExit(f"drain answered {code}")
        t.join(600)
        pause = max(b - max(a, at) for a, b in zip(stamps, stamps[1:]) if b > at)
        out = {"prompt_words": words, "kill": kill, "stream_pause_s": pause, "tokens": len(stamps)}
        for line in hlines[mark:]:
            m = re.search(r"moved from node \S+ to \S+ with (\d+) KV rows \(([\d.]+) MB\) in (\d+) ms", line)
            if m:
                out.update(rows=int(m.group(1)), mb=float(m.group(2)), move_ms=int(m.group(3)))
        if not kill and "move_ms" not in out:
            raise SystemExit("the head logged no move:\n" + "".join(hlines[mark:]))
        return out
    finally:
        stop(head)
        for p, _, _ in node_procs:
            stop(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default="build/apps/actorlm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-words", default="200,500,1000")
    ap.add_argument("--first-tokens", type=int, default=20)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    with open(SECRET, "w") as f:
        f.write("migration bench secret 77aa\n")
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("Model name")), "?")
    sizes = [int(x) for x in a.prompt_words.split(",")]
    runs = []
    for rnd in range(a.rounds):
        for words in sizes:
            for kill in ((False, True) if rnd % 2 == 0 else (True, False)):
                r = one_round(a.actorlm, words, a.first_tokens, kill)
                runs.append(r)
                what = "killed, failed over" if kill else f"drained: moved {r['rows']} rows, {r['mb']} MB in {r['move_ms']} ms"
                print(f"round {rnd}, {words} words: {what}; stream's longest pause {r['stream_pause_s'] * 1000:.0f} ms",
                      flush=True)
    print(f"\n{model}, two nodes on loopback, 1 thread each, data plane sealed (AES-256-GCM):")
    print("| prompt | KV rows moved | MB | move (head) | stream pause, moved with KV | stream pause, failover (recompute) |")
    print("|---|---:|---:|---:|---:|---:|")
    summary = []
    for words in sizes:
        moved = [r for r in runs if r["prompt_words"] == words and not r["kill"]]
        failed = [r for r in runs if r["prompt_words"] == words and r["kill"]]
        row = {"prompt_words": words, "rows": statistics.median(r["rows"] for r in moved),
               "mb": statistics.median(r["mb"] for r in moved),
               "move_ms": statistics.median(r["move_ms"] for r in moved),
               "pause_moved_ms": 1000 * statistics.median(r["stream_pause_s"] for r in moved),
               "pause_failover_ms": 1000 * statistics.median(r["stream_pause_s"] for r in failed)}
        summary.append(row)
        print(f"| {words} words | {row['rows']:.0f} | {row['mb']:.1f} | {row['move_ms']:.0f} ms | "
              f"{row['pause_moved_ms']:.0f} ms | {row['pause_failover_ms']:.0f} ms |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"cpu": model, "runs": runs, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
