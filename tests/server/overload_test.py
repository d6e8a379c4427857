#!/usr/bin/env python3
"""`actorlm serve` under limits, each answered in OpenAI's error format while
the admitted work completes and the server stays healthy:
- more concurrent requests than --max-concurrent-requests get 429 with
  Retry-After; an oversized body gets 413;
- with --max-queued-requests 1, a request beyond a full queue gets 429 with
  Retry-After, and with --queue-timeout one that waited past it gets 408;
  /metrics counts both; a priority outside its range is a 400 naming it;
- with --enable-priority-scheduling and one running place, an urgent request
  finishes while a long one waits for it, and the long one's text is what it
  is alone (preemption changes no token);
- with --radix-eviction-policy priority, an urgent prompt's prefix survives a
  flood of less urgent prompts through a small pool (cached on its return);
  under lru the flood evicts it; `priority` without priority scheduling is a
  usage error.

Usage: python3 tests/server/overload_test.py path/to/actorlm
"""
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402

BIN = sys.argv[1]


def post(port, body, raw=None):
    """(status, body, headers)"""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                                 headers={"Content-Type": "application/json"},
                                 data=raw if raw is not None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split(" ", 1)[1])
    raise SystemExit(f"/metrics has no {name}")


def serve(*flags):
    proc = subprocess.Popen([BIN, "serve", "--port", "0", "--threads", "2", "--kv-tokens", "4096", *flags],
                            stderr=subprocess.PIPE, text=True)
    while True:
        line = proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m and int(m.group(1)) > 0:
            return proc, int(m.group(1))
        if not line and proc.poll() is not None:
            raise SystemExit("server exited")


def in_background(port, body, results, key):
    t = threading.Thread(target=lambda: results.setdefault(key, post(port, body)))
    t.start()
    return t


def wait_for(port, name, at_least, alive, what):
    deadline = time.monotonic() + 120
    while metric(port, name) < at_least:
        check(alive.is_alive(), f"{what}: the request ended first")
        check(time.monotonic() < deadline, f"{what}: never seen")
        time.sleep(0.02)


def stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


def concurrency_limit():
    proc, port = serve("--max-concurrent-requests", "1", "--max-body-bytes", "4096")
    try:
        long_req = {"prompt": "Write a long story:", "max_tokens": 120, "temperature": 0}
        results = {}
        t = in_background(port, long_req, results, "first")
        # The second request must arrive while the first holds the only place.
        wait_for(port, "actorlm_running_requests", 1, t, "the first request running")
        status, body, headers = post(port, {"prompt": "Hi", "max_tokens": 4})
        check(status == 429, (status, body))
        check("concurrent requests" in body["error"]["message"], body)
        check(body["error"]["type"] == "rate_limit_error", body)
        check(headers.get("Retry-After") == "1", headers)
        t.join()
        check(results["first"][0] == 200, results["first"])
        status, body, _ = post(port, None, raw=b'{"prompt": "' + b"x" * 8000 + b'"}')
        check(status == 413, (status, body))
        check(urllib.request.urlopen(f"http://127.0.0.1:{port}/health").status == 200, "/health after")
        status, body, _ = post(port, {"prompt": "Hi", "max_tokens": 2})
        check(status == 200, (status, body))
        print("overload: 429 beyond the concurrency limit, 413 for big bodies, healthy after")
    finally:
        stop(proc)


