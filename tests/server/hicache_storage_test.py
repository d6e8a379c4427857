#!/usr/bin/env python3
"""The disk tier of the KV cache across restarts (issue 19), with real processes.

`actorlm serve --hicache-storage-dir DIR` answers a ~1,500-token prompt, stops, starts
again on the same folder, and answers the same prompt from disk: >= 90% of its tokens in
usage.prompt_tokens_details.cached_tokens, the same greedy text. Then the folder is
damaged (files truncated, data bytes flipped) and shared with a server of another KV
layout (f16): the damage is detected, counted in /metrics and removed, the other layout's
server uses none of the files and leaves them alone, and every answer stays the same. The
next run writes the lost blocks again, so the restart after that is a full hit once more.

The host tier (--hicache-size, write-back): a server whose pool holds one long prompt at a
time answers it, then another that pushes it out of the pool, then the first again: the
evicted KV was written back to RAM and comes back from there (>= 90% cached, same text).

Usage: python3 tests/server/hicache_storage_test.py path/to/actorlm
"""
import json
import os
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import ServerProcess  # noqa: E402

BIN = sys.argv[1]
DIR = tempfile.mkdtemp(prefix="actorlm-hicache-")
PROMPT = " ".join(f"Entry {i}: the lighthouse keeper logged the wind, the tide and {i % 9} passing ships."
                  for i in range(80)) + "\nThe keeper's summary of the season:"


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def serve(*extra):
    return ServerProcess(BIN, ["--kv-tokens", "8192", "--hicache-storage-dir", DIR, *extra])


OTHER = " ".join(f"Line {i}: the orchard keeper counted {i % 7} baskets of pears and mended a fence."
                 for i in range(80)) + "\nThe orchard keeper's summary:"


def complete(port, prompt=PROMPT):
    body = {"prompt": prompt, "max_tokens": 16, "temperature": 0}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return out["choices"][0]["text"], out["usage"]


def settled(s, key, at_least):
    """/metrics once `key` reaches `at_least` (10 s at most): the tiers store on a thread of
    their own, so a block may still be on its way when the answer is out."""
    deadline = time.monotonic() + 10
    while True:
        m = s.metrics()
        if m[key] >= at_least or time.monotonic() > deadline:
            return m
        time.sleep(0.05)


def blocks():
    return sorted(os.path.join(DIR, f) for f in os.listdir(DIR) if f.endswith(".kvb"))


def main():
    with serve() as s:
        text, usage = complete(s.port)
        n = usage["prompt_tokens"]
        m = settled(s, "actorlm_hicache_storage_stored_blocks_total", n // 64)
    check(n >= 1400, f"the prompt has only {n} tokens")
    check(usage["prompt_tokens_details"]["cached_tokens"] == 0, usage)
    stored = len(blocks())
    check(stored == n // 64 and m["actorlm_hicache_storage_stored_blocks_total"] == stored, (stored, n, m))
    print(f"ok: a {n}-token prompt wrote {stored} blocks of 64 tokens")

    with serve() as s:
        again, usage = complete(s.port)
        m = s.metrics()
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    check(again == text, f"after a restart: {again!r} != {text!r}")
    check(cached >= 0.9 * n, f"after a restart only {cached} of {n} tokens came from disk")
    check(m["actorlm_hicache_storage_hit_tokens_total"] == cached, m)
    print(f"ok: after a restart {cached} of {n} prompt tokens came from disk ({cached / n:.1%}); same text")

    # The host tier, write-back: a pool of 2,048 rows holds one of the two prompts.
    with ServerProcess(BIN, ["--kv-tokens", "2048", "--hicache-size", "0.5",
                             "--hicache-write-policy", "write_back"]) as s:
        complete(s.port)
        complete(s.port, OTHER)
        m = settled(s, "actorlm_hicache_host_stored_blocks_total", 8)
        check(m["actorlm_hicache_host_stored_blocks_total"] >= 8, m)
        back, usage = complete(s.port)
        m = s.metrics()
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    from_host = m["actorlm_hicache_host_hit_tokens_total"]
    check(back == text, f"from the host tier: {back!r} != {text!r}")
    check(cached >= 0.9 * n, f"only {cached} of {n} tokens cached with a host tier")
    check(from_host >= 8 * 64, m)
    check(m["actorlm_hicache_host_bytes"] <= m["actorlm_hicache_host_capacity_bytes"], m)
    print(f"ok: a prompt pushed out of the pool came back with {cached} of {n} tokens cached, "
          f"{from_host:.0f} of them from the host tier; same text")

    # Another KV layout on the same folder: nothing of it is used or touched.
    with serve("--kv-cache-dtype", "f16") as s:
        _, usage = complete(s.port)
        m = s.metrics()
    check(usage["prompt_tokens_details"]["cached_tokens"] == 0, usage)
    check(m["actorlm_hicache_storage_foreign_blocks"] == stored, m)
    check(m["actorlm_hicache_storage_hit_tokens_total"] == 0, m)
    f32_blocks = [b for b in blocks() if open(b, "rb").read(200).find(b"f32") >= 0]
    check(len(f32_blocks) == stored, "a server of another layout touched the first one's blocks")
    print(f"ok: an f16 server on the same folder counted {stored} foreign blocks and used none")

    # Damage: truncate two blocks, flip a data byte in two others.
    for path in f32_blocks[:2]:
        os.truncate(path, os.path.getsize(path) - 100)
    for path in f32_blocks[2:4]:
        with open(path, "r+b") as f:
            f.seek(-1000, os.SEEK_END)
            byte = f.read(1)
            f.seek(-1000, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0x40]))
    # A damaged block is found when the chain reaches it (truncated ones at
    # start-up, flipped ones on load): each run loads up to the first bad one,
    # computes the rest and writes what is missing, so a few restarts heal it
    # all. (Within one run a repeat is a hit in memory and reads no disk.)
    hits, rejected = [], 0
    for run in range(5):
        with serve() as s:
            if run == 0:
                check(s.metrics()["actorlm_hicache_storage_rejected_blocks_total"] == 2, "truncated blocks")
            damaged, usage = complete(s.port)
            rejected += s.metrics()["actorlm_hicache_storage_rejected_blocks_total"]
        check(damaged == text, f"with damaged blocks: {damaged!r} != {text!r}")
        hits.append(usage["prompt_tokens_details"]["cached_tokens"])
        if hits[-1] >= 0.9 * n:
            break
    check(hits[0] < cached, hits)
    check(hits[-1] >= 0.9 * n, f"the damaged blocks were not rewritten: {hits}")
    check(rejected == 4, f"{rejected} blocks refused, not the 4 damaged")
    print(f"ok: 4 damaged blocks refused (2 truncated on start-up, 2 flipped on load) and rewritten; "
          f"tokens from disk per restart {hits}; same text every time")
    print("hicache storage: all checks passed")


if __name__ == "__main__":
    main()
