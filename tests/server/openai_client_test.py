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

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import default_model  # noqa: E402

BIN = sys.argv[1]
KEY = "test-key-123"


def start_server(*extra):
    proc = subprocess.Popen([BIN, "serve", "--port", "0", "--threads", "2", "--kv-tokens", "8192",
                             "--api-key", KEY, *extra], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    port = None
    while time.monotonic() < deadline and port is None:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise SystemExit("server exited early")
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m and int(m.group(1)) > 0:
            port = int(m.group(1))
    check(port, "server did not announce its port")
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
        check(model.endswith(".gguf"), model)
        checks += 1

        q = [{"role": "user", "content": "Name the capital of France."}]
        r = client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24)
        text = r.choices[0].message.content
        check("Paris" in text, text)
        check(r.choices[0].finish_reason == "stop", 'r.choices[0].finish_reason == "stop"')
        check(r.usage.prompt_tokens > 10 and r.usage.completion_tokens > 0, 'r.usage.prompt_tokens > 10 and r.usage.completion_tokens > 0')
        check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, 'r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens')
        checks += 1

        # Streaming gives the same greedy text, then usage when asked, then ends.
        chunks = list(client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24,
                                                     stream=True, stream_options={"include_usage": True}))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        check(streamed == text, (streamed, text))
        check([c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop", '[c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"')
        check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens, 'chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens')
        checks += 1

        # Completions, plain and streamed.
        c = client.completions.create(model=model, prompt="The capital of France is", temperature=0, max_tokens=4)
        check(c.choices[0].text.startswith(" Paris"), c.choices[0].text)
        check(c.choices[0].finish_reason == "length", 'c.choices[0].finish_reason == "length"')
        s = "".join(x.choices[0].text for x in client.completions.create(
            model=model, prompt="The capital of France is", temperature=0, max_tokens=4, stream=True) if x.choices)
        check(s == c.choices[0].text, (s, c.choices[0].text))
        checks += 1

        # Stop strings end the text just before them: the greedy answer above,
        # cut there (an empty or shortened answer would also lack the word).
        r2 = client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24, stop=["Paris"])
        cut = text[:text.index("Paris")]
        check(r2.choices[0].message.content == cut, (r2.choices[0].message.content, cut))
        check(r2.choices[0].finish_reason == "stop", r2.choices[0].finish_reason)
        checks += 1

        # Same seed, same sample; the seed matters.
        def sample(seed):
            return client.completions.create(model=model, prompt="Once upon a time", temperature=1.0,
                                             max_tokens=16, seed=seed).choices[0].text
        a, b, other = sample(7), sample(7), sample(8)
        check(a == b, (a, b))
        check(a != other, (a, other))
        checks += 1

        # Errors arrive in OpenAI's format with the right status.
        def expect(exc, **kw):
            try:
                client.chat.completions.create(**kw)
            except exc as e:
                return e
            raise AssertionError(f"expected {exc.__name__} for {kw}")
        e = expect(openai.BadRequestError, model=model, messages=q, max_tokens=0)
        check("max_tokens" in str(e), '"max_tokens" in str(e)')
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
                                     headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req)
            raise AssertionError("bad JSON accepted")
        except urllib.error.HTTPError as he:
            check(he.code == 400 and "error" in json.loads(he.read()), 'he.code == 400 and "error" in json.loads(he.read())')
        checks += 1

        # A client that drops mid-stream does not hurt the server.
        stream = client.chat.completions.create(model=model, temperature=0, max_tokens=300, stream=True,
                                                messages=[{"role": "user", "content": "Write a long story."}])
        for i, _ in enumerate(stream):
            if i == 3:
                break
        stream.close()
        r3 = client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24)
        check(r3.choices[0].message.content == text, 'r3.choices[0].message.content == text')
        checks += 1

        # n > 1: independent choices, reproducible with a seed (choice i samples with seed + i).
        story = [{"role": "user", "content": "Tell me a one-line story."}]
        def choices(**kw):
            r = client.chat.completions.create(model=model, messages=story, max_tokens=16, **kw)
            return r, [ch.message.content for ch in sorted(r.choices, key=lambda ch: ch.index)]
        rn, three = choices(n=3, temperature=1.0, seed=5)
        check([ch.index for ch in rn.choices] == [0, 1, 2] and all(three), three)
        check(len(set(three)) >= 2, three)
        check(choices(n=3, temperature=1.0, seed=5)[1] == three, 'choices(n=3, temperature=1.0, seed=5)[1] == three')
        check(rn.usage.completion_tokens >= 3, 'rn.usage.completion_tokens >= 3')
        _, greedy2 = choices(n=2, temperature=0)
        check(greedy2[0] == greedy2[1], greedy2)
        by_index = {}
        for chunk in client.chat.completions.create(model=model, messages=story, max_tokens=16, n=2, temperature=0,
                                                    stream=True):
            for ch in chunk.choices:
                by_index[ch.index] = by_index.get(ch.index, "") + (ch.delta.content or "")
        check(by_index == {0: greedy2[0], 1: greedy2[1]}, by_index)
        expect(openai.BadRequestError, model=model, messages=q, n=0)
        expect(openai.BadRequestError, model=model, messages=q, n=17)
        checks += 1

        # logprobs: per token, with alternatives; greedy picks its own top alternative.
        r4 = client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24, logprobs=True,
                                            top_logprobs=3)
        content = r4.choices[0].logprobs.content
        # usage counts the end-of-turn token that stopped it; logprobs cover the text's tokens
        check(r4.choices[0].finish_reason == "stop", 'r4.choices[0].finish_reason == "stop"')
        check(len(content) == r4.usage.completion_tokens - 1, (len(content), r4.usage))
        check("".join(t.token for t in content) == r4.choices[0].message.content, '"".join(t.token for t in content) == r4.choices[0].message.content')
        for t in content:
            check(t.logprob <= 0 and len(t.top_logprobs) == 3, t)
            check(t.top_logprobs[0].token == t.token and abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, t)
            check(bytes(t.bytes).decode("utf-8", "replace") == t.token, 'bytes(t.bytes).decode("utf-8", "replace") == t.token')
        check(r.choices[0].logprobs is None, 'r.choices[0].logprobs is None')  # not asked for, not sent
        streamed_lp = []
        for ch in client.chat.completions.create(model=model, messages=q, temperature=0, max_tokens=24, logprobs=True,
                                                 stream=True):
            if ch.choices and ch.choices[0].logprobs:
                streamed_lp += [t.token for t in ch.choices[0].logprobs.content]
        check(streamed_lp == [t.token for t in content], (streamed_lp, content))
        c2 = client.completions.create(model=model, prompt="The capital of France is", temperature=0, max_tokens=4,
                                       logprobs=2)
        lp = c2.choices[0].logprobs
        check("".join(lp.tokens) == c2.choices[0].text and len(lp.token_logprobs) == 4, '"".join(lp.tokens) == c2.choices[0].text and len(lp.token_logprobs) == 4')
        check(all(1 <= len(alts) <= 3 and tok in alts for alts, tok in zip(lp.top_logprobs, lp.tokens)) and lp.text_offset[0] == 0,
              (lp.top_logprobs, lp.tokens, lp.text_offset))
        expect(openai.BadRequestError, model=model, messages=q, top_logprobs=3)  # without logprobs
        expect(openai.BadRequestError, model=model, messages=q, logprobs=True, top_logprobs=21)
        checks += 1

        # The native /generate API and Prometheus /metrics.
        auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", method="POST", headers=auth,
                                     data=json.dumps({"text": "The capital of France is",
                                                      "sampling_params": {"temperature": 0, "max_new_tokens": 4}}).encode())
        g = json.loads(urllib.request.urlopen(req).read())
        check(g["text"] == c.choices[0].text and g["meta_info"]["finish_reason"] == "length", g)
        # Token ids instead of text, natively and through /v1/completions.
        ids = [504, 3575, 282, 4649, 314]
        req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", method="POST", headers=auth,
                                     data=json.dumps({"input_ids": ids,
                                                      "sampling_params": {"temperature": 0, "max_new_tokens": 6}}).encode())
        g_ids = json.loads(urllib.request.urlopen(req).read())
        c_ids = client.completions.create(model=model, prompt=ids, temperature=0, max_tokens=6)
        check(g_ids["text"] == c_ids.choices[0].text and g_ids["meta_info"]["prompt_tokens"] == len(ids), (g_ids, c_ids))
        try:
            client.completions.create(model=model, prompt=[1, 2, 10**9], max_tokens=2)
            raise AssertionError("a token id outside the vocabulary was accepted")
        except openai.BadRequestError as e:
            check("vocabulary" in str(e), e)
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics")
            raise AssertionError("/metrics answered without the API key")
        except urllib.error.HTTPError as he:
            check(he.code == 401, 'he.code == 401')
        metrics = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                                                headers=auth)).read().decode()
        values = dict(line.split(" ", 1) for line in metrics.splitlines() if line and not line.startswith("#"))
        check(float(values["actorlm_requests_total"]) >= 10, metrics)
        check(float(values["actorlm_requests_rejected_total"]) >= 4, metrics)
        check(float(values["actorlm_generation_tokens_total"]) > 0, 'float(values["actorlm_generation_tokens_total"]) > 0')
        check(float(values["actorlm_cached_prompt_tokens_total"]) > 0, 'float(values["actorlm_cached_prompt_tokens_total"]) > 0')  # repeated questions hit the cache
        check(float(values["actorlm_running_requests"]) == 0, 'float(values["actorlm_running_requests"]) == 0')
        check(float(values["actorlm_kv_pool_locked_tokens"]) == 0, 'float(values["actorlm_kv_pool_locked_tokens"]) == 0')  # the dropped stream released its KV
        for h in ("actorlm_time_to_first_token_seconds", "actorlm_inter_token_latency_seconds"):
            check(f"# TYPE {h} histogram" in metrics, metrics)
            count = float(values[f"{h}_count"])
            check(count > 10 and float(values[f'{h}_bucket{{le="+Inf"}}']) == count, metrics)
            check(float(values[f"{h}_sum"]) > 0, 'float(values[f"{h}_sum"]) > 0')
        checks += 1
        copy = [{"role": "user", "content": "Repeat exactly: one two three four five six seven eight nine ten."}]
        plain = client.chat.completions.create(model=model, messages=copy, temperature=0, max_tokens=40)
        check(plain.usage.completion_tokens_details is None, str(plain.usage))  # nothing drafted
        checks += check_prediction(client, model, copy, plain)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    checks += check_speculative(plain)
    print(f"openai client: {checks} checks passed")


