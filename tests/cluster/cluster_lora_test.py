#!/usr/bin/env python3
"""LoRA adapters on cluster nodes (`actorlm node --lora NAME=PATH`), as real processes on loopback:
  - a head over two engine nodes that loaded the same adapters serves them by name: /v1/models
    lists them, and the base model's and each adapter's greedy answers equal a single
    `serve --lora` process's; after the node that answered an adapter's request is killed, the
    other node gives the same answer;
  - a node whose adapters differ (another set, or the same name over another file) is refused at
    its join with the reason in /nodes, and the head goes on serving;
  - an adapter loaded through the head (POST /v1/load_lora_adapter) is loaded on both nodes, each
    from its own --lora-dir, and answers as the same file does at start; a file one node lacks, or
    one name over different files, is refused and the nodes that had loaded it drop it again; a
    node that restarts is given what was loaded through the head since, and joins again; an
    adapter in use cannot be unloaded (409), and once unloaded no request can name it; a node that
    restarts with one of its --lora adapters dropped through the head since has it dropped, and
    gets what was loaded while it was down, before it joins;
  - two heads over the same two nodes: an adapter loaded through either is served by the other
    too once both nodes hold it (each node tells its other heads), answering as the same file;
    their ids never collide; one unloaded through either is gone from the other (404);
  - with prefill/decode disaggregation, an adapter's request runs whole on the prefill node (its
    KV never moves) and a decode node without adapters joins: both answers as one process;
  - a head driving a worker node (--role worker --lora ...) serves the worker's adapters, every
    answer as one process's; changing them through that head is refused with the reason.

Usage: python3 tests/cluster/cluster_lora_test.py path/to/actorlm
"""
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from cluster_test import BIN, SECRET, NodeProcess, check, head, nodes, post, wait_for  # noqa: E402
from server_process import ServerProcess  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
A = os.path.join(ROOT, "tests", "fixtures", "lora", "smollm2_a.gguf")
B = os.path.join(ROOT, "tests", "fixtures", "lora", "smollm2_b.gguf")
LORA = ["--lora", f"a={A}", "--lora", f"b={B}"]
PROMPTS = ["The capital of France is", "List three colors:"]


