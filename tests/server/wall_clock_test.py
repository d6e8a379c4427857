#!/usr/bin/env python3
"""A wall clock that jumps is not a silent worker or a stalled engine.

CAF 0.17's blocking receive times out on the wall clock (actors/silence.hpp):
a CI run, on a machine whose clock was stepped forward, saw two servers fail
requests with "no heartbeat or result from the worker for 30 s" in a test 29 s
long. Here a real `actorlm serve` on the default model runs under libfaketime
with its wall clock racing 20x ahead of real time (the steady clock left
alone), so every wall-clock wait ends twenty times too early:
- the worker's liveness: --worker-timeout 10 (beats every 2.5 s) while a
  prefill step takes well over 0.5 s: every request answers 200;
- the engine's stall timeout: --stall-timeout 20 and a worker deadline of a day:
  every request answers 200;
- and both still work: a worker that hangs (the test-only fault hook) fails
  its request with 503 after the worker deadline, or the stall timeout when
  that deadline is far off, measured in real seconds.

Usage: python3 tests/server/wall_clock_test.py path/to/actorlm
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


def fast_wall_clock():
    check(os.path.exists(FAKETIME), f"{FAKETIME} is missing: scripts/setup.sh installs the faketime package")
    # The wall clock runs 20x; CLOCK_MONOTONIC (std::chrono::steady_clock) is real.
    return dict(os.environ, LD_PRELOAD=FAKETIME, FAKETIME="+0 x20", FAKETIME_DONT_FAKE_MONOTONIC="1",
                FAKETIME_NO_CACHE="1")


def complete(port, k, words=160):
    # Distinct from the first word on: no request reuses another's prefix,
    # so each one's prefill is a step of its own of ~1,000 tokens.
    prompt = f"Request {k}. " + " ".join(f"ledger{k}x{i} entry{(i * 7 + k) % 97}" for i in range(words))
    body = json.dumps({"prompt": prompt, "max_tokens": 24, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read()), time.monotonic() - start
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), time.monotonic() - start


def check_serves(what, flags):
    with ServerProcess(sys.argv[1], flags + ["--max-step-ms", "0"], env=fast_wall_clock()) as s:
        times = []
        for k in range(3):
            code, body, took = complete(s.port, k)
            check(code == 200, f"{what}: request {k} failed under a fast wall clock after {took:.2f} s: {body}")
            times.append(took)
    print(f"ok: {what}: 3 of 3 answered 200 with the wall clock at 20x (each {min(times):.2f}-{max(times):.2f} s)")


def check_hang_still_caught(what, fault, flags, says):
    """A worker that really hangs is still caught, after the deadline in real seconds."""
    env = fast_wall_clock()
    env["ACTORLM_TEST_ONLY_WORKER_FAULT"] = fault
    with ServerProcess(sys.argv[1], flags + ["--shutdown-timeout", "1"], env=env) as s:
        code, body, took = complete(s.port, 0, words=20)
        check(code == 503 and says in body["error"]["message"], f"{what}: not reported: {code} {body}")
        # Not cut short by the racing clock (3 s of it pass in 0.15 s).
        check(took >= 2.9, f"{what}: the request failed after {took:.2f} s of a 3 s deadline")
    print(f"ok: {what}: 503 after {took:.2f} s of real time (deadline 3 s) under the fast wall clock")


def main():
    check_serves("worker deadline 10 s", ["--worker-timeout", "10"])
    check_serves("stall timeout 20 s", ["--worker-timeout", "86400", "--stall-timeout", "20"])
    check_hang_still_caught("a hung worker", "hang@1", ["--worker-timeout", "3"], "no heartbeat or result")
    check_hang_still_caught("a stalled engine", "hang@3", ["--worker-timeout", "120", "--stall-timeout", "3"],
                            "no progress for 3 s")
    print("wall clock: all checks passed")


if __name__ == "__main__":
    main()
