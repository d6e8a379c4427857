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
        time.sleep(1.0)  # the first request is now generating
        status, body = post(port, {"prompt": "Hi", "max_tokens": 4})
        assert status == 503, (status, body)
        assert "concurrent requests" in body["error"]["message"], body
        t.join()
        assert results["first"][0] == 200, results["first"]
        status, body = post(port, None, raw=b'{"prompt": "' + b"x" * 8000 + b'"}')
        assert status == 413, (status, body)
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health").status == 200
        status, body = post(port, {"prompt": "Hi", "max_tokens": 2})
        assert status == 200, (status, body)
        print("overload: 503 beyond the limit, 413 for big bodies, healthy after")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
