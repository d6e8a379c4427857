#!/usr/bin/env python3
"""A head and two worker nodes as real processes on loopback (CAF middleman).

Checks, on the default model:
  - greedy outputs through the cluster equal the single-process engine's;
  - requests sharing a prefix land on the same node, a new prefix group on the other;
  - killing a node mid-run moves its in-flight requests to the other node, where they go on
    from the tokens already sent: greedy and seeded, streamed and not (one client dropping its
    connection twice and coming back with Last-Event-ID), each client gets exactly the text and
    usage of a run without the failure; the node rejoins when restarted; with
    --failover-attempts 0 its requests fail instead (503, within seconds);
  - a head that dies has its requests aborted on the nodes (their KV freed);
  - a head driving a worker node (--role worker, --remote-worker) gives the same outputs,
    owns the node until it dies; a worker node killed mid-stream and started again on its
    port gets the head's running requests computed again from their tokens, each answer
    exactly the one without the failure (/metrics counts the reset); one that stays away
    past --connect-timeout fails them with 503;
  - a head with the wrong secret, or a certificate from another CA, is refused (also with TLS
    and a secret together: the node's gate in front of TLS);
    unsafe setups (plain TCP off loopback, no secret and no TLS) do not start.

Usage: python3 tests/cluster/cluster_test.py path/to/actorlm
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from server_process import ServerProcess, stop_at_exit, stop_process  # noqa: E402
from stream_resume_test import read_events, text_of  # noqa: E402


def check(cond, msg):
    """An assert that `python -O` keeps."""
    if not cond:
        raise AssertionError(msg)


BIN = sys.argv[1]
WORK = tempfile.mkdtemp(prefix="actorlm-cluster-")


def write(name, data):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(data)
    return path


SECRET = write("secret", "correct horse battery staple 1f3a\n")
WRONG_SECRET = write("wrong", "not the secret\n")


class NodeProcess:
    """`actorlm node` on loopback; port 0 picks a free port unless one is given."""

    def __init__(self, extra=(), port=0):
        self.args = [BIN, "node", "--port", str(port), "--threads", "1", "--kv-tokens", "8192", *extra]
        self.lines = []

    def start(self):
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, text=True)
        stop_at_exit(self.proc)
        deadline = time.monotonic() + 120
        self.port = None
        while time.monotonic() < deadline and self.port is None:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise AssertionError(f"node exited early: {self.args}")
            self.lines.append(line)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        check(self.port, "node did not announce its port")
        threading.Thread(target=lambda: [self.lines.append(x) for x in self.proc.stderr], daemon=True).start()
        return self

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        stop_process(self.proc)


def post(port, path, body, timeout=300):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def complete(port, prompt, max_tokens=24, **extra):
    return post(port, "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra})


def chat(port, content, max_tokens=24, system=None):
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
    return post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": max_tokens, "temperature": 0})


def nodes(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/nodes", timeout=30) as r:
        return {n["address"]: n for n in json.loads(r.read())["nodes"]}


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def head(node_list, extra=()):
    args = [a for n in node_list for a in ("--node", n.address)]
    return ServerProcess(BIN, [*args, "--secret-file", SECRET, *extra])


PROMPTS = ["The capital of France is", "List three colors:", "def fibonacci(n):", "Water boils at"]
QUESTIONS = ["What is the capital of France?", "Name a large animal.", "What is 2+2?"]


LOCAL = {}  # greedy outputs of the single-process engine, by prompt


def greedy_outputs(port):
    out = {}
    for p in PROMPTS:
        code, body = complete(port, p)
        check(code == 200, body)
        out[p] = body["choices"][0]["text"]
    for q in QUESTIONS:
        code, body = chat(port, q)
        check(code == 200, body)
        out[q] = body["choices"][0]["message"]["content"]
    return out


def check_greedy_equals_single_process(port, what):
    if not LOCAL:
        with ServerProcess(BIN, ["--kv-tokens", "8192"]) as local:
            LOCAL.update(greedy_outputs(local.port))
    check(greedy_outputs(port) == LOCAL, f"{what}: greedy outputs differ from the single-process run")
    print(f"ok: greedy outputs through {what} equal the single-process engine's ({len(LOCAL)} prompts)")


def check_prefix_affinity(port):
    long_a = ("You are a meticulous assistant for a shipping company. Answer in one short sentence, "
              "politely, and never mention competitors. Company facts: founded 1931, 40 ports, 900 ships. ") * 2
    long_b = ("You are a poet who writes about the sea and the weather. Reply with imagery, "
              "never with lists, and keep to the subject the user names. Favorite words: tide, salt, gale. ") * 2
    before = nodes(port)
    landed = {}
    for group, system in (("a", long_a), ("b", long_b)):
        start = nodes(port)
        for q in ("Where are you based?", "How many ships?", "Tell me more.", "When were you founded?"):
            code, body = chat(port, q, max_tokens=8, system=system)
            check(code == 200, body)
        end = nodes(port)
        grew = {a: end[a]["routed"] - start[a]["routed"] for a in end}
        check(sorted(grew.values()) == [0, 4], f"group {group} spread over nodes: {grew}")
        landed[group] = max(grew, key=grew.get)
    check(landed["a"] != landed["b"], f"both prefix groups went to {landed['a']}")
    after = nodes(port)
    for a, n in after.items():
        check(n["cached_tokens"] > before[a]["cached_tokens"], f"node {a} reused no cached prefix: {n}")
    rates = {a: round(n["cache_hit_rate"], 3) for a, n in after.items()}
    print(f"ok: each prefix group stayed on one node ({landed}); per-node cache hit rates {rates}")


def stream_completion(port, body, progress, timeout=300, stamps=None):
    """POSTs a streamed completion; progress[0] counts the text chunks as they
    arrive (and `stamps` gets their arrival times). Returns (status, text,
    finish_reason, usage)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}),
                 {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        return r.status, json.loads(r.read()), None, None
    text, finish, usage = [], None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        check("error" not in chunk, f"the stream carried an error: {chunk}")
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk.get("choices", []):
            if c.get("text"):
                text.append(c["text"])
                progress[0] += 1
                if stamps is not None:
                    stamps.append(time.monotonic())
            finish = c.get("finish_reason") or finish
    conn.close()
    return 200, "".join(text), finish, usage


# Failover: greedy and seeded sampling, streamed and not.
FAILOVER = [{"prompt": f"Story {i}: once upon a time, in a land far away,", "max_tokens": 400, "ignore_eos": True,
             **({"temperature": 0} if i % 2 == 0 else {"temperature": 0.8, "top_p": 0.95, "seed": 100 + i}),
             "stream": i < 2} for i in range(4)]


def stream_with_drops(port, body, drops, progress):
    """A streamed completion whose client drops its connection after each count of events
    in `drops` and comes back with Last-Event-ID (the head runs with a resume window).
    Returns what stream_completion does."""
    events, last = [], ""
    for stop in [*drops, None]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        conn.request("POST", "/v1/completions",
                     json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}),
                     {"Content-Type": "application/json", **({"Last-Event-ID": last} if last else {})})
        r = conn.getresponse()
        if r.status != 200:
            return r.status, json.loads(r.read()), None, None
        got, ended = read_events(r, stop_after=None if stop is None else stop - len(events))
        events += got
        progress[0] = len(events)
        if ended:
            break
        conn.sock.shutdown(2)
        conn.close()
        last = events[-1][0]
    chunks = [json.loads(d) for _, d in events if d != "[DONE]"]
    finish = next((c["finish_reason"] for ch in chunks for c in ch.get("choices", []) if c.get("finish_reason")), None)
    usage = next((ch["usage"] for ch in chunks if ch.get("usage")), None)
    return 200, text_of(events), finish, usage


