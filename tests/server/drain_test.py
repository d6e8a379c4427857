#!/usr/bin/env python3
"""Requests that end early, against a real `actorlm serve` (issue 13):
- non-streaming clients that disconnect mid-generation get their requests
  aborted: slots and KV rows are back within 1 s;
- SIGTERM stops accepting, lets running requests finish up to
  --shutdown-timeout, then ends the rest with finish_reason "abort" and
  [DONE], even with a client that trickles a header or reads nothing; the
  process exits 0;
- a second signal exits at once.

Usage: python3 tests/server/drain_test.py path/to/actorlm
"""
import json
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import Reader, check, connect, healthy, idle, post_bytes  # noqa: E402
from server_process import ServerProcess  # noqa: E402

LONG = {"prompt": "Write a very long story about the sea.", "max_tokens": 3000, "ignore_eos": True, "temperature": 0}


def disconnecting_clients(server, n=8):
    port = server.port
    body = json.dumps(LONG).encode()
    socks = []
    for _ in range(n):
        s = connect(port)
        s.sendall(post_bytes("/v1/completions", body, port))
        socks.append(s)
    # Wait until all are generating, then leave without a word.
    t0 = time.monotonic()
    while server.metrics()["actorlm_running_requests"] < n:
        check(time.monotonic() - t0 < 60, "requests never started")
        time.sleep(0.1)
    slots_before = server.metrics()["actorlm_request_slots_free"]
    for s in socks:
        s.close()
    took = idle(server, within=1.0)
    m = server.metrics()
    check(m["actorlm_request_slots_free"] >= slots_before + n, f"slots not returned: {m['actorlm_request_slots_free']}")
    check(m["actorlm_kv_pool_free_tokens"] + m["actorlm_kv_pool_cached_tokens"] == m["actorlm_kv_pool_capacity_tokens"],
          "KV rows still held")
    print(f"  {n} non-streaming clients left: idle again after {took * 1000:.0f} ms")


def open_stream(port, results, i):
    """A streaming completion; records (finish reasons seen, saw [DONE])."""
    body = json.dumps(dict(LONG, stream=True)).encode()
    finishes, done = [], False
    try:
        with connect(port, timeout=60) as s:
            s.sendall(post_bytes("/v1/completions", body, port))
            status, headers, raw = Reader(s).response()  # chunked: read to the end
            check(status == 200, f"stream {i}: HTTP {status}")
            for line in raw.split(b"\n"):
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif line.startswith(b"data: "):
                    for c in json.loads(line[6:]).get("choices", []):
                        if c.get("finish_reason"):
                            finishes.append(c["finish_reason"])
    except Exception as e:  # noqa: BLE001 - reported below
        results[i] = ("error", repr(e))
        return
    results[i] = (finishes, done)


def sigterm_drains(binary, streams=8):
    server = ServerProcess(binary, ["--kv-tokens", "8192", "--shutdown-timeout", "3"]).__enter__()
    port, proc = server.port, server.proc
    results = [None] * streams
    threads = [threading.Thread(target=open_stream, args=(port, results, i)) for i in range(streams)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    while server.metrics()["actorlm_running_requests"] < streams:
        check(time.monotonic() - t0 < 60, "streams never started")
        time.sleep(0.1)
    # A client trickling a header, and one that sends a request and never reads.
    slow = connect(port)
    slow.sendall(b"GET /health HTTP/1.1\r\nHo")
    deaf = connect(port)
    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    deaf.sendall(post_bytes("/v1/completions", json.dumps(dict(LONG, stream=True)).encode(), port))
    time.sleep(0.5)
    t_signal = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        connect(port, timeout=2).close()
        refused = False
    except OSError:
        refused = True
    check(refused, "new connections still accepted after SIGTERM")
    code = proc.wait(timeout=30)
    took = time.monotonic() - t_signal
    for t in threads:
        t.join(timeout=30)
    slow.close()
    deaf.close()
    check(code == 0, f"exit code {code}")
    check(took < 3 + 4, f"took {took:.1f} s to exit with --shutdown-timeout 3")
    for i, r in enumerate(results):
        check(r is not None and r[0] != "error", f"stream {i}: {r}")
        finishes, done = r
        check(done and finishes == ["abort"], f"stream {i}: finish {finishes}, [DONE] {done}")
    print(f"  SIGTERM with {streams} streams, a slow and a deaf client: exit 0 after {took:.1f} s, "
          f"every stream ended with abort and [DONE]")


def second_signal(binary):
    server = ServerProcess(binary, ["--kv-tokens", "4096", "--shutdown-timeout", "60"]).__enter__()
    results = [None]
    t = threading.Thread(target=open_stream, args=(server.port, results, 0))
    t.start()
    t0 = time.monotonic()
    while server.metrics()["actorlm_running_requests"] < 1:
        check(time.monotonic() - t0 < 60, "stream never started")
        time.sleep(0.1)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    check(server.proc.poll() is None, "exited before the drain deadline with a request running")
    t1 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(timeout=10)
    check(time.monotonic() - t1 < 2, f"second signal took {time.monotonic() - t1:.1f} s")
    t.join(timeout=30)
    print(f"  second SIGTERM: exit {code} after {time.monotonic() - t1:.2f} s")


def main():
    binary = sys.argv[1]
    with ServerProcess(binary, ["--kv-tokens", "8192"]) as server:
        disconnecting_clients(server)
        healthy(server)
    sigterm_drains(binary)
    second_signal(binary)
    print("drain: disconnects abort, SIGTERM drains and exits 0, a second signal exits at once")


if __name__ == "__main__":
    main()