def answers(port):
    """Greedy text of each prompt under the base model and each adapter, by (model, prompt)."""
    out = {}
    for model in (None, "a", "b"):
        for p in PROMPTS:
            body = {"prompt": p, "max_tokens": 16, "temperature": 0}
            if model:
                body["model"] = model
            code, r = post(port, "/v1/completions", body)
            check(code == 200, (model, p, code, r))
            out[(model, p)] = r["choices"][0]["text"]
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def listed(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as r:
        return [m["id"] for m in json.loads(r.read())["data"]]


def logged(node, line):
    return any(line in x for x in node.lines)


def restart(port, node, while_down=lambda: None):
    """`node` killed, `while_down()` run once the head has noticed, then the node started again
    with the same flags (after NodeProcess's own eight) on the same port, and joined."""
    node.kill()
    wait_for("the head to notice", lambda: not nodes(port)[node.address]["alive"], 30)
    while_down()
    node = NodeProcess(node.args[8:], port=node.port).start()
    wait_for("the restarted node to join", lambda: nodes(port)[node.address]["alive"], 60)
    return node


def check_loads_through_head(port, first, second, reference):
    """Loads and unloads through a head over `first` and `second` (each with its own --lora-dir)."""
    load = "/v1/load_lora_adapter"
    code, r = post(port, load, {"lora_name": "c", "lora_path": "shared.gguf"})
    check(code == 200 and r.get("status") == "loaded", (code, r))
    check(listed(port)[1:] == ["a", "b", "c"], f"after a load: {listed(port)}")
    for n in (first, second):
        wait_for(f"{n.address} to say it loaded c", lambda n=n: logged(n, "LoRA adapter c #3 loaded by a head"), 10)
    for p in PROMPTS:
        code, r = post(port, "/v1/completions", {"prompt": p, "max_tokens": 16, "temperature": 0, "model": "c"})
        check(code == 200 and r["choices"][0]["text"] == reference[("a", p)], ("c is a's file", p, code, r))
    print("ok: an adapter loaded through the head is loaded on both nodes, each from its own --lora-dir, "
          "and answers as the same file loaded at start")

    # Only the first node has the file: refused, and the first drops it again.
    code, r = post(port, load, {"lora_name": "d", "lora_path": "only_first.gguf"})
    check(code == 400 and "no adapter file by that name" in json.dumps(r), (code, r))
    wait_for("the first node to drop d again", lambda: logged(first, "LoRA adapter d #4 dropped by a head"), 10)
    # One name over different files: refused, dropped again on both.
    code, r = post(port, load, {"lora_name": "x", "lora_path": "x.gguf"})
    check(code == 400 and "differ" in json.dumps(r), (code, r))
    for n in (first, second):
        wait_for(f"{n.address} to drop x again", lambda n=n: logged(n, "LoRA adapter x #5 dropped by a head"), 10)
    check(listed(port)[1:] == ["a", "b", "c"], f"a refused load changed the list: {listed(port)}")
    # What the first node dropped again can be loaded again (it kept no trace).
    code, r = post(port, load, {"lora_name": "d", "lora_path": "shared.gguf"})
    check(code == 200, (code, r))
    print("ok: a file one node lacks, or one name over different files, is refused with the reason, "
          "and the nodes that had loaded it drop it again")

    # A node that restarts comes back with its --lora only: the head loads
    # what was loaded through it since (c, then d), then takes it back.
    second = restart(port, second)
    for line in ("LoRA adapter c #3 loaded by a head", "LoRA adapter d #6 loaded by a head"):
        check(logged(second, line), (line, second.lines[-8:]))
    check(listed(port)[1:] == ["a", "b", "c", "d"], f"after a node came back: {listed(port)}")
    print("ok: a node that restarts gets the adapters loaded through the head since, and joins again")

    # In use: refused; once the request ends, unloaded, and no request names it.
    result = {}
    body = {"prompt": "Tell me a long story.", "max_tokens": 400, "temperature": 0, "model": "c", "ignore_eos": True}
    running = threading.Thread(target=lambda: result.update(answer=post(port, "/v1/completions", body)))
    running.start()
    time.sleep(1.0)
    code, r = post(port, "/v1/unload_lora_adapter", {"lora_name": "c"})
    check(running.is_alive(), "the request ended before the unload: the check proves nothing")
    check(code == 409 and "in use" in json.dumps(r), (code, r))
    running.join()
    check(result["answer"][0] == 200, result)
    for name in ("c", "d"):
        code, r = post(port, "/v1/unload_lora_adapter", {"lora_name": name})
        check(code == 200, (name, code, r))
    check(listed(port)[1:] == ["a", "b"], f"after the unloads: {listed(port)}")
    code, r = post(port, "/v1/completions", {"prompt": "Hi", "max_tokens": 4, "model": "c"})
    check(code == 404, ("an unloaded adapter", code, r))
    for n in (first, second):
        wait_for(f"{n.address} to drop c", lambda n=n: logged(n, "LoRA adapter c #3 dropped by a head"), 10)
    print("ok: an adapter in use is not unloaded through the head (409); unloaded, it is gone from both nodes")

    # An adapter of the nodes' own --lora dropped through the head: a node
    # that restarts still loads it at start, and the head drops it there (and
    # loads e, loaded while that node was down) before taking it back.
    code, r = post(port, "/v1/unload_lora_adapter", {"lora_name": "b"})
    check(code == 200, ("unload b", code, r))
    def load_e():
        code, r = post(port, load, {"lora_name": "e", "lora_path": "shared.gguf"})
        check(code == 200, ("load e with one node down", code, r))

    second = restart(port, second, load_e)
    check(logged(second, "LoRA adapter b #2 dropped by a head"), second.lines[-8:])
    check(any(re.search(r"LoRA adapter e #\d+ loaded by a head", x) for x in second.lines), second.lines[-8:])
    check(listed(port)[1:] == ["a", "e"], f"after a node came back: {listed(port)}")
    # b back under its name (the same file as at start, in each --lora-dir).
    code, r = post(port, load, {"lora_name": "b", "lora_path": "b_again.gguf"})
    check(code == 200, ("load b again", code, r))
    check(listed(port)[1:] == ["a", "e", "b"], f"after b came back: {listed(port)}")
    print("ok: a node that restarts with an adapter dropped through the head since has it dropped, "
          "and gets what was loaded meanwhile, before it joins")
    return second


def check_two_heads(port, first, second, reference):
    """A second head over the same two nodes follows the changes made through the first, and the
    first those made through the second."""
    load = "/v1/load_lora_adapter"
    with head([first, second]) as other:
        wait_for("the second head to join both nodes", lambda: all(n["alive"] for n in nodes(other.port).values()), 60)
        check(listed(other.port) == listed(port), (listed(other.port), listed(port)))
        code, r = post(port, load, {"lora_name": "g", "lora_path": "shared.gguf"})
        check(code == 200, ("load g through the first head", code, r))
        wait_for("the second head to serve g", lambda: "g" in listed(other.port), 10)
        code, r = post(other.port, load, {"lora_name": "k", "lora_path": "b_again.gguf"})
        check(code == 200, ("load k through the second head", code, r))
        wait_for("the first head to serve k", lambda: "k" in listed(port), 10)
        for p in PROMPTS:
            for at, model, ref in ((other.port, "g", "a"), (port, "k", "b")):
                code, r = post(at, "/v1/completions", {"prompt": p, "max_tokens": 16, "temperature": 0, "model": model})
                check(code == 200 and r["choices"][0]["text"] == reference[(ref, p)], (model, p, code, r))
        ids = {}
        for n in (first, second):
            for name in ("g", "k"):
                found = [re.search(rf"LoRA adapter {name} #(\d+) loaded by a head", x) for x in n.lines]
                ids.setdefault(name, set()).update(m.group(1) for m in found if m)
        check(len(ids["g"]) == 1 and len(ids["k"]) == 1 and ids["g"] != ids["k"], f"ids on the nodes: {ids}")
        print(f"ok: adapters loaded through either of two heads over the same nodes are served by both "
              f"(g #{min(ids['g'])} through the first, k #{min(ids['k'])} through the second), answering as their files")
        for at, gone, name in ((other.port, port, "g"), (port, other.port, "k")):
            code, r = post(at, "/v1/unload_lora_adapter", {"lora_name": name})
            check(code == 200, ("unload", name, code, r))
            wait_for(f"{name} gone from the other head", lambda: name not in listed(gone), 10)
            code, r = post(gone, "/v1/completions", {"prompt": "Hi", "max_tokens": 4, "model": name})
            check(code == 404, ("an adapter unloaded through the other head", name, code, r))
        check(listed(other.port) == listed(port), (listed(other.port), listed(port)))
        print("ok: one unloaded through either head is gone from the other (404)")


def main():
    with ServerProcess(BIN, LORA, threads=1) as one:
        reference = answers(one.port)
    check(reference[("a", PROMPTS[0])] != reference[(None, PROMPTS[0])], "the adapter changes nothing: a useless check")

    # Each node's own --lora-dir: the same file under one name in both, a
    # file only the first has, and one name over different files.
    dirs = [tempfile.mkdtemp(prefix="actorlm-lora-dir-") for _ in range(2)]
    for d in dirs:
        shutil.copy(A, os.path.join(d, "shared.gguf"))
        shutil.copy(B, os.path.join(d, "b_again.gguf"))
    shutil.copy(B, os.path.join(dirs[0], "only_first.gguf"))
    shutil.copy(A, os.path.join(dirs[0], "x.gguf"))
    shutil.copy(B, os.path.join(dirs[1], "x.gguf"))
    first = NodeProcess(["--secret-file", SECRET, *LORA, "--lora-dir", dirs[0]]).start()
    second = NodeProcess(["--secret-file", SECRET, *LORA, "--lora-dir", dirs[1]]).start()
    # Started once the head serves the other two (the first node to join
    # sets the adapters the others must have): the same names over each
    # other's files.
    other = NodeProcess(["--secret-file", SECRET, "--lora", f"a={B}", "--lora", f"b={A}"], port=free_port())
    other.port = int(other.args[other.args.index("--port") + 1])
    try:
        with head([first, second, other], ["--connect-timeout", "3"]) as h:
            ids = listed(h.port)
            check(ids[1:] == ["a", "b"], f"/v1/models through the head: {ids}")
            other.start()
            wait_for("the node with other adapters refused",
                     lambda: "LoRA adapters" in str(nodes(h.port)[other.address].get("error", "")), 60)
            got = answers(h.port)
            check(got == reference, f"through a head over two nodes: {got} != {reference}")
            print("ok: two engine nodes with --lora serve the adapters by name through a head "
                  f"({', '.join(ids[1:])}), every answer equal to one process's; a node whose adapters "
                  f"differ is refused: {nodes(h.port)[other.address]['error'][:90]}...")
            second = check_loads_through_head(h.port, first, second, reference)
            check_two_heads(h.port, first, second, reference)
            # The node that has served adapter a's prompt goes; the other answers the same.
            served = {a: n["routed"] for a, n in nodes(h.port).items()}
            busiest = first if served[first.address] >= served[second.address] else second
            busiest.kill()
            wait_for("the head to notice", lambda: not nodes(h.port)[busiest.address]["alive"], 30)
            again = answers(h.port)
            check(again == reference, f"after a node was lost: {again} != {reference}")
            print("ok: with one node killed the other gives every adapter's answer unchanged")
    finally:
        for n in (first, second, other):
            if getattr(n, "proc", None):
                n.stop()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)

    prefill = NodeProcess(["--secret-file", SECRET, "--disaggregation-mode", "prefill", *LORA]).start()
    decode = NodeProcess(["--secret-file", SECRET, "--disaggregation-mode", "decode"]).start()
    try:
        with head([prefill, decode]) as h:
            wait_for("both nodes joined", lambda: all(n["alive"] for n in nodes(h.port).values()), 60)
            got = answers(h.port)
            check(got == reference, f"through a prefill/decode pair: {got} != {reference}")
            sent = [x for x in prefill.lines if "kv sender: sent" in x]
            check(0 < len(sent) <= len(PROMPTS), f"only the base model's prompts may move their KV: {sent}")
            print("ok: with disaggregation, adapters' requests run whole on the prefill node and the "
                  "base model's move to a decode node without adapters; every answer as one process's")
    finally:
        prefill.stop()
        decode.stop()

    worker = NodeProcess(["--secret-file", SECRET, "--role", "worker", *LORA]).start()
    try:
        with ServerProcess(BIN, ["--remote-worker", worker.address, "--secret-file", SECRET]) as h:
            check(listed(h.port)[1:] == ["a", "b"], f"/v1/models through a remote-worker head: {listed(h.port)}")
            got = answers(h.port)
            check(got == reference, f"through a head driving a worker node: {got} != {reference}")
            for path, body in (("/v1/load_lora_adapter", {"lora_name": "c", "lora_path": "shared.gguf"}),
                               ("/v1/unload_lora_adapter", {"lora_name": "a"})):
                code, r = post(h.port, path, body)
                check(code == 400 and "--lora on the node" in json.dumps(r), (path, code, r))
            print("ok: a head driving a worker node that loaded the adapters serves them, every answer as one "
                  "process's; unloading through it is refused")
    finally:
        worker.stop()
    print("cluster lora: all checks passed")


if __name__ == "__main__":
    main()
