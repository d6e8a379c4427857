#!/usr/bin/env python3
"""Two worker nodes against one on a shared-prefix workload, and what the network costs
each decode step, with bench/serving_bench.py against four setups.

Each node is pinned to its own core with one thread (taskset -c 0 and -c 1), which is
what two one-core machines would give; the head is not pinned (it tokenizes, routes and
streams, and uses little CPU). Setups, one after another:
  single process   actorlm serve --threads 1 on core 0 (no middleman at all)
  remote worker    head (scheduler, managers) + worker node on core 0: a ForwardBatch and
                   a BatchResult cross the network every step
  1 node           head + engine node on core 0: a TokenStream crosses every step
  2 nodes          head + engine nodes on cores 0 and 1
Workloads: "one stream" (one request at a time, 128 output tokens: inter-token latency
is the step time plus its messaging) and "shared prefix" (4 system prompts of 384
tokens, each shared by 8 requests with 32 tokens of their own, 32 output tokens, 16 in
flight). Writes docs/bench/cluster_*.json and prints a markdown table.

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
WORKLOADS = {
    "one stream": ["--workload", "random", "--concurrency", "1", "--num-prompts", "6", "--input-len", "64",
                   "--output-len", "128", "--seed", "21"],
    "shared prefix": ["--workload", "shared-prefix", "--concurrency", "16", "--groups", "4", "--prompts-per-group", "8",
                      "--prefix-len", "384", "--input-len", "32", "--output-len", "32", "--seed", "22"],
}


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


def bench(port, model, label, workload, out_dir):
    out = os.path.join(out_dir, f"cluster_{label}.json")
    subprocess.run([sys.executable, os.path.join(HERE, "serving_bench.py"), "--base-url", f"http://127.0.0.1:{port}",
                    "--tokenizer", model, "--extra-body", json.dumps({"ignore_eos": True}), "--json", out,
                    "--label", label, *workload], check=True)
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
    binary, model = args.actorlm, args.model
    engine = ["--model", model, "--kv-tokens", "32768", "--max-running-requests", "64"]

    def single():
        proc, port = start_server([binary, "serve", *engine, "--threads", "1"], pin=0)
        return [proc], port

    def nodes(n):
        def start():
            procs, addrs = [], []
            for core in range(n):
                proc, port = start_node(binary, model, core, secret)
                procs.append(proc)
                addrs += ["--node", f"127.0.0.1:{port}"]
            head, port = start_server([binary, "serve", "--model", model, *addrs, "--secret-file", secret])
            return [head, *procs], port
        return start

    def remote_worker():
        proc = subprocess.Popen(["taskset", "-c", "0", binary, "node", "--role", "worker", *engine, "--port", "0",
                                 "--threads", "1", "--secret-file", secret], stderr=subprocess.PIPE, text=True)
        wport = int(read_until(proc, r"listening on 127\.0\.0\.1:(\d+)", "worker node").group(1))
        head, port = start_server([binary, "serve", *engine, "--remote-worker", f"127.0.0.1:{wport}",
                                   "--secret-file", secret])
        return [head, proc], port

    # (setup, start, runs): "one stream" shows each step's messaging cost in its inter-token latency;
    # "shared prefix" the throughput of one node against two.
    setups = [("single process", single, ["one stream", "shared prefix"]),
              ("remote worker", remote_worker, ["one stream"]),
              ("1 node", nodes(1), ["one stream", "shared prefix"]),
              ("2 nodes", nodes(2), ["shared prefix"])]
    results = {}
    for name, start, runs in setups:
        procs, port = start()
        try:
            for run in runs:
                label = f"{name}_{run}".replace(" ", "_")
                results[(name, run)] = bench(port, model, label, WORKLOADS[run], args.out_dir)
            if name == "2 nodes":
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/nodes", timeout=30) as r:
                    results[(name, "shared prefix")]["nodes"] = json.loads(r.read())["nodes"]
        finally:
            stop(*procs)

    with open(os.path.join(args.out_dir, "cluster_results.json"), "w") as f:
        json.dump({f"{k[0]} / {k[1]}": v for k, v in results.items()}, f, indent=1)
    rows = ["| setup | workload | req/s | output tok/s | TTFT p50 / p99 ms | ITL p50 / mean / p99 ms | E2E p50 ms | "
            "cache hit |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (name, run), s in results.items():
        hit = "" if s.get("cache_hit_rate") is None else f"{s['cache_hit_rate']:.2f}"
        rows.append(f"| {name} | {run} | {s['request_throughput']:.2f} | {s['output_tokens_per_s']:.1f} | "
                    f"{s['ttft_ms']['p50']:.0f} / {s['ttft_ms']['p99']:.0f} | "
                    f"{s['itl_ms']['p50']:.2f} / {s['itl_ms']['mean']:.2f} / {s['itl_ms']['p99']:.2f} | "
                    f"{s['e2e_ms']['p50']:.0f} | {hit} |")
    two, one = results[("2 nodes", "shared prefix")], results[("1 node", "shared prefix")]
    rows.append(f"\n2 nodes / 1 node: {two['output_tokens_per_s'] / one['output_tokens_per_s']:.2f}x output tokens/s")
    for n in two.get("nodes", []):
        rows.append(f"- node {n['address']}: {n['routed']} requests, cache hit rate {n['cache_hit_rate']:.2f}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
