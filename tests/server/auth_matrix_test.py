#!/usr/bin/env python3
"""Every route of `actorlm serve --api-key` against every way of getting the
key almost right (issue 14): each protected route answers 401 with no key, a
wrong key, the key followed by a NUL and more, a prefix of the key, a
longer key and a lower-case scheme, and 401 comes before the body is looked
at (an unparseable body still gets 401). The open routes (/health, the chat
page) answer without a key, and the right key opens every route. The routes
are the server's own table (`actorlm serve --list-routes`), not a copy.

Usage: python3 tests/server/auth_matrix_test.py path/to/actorlm
"""
import json
import subprocess
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check, request  # noqa: E402
from server_process import ServerProcess  # noqa: E402

KEY = "matrix-key-0123456789"

# The routes come from the server itself (`actorlm serve --list-routes`, the
# table in server/http_routes.cpp), so a route added there is checked here
# without anyone remembering to. What this file adds: a request that the
# right key must turn into 200 for each POST route, and which routes may be
# open at all.
BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    "/v1/completions": {"prompt": "Hi", "max_tokens": 2},
    "/generate": {"text": "Hi", "sampling_params": {"max_new_tokens": 2}},
    "/tokenize": {"prompt": "Hi"},
    "/detokenize": {"tokens": [1, 2]},
    "/nodes/{id}/drain": {},
    "/nodes/{id}/undrain": {},
    "/v1/load_lora_adapter": {"lora_name": "x", "lora_path": "x.gguf"},
    "/v1/unload_lora_adapter": {"lora_name": "x"},
}
# Routes the right key opens but that this single server cannot serve: the
# status it must answer instead (tests/cluster/cluster_drain_test.py checks
# them on a cluster head).
WITH_KEY = {"/nodes/{id}/drain": 400, "/nodes/{id}/undrain": 400,
            # No --lora-dir: loading is off; no such adapter to unload
            # (tests/server/lora_test.py loads and unloads).
            "/v1/load_lora_adapter": 403, "/v1/unload_lora_adapter": 404}
# Opening a route to keyless clients is a security decision, made here too.
MAY_BE_OPEN = {"/health", "/", "/chat.js"}


def declared_routes(binary):
    """(method, path, open) for every route the server declares."""
    out = subprocess.run([binary, "serve", "--list-routes"], check=True, capture_output=True, text=True).stdout
    routes = []
    for line in out.splitlines():
        method, path, access = line.split()
        check(access in ("open", "key"), f"--list-routes printed {line!r}")
        routes.append((method, path, access == "open"))
    check(len(routes) >= 10, f"--list-routes printed only {len(routes)} routes:\n{out}")
    return routes


BAD_KEYS = {
    "no key": None,
    "wrong key": f"Bearer {KEY[::-1]}",
    "trailing NUL": f"Bearer {KEY}\x00junk",
    "prefix of the key": f"Bearer {KEY[:-1]}",
    "longer key": f"Bearer {KEY}0",
    "lower-case scheme": f"bearer {KEY}",
    "no scheme": KEY,
    "empty": "",
}


def raw_request(method, path, body, authorization):
    data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    head = head.encode()
    if authorization is not None:
        head += b"Authorization: " + authorization.encode("latin-1") + b"\r\n"
    return head + b"\r\n" + data


def main():
    routes = declared_routes(sys.argv[1])
    failures = []
    for method, path, is_open in routes:
        if is_open and path not in MAY_BE_OPEN:
            failures.append(f"{method} {path} is declared open (no API key); only {sorted(MAY_BE_OPEN)} may be")
        if method == "POST" and not is_open and path not in BODIES:
            failures.append(f"POST {path} has no request in BODIES: add one that the right key turns into 200 (or WITH_KEY's status)")
    check(not failures, "\n".join(failures))
    PROTECTED = [(m, p, BODIES.get(p)) for m, p, o in routes if not o]
    OPEN = [(m, p) for m, p, o in routes if o]
    with ServerProcess(sys.argv[1], ["--api-key", KEY, "--kv-tokens", "4096"]) as server:
        port = server.port
        cases = 0
        for method, path, body in PROTECTED:
            for name, auth in BAD_KEYS.items():
                # NUL in a header value is itself malformed: 400 or 401, never served.
                want = (400, 401) if "\x00" in (auth or "") else (401,)
                for b in ([body, b"{not json"] if body is not None else [None]):
                    status, _, reply = request(port, raw_request(method, path, b, auth))
                    cases += 1
                    if status not in want:
                        failures.append(f"{method} {path} with {name} (body {str(b)[:20]}): {status} {reply[:100]}")
            status, _, reply = request(port, raw_request(method, path, body, f"Bearer {KEY}"), timeout=120)
            cases += 1
            if status != WITH_KEY.get(path, 200):
                failures.append(f"{method} {path} with the key: {status} {reply[:200]}")
        for method, path in OPEN:
            for name, auth in (("no key", None), ("wrong key", "Bearer nope")):
                status, _, _ = request(port, raw_request(method, path, None, auth))
                cases += 1
                if status != 200:
                    failures.append(f"open route {path} with {name}: {status}")
        check(not failures, "\n".join(failures))
        print(f"auth matrix: {cases} requests over {len(PROTECTED)} protected and {len(OPEN)} open routes answered as expected")


if __name__ == "__main__":
    main()
