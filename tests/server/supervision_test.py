#!/usr/bin/env python3
"""A worker whose step fails (the test-only hook ACTORLM_TEST_ONLY_WORKER_FAULT: throw@N
makes the N-th forward throw, poison@T every forward whose new tokens hold token T), with
a real `actorlm serve` on the default model:
  - one failed step costs no request: four concurrent requests (greedy and seeded) all
    answer 200 with exactly the text and usage of a run without the fault, and
    actorlm_failed_steps_total counts the step;
  - a worker actor that ends mid-run (crash@N: the process's first worker actor ends at its
    N-th forward, as an exception escaping its handler would end it) is started again over the
    same weights and KV: the four requests answer exactly as without it, /health stays 200,
    actorlm_worker_restarts_total is 1 and actorlm_worker_up 1;
  - a poison request (one every step with it fails) is failed alone with a 500 that says so,
    while four requests beside it answer exactly as without it; the server goes on serving
    (/health 200, a new request 200) and actorlm_poisoned_requests_total counts it.

Usage: python3 tests/server/supervision_test.py path/to/actorlm
"""
import json
import os
import sys
import threading
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import ServerProcess  # noqa: E402

POISON_TEXT = "Quokka zebra xylophone tangerine"
BODIES = [{"prompt": f"Question {i}: what is a good name for a {['cat', 'boat', 'star', 'song'][i]}?",
           "max_tokens": 24, "ignore_eos": True,
           **({"temperature": 0} if i % 2 == 0 else {"temperature": 0.8, "seed": 40 + i})} for i in range(4)]


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def run_all(port, bodies):
    out = {}
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, post(port, "/v1/completions", bodies[k])))
               for k in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return out


def answer(r):
    """Status, text and token counts (how much of a prompt was cached depends on timing)."""
    code, body = r
    if code != 200:
        return code, body
    return code, body["choices"][0]["text"], body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]


def main():
    binary = sys.argv[1]
    with ServerProcess(binary, threads=1) as server:
        reference = {k: answer(r) for k, r in run_all(server.port, dict(enumerate(BODIES))).items()}
        check(all(r[0] == 200 for r in reference.values()), reference)
        poison = post(server.port, "/tokenize", {"prompt": POISON_TEXT, "add_special_tokens": False})[1]["tokens"][-1]
        for k, b in enumerate(BODIES):
            ids = post(server.port, "/tokenize", {"prompt": b["prompt"] + reference[k][1]})[1]["tokens"]
            check(poison not in ids, f"the poison token {poison} is in request {k}'s prompt or answer")

    env = dict(os.environ, ACTORLM_TEST_ONLY_WORKER_FAULT="throw@3")
    with ServerProcess(binary, threads=1, env=env) as server:
        got = {k: answer(r) for k, r in run_all(server.port, dict(enumerate(BODIES))).items()}
        check(got == reference, f"after a failed step: {got} != {reference}")
        check(server.metrics()["actorlm_failed_steps_total"] == 1, server.metrics())
    print("supervision: a failed step cost no request (4 outputs equal a run without it)")

    env = dict(os.environ, ACTORLM_TEST_ONLY_WORKER_FAULT="crash@5")
    with ServerProcess(binary, threads=1, env=env) as server:
        got = {k: answer(r) for k, r in run_all(server.port, dict(enumerate(BODIES))).items()}
        check(got == reference, f"across a worker restart: {got} != {reference}")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=10) as r:
            check(r.status == 200, "/health after a worker restart")
        check(answer(post(server.port, "/v1/completions", BODIES[1])) == reference[1], "a new request after the restart")
        m = server.metrics()
        check(m["actorlm_worker_restarts_total"] == 1 and m["actorlm_worker_up"] == 1, m)
        check(any("started again over the same weights and KV (1 of 3)" in line for _, line in server.lines), "no restart logged")
    print("supervision: a worker actor that ended was started again; 4 outputs equal a run without it")

    env = dict(os.environ, ACTORLM_TEST_ONLY_WORKER_FAULT=f"poison@{poison}")
    with ServerProcess(binary, threads=1, env=env) as server:
        bodies = dict(enumerate(BODIES))
        bodies["poison"] = {"prompt": POISON_TEXT, "max_tokens": 24, "temperature": 0}
        results = run_all(server.port, bodies)
        code, body = results.pop("poison")
        check(code == 500, f"the poison request got {code} {body}")
        check("failed alone" in body["error"]["message"] and "TEST FAULT" in body["error"]["message"], body)
        got = {k: answer(r) for k, r in results.items()}
        check(got == reference, f"beside a poison request: {got} != {reference}")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=10) as r:
            check(r.status == 200, "/health after a poison request")
        check(answer(post(server.port, "/v1/completions", BODIES[0])) == reference[0], "a new request after a poison request")
        m = server.metrics()
        check(m["actorlm_poisoned_requests_total"] == 1 and m["actorlm_failed_steps_total"] >= 2, m)
    print("supervision: a poison request failed alone (500); the 4 beside it equal a run without it; "
          "the server goes on")


if __name__ == "__main__":
    main()
