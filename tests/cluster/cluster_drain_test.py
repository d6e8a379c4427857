#!/usr/bin/env python3
"""Live migration: a head and three engine nodes as real processes on loopback, run with
--failover-attempts 0, so that a request that lost its node would fail instead of being
computed again elsewhere: every request that survives below moved with its KV.

Checks:
  - drain under load (POST /nodes/{id}/drain): twelve streams decoding (greedy, seeded
    sampling with a penalty, JSON schema), one of them with its client away (dropped after a
    few events, back with Last-Event-ID once the drain is over); the drained node's
    requests move to the other two with their KV and every client gets exactly the text and
    usage of the same request run alone in one process; the head logs each move with its
    rows and bytes; the other nodes compute no prompt token for them (their prompt-token
    counts do not move), and what the drained node lost they gained (migrated_out =
    migrated_in); the drained node takes no new request until POST .../undrain; an unknown
    node is a 404;
  - the same with a decode node of a prefill/decode cluster: its requests go on on the
    other decode node;
  - rolling restart: every node started with --drain is stopped (SIGTERM) and started
    again in turn while 16 clients send requests back to back: each node leaves once its
    requests have moved, and not one request fails; every output equals the one-process run;
  - rebalancing (--rebalance-interval): six streams sharing a long prefix, which cache-aware
    routing sends to one of two nodes, are spread over both by moving some with their KV once
    they decode (the other node computes no prompt token for them); every output equals the
    one-process run;
  - afterwards every node is idle, its pool adds up and holds no locked KV.

Usage: python3 tests/cluster/cluster_drain_test.py path/to/actorlm
"""
import http.client
import json
import os
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_test import BIN, SECRET, NodeProcess, check, head, nodes, post, stream_completion, wait_for  # noqa: E402
from cluster_pd_test import check_pools, pd_node  # noqa: E402
from server_process import ServerProcess  # noqa: E402
from stream_resume_test import read_events, text_of  # noqa: E402

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                          "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "age", "tags"]}
HEAD_FLAGS = ["--failover-attempts", "0", "--stream-resume-window", "120"]


def body_for(i, max_tokens):
    body = {"prompt": f"Drain {i}: a long letter about {['tides', 'orchards', 'bridges', 'comets'][i % 4]}.",
            "max_tokens": max_tokens}
    k = i % 3
    if k == 0:
        body.update(temperature=0, ignore_eos=True)
    elif k == 1:
        body.update(temperature=0.8, top_p=0.95, seed=500 + i, presence_penalty=0.3, ignore_eos=True)
    else:
        body.update(temperature=0, response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}})
    return body


def reference(bodies):
    """Each request alone in one process, no cluster."""
    out = {}
    with ServerProcess(BIN, ["--kv-tokens", "16384"]) as local:
        for k, body in bodies.items():
            code, r = post(local.port, "/v1/completions", body)
            check(code == 200, f"reference run of {body}: {code} {r}")
            out[k] = (r["choices"][0]["text"], r["choices"][0]["finish_reason"], r["usage"]["completion_tokens"],
                      r["usage"]["prompt_tokens"])
    return out


