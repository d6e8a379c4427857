#!/usr/bin/env python3
"""How long a running stream stalls when requests with new JSON schemas
arrive: one greedy stream of 160 tokens, and while it runs, 6 requests each
with a schema the server has not seen (so each must be compiled). Prints the
stream's inter-token gaps (median, p99, max) with and without the schema
requests, 3 rounds each, alternated.

Usage: python3 bench/schema_stall_bench.py path/to/actorlm
"""
import json
import statistics
import sys
import threading
import time
import urllib.request

import openai

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/tests/server")
from server_process import ServerProcess  # noqa: E402

BIN = sys.argv[1]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    return urllib.request.urlopen(req, timeout=300)


def stream_gaps(port):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    gaps, last = [], None
    for _ in client.chat.completions.create(model="default", max_tokens=160, temperature=0, stream=True, messages=[
            {"role": "user", "content": "Tell me a long, detailed story about a lighthouse keeper and a storm."}]):
        now = time.perf_counter()
        if last is not None:
            gaps.append(now - last)
        last = now
    return gaps


def schema(round_, i):
    props = {f"field_{round_}_{i}_{k}": {"type": ["string", "integer", "boolean"][k % 3]} for k in range(12)}
    return {"type": "object", "properties": props, "required": list(props)}


def with_schemas(port, round_):
    def send(i):
        body = {"prompt": "JSON:", "max_tokens": 4, "temperature": 0,
                "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema(round_, i)}}}
        post(port, body).read()
    time.sleep(0.5)
    threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    with ServerProcess(BIN, ["--kv-tokens", "8192"]) as server:
        stream_gaps(server.port)  # warm-up
        for round_ in range(3):
            for label in ("alone", "new schemas"):
                bg = None
                if label == "new schemas":
                    bg = threading.Thread(target=with_schemas, args=(server.port, round_))
                    bg.start()
                gaps = stream_gaps(server.port)
                if bg:
                    bg.join()
                gaps.sort()
                print(f"round {round_} {label:12s}: {len(gaps) + 1} chunks, median {statistics.median(gaps) * 1e3:6.1f} ms  "
                      f"p99 {gaps[int(len(gaps) * 0.99) - 1] * 1e3:6.1f} ms  max {gaps[-1] * 1e3:6.1f} ms")


if __name__ == "__main__":
    main()
