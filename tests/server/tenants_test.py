#!/usr/bin/env python3
"""Tenants through `actorlm serve --tenants FILE` (server/tenants.hpp):
- every tenant's key opens the generation routes, as does --api-key; no key
  or another key is a 401;
- fair share: with two places, tenant a floods 12 requests; tenant b's 4,
  sent once the flood runs, take half the places as they free up, so all of
  b's end before a's 8th (first come, first served would end them last);
  and the same server without --tenants serves the flood first (the check
  can fail);
- a token rate: tenant c (100 tokens a minute) gets its first request, which
  overdraws the bucket; the next is a 429 with Retry-After (the official
  openai client raises RateLimitError), counted in /metrics, while the
  other tenants go on;
- /metrics per tenant: requests, in flight, prompt and completion tokens
  equal to what the responses' usage said;
- a malformed --tenants file (bad JSON, a key given twice, a bad weight, an
  unknown field) exits 2 naming the fault, as does --tenant-preemption
  without --tenants;
- --tenant-preemption: tenant a's two long streams hold both places; b's
  short request takes one at once and ends first (without the flag, last),
  a's texts unchanged by the trip back to the queue;
- a KV quota (tenant q, max_kv_tokens 160): a prompt it cannot hold is a
  400 through the openai client; one request alone ends with finish reason
  length at exactly 160 prompt and completion tokens; four at once, more
  than the quota holds as they grow, are sent back to wait in turn
  (counted in /metrics) and answer the texts each gives alone;
- on a cluster head (one engine node, which has no tenants file): keys
  checked at the head, and the share holds on the node, each request
  carrying its tenant's weight and KV quota.

Usage: python3 tests/server/tenants_test.py path/to/actorlm
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import openai

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check, healthy, post_json  # noqa: E402
from server_process import ServerProcess  # noqa: E402

BIN = sys.argv[1]
TENANTS = {"tenants": [{"name": "a", "api_key": "key-a"}, {"name": "b", "api_key": "key-b", "weight": 1},
                       {"name": "c", "api_key": "key-c", "tokens_per_minute": 100},
                       {"name": "q", "api_key": "key-q", "max_kv_tokens": 160}]}
QUOTA = 160


def call(port, key, body, path="/v1/completions"):
    """(status, body, headers)"""
    return post_json(port, path, body, key)


def metrics(port, key):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {key}"})
    text = urllib.request.urlopen(req, timeout=30).read().decode()
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")}


def flood_order(port, keys):
    """a floods 12, then b sends 4 once two of a's run; the order requests end in."""
    done, lock = [], threading.Lock()

    def one(tenant, key, i):
        status, r, _ = call(port, key, {"prompt": f"Story {i} of tenant {tenant}: once upon a time", "max_tokens": 24,
                                        "temperature": 0, "ignore_eos": True})
        check(status == 200, f"{tenant}{i}: {status} {r}")
        with lock:
            done.append(tenant)

    threads = [threading.Thread(target=one, args=("a", keys["a"], i)) for i in range(12)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while metrics(port, keys["admin"])["actorlm_running_requests"] < 2:
        check(time.monotonic() < deadline, "the flood never ran")
        time.sleep(0.01)
    more = [threading.Thread(target=one, args=("b", keys["b"], i)) for i in range(4)]
    for t in more:
        t.start()
    for t in threads + more:
        t.join()
    return "".join(done)


def main():
    folder = tempfile.mkdtemp(prefix="actorlm_tenants_")
    path = os.path.join(folder, "tenants.json")
    with open(path, "w") as f:
        json.dump(TENANTS, f)
    # fcfs: the queue's own order is arrival, so only the share reorders it.
    flags = ["--kv-tokens", "4096", "--max-running-requests", "2", "--schedule-policy", "fcfs"]
    with ServerProcess(BIN, flags + ["--api-key", "admin-key", "--tenants", path]) as server:
        port = server.port
        for key, want in (("key-a", 200), ("key-b", 200), ("admin-key", 200), (None, 401), ("key-x", 401),
                          ("key-a2", 401), ("key-", 401)):
            status, r, _ = call(port, key, {"prompt": "Hi", "max_tokens": 2})
            check(status == want, f"key {key}: {status} {r}")

        order = flood_order(port, {"a": "key-a", "b": "key-b", "admin": "admin-key"})
        eighth_a = [i for i, t in enumerate(order) if t == "a"][7]
        last_b = max(i for i, t in enumerate(order) if t == "b")
        check(last_b < eighth_a, f"tenant b's share did not hold: requests ended in the order {order}")

        # c's token rate: the first request overdraws 100 tokens, the next waits.
        status, r, _ = call(port, "key-c", {"prompt": "Count to fifty:", "max_tokens": 120, "temperature": 0,
                                            "ignore_eos": True})
        check(status == 200, f"c's first request: {status} {r}")
        c_usage = r["usage"]
        status, r, headers = call(port, "key-c", {"prompt": "Hi", "max_tokens": 2})
        check(status == 429 and int(headers.get("Retry-After", "0")) >= 1, f"c past its rate: {status} {r} {headers}")
        check(r["error"]["type"] == "rate_limit_error", f"c's 429: {r}")
        status, r, _ = call(port, "key-b", {"prompt": "Hi", "max_tokens": 2})
        check(status == 200, f"b while c is limited: {status} {r}")
        # The official client sees OpenAI's rate-limit error.
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="key-c", max_retries=0, timeout=60)
        try:
            client.completions.create(model="default", prompt="Hi", max_tokens=2)
            check(False, "the openai client got an answer past c's rate")
        except openai.RateLimitError as e:
            check(int(e.response.headers.get("retry-after", "0")) >= 1, f"no Retry-After: {e.response.headers}")

        m = metrics(port, "admin-key")
        check(m['actorlm_tenant_rate_limited_total{tenant="c"}'] == 2, f"c's refusals: {m}")
        check(m['actorlm_tenant_requests_total{tenant="c"}'] == 1, "c's requests")
        check(m['actorlm_tenant_prompt_tokens_total{tenant="c"}'] == c_usage["prompt_tokens"] and
              m['actorlm_tenant_completion_tokens_total{tenant="c"}'] == c_usage["completion_tokens"] == 120,
              f"c's tokens: {c_usage}, metrics {m}")
        check(m['actorlm_tenant_requests_total{tenant="a"}'] == 13 and m['actorlm_tenant_requests_total{tenant="b"}'] == 6,
              "a's and b's requests")
        check(all(v == 0 for k, v in m.items() if k.startswith("actorlm_tenant_requests_in_flight")), "in flight")
        healthy(server, "admin-key")
        print(f"fair share: requests ended in the order {order}; c limited after {c_usage['total_tokens']} tokens")

    # The same flood without tenants' shares: first come, first served.
    with open(path, "w") as f:
        json.dump({"tenants": [{"name": "a", "api_key": "key-a", "weight": 1}, {"name": "b", "api_key": "key-b"}]}, f)
    with ServerProcess(BIN, flags + ["--api-key", "admin-key"]) as server:
        order = flood_order(server.port, {"a": "admin-key", "b": "admin-key", "admin": "admin-key"})
        last_b = max(i for i, t in enumerate(order) if t == "b")
        check(last_b >= 12, f"without tenants the flood should go first: {order}")
        print(f"without tenants: {order}")

    for content, reason in (("{", "valid JSON"),
                            ('{"tenants": [{"name": "a", "api_key": "k"}, {"name": "b", "api_key": "k"}]}', "another tenant's"),
                            ('{"tenants": [{"name": "a", "api_key": "k", "weight": 0}]}', "weight"),
                            ('{"tenants": [{"name": "a", "api_key": "k", "share": 1}]}', "'share' is not a field"),
                            ('{"tenants": [{"name": "a b", "api_key": "k"}]}', "a name is")):
        with open(path, "w") as f:
            f.write(content)
        p = subprocess.run([BIN, "serve", "--port", "0", "--tenants", path], capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and reason in p.stderr, f"{content}: exit {p.returncode}, {p.stderr[-300:]!r}")
    p = subprocess.run([BIN, "serve", "--port", "0", "--tenant-preemption"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--tenant-preemption needs --tenants" in p.stderr, f"exit {p.returncode}: {p.stderr[-300:]!r}")
    with open(path, "w") as f:
        json.dump(TENANTS, f)
    check_preemption(path, flags)
    with ServerProcess(BIN, ["--kv-tokens", "4096", "--max-running-requests", "8", "--api-key", "admin-key",
                             "--tenants", path]) as server:
        check_kv_quota(server.port, retractions=True)
    check_on_head(path, folder)
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    os.rmdir(folder)
    print("tenants: all checks passed")


def check_preemption(path, flags):
    """--tenant-preemption: a's two long streams hold both places; b's short
    request takes one of them at once (the newest of a's goes back to wait)
    and ends long before a's, whose texts are those of a run without it."""
    runs = {}
    for preempt in (False, True):
        with ServerProcess(BIN, flags + ["--api-key", "admin-key", "--tenants", path] +
                           (["--tenant-preemption"] if preempt else [])) as server:
            port, ended, texts, lock = server.port, [], {}, threading.Lock()

            def one(tenant, key, i, tokens):
                status, r, _ = call(port, key, {"prompt": f"Story {i} of tenant {tenant}: once upon a time",
                                                "max_tokens": tokens, "temperature": 0, "ignore_eos": True})
                check(status == 200, f"{tenant}{i}: {status} {r}")
                with lock:
                    ended.append(f"{tenant}{i}")
                    texts[f"{tenant}{i}"] = r["choices"][0]["text"]

            long_ones = [threading.Thread(target=one, args=("a", "key-a", i, 160)) for i in range(2)]
            for t in long_ones:
                t.start()
            deadline = time.monotonic() + 60
            while metrics(port, "admin-key")["actorlm_running_requests"] < 2:
                check(time.monotonic() < deadline, "a's requests never ran")
                time.sleep(0.01)
            b = threading.Thread(target=one, args=("b", "key-b", 0, 8))
            b.start()
            for t in long_ones + [b]:
                t.join()
            taken = metrics(port, "admin-key")["actorlm_share_preemptions_total"]
            healthy(server, "admin-key")
        runs[preempt] = (ended, texts, taken)
    (plain_order, plain_texts, plain_taken), (order, texts, taken) = runs[False], runs[True]
    check(plain_taken == 0 and plain_order[-1] == "b0", f"without preemption b waits for a: {plain_order}")
    check(taken == 1 and order[0] == "b0", f"with preemption b should end first: {order}, {taken} preemptions")
    check(texts == plain_texts, "a request sent back to wait answered differently")
    print(f"tenant preemption: requests ended {order} (without it {plain_order}); texts unchanged")


def check_kv_quota(port, retractions):
    """Tenant q's KV quota, on a server (or head) at `port`."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="key-q", max_retries=0, timeout=300)
    try:
        client.completions.create(model="default", prompt="word " * 200, max_tokens=4)
        check(False, "a prompt past q's KV quota was answered")
    except openai.BadRequestError as e:
        check(f"KV quota of {QUOTA} tokens" in str(e), f"the refusal does not name the quota: {e}")
    # Alone, the quota bounds its length as the context would.
    r = client.completions.create(model="default", prompt="Count to a thousand:", max_tokens=400, temperature=0,
                                  extra_body={"ignore_eos": True})
    check(r.choices[0].finish_reason == "length" and r.usage.prompt_tokens + r.usage.completion_tokens == QUOTA,
          f"alone: {r.choices[0].finish_reason}, usage {r.usage}")
    # Four at once claim 4 x (prompt + 41) at the end, past the quota: some
    # go back to wait, and every text is what it is alone.
    prompts = [f"Story {i} of tenant q: once upon a time" for i in range(4)]
    body = {"max_tokens": 40, "temperature": 0, "ignore_eos": True}
    alone = [call(port, "key-q", dict(body, prompt=p))[1]["choices"][0]["text"] for p in prompts]
    together, errors = [None] * 4, []

    def one(i):
        status, r, _ = call(port, "key-q", dict(body, prompt=prompts[i]))
        if status != 200:
            errors.append(f"{i}: {status} {r}")
        else:
            together[i] = r["choices"][0]["text"]

    before = metrics(port, "admin-key").get("actorlm_kv_quota_retractions_total", 0)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, f"q's requests failed: {errors}")
    check(together == alone, "a request sent back to wait by the quota answered differently")
    if retractions:
        taken = metrics(port, "admin-key")["actorlm_kv_quota_retractions_total"] - before
        check(taken >= 1, "four requests past the quota were never sent back to wait")
    print(f"KV quota {QUOTA}: a lone request ended at {r.usage.total_tokens} tokens; four at once unchanged")


def check_on_head(path, folder):
    """The flood through a head whose one engine node has no tenants file: the
    node keeps the share from the weights its requests carry."""
    secret = os.path.join(folder, "secret")
    with open(secret, "w") as f:
        f.write("tenants test secret 5c1d\n")
    node = subprocess.Popen([BIN, "node", "--port", "0", "--threads", "2", "--kv-tokens", "4096", "--secret-file", secret,
                             "--max-running-requests", "2", "--schedule-policy", "fcfs"],
                            stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = node.stderr.readline()
            check(line or node.poll() is None, "the node exited early")
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        check(port, "the node did not announce its port")
        threading.Thread(target=lambda: [None for _ in node.stderr], daemon=True).start()
        with ServerProcess(BIN, ["--node", f"127.0.0.1:{port}", "--secret-file", secret, "--api-key", "admin-key",
                                 "--tenants", path]) as head:
            for key, want in (("key-a", 200), ("key-x", 401), (None, 401)):
                status, r, _ = call(head.port, key, {"prompt": "Hi", "max_tokens": 2})
                check(status == want, f"head, key {key}: {status} {r}")
            order = flood_order(head.port, {"a": "key-a", "b": "key-b", "admin": "admin-key"})
            eighth_a = [i for i, t in enumerate(order) if t == "a"][7]
            last_b = max(i for i, t in enumerate(order) if t == "b")
            check(last_b < eighth_a, f"on a cluster head tenant b's share did not hold: {order}")
            m = metrics(head.port, "admin-key")
            check(m['actorlm_tenant_requests_total{tenant="b"}'] == 4, f"b's requests on the head: {m}")
            print(f"on a cluster head: requests ended in the order {order}")
            # The node keeps q's quota from what its requests carry (its
            # counters are the node's, so not checked here).
            check_kv_quota(head.port, retractions=False)
    finally:
        node.terminate()
        node.wait(timeout=60)


if __name__ == "__main__":
    main()
