#!/usr/bin/env python3
"""Chaos: a head and engine nodes as real processes on loopback, 48 clients sending
requests back to back for at least CHAOS_S seconds, while every few seconds a random node
is killed (SIGKILL) or hung (SIGSTOP past the heartbeat timeout) and then brought back.
One node at most is down at a time. Two clusters, one after the other: three
data-parallel nodes, then two prefill/decode pairs (prefill and decode nodes killed).

Requests: greedy, seeded sampling (with penalties) and JSON schema; two in three
streamed. Checks:
  - no request fails: every one answers 200;
  - every output is exactly what the same request gives in one process with no failure
    (the texts compared whole, so no token was repeated or lost in any stream), with the
    usage of that run;
  - requests did move (the head logged moves of requests mid-stream);
  - afterwards every node is idle, its pool adds up and holds no locked KV, and its own
    invariant check passes.
It prints the longest gap between two chunks of each stream (p50/p99), which holds the
time from a node's loss to the next token of the streams it served.

Usage: python3 tests/cluster/cluster_chaos_test.py path/to/actorlm
"""
import json
import os
import random
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_test import BIN, SECRET, NodeProcess, check, head, nodes, post, stream_completion, wait_for  # noqa: E402
from cluster_pd_test import check_pools, pd_node  # noqa: E402
from server_process import ServerProcess  # noqa: E402

CLIENTS = 48
CHAOS_S = 60
HEARTBEAT_TIMEOUT_S = 4  # the middleman's connection timeout (cluster/transport/remote_setup.cpp)
TOPICS = ["a lighthouse keeper", "a river delta", "the first winter", "a market town", "an old clock",
          "a desert road", "the last train", "a mountain pass"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                          "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "tags"]}


def request_body(client, rnd):
    """Request `rnd` of client `client`: its own prompt, kind and length."""
    k = client % 4
    body = {"prompt": f"Chaos {client}.{rnd}: a story about {TOPICS[(client + rnd) % len(TOPICS)]}.",
            "max_tokens": 60 + (client * 37 + rnd * 53) % 120}
    if k == 0:
        body.update(temperature=0, ignore_eos=True)
    elif k == 1:
        body.update(temperature=0.9, top_p=0.95, seed=1000 * rnd + client, ignore_eos=True)
    elif k == 2:
        body.update(temperature=0, response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}})
    else:
        body.update(temperature=0.7, seed=1000 * rnd + client, frequency_penalty=0.4, ignore_eos=True)
    return body


def run_one(port, body, stream):
    """(status, text, finish_reason, usage, longest gap between chunks or None);
    status -1 when the connection failed or the stream carried an error."""
    try:
        if stream:
            stamps = []
            code, text, finish, usage = stream_completion(port, body, [0], stamps=stamps)
            gap = max((b - a for a, b in zip(stamps, stamps[1:])), default=0.0)
            return code, text, finish, usage, gap
        code, out = post(port, "/v1/completions", body)
    except (OSError, AssertionError, ValueError) as e:
        return -1, repr(e), None, None, None
    if code != 200:
        return code, out, None, None, None
    return code, out["choices"][0]["text"], out["choices"][0]["finish_reason"], out["usage"], None


def clients(port, deadline, done):
    """CLIENTS threads, each sending requests back to back until `deadline`."""
    def client(c):
        rnd = 0
        while time.monotonic() < deadline:
            body = request_body(c, rnd)
            done[(c, rnd)] = (body, c % 3 != 0, run_one(port, body, c % 3 != 0))
            rnd += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    return threads


def chaos(h, node_list, deadline, log):
    """Until `deadline`: every 3-6 s one random node killed and restarted, or (every third
    time) hung and resumed."""
    rng = random.Random(7)
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(3, 6))
        n = rng.choice(node_list)
        if len(log) % 3 != 2:
            log.append(("kill", n.address, time.monotonic()))
            n.kill()
            time.sleep(1)
            n.args[n.args.index("--port") + 1] = str(n.port)
            n.start()
        else:
            log.append(("stop", n.address, time.monotonic()))
            n.proc.send_signal(signal.SIGSTOP)
            time.sleep(HEARTBEAT_TIMEOUT_S + 2)
            n.proc.send_signal(signal.SIGCONT)
        wait_for(f"{n.address} to rejoin", lambda: nodes(h.port)[n.address]["alive"], 60)


