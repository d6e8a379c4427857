#!/usr/bin/env python3
"""What an attacker or a careless client can do to `actorlm serve` before it
is authenticated, each against a real server on loopback (issue 13):
the key is checked before the body is read; slow, idle, oversized and
malformed requests are cut off with the right status; ranges are not
served; pipelined requests are answered in order; a keyless server answers
only local names and JSON bodies. After every case the server is healthy
(/health at once, a completion works, /metrics idle).

Usage: python3 tests/server/http_limits_test.py path/to/actorlm
"""
import json
import socket
import sys
import threading
import time
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import Reader, check, connect, healthy, post_bytes, request, rss_kb  # noqa: E402
from server_process import ServerProcess  # noqa: E402

KEY = "limits-key"
NESTED = b'{"text":"hi","sampling_params":{"x":' + b"[" * 100000 + b"]" * 100000 + b"}}"


def auth_before_body(server):
    port = server.port
    # The header announces 200 KB; no body byte is sent, and the 401 must
    # come anyway (the key is checked before the body is read).
    head = (f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(NESTED)}\r\n\r\n").encode()
    with connect(port, timeout=5) as s:
        s.sendall(head)
        status, _, body = Reader(s).response()
    check(status == 401, f"no key, body unsent: got {status}")
    # A client that asks first (curl does for big bodies) is refused before it sends.
    with connect(port, timeout=5) as s:
        s.sendall(head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n"))
        status, _, _ = Reader(s).response()
    check(status == 401, f"Expect: 100-continue without the key: got {status}")
    # The crashing sample, without and with the key, on every POST route.
    for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
        status, _, _ = request(port, post_bytes(path, NESTED, port))
        check(status == 401, f"{path} nested arrays, no key: got {status}")
        status, _, body = request(port, post_bytes(path, NESTED, port, {"Authorization": f"Bearer {KEY}"}))
        check(status == 400, f"{path} nested arrays with the key: got {status} {body[:200]}")
    # With the key, a body sent after 100 Continue is served.
    ok = json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()
    with connect(port, timeout=60) as s:
        s.sendall(post_bytes("/v1/completions", b"", port, {"Authorization": f"Bearer {KEY}", "Expect": "100-continue",
                                                            "Content-Length": str(len(ok))}))
        reader = Reader(s)
        line = b""
        while b"\r\n\r\n" not in reader.buf:
            reader._fill()
        line = reader.buf.split(b"\r\n", 1)[0]
        check(b" 100 " in line, f"no 100 Continue: {line}")
        s.sendall(ok)
        status, _, body = reader.response()
    check(status == 200, f"100-continue then body: got {status} {body[:200]}")
    # Keys that are almost right.
    for name, value in [("trailing NUL", f"Bearer {KEY}\x00junk"), ("prefix", f"Bearer {KEY[:-1]}"),
                        ("lower-case scheme", f"bearer {KEY}"), ("longer", f"Bearer {KEY}x")]:
        raw = post_bytes("/v1/completions", ok, port, {"Authorization": value})
        status, _, _ = request(port, raw)
        check(status in (400, 401), f"key with {name}: got {status}")


def slowloris(server, sockets=300):
    port = server.port
    conns = []
    for _ in range(sockets):
        s = connect(port, timeout=30)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHo")
        conns.append(s)
    stop = threading.Event()

    def trickle():  # one byte per socket per second, never finishing the header
        while not stop.is_set():
            for s in conns:
                try:
                    s.sendall(b"x")
                except OSError:
                    pass
            stop.wait(1.0)
    t = threading.Thread(target=trickle)
    t.start()
    try:
        # /health answers within 1 s all along.
        worst = 0.0
        for _ in range(10):
            t0 = time.monotonic()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                check(r.status == 200, "/health failed under slowloris")
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.3)
        check(worst < 1.0, f"/health took {worst:.2f} s under {sockets} slow sockets")
        # The header deadline (3 s in this server) closes every slow socket.
        deadline = time.monotonic() + 8
        closed = 0
        for s in conns:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                if s.recv(1024) == b"":
                    closed += 1
            except (ConnectionResetError, BrokenPipeError):
                closed += 1
            except socket.timeout:
                pass
        check(closed == sockets, f"only {closed} of {sockets} slow sockets were closed by the header deadline")
    finally:
        stop.set()
        t.join()
        for s in conns:
            s.close()
    print(f"  slowloris: {sockets} slow sockets, /health worst {worst * 1000:.0f} ms, all cut off")


