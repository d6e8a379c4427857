#!/usr/bin/env python3
"""actorlm serve on a model big enough that a CPU step takes seconds (a 3B
Q4_K_M file on 2 threads), driven with long concurrent prompts: every request
must answer 200, and the figures that show whether a long step holds anyone
up are printed: the longest gap between two tokens of one stream, and the
slowest answer of /health and /metrics while the engine works (probed every
half second from a thread of their own).

  python3 bench/long_step_serve.py --model ~/.cache/actorlm/bench/random-llama-3b.Q4_K_M.gguf \\
      [--threads 2] [--runs 8x600-2000,32x600-1000] [--output-len 32] [--timeout 600] [--json out.json]
      [-- serve args...]

A run "CxA-B" sends C prompts of A to B tokens, all at once (concurrency C).
Arguments after "--" go to `actorlm serve` (e.g. --max-step-ms 1000).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from serving_compare import start_actorlm  # noqa: E402


class Prober(threading.Thread):
    """Asks /health and /metrics every half second; keeps the slowest answer
    and any that failed."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop = port, threading.Event()
        self.worst = {"/health": 0.0, "/metrics": 0.0}
        self.failures = []
        self.count = 0

    def run(self):
        while not self.stop.is_set():
            for path in self.worst:
                t0 = time.monotonic()
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
                        r.read()
                        if r.status != 200:
                            self.failures.append(f"{path}: HTTP {r.status}")
                except Exception as e:  # noqa: BLE001 - recorded
                    self.failures.append(f"{path}: {e}")
                self.worst[path] = max(self.worst[path], time.monotonic() - t0)
                self.count += 1
            self.stop.wait(0.5)


def peak_rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def main():
    argv = sys.argv[1:]
    serve_extra = []
    if "--" in argv:
        cut = argv.index("--")
        argv, serve_extra = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", default="8x600-2000,32x600-1000")
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--actorlm", default=os.path.join(HERE, "..", "build", "apps", "actorlm"))
    ap.add_argument("--json", help="write every run's summary here")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds a client waits for its next byte; an 8B model on 2 threads queues the last of "
                         "8 long prompts for longer than the default")
    args = ap.parse_args(argv)
    runs = []
    for spec in args.runs.split(","):
        m = re.fullmatch(r"(\d+)x(\d+)-(\d+)", spec.strip())
        if not m or int(m.group(2)) > int(m.group(3)) or int(m.group(1)) < 1:
            raise SystemExit(f"bad run {spec!r}: want CxA-B, e.g. 8x600-2000")
        runs.append(tuple(int(g) for g in m.groups()))
    proc, port = start_actorlm(args.actorlm, args.model, args.threads, serve_extra)
    results = []
    failed = False
    try:
        for i, (count, lo, hi) in enumerate(runs):
            prober = Prober(port)
            prober.start()
            out = f"/tmp/long_step_serve_{os.getpid()}_{i}.json"
            cmd = [sys.executable, os.path.join(HERE, "serving_bench.py"), "--base-url", f"http://127.0.0.1:{port}",
                   "--tokenizer", args.model, "--workload", "random", "--num-prompts", str(count),
                   "--concurrency", str(count), "--input-len", str(hi), "--range-ratio", str(1 - lo / hi),
                   "--output-len", str(args.output_len), "--seed", str(11 + i),
                   "--extra-body", json.dumps({"ignore_eos": True}), "--json", out, "--label", f"{count}x{lo}-{hi}",
                   "--timeout", str(args.timeout)]
            subprocess.run(cmd, check=False)
            prober.stop.set()
            prober.join()
            with open(out) as f:
                stats = json.load(f)
            os.unlink(out)
            stats["probes"] = {"count": prober.count, "worst_s": prober.worst, "failures": prober.failures[:5]}
            results.append(stats)
            failed |= stats["failed"] > 0 or bool(prober.failures)
            print(f"{count} x {lo}-{hi} tokens: {stats['completed']} answered 200, {stats['failed']} failed; "
                  f"longest inter-token gap {stats['itl_ms']['max'] / 1000:.1f} s (p50 {stats['itl_ms']['p50']:.0f} ms); "
                  f"slowest /health {prober.worst['/health'] * 1000:.0f} ms, /metrics "
                  f"{prober.worst['/metrics'] * 1000:.0f} ms over {prober.count} probes"
                  + (f"; probe failures: {prober.failures[:3]}" if prober.failures else ""), flush=True)
        rss = peak_rss_mb(proc.pid)
        print(f"server peak RSS {rss:.0f} MB")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            failed = True
            print("actorlm serve did not stop within 60 s of SIGTERM")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, "serve_args": serve_extra, "runs": results,
                       "peak_rss_mb": rss}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