def run_failover_requests(port, results, progress, drops=()):
    """Each FAILOVER request on a thread of its own; with `drops`, request 0's client drops its
    connection after those counts of events and comes back."""
    def run(i):
        body = dict(FAILOVER[i])
        if body.pop("stream"):
            results[i] = (stream_with_drops(port, body, list(drops), progress[i]) if i == 0 and drops
                          else stream_completion(port, body, progress[i]))
        else:
            code, out = post(port, "/v1/completions", body)
            results[i] = (code, out["choices"][0]["text"] if code == 200 else out,
                          out["choices"][0]["finish_reason"] if code == 200 else None, out.get("usage"))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(FAILOVER))]
    for t in threads:
        t.start()
    return threads


def check_node_failure(port, head_proc, node_a, node_b):
    # Each request once with both nodes up and nothing lost: what a client
    # must get whatever happens below.
    reference, progress = {}, [[0] for _ in FAILOVER]
    for t in run_failover_requests(port, reference, progress):
        t.join(300)
    check(all(r[0] == 200 for r in reference.values()), reference)
    results, progress = {}, [[0] for _ in FAILOVER]
    # Request 0's client drops its connection twice, before the kill and (likely) while the
    # request moves, and comes back with Last-Event-ID.
    threads = run_failover_requests(port, results, progress, drops=(12, 30))
    wait_for("requests on both nodes, the streams 20 chunks in",
             lambda: all(n["in_flight"] >= 1 for n in nodes(port).values()) and all(p[0] >= 20 for p in progress[:2]), 60)
    on_b = nodes(port)[node_b.address]["in_flight"]
    mark = len(head_proc.lines)
    node_b.kill()
    for t in threads:
        t.join(300)
    check(len(results) == len(FAILOVER), f"a request never ended: {sorted(results)}")
    for i, (code, text, finish, usage) in sorted(results.items()):
        check(code == 200, f"request {i} failed: {code} {text}")
        check(text == reference[i][1], f"request {i} ({FAILOVER[i]}) differs from its run without a failure:\n"
                                       f"{text!r}\n---\n{reference[i][1]!r}")
        check(finish == "length" and usage["completion_tokens"] == 400 and
              usage["prompt_tokens"] == reference[i][3]["prompt_tokens"], (i, finish, usage, reference[i][3]))
    moves = [re.search(r"going on at node \S+ after (\d+) token", line) for _, line in head_proc.lines[mark:]]
    after = sorted(int(m.group(1)) for m in moves if m)
    check(len(after) == on_b, f"{on_b} requests were on the killed node, {len(after)} moved: {after}")
    check(any(n > 0 for n in after), f"no request was mid-stream when its node died: moved after {after} tokens")
    view = nodes(port)
    check(not view[node_b.address]["alive"] and view[node_a.address]["alive"], view)
    print(f"ok: killing a node moved its {on_b} in-flight request(s) (after {after} tokens) to the other node; "
          "all 4 (greedy and seeded, streamed and not, one client dropping and resuming its stream twice) gave "
          "exactly the text and usage of a run without the failure")
    node_b.args[node_b.args.index("--port") + 1] = str(node_b.port)
    node_b.start()
    wait_for("the restarted node to rejoin", lambda: nodes(port)[node_b.address]["alive"], 30)
    routed = nodes(port)[node_b.address]["routed"]
    for i in range(4):
        code, body = complete(port, f"Fresh topic number {i} about gardening and soil:", max_tokens=4)
        check(code == 200, body)
    check(nodes(port)[node_b.address]["routed"] > routed, "the rejoined node gets no requests")
    print("ok: the restarted node rejoined and receives requests again")


