#!/usr/bin/env python3
"""actorlm's CPU forward pass against mainline llama.cpp on the same GGUF
files, threads and machine, each measurement alternated between the two.

  actorlm:   build/bench/cpu_decode_bench (prefill N, decode CxB)
  llama.cpp: llama-bench (prefill N: -p N -n 0; decode Cx1: -p 0 -n 32 -d C)
             llama-batched-bench (decode CxB, B > 1: -npp C -ntg 32 -npl B)

llama.cpp is built from the tree vendored in the llama-cpp-python sdist
(see docs/BENCHMARKS.md for the commands). Quantized variants of the default
model are made once with that tree's llama-quantize (--allow-requantize from
the Q4_1 file; the weights are for speed, not quality) into
~/.cache/actorlm/bench/. Each cell runs `rounds` times alternating
actorlm, llama.cpp, actorlm, ...; the table shows both medians and their
ratio (above 1: actorlm faster).

  python3 bench/llamacpp_compare.py --llamacpp /path/to/llama.cpp/build-native/bin \\
      [--llamacpp-avx2 /path/to/llama.cpp/build-avx2/bin] [--isa native,avx2] \\
      [--types Q4_0,Q4_1,Q8_0,Q4_K_M,Q6_K] [--threads 2] [--rounds 3] \\
      [--prefill 128,512,2048] [--decode 128x1,2048x1,128x8,128x32] [--model FILE.gguf] [--rss]
      [--kv-cache-dtype auto|f16] [--llamacpp-kv-type f16|f32]

Every claim is measured on two ISAs: with --llamacpp-avx2 (a llama.cpp
build with -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
-DGGML_F16C=ON and no AVX-512 or AVX-VNNI) a second table compares it with
actorlm forced to AVX2 (ACTORLM_CPU_ISA=avx2). Each table names the CPU and
the ISA actorlm ran; on a CPU without AVX-512 the native table is AVX2 too.

--rss instead measures peak RSS (GNU time) of the same small job in both:
`actorlm run` with a 32-token prompt and 64 new tokens, and llama-bench -p 32
-n 64 (llama.cpp's context is sized for the job, as ours is).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(os.environ.get("ACTORLM_CACHE", os.path.expanduser("~/.cache/actorlm")))
DEFAULT = os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf")


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout


def quantized(bin_dir, source, qtype):
    # The default model is Q4_1 already; a file named *.TYPE.gguf is taken
    # as that type as it is (e.g. the 1B and 3B files made by
    # make_random_llama.py and quantized once by hand).
    if (qtype == "Q4_1" and source == DEFAULT) or source.endswith(f".{qtype}.gguf"):
        return source
    out = os.path.join(CACHE, "bench", os.path.basename(source).replace(".gguf", "") + f".{qtype}.gguf")
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        run([os.path.join(bin_dir, "llama-quantize"), "--allow-requantize", source, out, qtype, "2"])
    return out


def cpu_model():
    # A VM may show only "AMD EPYC": the family and model numbers tell the
    # core (family 25 Zen 3/4, 26 Zen 5; Intel 6/143 Sapphire Rapids).
    with open("/proc/cpuinfo") as f:
        info = f.read()
    field = lambda k: (re.search(rf"^{k}\s*:\s*(.+)$", info, re.M) or [None, "?"])[1].strip()
    return f"{field('model name')} (family {field('cpu family')} model {field('model')})"


def isa_env(isa):
    """actorlm's environment for one table: native picks the widest ISA."""
    env = dict(os.environ)
    env.pop("ACTORLM_CPU_ISA", None)
    if isa != "native":
        env["ACTORLM_CPU_ISA"] = isa
    return env


BENCH = os.path.join(ROOT, "build/bench/cpu_decode_bench")  # --bench


def actorlm(model, threads, what, kv_cache_dtype="auto", isa="native"):
    kind, shape = what
    # Only the one figure asked for (an empty list measures nothing).
    cmd = [BENCH, "--threads", str(threads), "--model", model,
           "--repeats", "3", "--prefill", str(shape) if kind == "prefill" else "",
           "--decode", shape if kind == "decode" else "", "--kv-cache-dtype", kv_cache_dtype]
    out = run(cmd, env=isa_env(isa))
    m = re.search(rf"^{kind} {shape} t/s ([0-9.]+)$", out, re.M)
    if not m:
        sys.exit(f"no {kind} {shape} in:\n{out}")
    return float(m.group(1))


def llamacpp(bin_dir, model, threads, what, kv_type="f16"):
    kind, shape = what
    kv = ["-ctk", kv_type, "-ctv", kv_type]
    if kind == "prefill":
        out = run([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(threads), "-p", str(shape), "-n", "0",
                   "-r", "3", "-o", "json"] + kv)
        return json.loads(out)[0]["avg_ts"]
    context, batch = (int(v) for v in shape.split("x"))
    if batch == 1:
        out = run([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(threads), "-p", "0", "-n", "32",
                   "-d", str(context), "-r", "3", "-o", "json"] + kv)
        return json.loads(out)[0]["avg_ts"]
    out = run([os.path.join(bin_dir, "llama-batched-bench"), "-m", model, "-t", str(threads), "-tb", str(threads),
               "-c", str((context + 64) * batch), "-b", "2048", "-ub", "512", "-npp", str(context), "-ntg", "32",
               "-npl", str(batch)] + kv)
    # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0] == str(context) and cells[2] == str(batch):
            return float(cells[7])
    sys.exit(f"no result row in llama-batched-bench output:\n{out}")


