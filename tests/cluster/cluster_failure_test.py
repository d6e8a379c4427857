#!/usr/bin/env python3
"""Cluster failure paths, with a head and worker nodes as real processes on loopback.

  - a node serving a different model (the default GGUF with one layer fewer: a
    real, loadable model whose identity differs) is refused by the head with a
    clear message, and the head keeps serving on the other node;
  - a hung node (SIGSTOP while requests run) is taken for lost within the
    heartbeat timeout and its requests go on on the other node, every one
    answered whole; after SIGCONT the node is joined again and gets requests;
  - every node lost with requests running: they wait for a node and finish on the first
    one back, with the text of a run without the failure;
  - all nodes dead at once: requests get 503 at once, /health answers 503 and
    /nodes lists every node as not alive.

Checks raise AssertionError explicitly (they must survive `python -O`); waits
poll for the expected state under a deadline.

Usage: python3 tests/cluster/cluster_failure_test.py path/to/actorlm
"""
import json
import os
import signal
import struct
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_test import BIN, WORK, SECRET, NodeProcess, check, complete, head, nodes  # noqa: E402
from cluster_test import wait_for as poll  # noqa: E402
from server_process import default_model  # noqa: E402

HEARTBEAT_TIMEOUT_S = 4  # docs/CLUSTER.md: about 4 s of missed heartbeats


