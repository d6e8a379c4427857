#!/usr/bin/env python3
"""Speculative decoding against plain decoding, and against llama-server's
matching mode (n-gram lookup, or with --draft-model a draft model:
llama-server's --model-draft with its defaults): the same GGUF files,
machine and threads, servers one at a time, taking turns round by round
(plain first in odd rounds).

Two workloads, greedy, EOS honoured (our outputs are the same with and
without speculation, so both runs of ours generate the same tokens):
  grounded  answers that copy their input: repeat a code block with one
            change, copy a list, extract fields as JSON from a text
  open      open chat questions (drafts mostly fail: the check that
            speculation costs nothing where it cannot help)
  predicted the grounded prompts with OpenAI's `prediction` set to the text
            they quote (what an editor plugin sends); actorlm only,
            llama-server has no such field
each at 1 stream (the prompts one after another) and 8 streams. The figure
is output tokens per second of wall time; the JSON keeps every round and
actorlm's /metrics counters (drafted, kept).

usage: speculative_bench.py [--actorlm build/apps/actorlm] [--llama-server PATH]
                            [--model GGUF] [--draft-model GGUF] [--threads 2] [--rounds 3]
                            [--draft-tokens 4] [--ngram-capacity N] [--baseline ACTORLM]
                            [--workloads grounded,open,predicted] [--json out.json]
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
sys.path.insert(0, HERE)
from serving_compare import DEFAULT_MODEL, start_actorlm, wait_ready  # noqa: E402

CODE = """def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    out = []
    total = 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out
