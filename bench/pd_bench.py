#!/usr/bin/env python3
"""Prefill/decode disaggregation on loopback: what a KV transfer costs, and what it buys.

1. Transfer. A head over one prefill node (core 0) and one decode node (core 1), each
   `--threads 1`. Prompts of 256 to 2,000 fresh tokens, max_tokens 2. The prefill node logs
   each transfer ("sent N tokens (MB, chunks) in ms (GB/s)"); the prompt's prefill time is
   the time to first token of the same-length prompt on a plain node on core 0 (max_tokens
   1). A memcpy of the same bytes (ctypes memmove, warm) is the floor.
2. Decode latency while long prompts arrive. Four streams of 256 tokens run while a
   1,500-token prompt arrives every 1.5 s (8 of them). Inter-token gaps of the streams,
   p50/p99, with (a) 1 prefill + 1 decode node and (b) 2 data-parallel nodes, each node
   pinned to its own core, same workload, rounds alternated.

The transfer table is made for each KV plane asked for (--planes), in alternated rounds:
`middleman` (chunk messages through CAF, the decode node with --kv-data-port -1), `sealed` (the
data plane, AES-256-GCM, the default) and `trusted` (the data plane, --kv-trusted-fabric on both
nodes), `sealed-worker` / `trusted-worker` (the same with the rows copied through each node's
worker actor, as a device pool's are, instead of in place), and `sealed-ucx` / `trusted-ucx`
(the data plane's frames over UCX, `--kv-transport ucx` on both nodes), `sealed-whole` /
`trusted-whole` (the prefill node with `--kv-stream off`: the KV goes once the whole prompt is
computed, instead of each chunk's as it is), `sealed-ucx-whole` / `trusted-ucx-whole` (both), any UCX plane
with `-noring` appended (payload blocks as UCX messages instead of read in place from the prefill node's
shared ring), and any of them with `-fresh` appended (a new data plane connection per transfer instead of one kept from the last
transfer, for an A/B of kept connections); it adds each prompt's time to first token through
the pair, against the plain node's. A streamed transfer's "transfer ms" is what it took after
the prompt's last chunk (what it adds to the time to first token), its GB/s the whole prompt's
bytes over that time, and "early" the share of its chunks that went while the prompt computed.

usage: pd_bench.py [--actorlm build/apps/actorlm] [--rounds 2] [--planes sealed] [--no-itl]
                   [--out docs/bench/pd.json]
"""
import argparse
import ctypes
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

SECRET = os.path.join(tempfile.mkdtemp(prefix="actorlm-pd-bench-"), "secret")


class Proc:
    def __init__(self, args, pattern, env=None):
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, **env) if env else None)
        self.lines = []
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit(f"exited early: {args}")
            self.lines.append(line)
            m = re.search(pattern, line)
            if m:
                self.port = int(m.group(1))
                break
        threading.Thread(target=lambda: [self.lines.append(x) for x in self.proc.stderr], daemon=True).start()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


# Each: the prefill node's flags, the decode node's, and the environment of both. The
# "-worker" planes copy rows through the worker actors instead of in place (what a device
# pool does), for an A/B of the in-place copies in one run.
THROUGH_WORKER = {"ACTORLM_TEST_ONLY_KV_THROUGH_WORKER": "1"}
PLANES = {"middleman": ([], ["--kv-data-port", "-1"], None), "sealed": ([], [], None),
          "trusted": (["--kv-trusted-fabric"], ["--kv-trusted-fabric"], None),
          "sealed-worker": ([], [], THROUGH_WORKER),
          "trusted-worker": (["--kv-trusted-fabric"], ["--kv-trusted-fabric"], THROUGH_WORKER),
          "sealed-ucx": (["--kv-transport", "ucx"], ["--kv-transport", "ucx"], None),
          "trusted-ucx": (["--kv-trusted-fabric", "--kv-transport", "ucx"],
                          ["--kv-trusted-fabric", "--kv-transport", "ucx"], None),
          # The prompt's KV sent once all of it is computed, not as its chunks compute.
          "sealed-whole": (["--kv-stream", "off"], [], None),
          "trusted-whole": (["--kv-trusted-fabric", "--kv-stream", "off"], ["--kv-trusted-fabric"], None),
          "sealed-ucx-whole": (["--kv-transport", "ucx", "--kv-stream", "off"], ["--kv-transport", "ucx"], None),
          "trusted-ucx-whole": (["--kv-trusted-fabric", "--kv-transport", "ucx", "--kv-stream", "off"],
                                ["--kv-trusted-fabric", "--kv-transport", "ucx"], None)}