def queue_limits():
    proc, port = serve("--max-running-requests", "1", "--max-queued-requests", "1", "--queue-timeout", "1.5")
    try:
        status, body, _ = post(port, {"prompt": "Hi", "max_tokens": 2, "priority": 2_000_000})
        check(status == 400 and body["error"].get("param") == "priority", (status, body))
        results = {}
        # 300 tokens take several seconds on any CPU: longer than the timeout.
        running = in_background(port, {"prompt": "Count:", "max_tokens": 300, "ignore_eos": True, "temperature": 0},
                                results, "running")
        wait_for(port, "actorlm_running_requests", 1, running, "the long request running")
        queued = in_background(port, {"prompt": "Hello", "max_tokens": 4}, results, "queued")
        wait_for(port, "actorlm_waiting_requests", 1, queued, "the second request queued")
        status, body, headers = post(port, {"prompt": "Hey", "max_tokens": 4})
        check(status == 429, (status, body))
        check("queue is full" in body["error"]["message"], body)
        check(headers.get("Retry-After") == "1", headers)
        queued.join()
        status, body, _ = results["queued"]
        check(status == 408, (status, body))
        check("--queue-timeout" in body["error"]["message"], body)
        check(running.is_alive(), "the long request ended before the queued one timed out: no wait was tested")
        running.join()
        status, body, _ = results["running"]
        check(status == 200 and body["usage"]["completion_tokens"] == 300, (status, body))
        check(metric(port, "actorlm_queue_rejected_requests_total") == 1, "rejections counted")
        check(metric(port, "actorlm_queue_timeouts_total") == 1, "timeouts counted")
        status, body, _ = post(port, {"prompt": "Hi", "max_tokens": 2})
        check(status == 200, (status, body))
        print("overload: 429 with Retry-After beyond a full queue, 408 past --queue-timeout, counted in /metrics")
    finally:
        stop(proc)


def priorities():
    proc, port = serve("--max-running-requests", "1", "--enable-priority-scheduling")
    try:
        slow = {"prompt": "Tell me about the sea.", "max_tokens": 160, "ignore_eos": True, "temperature": 0}
        status, alone, _ = post(port, slow)
        check(status == 200, (status, alone))
        results = {}
        t = in_background(port, slow, results, "slow")
        wait_for(port, "actorlm_running_requests", 1, t, "the long request running")
        status, urgent, _ = post(port, {"prompt": "Hi", "max_tokens": 8, "priority": 50})
        check(status == 200, (status, urgent))
        check(t.is_alive(), "the long request finished before the urgent one: it did not wait for it")
        t.join()
        status, body, _ = results["slow"]
        check(status == 200, (status, body))
        check(body["choices"][0]["text"] == alone["choices"][0]["text"],
              ("preemption changed the text", body["choices"][0]["text"], alone["choices"][0]["text"]))
        check(metric(port, "actorlm_preemptions_total") >= 1, "the preemption counted")
        print("overload: an urgent request took the running place and the long one's text is its text alone")
    finally:
        stop(proc)


def eviction(policy):
    """The cached tokens an urgent prompt gets back after a flood of six others
    through a 1,024-token pool."""
    flags = ["--kv-tokens", "1024", "--enable-priority-scheduling", "--radix-eviction-policy", policy]
    proc, port = serve(*flags)
    try:
        urgent = {"prompt": "Urgent notes: " + " ".join(f"item {i} is ready" for i in range(60)), "max_tokens": 2,
                  "priority": 20}
        status, first, _ = post(port, urgent)
        check(status == 200 and first["usage"]["prompt_tokens"] > 200, (status, first))
        for k in range(6):
            flood = {"prompt": f"Flood {k}: " + " ".join(f"row {k} {i} done" for i in range(60)), "max_tokens": 2}
            status, body, _ = post(port, flood)
            check(status == 200, (status, body))
        status, again, _ = post(port, urgent)
        check(status == 200, (status, again))
        return first["usage"]["prompt_tokens"], again["usage"]["prompt_tokens_details"]["cached_tokens"]
    finally:
        stop(proc)


def eviction_policies():
    n, kept = eviction("priority")
    check(kept >= n - 2, f"priority eviction: the urgent prompt came back with {kept} of {n} tokens cached")
    n, lost = eviction("lru")
    check(lost < n // 2, f"lru: the urgent prompt came back with {lost} of {n} tokens cached; the flood should evict it")
    refused = subprocess.run([BIN, "serve", "--radix-eviction-policy", "priority"], capture_output=True, text=True)
    check(refused.returncode != 0 and "needs --enable-priority-scheduling" in refused.stderr, refused.stderr[-300:])
    print(f"overload: an urgent prompt's {n} tokens came back {kept} cached under priority eviction, {lost} under lru")


def main():
    concurrency_limit()
    queue_limits()
    priorities()
    eviction_policies()


if __name__ == "__main__":
    main()