def check_prediction(client, model, copy, plain):
    """OpenAI's predicted outputs through its own client, on a server with
    speculation off: the same answer, drafted from the prediction and kept
    (usage); an edited prediction costs some drafts, not the answer;
    `speculative.n_max: 0` drafts nothing; a malformed prediction is a 400."""
    answer = plain.choices[0].message.content
    edited = answer.replace("five", "5", 1)
    # The answer is ~15 tokens, drafted 4 at a time (the default) from the
    # prediction's start. How many drafts a step carries follows measured
    # step times and the request's kept rate (DraftCost, DraftPace), so on a
    # loaded machine an answer may carry fewer or, after an early miss, none
    # (one CI run: 4 drafted, 0 kept): up to three tries for the counts;
    # every answer must be the plain one.
    for prediction, least in ((answer, 6), (edited, 2)):
        tries = []
        for _ in range(3):
            r = client.chat.completions.create(model=model, messages=copy, temperature=0, max_tokens=40,
                                               prediction={"type": "content", "content": prediction})
            check(r.choices[0].message.content == answer, f"{r.choices[0].message.content!r} != {answer!r}")
            check(r.usage.completion_tokens == plain.usage.completion_tokens, str(r.usage))
            d = r.usage.completion_tokens_details
            tries.append(str(r.usage))
            if d is not None and d.accepted_prediction_tokens >= least and \
                    (prediction != answer or d.rejected_prediction_tokens <= 1):
                break
        else:
            raise AssertionError(f"a prediction's drafts were not kept in three tries: {tries}")
    r = client.chat.completions.create(model=model, messages=copy, temperature=0, max_tokens=40,
                                       prediction={"type": "content", "content": [{"type": "text", "text": answer}]},
                                       extra_body={"speculative.n_max": 0})
    check(r.choices[0].message.content == answer and r.usage.completion_tokens_details is None, str(r.usage))
    try:
        client.chat.completions.create(model=model, messages=copy, max_tokens=4, prediction={"type": "text"})
        raise AssertionError("a malformed prediction was accepted")
    except openai.BadRequestError as e:
        check("prediction" in str(e), e)
    print(f"ok: a predicted output through the openai client: {d.accepted_prediction_tokens} drafted tokens kept")
    return 1


