#!/usr/bin/env python3
"""Keep-alive connections whose next request arrives while the server is
still finishing the previous one: two requests pipelined in one write, then
a third on the same connection once both answers are in. Each must be read
exactly as sent. (A read that landed in the input buffer while parsing
emptied it once garbled the next request: "the request body is not valid
JSON" or no answer at all, intermittently under load.)

Usage: python3 tests/server/pipelining_test.py path/to/actorlm
"""
import json
import socket
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402


def request(body):
    b = json.dumps(body).encode()
    return (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b)


def responses(sock, n, pending):
    """n whole responses (status line, parsed JSON body); `pending` carries bytes between calls."""
    out = []
    while len(out) < n:
        end = pending[0].find(b"\r\n\r\n")
        if end >= 0:
            head = pending[0][:end].decode()
            length = next((int(l.split(":")[1]) for l in head.split("\r\n") if l.lower().startswith("content-length:")), 0)
            if len(pending[0]) >= end + 4 + length:
                out.append((head.split("\r\n")[0], json.loads(pending[0][end + 4:end + 4 + length])))
                pending[0] = pending[0][end + 4 + length:]
                continue
        chunk = sock.recv(65536)
        check(chunk, f"the connection closed after {len(out)} of {n} answers")
        pending[0] += chunk
    return out


def main():
    with ServerProcess(sys.argv[1], ["--kv-tokens", "2048"]) as server:
        for trial in range(8):
            with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
                pending = [b""]
                first = {"prompt": "One, two,", "max_tokens": 2, "temperature": 0}
                second = {"prompt": "Red, green, blue and", "max_tokens": 3, "temperature": 0}
                s.sendall(request(first) + request(second))
                got = responses(s, 2, pending)
                third = {"prompt": "A", "max_tokens": 1, "temperature": 0, "seed": 12345 + trial}
                s.sendall(request(third))
                got += responses(s, 1, pending)
                for status, body in got:
                    check("200" in status, f"trial {trial}: {status} {body}")
                    check(body.get("object") == "text_completion", f"trial {trial}: {body}")
                check([b["usage"]["completion_tokens"] for _, b in got] == [2, 3, 1],
                      f"trial {trial}: answers out of order or mixed: {[b['usage'] for _, b in got]}")
    print("pipelining: 8 connections x 3 requests (two pipelined), every one read as sent")


if __name__ == "__main__":
    main()
