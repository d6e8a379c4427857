#!/usr/bin/env python3
"""Drives an OpenAI-compatible server the way serving benchmarks do (SGLang's
bench_serving, vLLM's benchmark_serving): a workload of generated prompts sent
at a fixed concurrency or at a Poisson request rate, every request streamed,
timed per token. Works against any such server (actorlm serve, llama.cpp's).

Workloads (all from a fixed seed, so runs repeat):
  random         prompts of random words, input length uniform in
                 [input_len * (1 - range_ratio), input_len] tokens
  chat           a system prompt and a question each, through /v1/chat/completions
  shared-prefix  `groups` long system prompts, each shared by `prompts_per_group`
                 requests that add a short question of their own

Reports request throughput, input and output tokens/s, TTFT, inter-token
latency and end-to-end latency (mean, p50, p99) and, where the server has a
Prometheus /metrics with actorlm's counters, its radix-cache hit rate.
Prompt lengths are exact: prompts are cut with the model's own tokenizer
(--tokenizer GGUF, through llama-cpp-python's vocab-only loader).

usage: serving_bench.py --base-url http://127.0.0.1:30000 --tokenizer MODEL.gguf
                        [--workload random|chat|shared-prefix] [--num-prompts N]
                        [--concurrency C | --request-rate R] [--input-len L] [--output-len L]
                        [--range-ratio F] [--groups G] [--prompts-per-group P] [--prefix-len L]
                        [--seed S] [--extra-body JSON] [--rotate-body JSONLIST] [--api-key KEY]
                        [--json OUT] [--label NAME]
--rotate-body: a JSON list of objects; request i also takes item i % len (e.g.
each request its own LoRA adapter: [{"model": "a0"}, {"model": "a1"}, ...]).
"""
import argparse
import http.client
import json
import queue
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

WORDS = ("time person year way day thing man world life hand part child eye woman place work week case point "
         "government company number group problem fact river mountain ocean engine garden window letter music "
         "market story picture question answer table paper light voice family station history science summer "
         "winter reason idea animal forest island city bridge road morning evening language planet system").split()


class Tokenizer:
    """Counts and cuts prompts in the model's tokens: with llama-cpp-python
    where it is installed (vocabulary only, no weights), else through the
    server's own /tokenize and /detokenize (actorlm's and llama-server's
    request shapes both work)."""

    def __init__(self, gguf, base_url, api_key=None):
        try:
            import llama_cpp
            self.llm = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)
        except ImportError:
            self.llm, self.base_url, self.api_key = None, base_url, api_key
        self.shape = None  # the server's /tokenize body, found on first use

    def _post(self, path, body):
        req = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.load(r)

    def ids(self, text):
        if self.llm:
            return self.llm.tokenize(text.encode(), add_bos=False, special=False)
        if self.shape is None:
            # actorlm's body ({"text"}) or llama-server's ({"content"}): the
            # first that tokenizes a word to something. llama-server answers
            # {"text"} with no tokens rather than an error, and prompts cut
            # to length by an empty tokenizer would grow forever.
            for key, extra in (("text", {"add_special_tokens": False}), ("content", {"add_special": False})):
                try:
                    if self._post("/tokenize", {key: "hello", **extra}).get("tokens"):
                        self.shape = (key, extra)
                        break
                except urllib.error.HTTPError:
                    continue
            else:
                raise SystemExit('the server\'s /tokenize reads neither {"text"} nor {"content"}: '
                                 "install llama-cpp-python for the tokenizer")
        key, extra = self.shape
        return self._post("/tokenize", {key: text, **extra})["tokens"]

    def text(self, ids):
        if self.llm:
            return self.llm.detokenize(ids).decode("utf-8", "ignore")
        out = self._post("/detokenize", {"tokens": ids})
        return out["text"] if "text" in out else out["content"]

    def count(self, text):
        return len(self.ids(text))

    def text_of(self, rng, n):
        """Random words cut to exactly n tokens (as this tokenizer counts them)."""
        words = []
        while True:
            words += [rng.choice(WORDS) for _ in range(max(8, n))]
            ids = self.ids(" " + " ".join(words))
            if len(ids) >= n:
                return self.text(ids[:n])


