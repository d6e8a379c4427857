#!/usr/bin/env python3
"""Serving with many LoRA adapters at once against the base model alone, and
against llama-server with the same adapters (issue 38's benchmark).

Writes `--adapters` random adapters of the default model (rank `--rank` on
every attention and FFN projection, float16, as convert_lora_to_gguf.py lays
them out), then, server by server and taking turns round by round:
  actorlm base   every request on the base model (the server holds the adapters)
  actorlm mixed  request i on adapter i % N: every batch mixes adapters
  llama base     llama-server with the adapters loaded but off
                 (--lora-init-without-apply), requests without "lora"
  llama mixed    request i with "lora": [{"id": i % N, "scale": 1}]
The load is serving_bench.py's random workload (fixed seed, output length
fixed, EOS ignored) at one concurrency. The figure is output tokens per
second; the goal is mixed >= 0.8x base. llama-server batches only requests
with the same adapters together (server_slot::can_batch_with), so its mixed
run shows what a server without mixed batches does.

usage: lora_bench.py [--actorlm build/apps/actorlm] [--llama-server PATH] [--model GGUF]
                     [--adapters 8] [--rank 16] [--threads 2] [--rounds 3] [--concurrency 16]
                     [--num-prompts 64] [--input-len 128] [--output-len 64] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serving_compare import DEFAULT_MODEL, start_actorlm, wait_ready  # noqa: E402

TARGETS = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


def shapes(model):
    """(layers, {target: (out, in)}) from the model's GGUF."""
    import gguf
    r = gguf.GGUFReader(model)
    out = {}
    for t in r.tensors:
        name = t.name
        if name.startswith("blk.0.") and name.endswith(".weight"):
            kind = name[len("blk.0."):-len(".weight")]
            if kind in TARGETS:
                out[kind] = (int(t.shape[1]), int(t.shape[0]))  # ggml {in, out}
    layers = 1 + max(int(t.name.split(".")[1]) for t in r.tensors if t.name.startswith("blk."))
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    return layers, out, arch


def write_adapters(model, count, rank, folder):
    import gguf
    layers, shape, arch = shapes(model)
    paths = []
    for n in range(count):
        rng = np.random.default_rng(100 + n)
        path = os.path.join(folder, f"adapter{n}.gguf")
        w = gguf.GGUFWriter(path, arch)
        w.add_string("general.type", "adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", float(rank))
        for layer in range(layers):
            for t in TARGETS:
                o, i = shape[t]
                w.add_tensor(f"blk.{layer}.{t}.weight.lora_a", rng.uniform(-0.05, 0.05, (rank, i)).astype(np.float16))
                w.add_tensor(f"blk.{layer}.{t}.weight.lora_b", rng.uniform(-0.05, 0.05, (o, rank)).astype(np.float16))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths.append(path)
    return paths


def start_llama_server(binary, model, threads, adapters, port=30873):
    args = [binary, "--model", model, "--host", "127.0.0.1", "--port", str(port), "--threads", str(threads),
            "--threads-batch", str(threads), "--parallel", "32", "--ctx-size", str(32 * 1024), "--cont-batching",
            "--lora-init-without-apply"]
    for a in adapters:
        args += ["--lora", a]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/v1/models", proc, "llama-server")
    return proc, port


def load(port, model, args, rotate, out):
    cmd = [sys.executable, os.path.join(HERE, "serving_bench.py"), "--base-url", f"http://127.0.0.1:{port}",
           "--tokenizer", model, "--workload", "random", "--concurrency", str(args.concurrency),
           "--num-prompts", str(args.num_prompts), "--input-len", str(args.input_len),
           "--output-len", str(args.output_len), "--seed", "7", "--extra-body", json.dumps({"ignore_eos": True}),
           "--rotate-body", json.dumps(rotate), "--json", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        r = json.load(f)
    if r["failed"] or r["short_outputs"]:
        raise SystemExit(f"{r['failed']} requests failed, {r['short_outputs']} ended short")
    return r["output_tokens_per_s"]


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--actorlm", default=os.path.join(HERE, "..", "build", "apps", "actorlm"))
    ap.add_argument("--llama-server", default="")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--adapters", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="actorlm_lora_bench_")
    paths = write_adapters(args.model, args.adapters, args.rank, folder)
    names = [f"a{n}" for n in range(args.adapters)]
    flags = ["--kv-tokens", "32768", "--max-running-requests", "64"]
    for n, p in zip(names, paths):
        flags += ["--lora", f"{n}={p}"]
    results = {k: [] for k in ("actorlm base", "actorlm mixed", "llama base", "llama mixed")}
    tmp = os.path.join(folder, "run.json")
    for rnd in range(args.rounds):
        order = ["actorlm", "llama"] if rnd % 2 == 0 else ["llama", "actorlm"]
        for who in order:
            if who == "llama" and not args.llama_server:
                continue
            if who == "actorlm":
                proc, port = start_actorlm(args.actorlm, args.model, args.threads, flags)
                mixed = [{"model": n} for n in names]
            else:
                proc, port = start_llama_server(args.llama_server, args.model, args.threads, paths)
                mixed = [{"lora": [{"id": i, "scale": 1.0}]} for i in range(args.adapters)]
            try:
                runs = [("base", []), ("mixed", mixed)] if rnd % 2 == 0 else [("mixed", mixed), ("base", [])]
                for kind, rotate in runs:
                    tput = load(port, args.model, args, rotate, tmp)
                    results[f"{who} {kind}"].append(tput)
                    print(f"round {rnd + 1}: {who} {kind}: {tput:.1f} output tok/s", flush=True)
            finally:
                stop(proc)
    med = {k: statistics.median(v) for k, v in results.items() if v}
    for k, v in med.items():
        print(f"{k:14} median {v:7.1f} tok/s  ({', '.join(f'{x:.1f}' for x in results[k])})")
    print(f"actorlm mixed / base: {med['actorlm mixed'] / med['actorlm base']:.2f}x")
    if "llama mixed" in med:
        print(f"llama mixed / base: {med['llama mixed'] / med['llama base']:.2f}x; "
              f"actorlm mixed / llama mixed: {med['actorlm mixed'] / med['llama mixed']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rounds": results, "median": med}, f, indent=1)


if __name__ == "__main__":
    main()