# Any plane with "-fresh" appended: the prefill node dials a new data plane connection for every
# transfer instead of keeping one for the next (the A/B of kept connections).
FRESH = {"ACTORLM_TEST_ONLY_KV_FRESH_CONNECTIONS": "1"}


# Any UCX plane with "-noring" appended: the prefill node's ring is allocated where the decode
# node cannot map it (UCX_ALLOC_PRIO=mmap), so payload blocks travel as UCX messages, copied by
# the receiver, instead of being read in place (the A/B of the shared ring).
NORING = {"UCX_ALLOC_PRIO": "mmap"}
SUFFIXES = {"-fresh": FRESH, "-noring": NORING}


def base_plane(plane):
    for suffix in SUFFIXES:
        plane = plane.replace(suffix, "")
    return plane


def plane_setup(plane):
    p_extra, d_extra, env = PLANES[base_plane(plane)]
    env = dict(env or {})
    for suffix, extra in SUFFIXES.items():
        if suffix in plane:
            env.update(extra)
    return p_extra, d_extra, env or None


def node(binary, core, mode=None, extra=(), env=None):
    args = ["taskset", "-c", str(core), binary, "node", "--port", "0", "--threads", "1", "--kv-tokens", "16384",
            "--secret-file", SECRET] + (["--disaggregation-mode", mode] if mode else []) + list(extra)
    return Proc(args, r"listening on 127\.0\.0\.1:(\d+)", env)


def head(binary, nodes):
    args = [binary, "serve", "--port", "0", "--secret-file", SECRET]
    for n in nodes:
        args += ["--node", f"127.0.0.1:{n.port}"]
    h = Proc(args, r"http://127\.0\.0\.1:([1-9]\d*)")
    for _ in range(300):
        try:
            body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{h.port}/nodes", timeout=5).read())
            if all(n["alive"] for n in body["nodes"]):
                return h
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    raise SystemExit("nodes did not join")