def build_requests(args, tok):
    rng = random.Random(args.seed)
    reqs = []  # (path, body)
    common = {"max_tokens": args.output_len, "temperature": 0, "stream": True,
              "stream_options": {"include_usage": True}}
    common.update(json.loads(args.extra_body))
    if args.workload == "random":
        for _ in range(args.num_prompts):
            n = rng.randint(max(1, int(args.input_len * (1 - args.range_ratio))), args.input_len)
            reqs.append(("/v1/completions", dict(common, prompt=tok.text_of(rng, n))))
    elif args.workload == "chat":
        for _ in range(args.num_prompts):
            system = "You are a helpful assistant. " + tok.text_of(rng, max(8, args.input_len // 4))
            question = tok.text_of(rng, max(8, args.input_len - args.input_len // 4))
            reqs.append(("/v1/chat/completions", dict(common, messages=[{"role": "system", "content": system},
                                                                         {"role": "user", "content": question}])))
    else:
        prefixes = [tok.text_of(rng, args.prefix_len) for _ in range(args.groups)]
        for g in range(args.groups):
            for _ in range(args.prompts_per_group):
                reqs.append(("/v1/completions", dict(common, prompt=prefixes[g] + tok.text_of(rng, args.input_len))))
        rng.shuffle(reqs)
    rotation = json.loads(args.rotate_body)
    if rotation:
        reqs = [(path, dict(body, **rotation[i % len(rotation)])) for i, (path, body) in enumerate(reqs)]
    return reqs


def run_one(base, path, body, api_key, timeout=600):
    """Streams one request. Returns a record of its timings and token counts.
    timeout: seconds the client waits for any byte (a queued request's first
    token included) before it gives up."""
    url = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    rec = {"start": time.perf_counter(), "chunks": [], "prompt_tokens": None, "output_tokens": None, "error": None,
           "max_tokens": body.get("max_tokens")}
    try:
        conn.request("POST", path, json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            rec["error"] = f"HTTP {resp.status}: {resp.read()[:200]!r}"
            return rec
        while True:
            line = resp.fp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                rec["error"] = str(chunk["error"])
                break
            if chunk.get("usage"):
                rec["prompt_tokens"] = chunk["usage"].get("prompt_tokens")
                rec["output_tokens"] = chunk["usage"].get("completion_tokens")
            for c in chunk.get("choices") or []:
                if c.get("finish_reason"):
                    rec["finish_reason"] = c["finish_reason"]
                piece = c.get("text")
                if piece is None:
                    piece = (c.get("delta") or {}).get("content")
                if piece:
                    rec["chunks"].append(time.perf_counter())
    except Exception as e:  # noqa: BLE001 - a failed request is data
        rec["error"] = repr(e)
    finally:
        conn.close()
    rec["end"] = time.perf_counter()
    if rec["output_tokens"] is None:
        rec["output_tokens"] = len(rec["chunks"])  # servers that stream one token per chunk
    return rec


def cache_counters(base, api_key):
    try:
        req = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        text = urllib.request.urlopen(req, timeout=10).read().decode()
    except Exception:  # noqa: BLE001 - not every server has actorlm's metrics
        return None
    values = dict(line.split(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    if "actorlm_prompt_tokens_total" not in values:
        return None
    return float(values["actorlm_prompt_tokens_total"]), float(values["actorlm_cached_prompt_tokens_total"])


def pct(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))]


def summarize(records, wall, prompt_lens, cache):
    ok = [r for r in records if not r["error"]]
    ttft = [(r["chunks"][0] - r["start"]) * 1000 for r in ok if r["chunks"]]
    itl = [(b - a) * 1000 for r in ok for a, b in zip(r["chunks"], r["chunks"][1:])]
    e2e = [(r["end"] - r["start"]) * 1000 for r in ok]
    out_tokens = sum(r["output_tokens"] for r in ok)
    in_tokens = sum(r["prompt_tokens"] if r["prompt_tokens"] is not None else n for r, n in zip(records, prompt_lens)
                    if not r["error"])
    stats = {"completed": len(ok), "failed": len(records) - len(ok), "duration_s": wall,
             "request_throughput": len(ok) / wall, "input_tokens_per_s": in_tokens / wall,
             "output_tokens_per_s": out_tokens / wall, "total_input_tokens": in_tokens, "total_output_tokens": out_tokens}
    for name, vals in (("ttft_ms", ttft), ("itl_ms", itl), ("e2e_ms", e2e)):
        stats[name] = {"mean": statistics.fmean(vals) if vals else float("nan"), "p50": pct(vals, 50), "p99": pct(vals, 99),
                       "max": max(vals) if vals else float("nan")}
    # Requests that ended before their max_tokens (a server that stops early
    # or cancels requests would otherwise look fast).
    short = [r for r in ok if r["max_tokens"] and r["output_tokens"] < r["max_tokens"]]
    stats["short_outputs"] = len(short)
    stats["short_examples"] = [{k: r.get(k) for k in ("output_tokens", "prompt_tokens", "finish_reason")} | {"chunks": len(r["chunks"])}
                               for r in short[:5]]
    stats["cache_hit_rate"] = cache
    stats["errors"] = [r["error"] for r in records if r["error"]][:5]
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--tokenizer", required=True, help="GGUF whose tokenizer cuts the prompts")
    ap.add_argument("--workload", choices=["random", "chat", "shared-prefix"], default="random")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=0, help="requests in flight (0: use --request-rate)")
    ap.add_argument("--request-rate", type=float, default=float("inf"), help="Poisson arrivals per second")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--range-ratio", type=float, default=0.5)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--prompts-per-group", type=int, default=8)
    ap.add_argument("--prefix-len", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extra-body", default="{}", help="JSON merged into every request (e.g. ignore_eos)")
    ap.add_argument("--rotate-body", default="[]", help="JSON list: request i also takes item i % len")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds a client waits for the next byte, the first token included")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    for name in ("num_prompts", "input_len", "output_len", "groups", "prompts_per_group", "prefix_len"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.range_ratio < 1:
        ap.error("--range-ratio must be in [0, 1)")

    tok = Tokenizer(args.tokenizer, args.base_url, args.api_key)
    reqs = build_requests(args, tok)
    prompt_lens = [tok.count(b.get("prompt") or " ".join(m["content"] for m in b["messages"])) for _, b in reqs]
    before = cache_counters(args.base_url, args.api_key)
    records = [None] * len(reqs)
    done = [0]
    lock = threading.Lock()

    def record(i):
        records[i] = run_one(args.base_url, reqs[i][0], reqs[i][1], args.api_key, args.timeout)
        with lock:
            done[0] += 1
            sys.stderr.write(f"\r[{args.label or args.workload}] {done[0]}/{len(reqs)} requests")
            sys.stderr.flush()

    t0 = time.perf_counter()
    if args.concurrency > 0:
        todo = queue.Queue()
        for i in range(len(reqs)):
            todo.put(i)

        def worker():
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                record(i)
        threads = [threading.Thread(target=worker) for _ in range(min(args.concurrency, len(reqs)))]
    else:
        rng = random.Random(args.seed + 1)
        threads = []

        def dispatcher():
            started = []
            for i in range(len(reqs)):
                t = threading.Thread(target=record, args=(i,))
                t.start()
                started.append(t)
                if args.request_rate != float("inf"):
                    time.sleep(rng.expovariate(args.request_rate))
            for t in started:
                t.join()
        threads = [threading.Thread(target=dispatcher)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    sys.stderr.write("\n")
    after = cache_counters(args.base_url, args.api_key)
    cache = None
    if before and after and after[0] > before[0]:
        cache = (after[1] - before[1]) / (after[0] - before[0])
    stats = summarize(records, wall, prompt_lens, cache)
    stats["config"] = {k: v for k, v in vars(args).items() if k not in ("api_key",)}
    if stats["config"]["request_rate"] == float("inf"):
        stats["config"]["request_rate"] = "inf"
    print(f"{args.label or args.workload}: {stats['completed']} ok, {stats['failed']} failed in {wall:.1f} s | "
          f"{stats['request_throughput']:.2f} req/s, in {stats['input_tokens_per_s']:.0f} tok/s, "
          f"out {stats['output_tokens_per_s']:.1f} tok/s | TTFT p50 {stats['ttft_ms']['p50']:.0f} ms "
          f"p99 {stats['ttft_ms']['p99']:.0f} ms | ITL p50 {stats['itl_ms']['p50']:.0f} ms "
          f"max {stats['itl_ms']['max']:.0f} ms | "
          f"E2E p50 {stats['e2e_ms']['p50']:.0f} ms" +
          (f" | {stats['short_outputs']} SHORT outputs" if stats["short_outputs"] else "") +
          (f" | cache hit {cache:.2f}" if cache is not None else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(stats, f, indent=1)
    return 0 if stats["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