def run_chaos(what, node_list):
    """The clients and the chaos over `node_list`; returns every request's (body, streamed,
    result)."""
    done, log = {}, []
    try:
        # A request may meet several failures in a minute of this: the default of 3 moves
        # (the guard against a request that kills every node it lands on) would fail it.
        with head(node_list, ["--failover-attempts", "50"]) as h:
            wait_for("every node joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)
            t0 = time.monotonic()
            deadline = t0 + CHAOS_S
            threads = clients(h.port, deadline, done)
            chaos(h, node_list, deadline, log)
            for t in threads:
                t.join(600)
            took = time.monotonic() - t0
            check(not any(t.is_alive() for t in threads), "a client never finished")
            failed = {k: v[2][:2] for k, v in done.items() if v[2][0] != 200}
            check(not failed, f"{len(failed)} of {len(done)} requests failed: {list(failed.items())[:5]}")
            moves = [re.search(r"going on at node \S+ after (\d+) token\(s\) \(move (\d+)\)", line) for _, line in h.lines]
            after = [int(m.group(1)) for m in moves if m]
            most = max((int(m.group(2)) for m in moves if m), default=0)
            waited = sum(1 for _, line in h.lines if "no node can take it now" in line)
            retried = sum(1 for _, line in h.lines if "trying again" in line)
            check(any(a > 0 for a in after), f"no request moved mid-stream: {after} ({retried} retried)")
            check_pools(h.port, "after the chaos")
    finally:
        for n in node_list:
            if n.proc.poll() is None:
                n.proc.send_signal(signal.SIGCONT)
            n.stop()
    kills = sum(1 for a in log if a[0] == "kill")
    print(f"chaos ({what}): {len(done)} requests from {CLIENTS} clients in {took:.0f} s; {kills} kills and "
          f"{len(log) - kills} hangs; {len(after)} moves ({sum(1 for a in after if a > 0)} mid-stream), "
          f"{retried} retries before a first token; one request moved up to {most} times; {waited} waited for a node; "
          "0 failed")
    return done


def check_outputs(what, done):
    """The same requests in one process, with no failure, give the same outputs."""
    with ServerProcess(BIN, ["--kv-tokens", "16384"]) as local:
        keys = sorted(done)
        reference = {}

        def replay(part):
            for k in part:
                reference[k] = run_one(local.port, done[k][0], False)

        parts = [keys[i::CLIENTS] for i in range(CLIENTS)]
        workers = [threading.Thread(target=replay, args=(p,)) for p in parts]
        for t in workers:
            t.start()
        for t in workers:
            t.join(900)
    differ = []
    for k in keys:
        body, stream, (code, text, finish, usage, _) = done[k]
        ref = reference[k]
        check(ref[0] == 200, f"the reference run of {body} failed: {ref[1]}")
        if (text, finish, usage["completion_tokens"], usage["prompt_tokens"]) != \
                (ref[1], ref[2], ref[3]["completion_tokens"], ref[3]["prompt_tokens"]):
            differ.append((k, body, stream, text, ref[1], finish, ref[2], usage, ref[3]))
    check(not differ, f"{len(differ)} of {len(keys)} outputs differ from the one-process run; first: {differ[:2]}")
    gaps = sorted(v[2][4] for v in done.values() if v[2][4] is not None)
    p = lambda q: gaps[min(len(gaps) - 1, int(q * len(gaps)))]  # noqa: E731
    print(f"ok ({what}): all {len(keys)} outputs equal the one-process run's (texts and usage); "
          f"every node's pool whole after; longest gap per stream p50 {p(0.5):.2f} s, p99 {p(0.99):.2f} s, "
          f"max {gaps[-1]:.2f} s")


def main():
    data_parallel = [NodeProcess(["--secret-file", SECRET]).start() for _ in range(3)]
    check_outputs("three nodes", run_chaos("three nodes", data_parallel))
    pairs = [pd_node(mode) for mode in ("prefill", "prefill", "decode", "decode")]
    check_outputs("two prefill and two decode nodes", run_chaos("two prefill and two decode nodes", pairs))
    print("cluster chaos: all checks passed")


if __name__ == "__main__":
    main()