def check_no_failover(node_a, node_b):
    """--failover-attempts 0: a request fails with its node (503, within seconds)."""
    with head([node_a, node_b], ["--failover-attempts", "0"]) as h:
        wait_for("both nodes joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)
        results = {}

        def run(i):
            code, body = complete(h.port, f"Saga {i}: in the north, where the rivers freeze,", max_tokens=400,
                                  ignore_eos=True)
            results[i] = (code, body, time.monotonic())

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        wait_for("requests on both nodes", lambda: all(n["in_flight"] >= 1 for n in nodes(h.port).values()), 60)
        on_b = nodes(h.port)[node_b.address]["in_flight"]
        killed_at = time.monotonic()
        node_b.kill()
        for t in threads:
            t.join(300)
        failed = [r for r in results.values() if r[0] != 200]
        check(len(failed) == on_b, f"{on_b} requests were on the killed node, {len(failed)} failed: {results}")
        for code, body, at in failed:
            check(code == 503 and "was lost" in body["error"]["message"], (code, body))
            check(at - killed_at < 5, f"a failed request took {at - killed_at:.1f} s to end")
        print(f"ok: with --failover-attempts 0, killing a node failed its {on_b} request(s) with 503 within 5 s")


def check_head_death(node_a, node_b):
    with head([node_a, node_b]) as observer:
        doomed = ServerProcess(BIN, ["--node", node_a.address, "--secret-file", SECRET])
        doomed.__enter__()
        def endless():
            try:
                complete(doomed.port, "An endless essay:", max_tokens=3000, ignore_eos=True)
            except OSError:
                pass  # its head is killed below

        threading.Thread(target=endless, daemon=True).start()
        wait_for("the doomed head's request to run", lambda: nodes(observer.port)[node_a.address]["running"] == 1, 60)
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait()
        t0 = time.monotonic()
        wait_for("the node to drop the dead head's request",
                 lambda: (lambda n: n["running"] == 0 and n["kv_locked_tokens"] == 0)(nodes(observer.port)[node_a.address]),
                 15)
        print(f"ok: a killed head's request was aborted on its node after {time.monotonic() - t0:.1f} s (no locked KV left)")


def head_refused(node_list, extra):
    args = [BIN, "serve", "--port", "0", "--connect-timeout", "4", *[a for n in node_list for a in ("--node", n.address)],
            *extra]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr


def check_refusals(node_a):
    code, err = head_refused([node_a], ["--secret-file", WRONG_SECRET])
    check(code == 1 and "shared secret does not match" in err, (code, err))
    check(any("refused a head: the shared secret does not match" in line for line in node_a.lines), node_a.lines[-5:])
    code, err = head_refused([node_a], [])
    check(code == 2 and "needs a shared secret" in err, (code, err))
    p = subprocess.run([BIN, "node", "--host", "0.0.0.0", "--secret-file", SECRET], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 2 and "plain TCP" in p.stderr, (p.returncode, p.stderr))
    print("ok: a wrong secret is refused (head exits 1, node logs it); no secret or plain TCP off loopback does not start")


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=WORK)