def idle_closed(server):
    # This server runs with --keep-alive-timeout 5: a socket that never sends
    # a byte, and one idle after a response, are closed.
    port = server.port
    silent = connect(port, timeout=10)
    used = connect(port, timeout=10)
    used.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    reader = Reader(used)
    check(reader.response()[0] == 200, "keep-alive /health failed")
    t0 = time.monotonic()
    for s in (silent, used):
        try:
            data = s.recv(1024)
        except (ConnectionResetError, socket.timeout):
            data = None
        check(data == b"", f"idle connection not closed ({data!r})")
        s.close()
    took = time.monotonic() - t0
    check(took < 8, f"idle connections closed after {took:.1f} s")


def connection_cap(server, idle_sockets=100):
    # The server runs with --max-connections 64: idle sockets beyond it make
    # room by being dropped, so new clients are still served.
    port = server.port
    conns = [connect(port) for _ in range(idle_sockets)]
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            check(r.status == 200, "no /health at the connection cap")
        check(time.monotonic() - t0 < 1.0, "/health slow at the connection cap")
        m = server.metrics(KEY)
        check(m["actorlm_http_connections"] <= 64, f"{m['actorlm_http_connections']} connections open, cap 64")
        check(m["actorlm_http_connections_dropped_total"] >= idle_sockets - 64,
              f"dropped {m['actorlm_http_connections_dropped_total']}")
    finally:
        for s in conns:
            s.close()