def check_speculative(plain):
    """Speculative decoding through the flags: the same answer, its drafts in
    usage (OpenAI's predicted-output fields) and /metrics; a bad count refused."""
    bad = subprocess.run([BIN, "serve", "--port", "0", "--speculative-num-draft-tokens", "0"],
                         capture_output=True, text=True, timeout=60)
    check(bad.returncode == 2 and "--speculative-num-draft-tokens" in bad.stderr, bad.stderr)
    bad = subprocess.run([BIN, "serve", "--port", "0", "--speculative-algorithm", "eagle"],
                         capture_output=True, text=True, timeout=60)
    check(bad.returncode == 2 and "none, ngram or draft" in bad.stderr, bad.stderr)
    bad = subprocess.run([BIN, "serve", "--port", "0", "--speculative-algorithm", "draft"],
                         capture_output=True, text=True, timeout=60)
    check(bad.returncode == 2 and "--speculative-draft-model-path" in bad.stderr, bad.stderr)
    # N-gram drafts, then the default model drafting for itself (the draft
    # model's mechanics through the flags; bench/ measures a smaller draft).
    for flags in (["--speculative-algorithm", "ngram", "--speculative-num-draft-tokens", "6"],
                  ["--speculative-algorithm", "draft", "--speculative-draft-model-path", default_model()]):
        check_speculative_server(plain, flags)
    return 1