def drain(port, node, action="drain"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", f"/nodes/{node}/{action}", "{}", {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def away_and_back(port, body, before, state, progress):
    """A streamed request whose client reads `before` events, goes away, and comes back with
    Last-Event-ID once state['back'] is set."""
    payload = json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
    r = conn.getresponse()
    check(r.status == 200, f"the stream that goes away: {r.status}")
    events, _ = read_events(r, stop_after=before)
    progress[0] = len(events)
    conn.sock.shutdown(2)
    conn.close()
    state["away"].set()
    state["back"].wait(300)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json", "Last-Event-ID": events[-1][0]})
    r = conn.getresponse()
    if r.status != 200:
        raise AssertionError(f"coming back: {r.status} {r.read()[:200]}")
    rest, ended = read_events(r, stop_after=None)
    check(ended, f"the resumed stream did not end: {len(events)} events, then {len(rest)}: {rest[-2:]}")
    events += rest
    chunks = [json.loads(d) for _, d in events if d != "[DONE]"]
    finish = next((c["finish_reason"] for ch in chunks for c in ch.get("choices", []) if c.get("finish_reason")), None)
    usage = next((ch["usage"] for ch in chunks if ch.get("usage")), None)
    return 200, text_of(events), finish, usage


def check_drain_under_load():
    node_list = [NodeProcess(["--secret-file", SECRET]).start() for _ in range(3)]
    bodies = {i: body_for(i, 160) for i in range(12)}
    expected = reference(bodies)
    results, progress = {}, {i: [0] for i in bodies}
    state = {"away": threading.Event(), "back": threading.Event()}
    try:
        with head(node_list, HEAD_FLAGS) as h:
            wait_for("every node joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)

            def run(i):
                if i == 0:
                    results[i] = away_and_back(h.port, bodies[i], 4, state, progress[i])
                else:
                    results[i] = stream_completion(h.port, bodies[i], progress[i])

            def run_logged(i):
                try:
                    run(i)
                except AssertionError as e:
                    results[i] = (-1, str(e), None, None)

            threads = [threading.Thread(target=run_logged, args=(i,)) for i in bodies]
            for t in threads:
                t.start()
            check(state["away"].wait(300), "the client that goes away never read its first events")
            wait_for("every stream decoding", lambda: all(p[0] >= 2 for p in progress.values()), 300)
            before = nodes(h.port)
            victim = max(before, key=lambda a: before[a]["in_flight"])
            check(before[victim]["in_flight"] >= 2, f"no node runs two requests: {before}")
            code, state_json = drain(h.port, victim)
            check(code == 200 and state_json["draining"] and state_json["address"] == victim, (code, state_json))
            wait_for("the drained node empty", lambda: nodes(h.port)[victim]["in_flight"] == 0, 120)
            state["back"].set()
            for t in threads:
                t.join(600)
            check(not any(t.is_alive() for t in threads), "a client never finished")
            after = nodes(h.port)
            moved = [m for _, line in h.lines
                     if (m := re.search(r"moved from node (\S+) to (\S+) with (\d+) KV rows \(([\d.]+) MB\) in (\d+) ms", line))]
            check(moved and all(m.group(1) == victim for m in moved), f"no move logged from {victim}: {h.lines[-20:]}")
            check(after[victim]["migrated_out"] == len(moved), (after[victim], len(moved)))
            check(sum(after[a]["migrated_in"] for a in after if a != victim) == len(moved), after)
            for a in after:
                if a != victim:
                    check(after[a]["prompt_tokens"] == before[a]["prompt_tokens"],
                          f"node {a} computed prompt tokens for moved requests: {before[a]} -> {after[a]}")
            differ = []
            for i in bodies:
                code, text, finish, usage = results[i]
                if code != 200:
                    print("\n".join(line.rstrip() for _, line in h.lines))
                    print(json.dumps(nodes(h.port), indent=1))
                    for n in node_list:
                        print("\n".join(f"{n.address}: {line.rstrip()}" for line in n.lines[-12:]))
                got = (text, finish, usage["completion_tokens"] if usage else None, usage["prompt_tokens"] if usage else None)
                if code != 200 or got != expected[i]:
                    differ.append((i, code, got, expected[i]))
            check(not differ, f"{len(differ)} outputs differ from the one-process run: {differ[:2]}")
            # Drained: nothing new goes there; undrained: it takes requests again.
            routed = after[victim]["routed"]
            for k in range(4):
                code, out = post(h.port, "/v1/completions", {"prompt": f"After the drain {k}", "max_tokens": 4})
                check(code == 200, out)
            check(nodes(h.port)[victim]["routed"] == routed, "a drained node was given a new request")
            check(drain(h.port, "127.0.0.1:1")[0] == 404, "an unknown node was drained")
            code, state_json = drain(h.port, victim, "undrain")
            check(code == 200 and not state_json["draining"], state_json)
            for k in range(6):
                post(h.port, "/v1/completions", {"prompt": f"After the undrain {k}: something new entirely", "max_tokens": 4})
            check(nodes(h.port)[victim]["routed"] > routed, "an undrained node got no request")
            check_pools(h.port, "after the drain")
            mb = sum(float(m.group(4)) for m in moved)
            ms = sorted(int(m.group(5)) for m in moved)
            print(f"drain: {len(moved)} requests moved off {victim} with their KV ({mb:.1f} MB, "
                  f"{ms[len(ms) // 2]} ms median per move), 0 prompt tokens computed for them; "
                  f"all {len(bodies)} outputs equal the one-process run (one client away during the move)")
    finally:
        for n in node_list:
            n.stop()


def check_pd_drain():
    """A decode node of a prefill/decode cluster drained: its requests go on on the other
    decode node from their KV."""
    node_list = [pd_node(m) for m in ("prefill", "decode", "decode")]
    bodies = {i: body_for(3 * i, 120) for i in range(6)}  # greedy: they split into pairs
    bodies.update({i: body_for(3 * (i - 6) + 1, 120) for i in range(6, 9)})  # seeded sampling
    expected = reference(bodies)
    results, progress = {}, {i: [0] for i in bodies}
    try:
        with head(node_list, HEAD_FLAGS) as h:
            wait_for("every node joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)
            threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, stream_completion(h.port, bodies[i], progress[i])))
                       for i in bodies]
            for t in threads:
                t.start()
            wait_for("every stream decoding", lambda: all(p[0] >= 2 for p in progress.values()), 300)
            before = nodes(h.port)
            decoders = [a for a in before if before[a]["disaggregation_mode"] == "decode"]
            victim = max(decoders, key=lambda a: before[a]["in_flight"])
            other = next(a for a in decoders if a != victim)
            check(before[victim]["in_flight"] >= 1, before)
            code, _ = drain(h.port, victim)
            check(code == 200, code)
            wait_for("the drained decode node empty", lambda: nodes(h.port)[victim]["in_flight"] == 0, 120)
            for t in threads:
                t.join(600)
            after = nodes(h.port)
            moved = [line for _, line in h.lines if f"moved from node {victim} to {other}" in line]
            check(moved and after[victim]["migrated_out"] == len(moved) == after[other]["migrated_in"], (len(moved), after))
            check(after[other]["prompt_tokens"] == before[other]["prompt_tokens"], (before[other], after[other]))
            differ = [(i, results[i], expected[i]) for i in bodies
                      if results[i][0] != 200 or (results[i][1], results[i][2], results[i][3]["completion_tokens"],
                                                  results[i][3]["prompt_tokens"]) != expected[i]]
            check(not differ, f"{len(differ)} outputs differ from the one-process run: {differ[:2]}")
            check_pools(h.port, "after the decode node's drain")
            print(f"drain (prefill/decode): {len(moved)} requests moved from decode node {victim} to {other} with "
                  f"their KV; all {len(bodies)} outputs equal the one-process run")
    finally:
        for n in node_list:
            n.stop()


