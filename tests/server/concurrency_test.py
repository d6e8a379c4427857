#!/usr/bin/env python3
"""Many clients at once against a real `actorlm serve` on loopback: 64
concurrent streaming clients all complete without an error, then 50 clients
that drop mid-stream leave no request slot and no KV row behind. Starts and
stops the server itself.

Usage: python3 tests/server/concurrency_test.py path/to/actorlm
"""
import http.client
import json
import sys
import threading
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402

SLOTS = 72  # --max-running-requests 64 + the engine's 8 spare slots


def stream(port, i, max_tokens, drop_after=None):
    """One streaming chat; returns (text, finish_reason, saw_done) or raises."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {"messages": [{"role": "system", "content": "You are a terse assistant."},
                         {"role": "user", "content": f"Give me fact number {i} about the sea."}],
            "max_tokens": max_tokens, "temperature": 0.7, "seed": i, "stream": True}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"client {i}: HTTP {resp.status} {resp.read()[:200]}")
    text, finish, done, events = "", None, False, 0
    while True:
        line = resp.fp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        events += 1
        if drop_after is not None and events >= drop_after:
            conn.sock.close()  # gone without a word
            return None
        payload = line[6:]
        if payload == b"[DONE]":
            done = True
            break
        chunk = json.loads(payload)
        if "error" in chunk:
            raise RuntimeError(f"client {i}: {chunk['error']}")
        for c in chunk["choices"]:
            text += c["delta"].get("content") or ""
            finish = c["finish_reason"] or finish
    conn.close()
    return text, finish, done


def run_all(port, n, **kw):
    results, errors = [None] * n, []

    def worker(i):
        try:
            results[i] = stream(port, i, **kw)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def settle(server, what):
    """Waits until no request runs or waits, then checks nothing is held."""
    for _ in range(300):
        m = server.metrics()
        if m["actorlm_running_requests"] == 0 and m["actorlm_waiting_requests"] == 0:
            break
        time.sleep(0.1)
    check(m["actorlm_running_requests"] == 0 and m["actorlm_waiting_requests"] == 0, (what, m))
    check(m["actorlm_kv_pool_locked_tokens"] == 0, (what, m))
    check(m["actorlm_kv_pool_free_tokens"] + m["actorlm_kv_pool_cached_tokens"] == m["actorlm_kv_pool_capacity_tokens"], (what, m))
    check(m["actorlm_request_slots_free"] == SLOTS, (what, m))
    return m


def main():
    with ServerProcess(sys.argv[1], ["--kv-tokens", "16384", "--max-running-requests", "64",
                                     "--max-concurrent-requests", "256"]) as server:
        t0 = time.monotonic()
        results, errors = run_all(server.port, 64, max_tokens=24)
        check(not errors, errors[:5])
        check(all(r and r[2] and r[1] in ("stop", "length") and r[0] for r in results), results)
        m = settle(server, "after 64 streams")
        check(m["actorlm_requests_total"] == 64, m)
        print(f"64 concurrent streams completed in {time.monotonic() - t0:.1f} s")

        results, errors = run_all(server.port, 50, max_tokens=200, drop_after=3)
        check(not errors, errors[:5])
        settle(server, "after 50 dropped streams")
        # Still serving.
        results, errors = run_all(server.port, 4, max_tokens=8)
        check(not errors and all(r and r[2] for r in results), (errors, results))
    print("concurrency: 64 streams completed, 50 dropped streams left no slot or KV row held")


if __name__ == "__main__":
    main()
