#!/usr/bin/env python3
"""Two worker nodes against one, on a shared-prefix workload (bench/serving_bench.py),
plus the single-process server as the no-network reference.

Each node is pinned to its own core with one thread (taskset -c 0 and -c 1), which is
what two one-core machines would give; the head is not pinned (it tokenizes, routes and
streams, and uses little CPU). Runs, one after another:
  single process   actorlm serve --threads 1 on core 0 (no middleman at all)
  1 node           head + node A (core 0)
  2 nodes          head + node A (core 0) + node B (core 1)
Workload: `groups` system prompts of `prefix_len` tokens, each shared by
`prompts_per_group` requests with 32 tokens of their own, 32 output tokens,
`concurrency` in flight. Writes docs/bench/cluster_*.json and prints a markdown table.

usage: cluster_compare.py [--model GGUF] [--actorlm build/apps/actorlm] [--out-dir docs/bench]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.expanduser("~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")
WORKLOAD = ["--workload", "shared-prefix", "--concurrency", "16", "--groups", "4", "--prompts-per-group", "8",
            "--prefix-len", "384", "--input-len", "32", "--output-len", "32"]


def read_until(proc, pattern, what):
    while True:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit(f"{what} exited early")
        m = re.search(pattern, line)
        if m:
            return m


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit("server exited early")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise SystemExit("server did not come up")


def start_node(binary, model, core, secret):
    proc = subprocess.Popen(["taskset", "-c", str(core), binary, "node", "--model", model, "--port", "0", "--threads", "1",
                             "--kv-tokens", "32768", "--max-running-requests", "64", "--secret-file", secret],
                            stderr=subprocess.PIPE, text=True)
    port = int(read_until(proc, r"listening on 127\.0\.0\.1:(\d+)", "node").group(1))
    return proc, port


def start_server(args, pin=None):
    cmd = (["taskset", "-c", str(pin)] if pin is not None else []) + [*args, "--port", "0"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = int(read_until(proc, r"http://127\.0\.0\.1:(\d+)", "server").group(1))
    wait_ready(port, proc)
    return proc, port


def stop(*procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def bench(port, model, label, seed, out_dir):
    out = os.path.join(out_dir, f"cluster_{label}.json")
    subprocess.run([sys.executable, os.path.join(HERE, "serving_bench.py"), "--base-url", f"http://127.0.0.1:{port}",
                    "--tokenizer", model, "--extra-body", json.dumps({"ignore_eos": True}), "--json", out,
                    "--label", label, "--seed", str(seed), *WORKLOAD], check=True)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--actorlm", default=os.path.join(HERE, "..", "build", "apps", "actorlm"))
    ap.add_argument("--out-dir", default=os.path.join(HERE, "..", "docs", "bench"))
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    secret = os.path.join(tempfile.mkdtemp(), "secret")
    with open(secret, "w") as f:
        f.write(os.urandom(16).hex())
    results = {}

    proc, port = start_server([args.actorlm, "serve", "--model", args.model, "--threads", "1", "--kv-tokens", "32768",
                               "--max-running-requests", "64"], pin=0)
    try:
        results["single process"] = bench(port, args.model, "single_process", 11, args.out_dir)
    finally:
        stop(proc)

    node_a, port_a = start_node(args.actorlm, args.model, 0, secret)
    try:
        head, port = start_server([args.actorlm, "serve", "--model", args.model, "--node", f"127.0.0.1:{port_a}",
                                   "--secret-file", secret])
        try:
            results["1 node"] = bench(port, args.model, "one_node", 12, args.out_dir)
        finally:
            stop(head)
        node_b, port_b = start_node(args.actorlm, args.model, 1, secret)
        try:
            head, port = start_server([args.actorlm, "serve", "--model", args.model, "--node", f"127.0.0.1:{port_a}",
                                       "--node", f"127.0.0.1:{port_b}", "--secret-file", secret])
            try:
                results["2 nodes"] = bench(port, args.model, "two_nodes", 13, args.out_dir)
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/nodes", timeout=30) as r:
                    results["2 nodes"]["nodes"] = json.loads(r.read())["nodes"]
            finally:
                stop(head)
        finally:
            stop(node_b)
    finally:
        stop(node_a)

    with open(os.path.join(args.out_dir, "cluster_results.json"), "w") as f:
        json.dump(results, f, indent=1)
    rows = ["| setup | req/s | output tok/s | input tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | E2E p50 / p99 ms | "
            "cache hit |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in results.items():
        hit = "" if s.get("cache_hit_rate") is None else f"{s['cache_hit_rate']:.2f}"
        rows.append(f"| {name} | {s['request_throughput']:.2f} | {s['output_tokens_per_s']:.1f} | "
                    f"{s['input_tokens_per_s']:.0f} | {s['ttft_ms']['p50']:.0f} / {s['ttft_ms']['p99']:.0f} | "
                    f"{s['itl_ms']['p50']:.0f} / {s['itl_ms']['p99']:.0f} | "
                    f"{s['e2e_ms']['p50']:.0f} / {s['e2e_ms']['p99']:.0f} | {hit} |")
    two, one = results["2 nodes"], results["1 node"]
    rows.append(f"\n2 nodes / 1 node: {two['output_tokens_per_s'] / one['output_tokens_per_s']:.2f}× output tokens/s")
    for n in two.get("nodes", []):
        rows.append(f"- node {n['address']}: {n['routed']} requests, cache hit rate {n['cache_hit_rate']:.2f}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