def stream(port, prompt, max_tokens, ignore_eos=True):
    """Arrival times of each streamed chunk that carries text, from the request's start."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": ignore_eos}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            if json.loads(line[5:])["choices"][0].get("text"):
                times.append(time.perf_counter() - t0)
    return times


def fresh_prompt(tokens, rng):
    # About one token per word for these words.
    words = ["river", "stone", "green", "market", "window", "seven", "cloud", "paper", "engine", "garden"]
    return f"{rng.random()} " + " ".join(rng.choice(words) for _ in range(tokens))


def memcpy_gbs(nbytes):
    src = ctypes.create_string_buffer(nbytes)
    dst = ctypes.create_string_buffer(nbytes)
    ctypes.memmove(dst, src, nbytes)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        ctypes.memmove(dst, src, nbytes)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def prefill_times(binary):
    """Time to first token of fresh prompts on a plain node, by length."""
    rng = random.Random(4)
    plain = node(binary, 0)
    h = head(binary, [plain])
    prefill_s = {}
    for n in SIZES:
        prefill_s[n] = statistics.median(stream(h.port, fresh_prompt(n, rng), 1)[0] for _ in range(3))
    h.stop()
    plain.stop()
    return prefill_s


SIZES = (256, 512, 1000, 2000)


def transfer_table(binary, plane, prefill_s):
    rng = random.Random(5)
    rows = []
    p_extra, d_extra, env = plane_setup(plane)
    p, d = node(binary, 0, "prefill", p_extra, env), node(binary, 1, "decode", d_extra, env)
    h = head(binary, [p, d])
    stream(h.port, fresh_prompt(16, rng), 2)  # the prefill node joins the decode node
    for n in SIZES:
        sent, ttft, early = [], [], []
        for _ in range(3):
            before = len(p.lines)
            ttft.append(stream(h.port, fresh_prompt(n, rng), 2)[0])
            time.sleep(0.2)
            for line in p.lines[before:]:
                m = re.search(r"sent (\d+) tokens \(([\d.]+) MB, (\d+) chunks\) .* in ([\d.]+) ms \(([\d.]+) GB/s\)", line)
                if m:
                    sent.append((int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))))
                    e = re.search(r"streamed: (\d+) of its (\d+) chunks", line)
                    early.append(int(e.group(1)) / int(e.group(2)) if e else 0.0)
        tokens = sent[0][0]
        mb = statistics.median(s[1] for s in sent)
        ms = statistics.median(s[3] for s in sent)
        on_plane = all("over the data plane" in line for line in p.lines if "kv sender: sent" in line)
        if on_plane != (plane != "middleman"):
            raise SystemExit(f"{plane}: the transfers did not take the plane asked for")
        rows.append({"plane": plane, "prompt_tokens": tokens, "mb": mb, "chunks": sent[0][2], "transfer_ms": ms,
                     "gb_per_s": mb / 1e3 / (ms / 1e3), "memcpy_gb_per_s": memcpy_gbs(int(mb * 1e6)),
                     "prefill_ms": prefill_s[n] * 1e3, "pd_ttft_ms": statistics.median(ttft) * 1e3,
                     "early_share": statistics.median(early) if early else 0.0})
    h.stop()
    p.stop()
    d.stop()
    return rows


def itl_run(binary, mode):
    rng = random.Random(9)
    if mode == "pd":
        nodes = [node(binary, 0, "prefill"), node(binary, 1, "decode")]
    else:
        nodes = [node(binary, 0), node(binary, 1)]
    h = head(binary, nodes)
    stream(h.port, "Warm up:", 2)
    gaps, ttft = [], []
    longs = [fresh_prompt(1500, rng) for _ in range(8)]

    def run_stream(i):
        times = stream(h.port, f"Story {i}: once upon a time, in a land far away,", 256)
        gaps.extend(b - a for a, b in zip(times[1:], times[2:]))

    def run_long(p):
        times = stream(h.port, p, 4)
        ttft.append(times[0])

    threads = [threading.Thread(target=run_stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    for p in longs:
        t = threading.Thread(target=run_long, args=(p,))
        t.start()
        threads.append(t)
        time.sleep(1.5)
    for t in threads:
        t.join()
    h.stop()
    for n in nodes:
        n.stop()
    gaps.sort()
    ttft.sort()
    return {"itl_p50_ms": gaps[len(gaps) // 2] * 1e3, "itl_p99_ms": gaps[int(len(gaps) * 0.99)] * 1e3,
            "itl_max_ms": gaps[-1] * 1e3, "long_ttft_p50_s": ttft[len(ttft) // 2], "gaps": len(gaps)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default="build/apps/actorlm")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--planes", default="sealed",
                    help="comma-separated: " + ", ".join(PLANES) + "; any with -fresh and/or -noring appended")
    ap.add_argument("--no-itl", action="store_true", help="the transfer table only")
    ap.add_argument("--out", default="docs/bench/pd.json")
    a = ap.parse_args()
    with open(SECRET, "w") as f:
        f.write("pd bench secret 8c1e\n")
    planes = a.planes.split(",")
    for plane in planes:
        if base_plane(plane) not in PLANES:
            raise SystemExit(f"unknown plane {plane}")
    prefill_s = prefill_times(a.actorlm)
    transfer = []
    for i in range(a.rounds):
        for plane in planes if i % 2 == 0 else reversed(planes):
            transfer += transfer_table(a.actorlm, plane, prefill_s)
    print("| plane | round | prompt tokens | KV MB | chunks | transfer ms | GB/s | memcpy GB/s | prefill ms | "
          "transfer / prefill | PD TTFT ms | PD TTFT / prefill | early |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    seen = {}
    for r in transfer:
        seen[(r["plane"], r["prompt_tokens"])] = seen.get((r["plane"], r["prompt_tokens"]), 0) + 1
        print(f"| {r['plane']} | {seen[(r['plane'], r['prompt_tokens'])]} | {r['prompt_tokens']} | {r['mb']:.1f} | "
              f"{r['chunks']} | {r['transfer_ms']:.1f} | {r['gb_per_s']:.2f} | {r['memcpy_gb_per_s']:.1f} | "
              f"{r['prefill_ms']:.0f} | {r['transfer_ms'] / r['prefill_ms']:.1%} | {r['pd_ttft_ms']:.0f} | "
              f"{r['pd_ttft_ms'] / r['prefill_ms']:.2f}x | {r['early_share']:.0%} |")
    itl = {"pd": [], "dp": []}
    for _ in range(0 if a.no_itl else a.rounds):
        for mode in ("dp", "pd"):
            itl[mode].append(itl_run(a.actorlm, mode))
            print(mode, itl[mode][-1], file=sys.stderr)
    print("\n| setup | round | ITL p50 ms | ITL p99 ms | ITL max ms | long-prompt TTFT p50 s |")
    print("|---|---|---|---|---|---|")
    for mode, label in (("dp", "2 data-parallel nodes"), ("pd", "1 prefill + 1 decode node")):
        for i, r in enumerate(itl[mode]):
            print(f"| {label} | {i + 1} | {r['itl_p50_ms']:.1f} | {r['itl_p99_ms']:.1f} | {r['itl_max_ms']:.0f} | "
                  f"{r['long_ttft_p50_s']:.2f} |")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"transfer": transfer, "itl": itl}, f, indent=1)


if __name__ == "__main__":
    main()
