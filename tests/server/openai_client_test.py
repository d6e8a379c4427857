#!/usr/bin/env python3
"""`actorlm serve` against the official `openai` Python client, on loopback.
Starts the server itself (port chosen by the OS), runs the checks, stops it.

Usage: python3 tests/server/openai_client_test.py path/to/actorlm
"""
import json
import re
import subprocess
import sys
import time
import urllib.request

import openai

BIN = sys.argv[1]
KEY = "test-key-123"


def start_server():
    proc = subprocess.Popen([BIN, "serve", "--port", "0", "--threads", "2", "--kv-tokens", "8192",
                             "--api-key", KEY], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    port = None
    while time.time() < deadline and port is None:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise SystemExit("server exited early")
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m and int(m.group(1)) > 0:
            port = int(m.group(1))
    assert port, "server did not announce its port"
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            break
        except Exception:
            time.sleep(0.1)
    return proc, port


def main():
    proc, port = start_server()
    base = f"http://127.0.0.1:{port}/v1"
    client = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=120)
    checks = 0
    try:
        models = client.models.list()
        model = models.data[0].id
        assert model.endswith(".gguf"), model
        checks += 1

        q = [{"role": "user", "content": "What is the capital of France?"}]
        r = client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24)
        text = r.choices[0].message.content
        assert "Paris" in text, text
        assert r.choices[0].finish_reason == "stop"
        assert r.usage.prompt_tokens > 10 and r.usage.completion_tokens > 0
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
        checks += 1

        # Streaming gives the same greedy text, then usage when asked, then ends.
        chunks = list(client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24,
                                                     stream=True, stream_options={"include_usage": True}))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == text, (streamed, text)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
        checks += 1

        # Completions, plain and streamed.
        c = client.completions.create(model=model, prompt="The capital of France is", temperature=0, max_tokens=4)
        assert c.choices[0].text.startswith(" Paris"), c.choices[0].text
        assert c.choices[0].finish_reason == "length"
        s = "".join(x.choices[0].text for x in client.completions.create(
            model=model, prompt="The capital of France is", temperature=0, max_tokens=4, stream=True) if x.choices)
        assert s == c.choices[0].text, (s, c.choices[0].text)
        checks += 1

        # Stop strings end the text before them.
        r2 = client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24, stop=["Paris"])
        assert "Paris" not in r2.choices[0].message.content and r2.choices[0].finish_reason == "stop"
        checks += 1

        # Same seed, same sample; the seed matters.
        def sample(seed):
            return client.completions.create(model=model, prompt="Once upon a time", temperature=1.0,
                                             max_tokens=16, seed=seed).choices[0].text
        a, b, other = sample(7), sample(7), sample(8)
        assert a == b, (a, b)
        assert a != other, (a, other)
        checks += 1

        # Errors arrive in OpenAI's format with the right status.
        def expect(exc, **kw):
            try:
                client.chat.completions.create(**kw)
            except exc as e:
                return e
            raise AssertionError(f"expected {exc.__name__} for {kw}")
        e = expect(openai.BadRequestError, model=model, messages=q, max_tokens=0)
        assert "max_tokens" in str(e)
        expect(openai.BadRequestError, model=model, messages=[])
        expect(openai.BadRequestError, model=model, messages=q, temperature=5)
        expect(openai.BadRequestError, model=model, messages=[{"role": "user", "content": "x " * 9000}])
        expect(openai.NotFoundError, model="no-such-model", messages=q)
        bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
        try:
            bad.models.list()
            raise AssertionError("wrong key accepted")
        except openai.AuthenticationError:
            pass
        req = urllib.request.Request(f"{base}/chat/completions", data=b"{not json", method="POST",
                                     headers={"Authorization": f"Bearer {KEY}"})
        try:
            urllib.request.urlopen(req)
            raise AssertionError("bad JSON accepted")
        except urllib.error.HTTPError as he:
            assert he.code == 400 and "error" in json.loads(he.read())
        checks += 1

        # A client that drops mid-stream does not hurt the server.
        stream = client.chat.completions.create(model=model, temperature=0, max_tokens=300, stream=True,
                                                messages=[{"role": "user", "content": "Write a long story."}])
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        r3 = client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24)
        assert r3.choices[0].message.content == text
        checks += 1

        # The native /generate API and Prometheus /metrics.
        auth = {"Authorization": f"Bearer {KEY}"}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", method="POST", headers=auth,
                                     data=json.dumps({"text": "The capital of France is",
                                                      "sampling_params": {"temperature": 0, "max_new_tokens": 4}}).encode())
        g = json.loads(urllib.request.urlopen(req).read())
        assert g["text"] == c.choices[0].text and g["meta_info"]["finish_reason"] == "length", g
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics")
            raise AssertionError("/metrics answered without the API key")
        except urllib.error.HTTPError as he:
            assert he.code == 401
        metrics = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                                                headers=auth)).read().decode()
        values = dict(line.split(" ", 1) for line in metrics.splitlines() if line and not line.startswith("#"))
        assert float(values["actorlm_requests_total"]) >= 10, metrics
        assert float(values["actorlm_requests_rejected_total"]) >= 4, metrics
        assert float(values["actorlm_generation_tokens_total"]) > 0
        assert float(values["actorlm_cached_prompt_tokens_total"]) > 0  # repeated questions hit the cache
        assert float(values["actorlm_running_requests"]) == 0
        assert float(values["actorlm_kv_pool_locked_tokens"]) == 0  # the dropped stream released its KV
        checks += 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"openai client: {checks} checks passed")


if __name__ == "__main__":
    main()