"""
TEXT = ("Order 4471 was placed by Dana Whitfield of 12 Orchard Lane, Leeds, on 3 March 2024. "
        "She bought two blue kettles at 24.99 each and one toaster at 39.50, paid by card, "
        "and asked for delivery before noon.")
FRUIT = "apples, pears, plums, cherries, lemons, limes, oranges, grapes, melons, figs"
TEN = "one, two, three, four, five, six, seven, eight, nine, ten"
# (prompt, the text it quotes: the `predicted` workload's prediction)
GROUNDED_SOURCES = [
    ("Repeat this Python function exactly, but rename `values` to `xs`:\n\n" + CODE, CODE),
    ("Copy this function exactly, changing only the error message to 'bad window':\n\n" + CODE, CODE),
    ("Rewrite this list with the items in the same order, one per line, each starting with '- ':\n" + FRUIT, FRUIT),
    ("Extract as JSON with keys order_id, name, street, city, date, items (name, quantity, price) and payment from: "
     + TEXT, TEXT),
    ("Repeat this text word for word: " + TEXT, TEXT),
    ("Copy this code and add a docstring line under the def line:\n\n" + CODE, CODE),
    ("Write out the list again in reverse order: " + TEN, TEN),
    ("Copy exactly: " + TEXT, TEXT),
]
GROUNDED = [p for p, _ in GROUNDED_SOURCES]
OPEN = [
    "Tell me a short story about a lighthouse keeper.",
    "What are three good habits for learning a language?",
    "Describe the water cycle to a child.",
    "Why is the sky blue? Explain briefly.",
    "Give me ideas for a rainy afternoon.",
    "What makes a good team leader?",
    "Explain what a database index is.",
    "Write a haiku about autumn and explain it.",
]


def model_id(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
        return json.load(r)["data"][0]["id"]


def post(port, messages, max_tokens, prediction=None):
    """One streamed greedy request: (completion tokens, text, seconds to the
    first token, seconds from the first token to the last)."""
    body = {"model": model_id(port), "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    if prediction:
        body["prediction"] = {"type": "content", "content": prediction}
    body = json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                 {"Content-Type": "application/json"})
    t0 = time.monotonic()
    first = last = None
    text, tokens, chunks = [], None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            msg = json.loads(line[6:])
            if msg.get("usage"):
                tokens = msg["usage"]["completion_tokens"]
            for c in msg.get("choices", []):
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    now = time.monotonic()
                    first = first or now
                    last = now
                    chunks += 1
                    text.append(piece)
    if tokens is None:
        tokens = chunks
    return tokens, "".join(text), (first or t0) - t0, (last or t0) - (first or t0)


def run_workload(port, prompts, streams, max_tokens, predictions=None):
    """(output tokens per second of wall time, decode tokens per second per
    stream (after each one's first token), tokens, texts)."""
    texts = [None] * len(prompts)
    tokens = [0] * len(prompts)
    decode = [0.0] * len(prompts)
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(prompts):
                return
            tokens[i], texts[i], _, decode[i] = post(port, [{"role": "user", "content": prompts[i]}], max_tokens,
                                                     predictions[i] if predictions else None)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    per_stream = sum(max(n - 1, 0) for n in tokens) / max(sum(decode), 1e-9)
    return sum(tokens) / wall, per_stream, sum(tokens), texts


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def start_llama_server(binary, model, threads, spec, draft_model=None, port=30872):
    cmd = [binary, "--model", model, "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads),
           "--threads-batch", str(threads), "--parallel", "8", "--ctx-size", str(8 * 2048), "--cont-batching"]
    if spec and draft_model:
        # Its draft model with its defaults (up to 16 drafts, while the
        # draft's own probability stays above 0.75).
        cmd += ["--model-draft", draft_model, "--threads-draft", str(threads)]
    elif spec:
        # Its own n-gram mode with its defaults (lookup 12 tokens, drafts up to 48).
        cmd += ["--spec-type", "ngram-simple"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/v1/models", proc, "llama-server")
    return proc, port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default=os.path.join(HERE, "..", "build", "apps", "actorlm"))
    ap.add_argument("--llama-server")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--draft-model", help="speculate with this draft model instead of n-gram lookup")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--ngram-capacity", type=int, default=0,
                    help="actorlm's n-gram table across requests (--speculative-ngram-capacity)")
    ap.add_argument("--baseline", metavar="ACTORLM",
                    help="also run this actorlm binary with speculation (an A/B of two builds, taking turns)")
    ap.add_argument("--workloads", default="grounded,open,predicted",
                    help="which of grounded, open, predicted to run (comma-separated)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not 1 <= args.rounds <= 20 or not 1 <= args.draft_tokens <= 16:
        raise SystemExit("--rounds must be 1-20 and --draft-tokens 1-16")
    mode = "draft" if args.draft_model else "ngram"
    spec_flags = ["--speculative-algorithm", mode, "--speculative-num-draft-tokens", str(args.draft_tokens)]
    if args.draft_model:
        spec_flags += ["--speculative-draft-model-path", args.draft_model]
    if args.ngram_capacity:
        spec_flags += ["--speculative-ngram-capacity", str(args.ngram_capacity)]
    base = ["--kv-tokens", "32768", "--max-running-requests", "16"]
    servers = [("actorlm plain", lambda: start_actorlm(args.actorlm, args.model, args.threads, base)),
               (f"actorlm {mode}", lambda: start_actorlm(args.actorlm, args.model, args.threads, base + spec_flags))]
    if args.baseline:
        servers += [(f"baseline {mode}", lambda: start_actorlm(args.baseline, args.model, args.threads, base + spec_flags))]
    if args.llama_server:
        servers += [("llama-server plain", lambda: start_llama_server(args.llama_server, args.model, args.threads, False)),
                    (f"llama-server {mode}",
                     lambda: start_llama_server(args.llama_server, args.model, args.threads, True, args.draft_model))]
    cells = [("grounded", GROUNDED, 1), ("grounded", GROUNDED, 8), ("open", OPEN, 1), ("open", OPEN, 8),
             ("predicted", GROUNDED, 1), ("predicted", GROUNDED, 8)]
    wanted = set(args.workloads.split(","))
    if not wanted <= {"grounded", "open", "predicted"} or (wanted & {"predicted"} and "grounded" not in wanted):
        raise SystemExit("--workloads: grounded, open, predicted (predicted needs grounded)")
    cells = [c for c in cells if c[0] in wanted]
    results = {s: {f"{w} x{n}": [] for w, _, n in cells} for s, _ in servers}
    decode_rates = {s: {f"{w} x{n}": [] for w, _, n in cells} for s, _ in servers}
    counters = {s: [] for s, _ in servers}
    texts = {}
    for r in range(args.rounds):
        for name, start in (servers if r % 2 == 0 else servers[::-1]):
            proc, port = start()
            try:
                for w, prompts, n in cells:
                    predicted = w == "predicted"
                    if predicted and name.startswith("llama-server"):
                        continue
                    # Each round's prompts differ by a prefix: no round finds another's cached.
                    # The predicted cells repeat the grounded prompts (so the same outputs):
                    # compare their decode rates, not wall rates (their prompts are cached).
                    tagged = [f"(round {r + 1}) {p}" for p in prompts]
                    rate, decode, total, out = run_workload(port, tagged, n, args.max_tokens,
                                                            [src for _, src in GROUNDED_SOURCES] if predicted else None)
                    results[name][f"{w} x{n}"].append(rate)
                    decode_rates[name][f"{w} x{n}"].append(decode)
                    texts.setdefault(name, {})[f"{w} x{n}"] = out
                    print(f"round {r + 1} {name:20s} {w:8s} x{n}: {rate:7.1f} tok/s, decode {decode:6.1f} tok/s "
                          f"a stream ({total} tokens)", flush=True)
                if not name.startswith("llama-server"):
                    counters[name].append({k: metric(port, k) for k in (
                        "actorlm_spec_verifies_total", "actorlm_spec_draft_tokens_total",
                        "actorlm_spec_accepted_tokens_total", "actorlm_spec_table_draft_tokens_total",
                        "actorlm_generation_tokens_total")})
            finally:
                proc.terminate()
                proc.wait()
    # Ours must be exact: speculation and predictions change speed, never text.
    ours = [s for s, _ in servers if not s.startswith("llama-server")]
    same = all(texts["actorlm plain"][k] == texts[s][k] for s in ours for k in texts["actorlm plain"])
    if "predicted" in wanted:
        for s in ours:
            same = same and all(texts[s][f"predicted x{n}"] == texts[s][f"grounded x{n}"] for n in (1, 8))
    print(f"\nactorlm outputs identical with and without speculation: {same}")
    for title, table in (("output tok/s (wall)", results), ("decode tok/s a stream", decode_rates)):
        print(f"\n{title}, medians of {args.rounds}\n\n| workload | " + " | ".join(s for s, _ in servers)
              + f" | {mode} / plain (ours) |" + (f" {mode} ours / llama {mode} |" if args.llama_server else ""))
        print("|---" * (len(servers) + 2 + (1 if args.llama_server else 0)) + "|")
        for w, _, n in cells:
            k = f"{w} x{n}"
            med = {s: statistics.median(table[s][k]) if table[s][k] else float("nan") for s, _ in servers}
            row = f"| {k} | " + " | ".join(f"{med[s]:.1f}" for s, _ in servers)
            row += f" | {med[f'actorlm {mode}'] / med['actorlm plain']:.2f}x |"
            if args.baseline:
                row += f" {mode} / baseline {med[f'actorlm {mode}'] / med[f'baseline {mode}']:.2f}x |"
            if args.llama_server:
                row += f" {med[f'actorlm {mode}'] / med[f'llama-server {mode}']:.2f}x |"
            if w == "predicted" and table is decode_rates:
                # The same prompts and outputs as grounded, without a prediction.
                base = {s: statistics.median(table[s][f"grounded x{n}"]) for s in ("actorlm plain", f"actorlm {mode}")}
                row += (f" prediction / none: plain {med['actorlm plain'] / base['actorlm plain']:.2f}x, "
                        f"{mode} {med[f'actorlm {mode}'] / base[f'actorlm {mode}']:.2f}x")
            print(row)
    for name, c in counters.items():
        if c and c[-1]["actorlm_spec_draft_tokens_total"]:
            d, a = c[-1]["actorlm_spec_draft_tokens_total"], c[-1]["actorlm_spec_accepted_tokens_total"]
            t = c[-1]["actorlm_spec_table_draft_tokens_total"]
            print(f"{name}: {a:.0f} of {d:.0f} drafted tokens kept ({a / d:.0%}), {t:.0f} drafted from the "
                  "n-gram table, last round")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "decode": decode_rates, "counters": counters, "identical": same,
                       "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