def make_ca(name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-days", "2", "-subj", f"/CN={name}")


def make_cert(name, ca):
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2")


def tls_flags(name, ca):
    return ["--tls-cert", os.path.join(WORK, f"{name}.pem"), "--tls-key", os.path.join(WORK, f"{name}.key"),
            "--tls-ca", os.path.join(WORK, f"{ca}.pem")]


def check_tls():
    make_ca("ca")
    make_ca("rogue-ca")
    make_cert("node", "ca")
    make_cert("head", "ca")
    make_cert("intruder", "rogue-ca")
    node = NodeProcess(tls_flags("node", "ca")).start()
    try:
        check(any("on TLS" in line for line in node.lines), node.lines)
        with ServerProcess(BIN, ["--node", node.address, *tls_flags("head", "ca")]) as h:
            code, body = complete(h.port, "The capital of France is", max_tokens=8)
            check(code == 200 and "Paris" in body["choices"][0]["text"], body)
            # Refused while the head is joined: each refusal is a failed TLS handshake on the
            # node, which once closed every other TLS link of the node as well
            # (cluster/transport/tls_error_queue.hpp).
            code, err = head_refused([node], tls_flags("intruder", "rogue-ca"))
            check(code == 1 and "no worker node could be joined" in err, (code, err))
            code, err = head_refused([node], ["--secret-file", SECRET])
            check(code == 1 and "no worker node could be joined" in err, (code, err))
            time.sleep(2)  # heartbeats every 500 ms: the node reads the head's link again
            code, body = complete(h.port, "The capital of France is", max_tokens=8)
            check(code == 200 and "Paris" in body["choices"][0]["text"], body)
            lost = [line for _, line in h.lines if " lost" in line]
            check(not lost, f"the head lost its TLS link when others were refused: {lost}")
        print("ok: mutual TLS: a head with a certificate from the node's CA is served; "
              "one from another CA, or plain TCP, is refused, and the served head's link stays up")
    finally:
        node.stop()
    # TLS and a secret: the node's gate checks the secret, then relays TLS.
    node = NodeProcess([*tls_flags("node", "ca"), "--secret-file", SECRET]).start()
    try:
        with ServerProcess(BIN, ["--node", node.address, "--secret-file", SECRET, *tls_flags("head", "ca")]) as h:
            code, body = complete(h.port, "The capital of France is", max_tokens=8)
            check(code == 200 and "Paris" in body["choices"][0]["text"], body)
        code, err = head_refused([node], ["--secret-file", WRONG_SECRET, *tls_flags("head", "ca")])
        check(code == 1 and "shared secret does not match" in err, (code, err))
        print("ok: TLS behind the secret's gate: the right secret and certificate are served, a wrong secret is refused")
    finally:
        node.stop()


def check_remote_worker():
    worker = NodeProcess(["--secret-file", SECRET, "--role", "worker"]).start()
    try:
        first = ServerProcess(BIN, ["--remote-worker", worker.address, "--secret-file", SECRET]).__enter__()
        check_greedy_equals_single_process(first.port, "a head driving a worker node")
        code, err = head_refused([], ["--remote-worker", worker.address, "--secret-file", SECRET])
        check(code == 1 and "driven by" in err, (code, err))
        code, err = head_refused([worker], ["--secret-file", SECRET])
        check(code == 1 and "no worker node could be joined" in err, (code, err))
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
        with ServerProcess(BIN, ["--remote-worker", worker.address, "--secret-file", SECRET,
                                 "--connect-timeout", "60"]) as second:
            code, body = complete(second.port, PROMPTS[0])
            check(code == 200 and body["choices"][0]["text"] == LOCAL[PROMPTS[0]], body)
            worker = check_worker_comes_back(second, worker)
        with ServerProcess(BIN, ["--remote-worker", worker.address, "--secret-file", SECRET,
                                 "--connect-timeout", "2"]) as third:
            result = {}

            def endless():
                result["r"] = complete(third.port, "An endless essay:", max_tokens=3000, ignore_eos=True)
                result["at"] = time.monotonic()

            t = threading.Thread(target=endless)
            t.start()
            time.sleep(1.5)
            killed_at = time.monotonic()
            worker.kill()
            t.join(60)
            code, body = result["r"]
            check(code == 503 and "did not come back within 2" in body["error"]["message"], (code, body))
            check(result["at"] - killed_at < 10, result["at"] - killed_at)
        print("ok: a head drives a worker node (greedy equal); a second head is refused while it does, "
              "takes over when it dies; a worker node killed mid-request and started again finishes its "
              "requests exactly; one that stays away fails them (503) after --connect-timeout")
    finally:
        worker.stop()


# Requests on a remote-worker head while its worker node is killed and
# started again: greedy and seeded, streamed and not.
COMEBACK = [{"prompt": "A long letter to a friend about the sea:", "max_tokens": 160, "ignore_eos": True,
             "temperature": 0, "stream": True},
            {"prompt": "Notes from a journey by train:", "max_tokens": 160, "ignore_eos": True,
             "temperature": 0.8, "top_p": 0.95, "seed": 7, "stream": False}]


def run_comeback(port):
    """COMEBACK's requests at once; returns their (code, text, usage) and the streamed one's progress."""
    results, progress = [None] * len(COMEBACK), [0]

    def run(i):
        body = dict(COMEBACK[i])
        if body.pop("stream"):
            code, text, _, usage = stream_completion(port, body, progress)
            results[i] = (code, text, usage)
        else:
            code, out = post(port, "/v1/completions", body)
            results[i] = (code, out["choices"][0]["text"] if code == 200 else out, out.get("usage"))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(COMEBACK))]
    for t in threads:
        t.start()
    return threads, results, progress


