#!/usr/bin/env python3
"""LoRA adapters through `actorlm serve` (tests/fixtures/lora: two adapters of
the default model, scripts/reference/lora_fixture.py):
- --lora at start: /v1/models lists each adapter with the base model as its
  parent; "model": NAME, "model": "<id>:NAME", "lora": NAME and llama-server's
  list pick it; an adapter's greedy answer differs from the base model's and
  is the same each way it is named; unknown names are 404s, a "lora" that
  disagrees with "model" a 400; a request's own scale (llama-server's list)
  gives another answer, computed whole each time, as do several adapters
  listed at once; scales out of range, an adapter listed twice and more
  than 8 adapters are 400s;
- no prefix is shared across adapters: the base model's cached prompt is not
  an adapter's (cached_tokens 0), the adapter's own second request hits;
- 16 concurrent requests mixing both adapters (one also at half its scale)
  and the base model each get the answer they get alone;
- at run time, with --lora-dir: an adapter loaded by name from the folder
  serves at once; a path leading out of the folder, a second adapter of the
  same name, a file that is not an adapter of this model are refused and
  load nothing; unloading an adapter a request still uses is a 409, and
  after its request it unloads and its name is a 404; without --lora-dir
  loading is a 403;
- the disk tier (--hicache-storage-dir) keeps an adapter's prompt under
  its file, not its id: after a restart the adapter loaded again (at run
  time under another id, or at start) finds it there and answers the same,
  while the base model, and another adapter under the id it had, find
  nothing of it;
- a bad --lora at start (a model file, a missing file, a bad name) exits 2
  with the reason; the server stays healthy and leaks no KV row throughout.

Usage: python3 tests/server/lora_test.py path/to/actorlm
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check, healthy, post_json  # noqa: E402
from server_process import ServerProcess, default_model  # noqa: E402

BIN = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "lora")
A = os.path.join(FIXTURES, "smollm2_a.gguf")
B = os.path.join(FIXTURES, "smollm2_b.gguf")
PROMPT = "The capital of France is"


def call(port, path, body):
    """(status, parsed body)"""
    return post_json(port, path, body)[:2]


def complete(port, model=None, lora=None, prompt=PROMPT, max_tokens=16):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if model is not None:
        body["model"] = model
    if lora is not None:
        body["lora"] = lora
    return call(port, "/v1/completions", body)


def text_of(port, **kw):
    status, r = complete(port, **kw)
    check(status == 200, f"{kw}: {status} {r}")
    return r["choices"][0]["text"], r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0), r["model"]


def models(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as r:
        return json.loads(r.read())["data"]


def start_time_adapters():
    with ServerProcess(BIN, ["--kv-tokens", "4096", "--lora", f"a={A}", "--lora", f"b={B}"]) as server:
        port = server.port
        listed = models(port)
        base_id = listed[0]["id"]
        names = {m["id"]: m for m in listed[1:]}
        check(set(names) == {"a", "b"}, f"/v1/models lists {list(names)}")
        check(all(m.get("parent") == base_id for m in names.values()), f"adapters' parent: {listed}")

        base, base_cached, base_model = text_of(port)
        check(base_model == base_id, f"a base answer names {base_model}")
        a1, a1_cached, a_model = text_of(port, model="a")
        check(a_model == "a", f"an adapter's answer names {a_model}")
        check(a1 != base, f"adapter a changed nothing: {a1!r}")
        # The base model's rows of this prompt are cached now, but not for a.
        check(a1_cached == 0, f"adapter a found {a1_cached} cached tokens of the base model's")
        a2, a2_cached, _ = text_of(port, model=f"{base_id}:a")
        check(a2 == a1, f"'{base_id}:a' answered {a2!r}, 'a' {a1!r}")
        check(a2_cached > 0, "adapter a's own prefix was not reused")
        a3, _, _ = text_of(port, lora="a")
        check(a3 == a1, f"lora 'a' answered {a3!r}")
        # llama-server's form: ids in /v1/models' order, scale 0 is off.
        a4, _, _ = text_of(port, lora=[{"id": 0, "scale": 1}, {"id": 1, "scale": 0}])
        check(a4 == a1, f"lora [{{id 0}}] answered {a4!r}")
        check(text_of(port, lora=[{"id": 1, "scale": 0.0}])[0] == base, "lora with every scale 0 is the base model")
        # A request's own scale: another answer, computed whole each time
        # (its KV is its own, not a's at scale 1 nor cached for the next).
        neg, neg_cached, neg_model = text_of(port, lora=[{"id": 0, "scale": -2}])
        check(neg != a1 and neg_cached == 0 and neg_model == "a", f"a at scale -2: {neg!r}, cached {neg_cached}")
        neg2, neg2_cached, _ = text_of(port, lora=[{"id": 0, "scale": -2.0}, {"id": 1, "scale": 0}])
        check(neg2 == neg and neg2_cached == 0, f"a at scale -2 again: {neg2!r}, cached {neg2_cached}")
        # Several adapters at once (llama-server applies every one listed):
        # b stacked on a, its own KV as well.
        ab, ab_cached, ab_model = text_of(port, lora=[{"id": 0, "scale": 1}, {"id": 1, "scale": 2}])
        ab2, ab2_cached, _ = text_of(port, lora=[{"id": 0}, {"id": 1, "scale": 2.0}])
        check(ab_model == "a" and ab == ab2 and ab_cached == ab2_cached == 0, f"a with b stacked: {ab!r} / {ab2!r}")
        b1, b1_cached, _ = text_of(port, model="b")
        check(b1 not in (base, a1) and b1_cached == 0, f"adapter b: {b1!r}, cached {b1_cached}")
        again, again_cached, _ = text_of(port)
        check(again == base and again_cached > 0, "the base model's answer or cache changed")

        for body, want in (({"model": "c"}, 404), ({"model": f"{base_id}:c"}, 404), ({"lora": "c"}, 404),
                           ({"model": "a", "lora": "b"}, 400), ({"lora": 3}, 400),
                           ({"lora": [{"id": 0, "scale": 16.5}]}, 400), ({"lora": [{"id": 0, "scale": -1e300}]}, 400),
                           ({"lora": [{"id": 0, "scale": 1e-60}]}, 400),
                           ({"lora": [{"id": 0, "scale": "1"}]}, 400), ({"lora": [{"id": 0}, {"id": 0, "scale": 2}]}, 400),
                           ({"lora": [{"id": 0}] * 9}, 400), ({"model": "b", "lora": [{"id": 0}, {"id": 1}]}, 400),
                           ({"lora": [{"id": 7}]}, 404), ({"lora": [{"id": -1}]}, 400), ({"lora": [{"x": 1}]}, 400)):
            status, r = call(port, "/v1/completions", {"prompt": "Hi", "max_tokens": 2, **body})
            check(status == want, f"{body}: {status} {r}")
        status, r = call(port, "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "model": "b"})
        check(status == 200 and r["model"] == "b", f"chat with adapter b: {status} {r}")

        # Sixteen at once, both adapters (a also at half its scale) and the
        # base model interleaved.
        prompts = [PROMPT, "Name three rivers of Europe.", "Write one line about the sea.", "What is 7 times 8?"]
        kinds = {None: {}, "a": {"model": "a"}, "a/2": {"lora": [{"id": 0, "scale": 0.5}]}, "b": {"model": "b"}}
        alone = {}
        for p in prompts:
            for m, kw in kinds.items():
                alone[(p, m)] = text_of(port, prompt=p, **kw)[0]
        got, threads = {}, []
        for p in prompts:
            for m in ("a", None, "a/2", "b"):
                t = threading.Thread(target=lambda p=p, m=m: got.__setitem__((p, m), text_of(port, prompt=p, **kinds[m])[0]))
                threads.append(t)
                t.start()
        for t in threads:
            t.join()
        for k, v in alone.items():
            check(got[k] == v, f"{k}: batched {got[k]!r}, alone {v!r}")
        m = server.metrics()
        check(m["actorlm_lora_adapters"] == 2 and m["actorlm_lora_bytes"] == 2 * 230_400,
              f"adapter metrics: {m['actorlm_lora_adapters']}, {m['actorlm_lora_bytes']}")
        healthy(server)
        print(f"start-time adapters: base {base!r}, a {a1!r}, a at -2 {neg!r}, b {b1!r}; 16 concurrent as alone")


def run_time_adapters(folder):
    shutil.copy(A, os.path.join(folder, "a.gguf"))
    shutil.copy(B, os.path.join(folder, "b.gguf"))
    with ServerProcess(BIN, ["--kv-tokens", "4096", "--lora-dir", folder]) as server:
        port = server.port
        check(len(models(port)) == 1, "adapters listed before any was loaded")
        check(complete(port, model="a")[0] == 404, "an adapter not loaded yet was served")
        status, r = call(port, "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "a.gguf"})
        check(status == 200, f"load a: {status} {r}")
        check([m["id"] for m in models(port)][1:] == ["a"], f"/v1/models after loading a: {models(port)}")
        a1, _, _ = text_of(port, model="a")
        base, _, _ = text_of(port)
        check(a1 != base, "the adapter loaded at run time changed nothing")

        refusals = [
            ({"lora_name": "a", "lora_path": "b.gguf"}, 409),               # the name is taken
            ({"lora_name": "x", "lora_path": "../" + os.path.basename(folder) + "/../etc/passwd"}, 404),
            ({"lora_name": "x", "lora_path": "/etc/passwd"}, 404),          # outside the folder
            ({"lora_name": "x", "lora_path": "missing.gguf"}, 404),
            ({"lora_name": "x", "lora_path": "link.gguf"}, 404),            # a link leading out
            ({"lora_name": "x", "lora_path": "model.gguf"}, 400),           # a model, not an adapter
            ({"lora_name": "x", "lora_path": "garbage.gguf"}, 400),
            ({"lora_name": "bad name", "lora_path": "b.gguf"}, 400),
            ({"lora_name": "default", "lora_path": "b.gguf"}, 400),
            ({"lora_name": "x"}, 400),
            ({"lora_name": "x", "lora_path": "b.gguf", "extra": 1}, 400),
        ]
        os.symlink(default_model(), os.path.join(folder, "link.gguf"))
        shutil.copy(default_model(), os.path.join(folder, "model.gguf"))
        with open(os.path.join(folder, "garbage.gguf"), "wb") as f:
            f.write(b"GGUF\x03\x00\x00\x00" + os.urandom(64))
        for body, want in refusals:
            status, r = call(port, "/v1/load_lora_adapter", body)
            check(status == want, f"load {body}: {status} {r}, wanted {want}")
            check("error" in r, f"load {body}: no error body: {r}")
        check([m["id"] for m in models(port)][1:] == ["a"], f"a refused load left something: {models(port)}")

        # An adapter in use stays: a long request holds it.
        result = {}
        long = threading.Thread(target=lambda: result.setdefault(
            "r", complete(port, model="a", prompt="Count from one to one hundred in words:", max_tokens=200)))
        long.start()
        import time
        deadline = time.monotonic() + 60
        while server.metrics()["actorlm_running_requests"] < 1:
            check(time.monotonic() < deadline, "the long request never ran")
            time.sleep(0.02)
        status, r = call(port, "/v1/unload_lora_adapter", {"lora_name": "a"})
        check(status == 409, f"unloading an adapter in use: {status} {r}")
        long.join()
        check(result["r"][0] == 200, f"the long request: {result['r']}")
        status, r = call(port, "/v1/unload_lora_adapter", {"lora_name": "a"})
        check(status == 200, f"unload a: {status} {r}")
        check(complete(port, model="a")[0] == 404, "an unloaded adapter was served")
        check(server.metrics()["actorlm_lora_bytes"] == 0, "an unloaded adapter's bytes are still counted")
        check(call(port, "/v1/unload_lora_adapter", {"lora_name": "a"})[0] == 404, "unloading twice")
        # Loaded again under the same name: a new id, the same answers.
        check(call(port, "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": "a.gguf"})[0] == 200, "reload a")
        check(text_of(port, model="a")[0] == a1, "a reloaded adapter answered differently")

        # Loads and unloads under load: 12 requests over a and the base model
        # run while adapter b comes and goes five times; every request is
        # answered as alone, nothing stays locked.
        got, threads = {}, []
        for i in range(12):
            m = "a" if i % 2 else None
            t = threading.Thread(target=lambda i=i, m=m: got.__setitem__(i, text_of(port, model=m, max_tokens=24)[0]))
            threads.append(t)
            t.start()
        for _ in range(5):
            check(call(port, "/v1/load_lora_adapter", {"lora_name": "b", "lora_path": "b.gguf"})[0] == 200, "load b")
            status, r = complete(port, model="b", max_tokens=4)
            check(status == 200, f"b under load: {status} {r}")
            check(call(port, "/v1/unload_lora_adapter", {"lora_name": "b"})[0] == 200, "unload b")
        for t in threads:
            t.join()
        want_a, want_base = text_of(port, model="a", max_tokens=24)[0], text_of(port, max_tokens=24)[0]
        for i, text in got.items():
            check(text == (want_a if i % 2 else want_base), f"request {i} under loads and unloads: {text!r}")
        check(server.metrics()["actorlm_lora_adapters"] == 1, "adapters left after the loads and unloads")
        healthy(server)
    with ServerProcess(BIN, ["--kv-tokens", "4096"]) as server:
        status, r = call(server.port, "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": A})
        check(status == 403, f"loading without --lora-dir: {status} {r}")
    print("run-time adapters: load, refusals, unload refused in use then done, reload")


def bad_start(folder):
    for flags, reason in ((["--lora", f"m={default_model()}"], "not 'adapter'"),
                          (["--lora", f"m={folder}/none.gguf"], "none.gguf"),
                          (["--lora", f"bad name={A}"], "NAME=PATH"),
                          (["--lora", f"a={A}", "--lora", f"a={B}"], "given twice"),
                          (["--lora", f"a={A}", "--max-lora-memory-mb", "0"], "max-lora-memory-mb")):
        p = subprocess.run([BIN, "serve", "--port", "0", "--kv-tokens", "1024", *flags], capture_output=True,
                           text=True, timeout=120)
        check(p.returncode != 0 and reason in p.stderr, f"{flags}: exit {p.returncode}, stderr {p.stderr[-400:]!r}")
    print("bad --lora flags refused at start")


def adapters_in_the_disk_tier(folder):
    # Under their own names: a file's fingerprint includes its name.
    for f in (A, B):
        shutil.copy(f, folder)
    disk = os.path.join(folder, "kv")
    flags = ["--kv-tokens", "4096", "--lora-dir", folder, "--hicache-storage-dir", disk]
    long_prompt = " ".join(f"Harbour log entry {i}: the tide turned at {i % 12} and the boats came home." for i in range(30))

    def load(port, name, path):
        status, r = call(port, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
        check(status == 200, f"load {name}: {status} {r}")

    with ServerProcess(BIN, flags) as server:
        load(server.port, "a", os.path.basename(A))  # id 1 here
        with_a, cached, _ = text_of(server.port, model="a", prompt=long_prompt, max_tokens=12)
        check(cached == 0, f"a fresh disk tier served {cached} tokens")
    with ServerProcess(BIN, flags) as server:
        load(server.port, "b", os.path.basename(B))  # id 1 now: a's old id
        load(server.port, "a", os.path.basename(A))  # id 2
        _, cached_b, _ = text_of(server.port, model="b", prompt=long_prompt, max_tokens=12)
        check(cached_b == 0, f"adapter b, under the id a had, was served {cached_b} of a's tokens")
        _, cached_base, _ = text_of(server.port, prompt=long_prompt, max_tokens=12)
        check(cached_base == 0, f"the base model was served {cached_base} of an adapter's tokens")
        again, cached_a, _ = text_of(server.port, model="a", prompt=long_prompt, max_tokens=12)
        check(cached_a >= 256, f"adapter a loaded again found {cached_a} of its tokens on disk")
        check(again == with_a, f"adapter a from the disk tier answered {again!r}, computed {with_a!r}")
    with ServerProcess(BIN, ["--kv-tokens", "4096", "--hicache-storage-dir", disk, "--lora", f"a={os.path.join(folder, os.path.basename(A))}"]) as server:
        at_start, cached_a, _ = text_of(server.port, model="a", prompt=long_prompt, max_tokens=12)
        check(cached_a >= 256 and at_start == with_a, f"a at start: {cached_a} cached, {at_start!r}")
    print(f"  disk tier: a's {cached_a} tokens found again after restarts (at run time under another id, and at "
          "start); none served to b under a's old id or to the base model")


def main():
    start_time_adapters()
    folder = tempfile.mkdtemp(prefix="actorlm_lora_")
    tiers = tempfile.mkdtemp(prefix="actorlm_lora_tiers_")
    try:
        run_time_adapters(folder)
        bad_start(folder)
        adapters_in_the_disk_tier(tiers)
    finally:
        shutil.rmtree(folder)
        shutil.rmtree(tiers)
    print("lora: all checks passed")


if __name__ == "__main__":
    main()