def peak_rss_mb(cmd):
    """Peak resident set of a command, from GNU time (kilobytes)."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1)) / 1024


def rss_row(actorlm_bin, bin_dir, model, threads, qtype):
    """The same small job in both: a 32-token prompt and 64 generated tokens."""
    prompt = "Write a short story about a lighthouse keeper who finds a message in a bottle on the beach."
    ours = peak_rss_mb([actorlm_bin, "run", "--model", model, "--threads", str(threads),
                        "--raw", "--max-tokens", "64", "-p", prompt])
    theirs = peak_rss_mb([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(threads), "-p", "32", "-n",
                          "64", "-r", "1"])
    size = os.path.getsize(model) / 2**20
    print(f"| {qtype} | {size:.0f} MB | {ours:.0f} MB | {theirs:.0f} MB | {ours / theirs:.2f} |", flush=True)


def main():
    global BENCH
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llamacpp", required=True, help="folder with llama-bench, llama-batched-bench, llama-quantize "
                    "(a native build)")
    ap.add_argument("--llamacpp-avx2", help="the same tools built for AVX2 only: adds the AVX2 table")
    ap.add_argument("--isa", default=None,
                    help="tables to measure, of native,avx2 (default: both when --llamacpp-avx2 is given)")
    ap.add_argument("--model", default=DEFAULT, help="source GGUF (default: the default model)")
    ap.add_argument("--types", default="Q4_0,Q4_1,Q8_0,Q4_K_M,Q6_K")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefill", default="128,512,2048")
    ap.add_argument("--decode", default="128x1,2048x1,128x8,128x32")
    ap.add_argument("--rss", action="store_true", help="peak RSS of one small generation instead of speed")
    ap.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "f16"],
                    help="actorlm's KV cache: auto (float32, its default) or f16 (llama.cpp's default)")
    ap.add_argument("--llamacpp-kv-type", default="f16", choices=["f16", "f32"],
                    help="llama.cpp's KV cache (-ctk/-ctv): f16 (its default) or f32 (actorlm's default)")
    # A CUDA-enabled binary maps cuBLAS at start (~140 MB resident before any
    # model); CPU users build without CUDA, so that is the one to measure.
    ap.add_argument("--bench", default=BENCH, help="actorlm's cpu_decode_bench (a copy, to keep building meanwhile)")
    ap.add_argument("--actorlm", default=os.path.join(ROOT, "build-cpu/apps/actorlm"),
                    help="the actorlm binary for --rss (default: the CPU-only build of scripts/test.sh)")
    args = ap.parse_args()
    BENCH = args.bench
    if args.rss:
        print("| GGUF type | file | actorlm run | llama-bench | ratio |")
        print("|---|---:|---:|---:|---:|")
        for qtype in args.types.split(","):
            rss_row(args.actorlm, args.llamacpp, quantized(args.llamacpp, args.model, qtype), args.threads, qtype)
        return
    cells = [("prefill", int(n)) for n in args.prefill.split(",") if n] + \
            [("decode", s) for s in args.decode.split(",") if s]
    isas = (args.isa or ("native,avx2" if args.llamacpp_avx2 else "native")).split(",")
    if "avx2" in isas and not args.llamacpp_avx2:
        sys.exit("--isa avx2 needs --llamacpp-avx2 (llama.cpp built for AVX2 only)")
    peers = {"native": args.llamacpp, "avx2": args.llamacpp_avx2}
    tables = {isa: [] for isa in isas}
    for qtype in args.types.split(","):
        model = quantized(args.llamacpp, args.model, qtype)
        for what in cells:
            for isa in isas:
                ours, theirs = [], []
                for _ in range(args.rounds):
                    ours.append(actorlm(model, args.threads, what, args.kv_cache_dtype, isa))
                    theirs.append(llamacpp(peers[isa], model, args.threads, what, args.llamacpp_kv_type))
                a, b = statistics.median(ours), statistics.median(theirs)
                label = f"prefill {what[1]}" if what[0] == "prefill" else f"decode {what[1]} (context x sequences)"
                row = f"| {qtype} | {label} | {a:.1f} | {b:.1f} | {a / b:.2f} |"
                tables[isa].append(row)
                print(f"[{isa}] {row}", file=sys.stderr, flush=True)
    for isa in isas:
        ours = "widest available" if isa == "native" else f"ACTORLM_CPU_ISA={isa}"
        print(f"\n{isa} on {cpu_model()}, {args.threads} threads (actorlm: {ours}; llama.cpp: {peers[isa]})\n")
        print("| GGUF type | measurement | actorlm t/s | llama.cpp t/s | actorlm / llama.cpp |")
        print("|---|---|---:|---:|---:|")
        print("\n".join(tables[isa]), flush=True)


if __name__ == "__main__":
    main()
