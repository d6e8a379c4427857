#!/usr/bin/env python3
"""Hostile and malformed requests against a real `actorlm serve` on loopback:
each must get the right 4xx with an OpenAI-format error body, the server must
stay healthy, and nothing may leak (no running request, no locked KV row).
Starts and stops the server itself.

Usage: python3 tests/server/hostile_input_test.py path/to/actorlm
"""
import json
import socket
import sys
import time
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402

KEY = "hostile-key"
CHAT = "/v1/chat/completions"
Q = [{"role": "user", "content": "Say hi."}]


def raw(port, data, read=True, timeout=10.0):
    """Sends raw bytes; returns the status code (0: no answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return 0
        reply = b""
        try:
            while b"\r\n" not in reply:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        except socket.timeout:
            return 0
    parts = reply.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def post(port, path, body, auth=True, headers=None):
    """POSTs bytes; returns (status, parsed JSON or None)."""
    h = {"Content-Type": "application/json"}
    if auth:
        h["Authorization"] = f"Bearer {KEY}"
    h.update(headers or {})
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST", headers=h)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, None


def chat(**fields):
    body = {"messages": Q, "max_tokens": 4, "temperature": 0}
    body.update(fields)
    return json.dumps(body).encode()


def main():
    cases = []  # (name, expected status, function returning (status, body))

    def case(name, want, fn):
        cases.append((name, want, fn))

    def body_case(name, want, data, path=CHAT, **kw):
        case(name, want, lambda port: post(port, path, data, **kw))

    # Not JSON, or not an object.
    for name, data in [("bad JSON", b"{not json"), ("empty body", b""), ("array body", b"[]"), ("null body", b"null"),
                       ("number body", b"123"), ("NaN literal", b'{"messages": [], "temperature": NaN}'),
                       ("truncated JSON", b'{"messages": [{"role": "user", "content": "hi"'),
                       ("invalid UTF-8", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'),
                       ("lone surrogate escape", b'{"messages": [{"role": "user", "content": "\\ud800"}]}'),
                       ("deeply nested", b"[" * 100000 + b"]" * 100000)]:
        body_case(name, 400, data)
    # Messages.
    for name, fields in [("no messages", {"messages": None}), ("messages not a list", {"messages": "hi"}),
                         ("empty messages", {"messages": []}), ("message not an object", {"messages": ["hi"]}),
                         ("no role", {"messages": [{"content": "hi"}]}),
                         ("unknown role", {"messages": [{"role": "wizard", "content": "hi"}]}),
                         ("numeric content", {"messages": [{"role": "user", "content": 5}]}),
                         ("image part", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})]:
        body_case(name, 400, chat(**fields))
    # Wrong types and out-of-range numbers.
    for name, fields in [("temperature string", {"temperature": "hot"}), ("temperature negative", {"temperature": -1}),
                         ("temperature huge", {"temperature": 1e308}), ("top_p zero", {"top_p": 0}),
                         ("top_p above one", {"top_p": 1.5}), ("top_k negative", {"top_k": -5}),
                         ("top_k fractional", {"top_k": 1.5}), ("min_p above one", {"min_p": 2}),
                         ("max_tokens zero", {"max_tokens": 0}), ("max_tokens negative", {"max_tokens": -1}),
                         ("max_tokens float", {"max_tokens": 1e20}), ("max_tokens beyond int64", {"max_tokens": 2**70}),
                         ("n zero", {"n": 0}), ("n too many", {"n": 100}), ("seed below int64", {"seed": -2 ** 63 - 1}),
                         ("seed string", {"seed": "abc"}), ("stop number", {"stop": 123}),
                         ("stop list too long", {"stop": ["x"] * 17}), ("stop list with a number", {"stop": ["a", 1]}),
                         ("stream string", {"stream": "yes"}), ("logprobs string", {"logprobs": "true"}),
                         ("top_logprobs too many", {"logprobs": True, "top_logprobs": 50}),
                         ("frequency_penalty too high", {"frequency_penalty": 3}),
                         ("presence_penalty too low", {"presence_penalty": -3}),
                         ("repetition_penalty zero", {"repetition_penalty": 0}), ("model number", {"model": 123})]:
        body_case(name, 400, chat(**fields))
    body_case("unknown model", 404, chat(model="no-such-model"))
    body_case("prompt beyond the context", 400, chat(messages=[{"role": "user", "content": "word " * 9000}]))
    body_case("completions prompt not a string", 400, json.dumps({"prompt": {"a": 1}}).encode(), path="/v1/completions")
    body_case("native generate without text", 400, json.dumps({"input": "hi"}).encode(), path="/generate")
    body_case("oversized body", 413, b'{"messages": [], "pad": "' + b"x" * (2 << 20) + b'"}')
    body_case("no API key", 401, chat(), auth=False)
    body_case("wrong API key", 401, chat(), auth=False, headers={"Authorization": "Bearer nope"})
    body_case("unknown route", 404, chat(), path="/v1/nothing")
    # Broken HTTP.
    case("GET on a POST route", 405, lambda port: (raw(port, b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                                        b"Authorization: Bearer " + KEY.encode() + b"\r\n\r\n"), None))
    case("garbage request line", 400, lambda port: (raw(port, b"\x00\x01\x02 nonsense\r\n\r\n"), None))
    case("huge header", 431, lambda port: (raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nX-Big: " + b"a" * 70000 +
                                               b"\r\n\r\n"), None))
    # Cut and slow connections: no answer expected, only a healthy server after.
    case("body cut short", 0, lambda port: (raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                                 b"Content-Length: 1000\r\n\r\n{\"mess", read=False), None))
    case("headers cut short", 0, lambda port: (raw(port, b"POST /v1/chat/comp", read=False), None))

    def slow(port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            for b in b"POST /v1/chat/completions HTTP/1.1\r\nHost":
                s.sendall(bytes([b]))
                time.sleep(0.02)
        return 0, None
    case("slow then gone", 0, slow)

    with ServerProcess(sys.argv[1], ["--api-key", KEY, "--max-body-bytes", str(1 << 20), "--kv-tokens", "4096",
                                     "--context-length", "2048"]) as server:
        port = server.port
        failures = []
        for name, want, fn in cases:
            status, body = fn(port)
            ok = status == want
            if ok and want >= 400 and body is not None:
                ok = isinstance(body, dict) and "message" in body.get("error", {})
            if not ok:
                failures.append(f"{name}: got {status} {body}, want {want}")
            # Healthy after every case.
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
                check(r.status == 200, name)
        check(not failures, "\n".join(failures))
        # OpenAI's bookkeeping fields are accepted and ignored; an unknown field is a
        # 400 naming it, never a request answered as if it were not there.
        status, body = post(port, CHAT, chat(user="someone", service_tier="auto", metadata={"bar": 1}))
        check(status == 200 and body["choices"][0]["message"]["content"], body)
        status, body = post(port, CHAT, chat(foo={"bar": 1}))
        check(status == 400 and body["error"]["param"] == "foo", body)
        # Nothing leaked: no request running or waiting, no KV row locked.
        metrics = server.metrics(KEY)
        for key in ("actorlm_running_requests", "actorlm_waiting_requests", "actorlm_kv_pool_locked_tokens"):
            check(metrics[key] == 0, (key, metrics[key]))
        check(metrics["actorlm_kv_pool_free_tokens"] + metrics["actorlm_kv_pool_cached_tokens"] ==
              metrics["actorlm_kv_pool_capacity_tokens"], metrics)
    print(f"hostile input: {len(cases)} malformed requests answered correctly, server healthy, nothing leaked")


if __name__ == "__main__":
    main()