def check_rolling_restart():
    node_list = [NodeProcess(["--secret-file", SECRET, "--drain", "--drain-timeout", "120"]).start() for _ in range(3)]
    done, stop = {}, threading.Event()
    try:
        with head(node_list, HEAD_FLAGS) as h:
            wait_for("every node joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)

            def client(c):
                rnd = 0
                while not stop.is_set():
                    body = body_for(c * 100 + rnd, 40 + (c * 13 + rnd * 7) % 60)
                    if c % 2:
                        r = stream_completion(h.port, body, [0])
                    else:
                        code, out = post(h.port, "/v1/completions", body)
                        r = (code, out["choices"][0]["text"], out["choices"][0]["finish_reason"], out["usage"]) if code == 200 \
                            else (code, out, None, None)
                    done[(c, rnd)] = (body, r)
                    rnd += 1

            threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
            for t in threads:
                t.start()
            time.sleep(3)
            for n in node_list:
                t0 = time.monotonic()
                n.proc.send_signal(signal.SIGTERM)
                n.proc.wait(180)
                left = time.monotonic() - t0
                check(any("actorlm node: drained" in line for line in n.lines), f"{n.address} left undrained: {n.lines[-5:]}")
                n.args[n.args.index("--port") + 1] = str(n.port)
                n.start()
                wait_for(f"{n.address} to rejoin", lambda: nodes(h.port)[n.address]["alive"], 60)
                print(f"rolling restart: {n.address} drained and left in {left:.1f} s, back")
                time.sleep(2)
            stop.set()
            for t in threads:
                t.join(600)
            failed = {k: v[1][:2] for k, v in done.items() if v[1][0] != 200}
            check(not failed, f"{len(failed)} of {len(done)} requests failed during the rolling restart: {list(failed.items())[:3]}")
            moves = sum(1 for _, line in h.lines if " moved from node " in line)
            check_pools(h.port, "after the rolling restart")
        expected = reference({k: v[0] for k, v in done.items()})
        differ = [k for k, (body, r) in done.items()
                  if (r[1], r[2], r[3]["completion_tokens"], r[3]["prompt_tokens"]) != expected[k]]
        check(not differ, f"{len(differ)} of {len(done)} outputs differ from the one-process run: {differ[:3]}")
        print(f"rolling restart: 3 nodes restarted one by one under 16 clients: {len(done)} requests, "
              f"{moves} moved with their KV, 0 failed, every output equal to the one-process run")
    finally:
        stop.set()
        for n in node_list:
            n.stop()


PREFIX = ("You are the archivist of a small harbour town. Every answer you give starts from the "
          "harbour's logbooks: ships, tides, storms, the lighthouse keepers' notes and the fish market's "
          "prices, kept since the town was founded. ") * 4


def check_rebalance():
    node_list = [NodeProcess(["--secret-file", SECRET]).start() for _ in range(2)]
    topics = ["the winter storm", "the lighthouse", "the fish market", "the old ferry", "the regatta", "the fog"]
    bodies = {}
    for i, t in enumerate(topics):
        body = {"prompt": PREFIX + f"Question {i}: tell the story of {t}.", "max_tokens": 200, "ignore_eos": True}
        body.update(temperature=0) if i % 2 == 0 else body.update(temperature=0.7, seed=900 + i)
        bodies[i] = body
    expected = reference(bodies)
    results, progress = {}, {i: [0] for i in bodies}
    try:
        with head(node_list, HEAD_FLAGS + ["--rebalance-interval", "0.2"]) as h:
            wait_for("every node joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)
            before = nodes(h.port)
            threads = []
            for i in bodies:
                threads.append(threading.Thread(
                    target=lambda i=i: results.__setitem__(i, stream_completion(h.port, bodies[i], progress[i]))))
                threads[-1].start()
                time.sleep(0.05)  # in order: each later one finds the first's prefix on its node
            for t in threads:
                t.join(600)
            check(not any(t.is_alive() for t in threads), "a client never finished")
            after = nodes(h.port)
            routed = {a: after[a]["routed"] - before[a]["routed"] for a in after}
            busy = max(routed, key=routed.get)
            check(routed[busy] == len(bodies), f"the shared prefix did not send every request to one node: {routed}")
            picked = [line for _, line in h.lines if "rebalancing moves request" in line]
            moved = [m for _, line in h.lines if (m := re.search(r"moved from node (\S+) to (\S+) with (\d+) KV rows", line))]
            check(len(moved) >= 2 and all(m.group(1) == busy for m in moved), f"moves: {picked} {h.lines[-20:]}")
            # Each request is moved by a rebalance at most once (nothing bounces); more than half may
            # move when the moved ones, on the idler node, finish first and leave the gap again.
            ids = [re.search(r"rebalancing moves request (\d+)", line).group(1) for line in picked]
            check(len(moved) <= len(picked) and len(ids) == len(set(ids)), f"a request rebalanced twice: {picked}")
            idle = next(a for a in after if a != busy)
            check(after[idle]["migrated_in"] == len(moved) and after[busy]["migrated_out"] == len(moved), after)
            check(after[idle]["prompt_tokens"] == before[idle]["prompt_tokens"],
                  f"the idle node computed prompt tokens for moved requests: {before[idle]} -> {after[idle]}")
            differ = [(i, results[i][:2], expected[i][:2]) for i in bodies
                      if results[i][0] != 200 or (results[i][1], results[i][2], results[i][3]["completion_tokens"],
                                                  results[i][3]["prompt_tokens"]) != expected[i]]
            check(not differ, f"{len(differ)} outputs differ from the one-process run: {differ[:2]}")
            check_pools(h.port, "after rebalancing")
            print(f"rebalance: {len(bodies)} streams sharing a prefix all routed to {busy}; {len(moved)} moved to "
                  f"{idle} with their KV as they decoded, 0 prompt tokens computed there; outputs equal one process")
    finally:
        for n in node_list:
            n.stop()


def main():
    check_rebalance()
    check_drain_under_load()
    check_pd_drain()
    check_rolling_restart()
    print("cluster drain: all checks passed")


if __name__ == "__main__":
    main()
