#!/usr/bin/env python3
"""`actorlm serve` under limits: more concurrent requests than allowed get 503
(OpenAI error format) while the admitted one completes; an oversized body gets
413; the server stays healthy.

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
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                                 headers={"Content-Type": "application/json"},
                                 data=raw if raw is not None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def running_requests(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith("actorlm_running_requests "):
            return float(line.split(" ", 1)[1])
    raise SystemExit("/metrics has no actorlm_running_requests")


def main():
    proc = subprocess.Popen([BIN, "serve", "--port", "0", "--threads", "2", "--kv-tokens", "4096",
                             "--max-concurrent-requests", "1", "--max-body-bytes", "4096"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = None
        while port is None:
            line = proc.stderr.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if m and int(m.group(1)) > 0:
                port = int(m.group(1))
            if not line and proc.poll() is not None:
                raise SystemExit("server exited")
        long_req = {"prompt": "Write a long story:", "max_tokens": 120, "temperature": 0}
        results = {}
        t = threading.Thread(target=lambda: results.setdefault("first", post(port, long_req)))
        t.start()
        # The second request must arrive while the first holds the only place:
        # wait until the engine reports it running (or it already finished).
        deadline = time.time() + 120
        while running_requests(port) < 1:
            check(t.is_alive(), f"the first request ended before it was seen running: {results}")
            check(time.time() < deadline, "the first request never started running")
            time.sleep(0.02)
        status, body = post(port, {"prompt": "Hi", "max_tokens": 4})
        check(status == 503, (status, body))
        check("concurrent requests" in body["error"]["message"], body)
        t.join()
        check(results["first"][0] == 200, results["first"])
        status, body = post(port, None, raw=b'{"prompt": "' + b"x" * 8000 + b'"}')
        check(status == 413, (status, body))
        check(urllib.request.urlopen(f"http://127.0.0.1:{port}/health").status == 200, 'urllib.request.urlopen(f"http://127.0.0.1:{port}/health").status == 200')
        status, body = post(port, {"prompt": "Hi", "max_tokens": 2})
        check(status == 200, (status, body))
        print("overload: 503 beyond the limit, 413 for big bodies, healthy after")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