def check_speculative_server(plain, flags):
    proc, port = start_server(*flags)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0, timeout=120)
        copy = [{"role": "user", "content": "Repeat exactly: one two three four five six seven eight nine ten."}]
        # What a step drafts depends on measured step times (DraftCost), so
        # on a loaded machine one answer may keep none: up to three tries,
        # every one the plain answer.
        kept = 0
        for _ in range(3):
            r = client.chat.completions.create(model=plain.model, messages=copy, temperature=0, max_tokens=40)
            check(r.choices[0].message.content == plain.choices[0].message.content,
                  f"{r.choices[0].message.content!r} != {plain.choices[0].message.content!r}")
            check(r.usage.completion_tokens == plain.usage.completion_tokens, str(r.usage))
            d = r.usage.completion_tokens_details
            if d is not None:
                check(d.accepted_prediction_tokens >= 0 and d.rejected_prediction_tokens >= 0, str(r.usage))
                kept += d.accepted_prediction_tokens
            if kept > 0:
                break
        check(kept > 0, "no drafted token kept in three answers")
        metrics = urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {KEY}"})).read().decode()
        values = dict(line.split(" ", 1) for line in metrics.splitlines() if line and not line.startswith("#"))
        check(float(values["actorlm_spec_accepted_tokens_total"]) == kept, metrics)
        check("# TYPE actorlm_spec_accept_length histogram" in metrics, metrics)
        print(f"ok: speculative decoding with {' '.join(flags[:2])}: {kept} drafted tokens kept")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