def big_headers(server):
    port = server.port
    before = rss_kb(server.proc.pid)
    # 24 MB of headers in 12 KB lines: refused at the 16 KB limit.
    with connect(port) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        status = 0
        try:
            for _ in range(2000):
                s.sendall(b"X-Pad: " + b"a" * 12000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            status, _, _ = Reader(s).response()
        except (EOFError, ConnectionResetError):
            pass
    check(status in (0, 431), f"24 MB of headers: got {status}")
    # A single request just over the limit gets the status.
    status, _, _ = request(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 17000 + b"\r\n\r\n")
    check(status == 431, f"17 KB header: got {status}")
    many = b"".join(b"X-F%d: 1\r\n" % i for i in range(150))
    status, _, _ = request(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + many + b"\r\n")
    check(status == 431, f"150 header fields: got {status}")
    grown = rss_kb(server.proc.pid) - before
    check(grown < 30000, f"RSS grew by {grown} KB on oversized headers")


def ranges(server):
    port = server.port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/chat.js", timeout=5) as r:
        size = len(r.read())
    spec = "bytes=" + ",".join(["0-"] * 2600)
    status, headers, body = request(port, f"GET /chat.js HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: {spec}\r\n\r\n".encode())
    check(status == 200 and len(body) == size, f"2600 ranges: got {status} with {len(body)} bytes (file {size})")


def pipelining(server):
    port = server.port
    gen = json.dumps({"prompt": "Hi", "max_tokens": 2, "temperature": 0}).encode()
    auth = {"Authorization": f"Bearer {KEY}"}
    data = (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + post_bytes("/v1/completions", gen, port, auth) +
            f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode())
    with connect(port, timeout=60) as s:
        s.sendall(data)
        reader = Reader(s)
        answers = [reader.response() for _ in range(3)]
    check([a[0] for a in answers] == [200, 200, 200], f"pipelined statuses {[a[0] for a in answers]}")
    check(b'"ok"' in answers[0][2] and b"text_completion" in answers[1][2] and b'"list"' in answers[2][2],
          "pipelined answers out of order")


def framing(server):
    port = server.port
    ok = json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()
    base = f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
    cases = {
        "two Content-Lengths": base + f"Content-Length: {len(ok)}\r\nContent-Length: 5\r\n\r\n",
        "Content-Length abc": base + "Content-Length: abc\r\n\r\n",
        "Content-Length -1": base + "Content-Length: -1\r\n\r\n",
        "header without a colon": base + f"Content-Length: {len(ok)}\r\nNoColonHere\r\n\r\n",
        "NUL in a header": base + f"Content-Length: {len(ok)}\r\nX-A: a\x00b\r\n\r\n",
        "Content-Length and chunked": base + f"Content-Length: {len(ok)}\r\nTransfer-Encoding: chunked\r\n\r\n",
        "percent-encoded path": base.replace("/v1/completions", "/v1/chat%2Fcompletions") + f"Content-Length: {len(ok)}\r\n\r\n",
        "dot segment": base.replace("/v1/completions", "/v1/../v1/completions") + f"Content-Length: {len(ok)}\r\n\r\n",
        "absolute-form target": base.replace("/v1/completions", "http://evil/v1/completions") + f"Content-Length: {len(ok)}\r\n\r\n",
    }
    for name, head in cases.items():
        status, _, body = request(port, head.encode() + ok)
        check(status == 400, f"{name}: got {status} {body[:120]}")


def keyless_browser(binary):
    # No --api-key: other sites' names and non-JSON posts are refused.
    with ServerProcess(binary, ["--kv-tokens", "4096", "--allowed-host", "inference.internal"]) as server:
        port = server.port
        gen = json.dumps({"prompt": "Hi", "max_tokens": 2}).encode()
        before = server.metrics()["actorlm_requests_total"]
        for host, want in [("evil.example", 403), ("evil.example:%d" % port, 403), ("localhost.evil.example", 403),
                           ("localhost:%d" % port, 200), ("127.0.0.1", 200), ("[::1]:%d" % port, 200),
                           ("10.1.2.3", 200), ("inference.internal", 200), ("INFERENCE.internal:80", 200)]:
            status, _, body = request(port, post_bytes("/v1/completions", gen, port, {"Host": host}))
            check(status == want, f"Host {host}: got {status}, want {want} {body[:120]}")
        # A cross-site form post (text/plain needs no CORS preflight).
        for ct in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""):
            status, _, _ = request(port, post_bytes("/v1/completions", gen, port, {"Content-Type": ct}))
            check(status == 400, f"Content-Type {ct!r}: got {status}")
        after = server.metrics()["actorlm_requests_total"]
        check(after == before + 6, f"{after - before} completions ran, 6 expected (only the allowed hosts)")
        healthy(server)


def main():
    binary = sys.argv[1]
    args = ["--api-key", KEY, "--kv-tokens", "4096", "--max-concurrent-requests", "8", "--max-connections", "400",
            "--header-timeout", "3", "--keep-alive-timeout", "5"]
    with ServerProcess(binary, args) as server:
        for name, fn in [("key before body", auth_before_body), ("slowloris", slowloris), ("idle", idle_closed),
                         ("big headers", big_headers),
                         ("ranges", ranges), ("pipelining", pipelining), ("framing", framing)]:
            fn(server)
            healthy(server, KEY)
            print(f"{name}: ok")
    with ServerProcess(binary, ["--api-key", KEY, "--kv-tokens", "4096", "--max-connections", "64"]) as server:
        connection_cap(server)
        healthy(server, KEY)
        print("connection cap: ok")
    keyless_browser(binary)
    print("keyless server: ok")
    print("http limits: every case answered as expected, server healthy after each")


if __name__ == "__main__":
    main()