def check_worker_comes_back(h, worker):
    """The worker node SIGKILLed mid-generation and started again on its port: the head
    dials it again and computes its running requests again there from their tokens, so
    each answer is exactly the one without the failure. Returns the new node."""
    threads, reference, _ = run_comeback(h.port)
    for t in threads:
        t.join(300)
    check(all(r[0] == 200 for r in reference), reference)
    threads, results, progress = run_comeback(h.port)
    wait_for("the stream to be under way", lambda: progress[0] >= 20, 120)
    killed_at = progress[0]
    worker.kill()
    time.sleep(1)
    worker = NodeProcess(["--secret-file", SECRET, "--role", "worker"], port=worker.port).start()
    for t in threads:
        t.join(300)
    head_log = "".join(line for _, line in h.lines[-15:])
    for got, want in zip(results, reference):
        check(got is not None and got[0] == 200, f"{got}; the head's last lines:\n{head_log}")
        check(got[1] == want[1], f"after the worker came back: {got[1]!r} != {want[1]!r}")
        check(got[2]["completion_tokens"] == want[2]["completion_tokens"], (got[2], want[2]))
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{h.port}/metrics", timeout=30).read().decode()
    values = dict(line.split(" ", 1) for line in metrics.splitlines() if line and not line.startswith("#"))
    check(float(values["actorlm_worker_resets_total"]) >= 1, metrics)
    check(float(values["actorlm_reset_requests_total"]) >= 1, metrics)
    check(any("joined again" in line for _, line in h.lines), "the head did not log the worker's return")
    print(f"ok: a worker node killed mid-stream ({killed_at} of {progress[0]} chunks in) and started again: both requests "
          "finished exactly as without the failure")
    return worker


def main():
    node_a = NodeProcess(["--secret-file", SECRET]).start()
    node_b = NodeProcess(["--secret-file", SECRET]).start()
    try:
        with head([node_a, node_b], ["--stream-resume-window", "10"]) as h:
            check_greedy_equals_single_process(h.port, "a head and two nodes")
            check_prefix_affinity(h.port)
            check_node_failure(h.port, h, node_a, node_b)
        check_head_death(node_a, node_b)
        check_no_failover(node_a, node_b)
        check_refusals(node_a)
    finally:
        node_a.stop()
        node_b.stop()
    check_remote_worker()
    check_tls()
    print("cluster: all checks passed")


if __name__ == "__main__":
    main()
