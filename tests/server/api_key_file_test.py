#!/usr/bin/env python3
"""`actorlm serve --api-key-file`: the key read from a file (so it never sits
on a command line) guards the routes as --api-key does; an empty or missing
file, or both flags, stop the server with a message before it listens.

Usage: python3 tests/server/api_key_file_test.py path/to/actorlm
"""
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402

BIN = sys.argv[1]


def status(port, key=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def refused_at_start(args, words):
    p = subprocess.run([BIN, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=120)
    check(p.returncode != 0, f"{args}: started anyway")
    check(all(w in p.stderr for w in words), f"{args}: {p.stderr[-300:]}")


def main():
    with tempfile.TemporaryDirectory() as d:
        key_file = os.path.join(d, "api.key")
        with open(key_file, "w") as f:
            f.write("file-key-123\n")  # the trailing newline an editor leaves is not part of the key
        with ServerProcess(BIN, ["--api-key-file", key_file, "--kv-tokens", "2048"]) as server:
            check(status(server.port) == 401, "no key accepted")
            check(status(server.port, "wrong") == 401, "wrong key accepted")
            check(status(server.port, "file-key-123") == 200, "the file's key refused")
        empty = os.path.join(d, "empty.key")
        open(empty, "w").close()
        refused_at_start(["--api-key-file", empty], ["--api-key-file", "empty"])
        refused_at_start(["--api-key-file", os.path.join(d, "missing")], ["--api-key-file", "cannot read"])
        refused_at_start(["--api-key-file", key_file, "--api-key", "x"], ["not both"])
    print("api key file: guards like --api-key; empty, missing and doubled keys refused at start")


if __name__ == "__main__":
    main()