def health(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def model_with_fewer_layers(src):
    """The GGUF at `src` without its last layer: llama.block_count one lower
    and that layer's tensors left out of the tensor list (their bytes stay in
    the data section, unreferenced). A consistent, loadable model that is
    another model by identity (layers) with the same tokenizer."""
    with open(src, "rb") as f:
        data = f.read()
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(at, vtype):
        if vtype in scalar:
            return at + scalar[vtype]
        if vtype == 8:
            (n,) = struct.unpack_from("<Q", data, at)
            return at + 8 + n
        check(vtype == 9, f"unknown GGUF value type {vtype}")
        etype, count = struct.unpack_from("<IQ", data, at)
        at += 12
        for _ in range(count):
            at = skip_value(at, etype)
        return at

    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", data, 0)
    check(magic == 0x46554747 and version >= 2, "not a GGUF v2/v3 file")
    at, kvs, layers, alignment = 24, bytearray(), None, 32
    for _ in range(n_kv):
        start = at
        (klen,) = struct.unpack_from("<Q", data, at)
        key = data[at + 8:at + 8 + klen]
        (vtype,) = struct.unpack_from("<I", data, at + 8 + klen)
        value_at = at + 12 + klen
        at = skip_value(value_at, vtype)
        entry = bytearray(data[start:at])
        if key == b"llama.block_count":
            (layers,) = struct.unpack_from("<I", data, value_at)
            struct.pack_into("<I", entry, value_at - start, layers - 1)
        elif key == b"general.alignment":
            (alignment,) = struct.unpack_from("<I", data, value_at)
        kvs += entry
    check(layers is not None, "no llama.block_count in the default model")
    infos, kept, last = bytearray(), 0, f"blk.{layers - 1}.".encode()
    for _ in range(n_tensors):
        start = at
        (nlen,) = struct.unpack_from("<Q", data, at)
        name = data[at + 8:at + 8 + nlen]
        (ndims,) = struct.unpack_from("<I", data, at + 8 + nlen)
        at += 8 + nlen + 4 + 8 * ndims + 4 + 8  # name, dims, type, offset
        if not name.startswith(last):
            infos += data[start:at]
            kept += 1
    data_start = (at + alignment - 1) // alignment * alignment
    head = struct.pack("<IIQQ", magic, version, kept, n_kv) + kvs + infos
    head += b"\0" * ((-len(head)) % alignment)
    path = os.path.join(WORK, "smaller-model.gguf")
    with open(path, "wb") as f:
        f.write(head + data[data_start:])
    return path, layers


def check_different_model(node_a):
    path, layers = model_with_fewer_layers(default_model())
    other = NodeProcess(["--secret-file", SECRET, "--model", path]).start()
    try:
        with head([node_a, other], ["--connect-timeout", "10"]) as h:
            poll("the head to refuse the other model",
                 lambda: "different model" in (nodes(h.port)[other.address].get("error") or ""), 30)
            view = nodes(h.port)
            msg = view[other.address]["error"]
            check(not view[other.address]["alive"] and view[node_a.address]["alive"], view)
            check(f"{layers - 1} layers" in msg, f"the refusal does not say what differs: {msg}")
            for i in range(3):
                code, body = complete(h.port, f"Still serving {i}:", max_tokens=4)
                check(code == 200, (code, body))
            check(nodes(h.port)[other.address]["routed"] == 0, "a request was routed to the other model")
        print(f"ok: a node serving another model is refused ({msg}); the head serves on the other node")
    finally:
        other.stop()


def check_hung_node(node_a, node_b):
    with head([node_a, node_b]) as h:
        poll("both nodes joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)
        results = {}

        def run(i):
            code, body = complete(h.port, f"Tale {i}: long ago, beyond the mountains,", max_tokens=600, ignore_eos=True)
            results[i] = (code, body, time.monotonic())

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(4)]
        for t in threads:
            t.start()
        poll("requests on both nodes", lambda: all(n["in_flight"] >= 1 for n in nodes(h.port).values()), 60)
        on_b = nodes(h.port)[node_b.address]["in_flight"]
        mark = len(h.lines)
        stopped_at = time.monotonic()
        node_b.proc.send_signal(signal.SIGSTOP)
        try:
            moved = lambda: [t for t, line in h.lines[mark:] if "going on at node" in line]
            poll("the hung node's requests to move", lambda: len(moved()) >= on_b, HEARTBEAT_TIMEOUT_S + 10)
            moved_after = max(moved()) - stopped_at
            check(moved_after < HEARTBEAT_TIMEOUT_S + 6, f"a request on the hung node took {moved_after:.1f} s to move")
            check(not nodes(h.port)[node_b.address]["alive"], "the hung node is still listed as alive")
            for i in range(2):
                code, body = complete(h.port, f"While one node hangs {i}:", max_tokens=4)
                check(code == 200, (code, body))
        finally:
            node_b.proc.send_signal(signal.SIGCONT)
        for t in threads:
            t.join(300)
        check(len(results) == 4, f"a request never ended: {sorted(results)}")
        for code, body, _ in results.values():
            check(code == 200 and body["choices"][0]["finish_reason"] == "length", (code, body))
            check(body["usage"]["completion_tokens"] == 600, body["usage"])
        poll("the resumed node to be joined again", lambda: nodes(h.port)[node_b.address]["alive"], 30)
        routed = nodes(h.port)[node_b.address]["routed"]
        for i in range(4):
            code, body = complete(h.port, f"New subject {i} on rivers and lakes:", max_tokens=4)
            check(code == 200, (code, body))
        check(nodes(h.port)[node_b.address]["routed"] > routed, "the resumed node gets no requests")
        poll("the resumed node to free the moved requests' KV",
             lambda: (lambda n: n["running"] == 0 and n["kv_locked_tokens"] == 0)(nodes(h.port)[node_b.address]), 30)
        print(f"ok: a hung node's {on_b} request(s) moved to the other node {moved_after:.1f} s after SIGSTOP and "
              "finished there; after SIGCONT it was joined again, got requests, and held no KV")


def check_all_lost_then_one_back(node_a, node_b):
    """Every node lost with requests running: they wait for a node (up to --connect-timeout)
    and finish on the first that comes back, with the text of a run without the failure."""
    prompts = [f"Chronicle {i}: the valley before the flood," for i in range(2)]
    with head([node_a, node_b]) as h:
        poll("both nodes joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)
        clean = {}

        def run(store, i):
            code, body = complete(h.port, prompts[i], max_tokens=300, ignore_eos=True)
            store[i] = (code, body)

        for t in [threading.Thread(target=run, args=(clean, i)) for i in range(2)]:
            t.start()
            t.join(300)
        results = {}
        threads = [threading.Thread(target=run, args=(results, i), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        poll("a request on each node", lambda: all(n["in_flight"] >= 1 for n in nodes(h.port).values()), 60)
        time.sleep(1)  # some tokens out
        node_a.kill()
        node_b.kill()
        poll("the head to see both nodes gone", lambda: not any(n["alive"] for n in nodes(h.port).values()), 10)
        time.sleep(2)
        node_a.args[node_a.args.index("--port") + 1] = str(node_a.port)
        node_a.start()
        for t in threads:
            t.join(300)
        for i in range(2):
            code, body = results[i]
            check(code == 200, (code, body))
            check(body["choices"][0]["text"] == clean[i][1]["choices"][0]["text"],
                  f"request {i} differs from its run without the failure")
        waited = sum(1 for _, line in h.lines if "no node can take it now" in line)
        check(waited == 2, f"{waited} requests waited for a node")
        print("ok: with every node lost mid-request, both requests waited, went on on the first node back, "
              "and answered exactly as without the failure")
    node_b.args[node_b.args.index("--port") + 1] = str(node_b.port)
    node_b.start()


def check_all_nodes_dead(node_a, node_b):
    with head([node_a, node_b]) as h:
        poll("both nodes joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 30)
        node_a.kill()
        node_b.kill()
        poll("the head to see both nodes gone", lambda: not any(n["alive"] for n in nodes(h.port).values()), 10)
        t0 = time.monotonic()
        code, body = complete(h.port, "Anyone there?", max_tokens=4)
        took = time.monotonic() - t0
        check(code == 503, (code, body))
        check("no worker node is available" in body["error"]["message"], body)
        check(took < 2, f"a request with every node dead took {took:.1f} s to fail")
        code, body = health(h.port)
        check(code == 503 and body.get("nodes_joined") == 0 and body.get("nodes") == 2, (code, body))
        view = nodes(h.port)
        check(all(not n["alive"] and n.get("error") for n in view.values()), view)
        print(f"ok: with every node dead a request fails with 503 in {took * 1000:.0f} ms; /health is 503; "
              "/nodes lists both as down with the reason")


def main():
    node_a = NodeProcess(["--secret-file", SECRET]).start()
    node_b = NodeProcess(["--secret-file", SECRET]).start()
    try:
        check_different_model(node_a)
        check_hung_node(node_a, node_b)
        check_all_lost_then_one_back(node_a, node_b)
        check_all_nodes_dead(node_a, node_b)
    finally:
        for n in (node_a, node_b):
            if n.proc.poll() is None:
                n.proc.send_signal(signal.SIGCONT)
                n.stop()
    print("cluster failures: all checks passed")


if __name__ == "__main__":
    main()
