#!/usr/bin/env python3
"""actorlm serve and llama.cpp's own llama-server (mainline, built from the
tree vendored in the llama-cpp-python sdist; see docs/BENCHMARKS.md) side by
side: same GGUF, same machine, same thread count, same workloads
(bench/serving_bench.py), one server at a time. llama-server runs 32
parallel slots with continuous batching (-np 32), its strongest setting for
these workloads; llama-cpp-python's own server runs one request at a time and
would flatter us. Writes every result as JSON, a markdown table and a plot
(PNG) into --out-dir.

With --rounds N (default 3) every workload runs N times per server, the two
servers taking turns (actorlm first in odd rounds, llama-server first in even
ones), so minute-to-minute drift on a shared machine falls on both; the
table gives each figure's median over the rounds and the ratio of medians,
and the JSON keeps every round.

usage: serving_compare.py --llama-server PATH [--model GGUF] [--threads N] [--rounds N]
                          [--actorlm build/apps/actorlm] [--out-dir docs/bench]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.expanduser("~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")

# (name, serving_bench arguments). Output lengths are fixed (EOS ignored) so
# both servers generate the same number of tokens.
# Each run has its own seed, so no run finds the previous one's prompts cached.
RUNS = [
    ("concurrency 1", ["--workload", "random", "--concurrency", "1", "--num-prompts", "8", "--seed", "1"]),
    ("concurrency 8", ["--workload", "random", "--concurrency", "8", "--num-prompts", "32", "--seed", "2"]),
    ("concurrency 32", ["--workload", "random", "--concurrency", "32", "--num-prompts", "64", "--seed", "3"]),
    ("shared prefix", ["--workload", "shared-prefix", "--concurrency", "16", "--groups", "4", "--seed", "4",
                       "--prompts-per-group", "8", "--prefix-len", "384", "--input-len", "32", "--output-len", "32"]),
]


def wait_ready(url, proc, what):
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited early")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise SystemExit(f"{what} did not come up")


def start_actorlm(binary, model, threads, args=("--kv-tokens", "32768", "--max-running-requests", "64")):
    """`actorlm serve` on a free port, once /health answers: (process, port)."""
    proc = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--threads", str(threads), *args],
                            stderr=subprocess.PIPE, text=True)
    port = None
    while port is None:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit("actorlm serve exited early")
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m and int(m.group(1)) > 0:
            port = int(m.group(1))
    # Keep draining stderr, so that a long run never blocks the server on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    wait_ready(f"http://127.0.0.1:{port}/health", proc, "actorlm serve")
    return proc, port


def start_llama_server(binary, model, threads, port=30871):
    # 32 slots of 1,024 tokens each (the longest workload is ~450 + 128).
    proc = subprocess.Popen([binary, "--model", model, "--host", "127.0.0.1", "--port", str(port),
                             "--threads", str(threads), "--threads-batch", str(threads), "--parallel", "32",
                             "--ctx-size", str(32 * 1024), "--cont-batching"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/v1/models", proc, "llama-server")
    return proc, port


def bench(port, model, name, extra, args, out):
    label = name.replace(" ", "_")
    cmd = [sys.executable, os.path.join(HERE, "serving_bench.py"), "--base-url", f"http://127.0.0.1:{port}",
           "--tokenizer", model, "--extra-body", json.dumps(extra), "--json", out, "--label", label, *args]
    subprocess.run(cmd, check=False)
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--actorlm", default=os.path.join(HERE, "..", "build", "apps", "actorlm"))
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary (required unless --report-only)")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "..", "docs", "bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--report-only", action="store_true",
                    help="redo the table and plot from --out-dir's serving_results.json")
    args = ap.parse_args()
    if not 1 <= args.rounds <= 20:
        raise SystemExit("--rounds must be 1-20")
    os.makedirs(args.out_dir, exist_ok=True)
    if args.report_only:
        with open(os.path.join(args.out_dir, "serving_results.json")) as f:
            report(json.load(f)["results"], args)
        return
    if not args.llama_server:
        raise SystemExit("--llama-server is required")
    # rounds[server][workload]: one summary per round.
    rounds = {"actorlm": {name: [] for name, _ in RUNS}, "llama.cpp": {name: [] for name, _ in RUNS}}
    servers = [
        ("actorlm", lambda: start_actorlm(args.actorlm, args.model, args.threads), {"ignore_eos": True}),
        ("llama.cpp", lambda: start_llama_server(args.llama_server, args.model, args.threads), {"ignore_eos": True}),
    ]
    for r in range(args.rounds):
        for server, start, extra in (servers if r % 2 == 0 else servers[::-1]):
            proc, port = start()
            try:
                for name, run_args in RUNS:
                    out = os.path.join(args.out_dir,
                                       f"serving_{server.replace('.', '')}_{name.replace(' ', '_')}_r{r + 1}.json")
                    # A fresh seed per round: no round finds another's prompts cached.
                    seeded = [str(int(v) + 100 * r) if prev == "--seed" else v
                              for prev, v in zip([""] + run_args, run_args)]
                    rounds[server][name].append(bench(port, args.model, name, extra, seeded, out))
                    print(f"round {r + 1} {server} {name}: "
                          f"{rounds[server][name][-1]['output_tokens_per_s']:.1f} output tok/s", flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
    with open(os.path.join(args.out_dir, "serving_results.json"), "w") as f:
        json.dump({"rounds": args.rounds, "results": rounds}, f, indent=1)
    report(rounds, args)


def report(rounds, args):
    """The table (medians over rounds, ratios, every round's output tok/s)
    and the plot, from each round's serving_bench summaries."""

    def med(server, name, *path):
        values = []
        for summary in rounds[server][name]:
            for key in path:
                summary = summary[key]
            values.append(summary)
        return statistics.median(values)

    results = {server: {name: {
        "request_throughput": med(server, name, "request_throughput"),
        "output_tokens_per_s": med(server, name, "output_tokens_per_s"),
        "input_tokens_per_s": med(server, name, "input_tokens_per_s"),
        "ttft_ms": {p: med(server, name, "ttft_ms", p) for p in ("p50", "p99")},
        "itl_ms": {p: med(server, name, "itl_ms", p) for p in ("p50", "p99")},
        "e2e_ms": {p: med(server, name, "e2e_ms", p) for p in ("p50", "p99")},
        "cache_hit_rate": (None if rounds[server][name][0]["cache_hit_rate"] is None
                           else med(server, name, "cache_hit_rate")),
        "output_tokens_per_s_rounds": [s["output_tokens_per_s"] for s in rounds[server][name]],
    } for name, _ in RUNS} for server in rounds}

    rows = ["| workload | server | req/s | output tok/s | input tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | "
            "E2E p50 / p99 ms | cache hit |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, _ in RUNS:
        for server in ("actorlm", "llama.cpp"):
            s = results[server][name]
            hit = "" if s["cache_hit_rate"] is None else f"{s['cache_hit_rate']:.2f}"
            rows.append(f"| {name} | {server} | {s['request_throughput']:.2f} | {s['output_tokens_per_s']:.1f} | "
                        f"{s['input_tokens_per_s']:.0f} | {s['ttft_ms']['p50']:.0f} / {s['ttft_ms']['p99']:.0f} | "
                        f"{s['itl_ms']['p50']:.0f} / {s['itl_ms']['p99']:.0f} | "
                        f"{s['e2e_ms']['p50']:.0f} / {s['e2e_ms']['p99']:.0f} | {hit} |")
        a, b = results["actorlm"][name], results["llama.cpp"][name]
        rows.append(f"| {name} | **actorlm / llama.cpp** | {a['request_throughput'] / b['request_throughput']:.2f}× | "
                    f"{a['output_tokens_per_s'] / b['output_tokens_per_s']:.2f}× | | "
                    f"{a['ttft_ms']['p50'] / b['ttft_ms']['p50']:.2f}× | {a['itl_ms']['p50'] / b['itl_ms']['p50']:.2f}× | "
                    f"{a['e2e_ms']['p50'] / b['e2e_ms']['p50']:.2f}× | |")
    rows.append("")
    rows.append("| workload | actorlm output tok/s per round | llama.cpp output tok/s per round |")
    rows.append("|---|---|---|")
    for name, _ in RUNS:
        rows.append(f"| {name} | " + " / ".join(f"{v:.1f}" for v in results["actorlm"][name]["output_tokens_per_s_rounds"])
                    + " | " + " / ".join(f"{v:.1f}" for v in results["llama.cpp"][name]["output_tokens_per_s_rounds"])
                    + " |")
    table = "\n".join(rows)
    with open(os.path.join(args.out_dir, "serving_table.md"), "w") as f:
        f.write(table + "\n")
    print(table)

    try:
        import matplotlib
    except ImportError:  # the JSON and the table are written; the plot is extra
        print("no plot: matplotlib is not installed (pip install matplotlib)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    conc = [1, 8, 32]
    names = ["concurrency 1", "concurrency 8", "concurrency 32"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for server, style in (("actorlm", "o-"), ("llama.cpp", "s--")):
        ax1.plot(conc, [results[server][n]["output_tokens_per_s"] for n in names], style, label=server)
        ax2.plot(conc, [results[server][n]["ttft_ms"]["p50"] for n in names], style, label=f"{server} TTFT p50")
        ax2.plot(conc, [results[server][n]["itl_ms"]["p50"] for n in names], style, alpha=0.5,
                 label=f"{server} ITL p50")
    ax1.set(xscale="log", xlabel="concurrent requests", ylabel="output tokens/s", title="Throughput")
    ax2.set(xscale="log", yscale="log", xlabel="concurrent requests", ylabel="ms", title="Latency (p50)")
    for ax in (ax1, ax2):
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(f"{os.path.basename(args.model)}, {args.threads} threads, random prompts 64-128 tokens, 64 out")
    fig.tight_layout()
    fig.savefig(os.path.join(args.out_dir, "serving.png"), dpi=110)


if __name__ == "__main__":
    main()
