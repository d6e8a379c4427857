#!/usr/bin/env python3
"""OpenAI conformance of `actorlm serve`, field by field: every request field
is honoured as OpenAI documents it or refused with a 400 naming it. Each
check is one defect a client hits (the list in issue 17), through the
official `openai` client where it exposes the field and raw HTTP where it
hides it (content types, malformed bodies).

Usage: python3 tests/server/openai_conformance_test.py path/to/actorlm
"""
import json
import math
import socket
import sys
import time
import urllib.error
import urllib.request

import openai

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402

BIN = sys.argv[1]
KEY = "conformance-key"
failures = []


def case(fn):
    """Runs one check, records its failure and goes on with the others."""
    try:
        fn()
        print(f"{fn.__name__}: ok")
    except Exception as e:  # noqa: BLE001 - every failure is reported, then the run fails
        failures.append(fn.__name__)
        print(f"{fn.__name__}: FAILED: {e}")
    return fn


def post(port, path, body, content_type="application/json", raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST",
                                 headers={"Content-Type": content_type, "Authorization": f"Bearer {KEY}"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def refused(port, path, body, field, content_type="application/json", raw=None):
    status, text = post(port, path, body, content_type, raw)
    check(status == 400, f"{field}: status {status}, {text[:200]}")
    err = json.loads(text)["error"]
    check(field in err["message"] or err.get("param") == field, f"{field} not named: {err}")
    return err


def main():
    with ServerProcess(BIN, ["--api-key", KEY, "--kv-tokens", "8192", "--context-length", "512"]) as server:
        port = server.port
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        chat = [{"role": "user", "content": "Name a color."}]

        @case
        def logit_bias_is_honoured():
            # " Paris" and friends pushed to -100, one arbitrary token to +100:
            # greedy decoding must then emit that token every step.
            forced = 1000
            r = client.completions.create(model="default", prompt="The capital of France is", max_tokens=4,
                                          temperature=0, logit_bias={str(forced): 100}, logprobs=0)
            check(r.choices[0].logprobs.tokens is not None, "no logprobs")
            pieces = r.choices[0].logprobs.tokens
            check(len(pieces) == 4 and len(set(pieces)) == 1, f"biased token not forced: {pieces}")

        @case
        def logit_bias_out_of_range_is_refused():
            refused(port, "/v1/completions", {"prompt": "hi", "logit_bias": {"1": 101}}, "logit_bias")
            refused(port, "/v1/completions", {"prompt": "hi", "logit_bias": {"99999999": 1}}, "logit_bias")
            refused(port, "/v1/completions", {"prompt": "hi", "logit_bias": {"x": 1}}, "logit_bias")
            refused(port, "/v1/chat/completions", {"messages": chat, "logit_bias": [1]}, "logit_bias")

        @case
        def echo_prepends_the_prompt():
            r = client.completions.create(model="default", prompt="Once upon a time", max_tokens=5, temperature=0,
                                          echo=True)
            check(r.choices[0].text.startswith("Once upon a time"), repr(r.choices[0].text))
            ids = client.completions.create(model="default", prompt=[19556, 905], max_tokens=2, temperature=0,
                                            echo=True)
            check(ids.choices[0].text.startswith("Hello world"), repr(ids.choices[0].text))
            stream = client.completions.create(model="default", prompt="Once upon a time", max_tokens=5,
                                               temperature=0, echo=True, stream=True)
            text = "".join(c.choices[0].text for c in stream if c.choices)
            check(text == r.choices[0].text, f"streamed echo {text!r} vs {r.choices[0].text!r}")

        @case
        def echo_with_logprobs_scores_the_prompt():
            prompt = "The capital of France is"
            status, body = post(port, "/tokenize", {"prompt": prompt})
            check(status == 200, body)
            ids = json.loads(body)["tokens"]
            r = client.completions.create(model="default", prompt=prompt, max_tokens=3, temperature=0, echo=True,
                                          logprobs=2)
            lp = r.choices[0].logprobs
            check(len(lp.tokens) == len(ids) + 3, f"{len(lp.tokens)} tokens for {len(ids)} + 3")
            check("".join(lp.tokens) == r.choices[0].text, f"{lp.tokens} vs {r.choices[0].text!r}")
            # Nothing predicts the first prompt token (OpenAI's null); every
            # other carries its logprob and alternatives.
            check(lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, f"{lp.token_logprobs[0]}")
            for j in range(1, len(lp.tokens)):
                check(lp.token_logprobs[j] is not None and lp.token_logprobs[j] <= 0, f"token {j}: {lp.token_logprobs[j]}")
                top = lp.top_logprobs[j]
                check(1 <= len(top) <= 3 and max(top.values()) >= lp.token_logprobs[j] - 1e-5, f"token {j}: {top}")
                # The token itself is always listed (OpenAI: up to logprobs + 1 entries).
                check(abs(top.get(lp.tokens[j], 1.0) - lp.token_logprobs[j]) < 1e-5, f"token {j} not in {top}")
            check(lp.text_offset == [sum(len(t) for t in lp.tokens[:j]) for j in range(len(lp.tokens))], lp.text_offset)
            # Each prompt position needs its logits: no cached prefix is used.
            again = client.completions.create(model="default", prompt=prompt, max_tokens=3, temperature=0, echo=True,
                                              logprobs=2)
            check(again.usage.prompt_tokens_details.cached_tokens == 0, again.usage)
            check(again.choices[0].logprobs.token_logprobs == lp.token_logprobs, "repeat differs")
            # A generated token's logprob is the one its position gets as
            # part of a longer prompt.
            plain = client.completions.create(model="default", prompt=prompt, max_tokens=1, temperature=0,
                                              logprobs=0)
            status, body = post(port, "/tokenize", {"prompt": r.choices[0].text})
            longer = client.completions.create(model="default", prompt=ids + json.loads(body)["tokens"][len(ids):len(ids) + 1],
                                               max_tokens=1, temperature=0, echo=True, logprobs=0)
            got, want = longer.choices[0].logprobs.token_logprobs[len(ids)], plain.choices[0].logprobs.token_logprobs[0]
            check(abs(got - want) < 1e-3, f"{got} as a prompt token vs {want} generated")
            # Streamed: the same tokens and figures, the prompt's in the first chunk.
            stream = client.completions.create(model="default", prompt=prompt, max_tokens=3, temperature=0, echo=True,
                                               logprobs=2, stream=True)
            toks, lps = [], []
            for c in stream:
                if c.choices and c.choices[0].logprobs:
                    toks += c.choices[0].logprobs.tokens
                    lps += c.choices[0].logprobs.token_logprobs
            check(toks == lp.tokens and lps == lp.token_logprobs, f"streamed {toks} {lps} vs {lp.tokens}")

        @case
        def prompt_list_is_a_batch():
            r = client.completions.create(model="default", prompt=["One, two,", "Red, green,"], max_tokens=3,
                                          temperature=0, n=2)
            check(len(r.choices) == 4, f"{len(r.choices)} choices")
            check(sorted(c.index for c in r.choices) == [0, 1, 2, 3], [c.index for c in r.choices])
            solo = client.completions.create(model="default", prompt="Red, green,", max_tokens=3, temperature=0)
            by_index = {c.index: c.text for c in r.choices}
            check(by_index[2] == solo.choices[0].text, f"{by_index} vs {solo.choices[0].text!r}")

        @case
        def zero_logprobs_give_the_sampled_tokens():
            r = client.completions.create(model="default", prompt="Hi", max_tokens=3, temperature=0, logprobs=0)
            lp = r.choices[0].logprobs
            check(len(lp.token_logprobs) == 3 and all(x <= 0 for x in lp.token_logprobs), lp)
            # The sampled token alone, with its logprob (OpenAI's and vLLM's reading).
            check(all(top == {tok: x} for top, tok, x in zip(lp.top_logprobs, lp.tokens, lp.token_logprobs)),
                  lp.top_logprobs)
            # Echoed prompt tokens the same way; nothing predicts the first.
            e = client.completions.create(model="default", prompt="Hi there", max_tokens=1, temperature=0, echo=True,
                                          logprobs=0).choices[0].logprobs
            check(e.top_logprobs[0] is None and len(e.tokens) >= 3, e)
            check(all(top == {tok: x} for top, tok, x in zip(e.top_logprobs[1:], e.tokens[1:], e.token_logprobs[1:])),
                  e.top_logprobs)
            c = client.chat.completions.create(model="default", messages=chat, max_tokens=3, temperature=0,
                                               logprobs=True, top_logprobs=0)
            content = c.choices[0].logprobs.content
            check(len(content) >= 1 and all(t.top_logprobs == [] for t in content), content)
            refused(port, "/v1/completions", {"prompt": "hi", "logprobs": 6}, "logprobs")
            refused(port, "/v1/chat/completions", {"messages": chat, "logprobs": True, "top_logprobs": 21},
                    "top_logprobs")

        @case
        def min_tokens_holds_back_the_end():
            # Greedy, the short answer ends with its end token; min_tokens
            # takes that token away until there are that many, so the same
            # text goes on past it.
            short = client.chat.completions.create(model="default", messages=chat, max_tokens=64, temperature=0)
            k = short.usage.completion_tokens
            check(short.choices[0].finish_reason == "stop" and k < 40, f"not a short answer: {short}")
            longer = client.chat.completions.create(model="default", messages=chat, max_tokens=64, temperature=0,
                                                    extra_body={"min_tokens": k + 12})
            check(longer.usage.completion_tokens >= k + 12, longer.usage)
            check(longer.choices[0].message.content.startswith(short.choices[0].message.content),
                  f"{short.choices[0].message.content!r} vs {longer.choices[0].message.content!r}")
            # Streamed the same; and stop strings wait too: " " stops at the
            # first space, unless min_tokens says not yet.
            stream = client.chat.completions.create(model="default", messages=chat, max_tokens=64, temperature=0,
                                                    stream=True, extra_body={"min_tokens": k + 12},
                                                    stream_options={"include_usage": True})
            chunks = list(stream)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            check(text == longer.choices[0].message.content, f"{text!r} vs {longer.choices[0].message.content!r}")
            cut = client.completions.create(model="default", prompt="The sea is", max_tokens=24, temperature=0,
                                            stop=[" "])
            held = client.completions.create(model="default", prompt="The sea is", max_tokens=24, temperature=0,
                                             stop=[" "], extra_body={"min_tokens": 6})
            check(" " not in cut.choices[0].text and cut.usage.completion_tokens < 6, cut)
            check(held.usage.completion_tokens >= 6 and held.choices[0].text.count(" ") >= 2, held)
            check(held.choices[0].finish_reason == "stop", held)
            # SGLang's spelling on /generate.
            status, body = post(port, "/generate", {"text": "Hi", "sampling_params": {
                "max_new_tokens": 40, "min_new_tokens": 30, "temperature": 0}})
            check(status == 200 and json.loads(body)["meta_info"]["completion_tokens"] >= 30, body)
            refused(port, "/v1/completions", {"prompt": "hi", "max_tokens": 4, "min_tokens": 5}, "min_tokens")
            refused(port, "/v1/completions", {"prompt": "hi", "min_tokens": -1}, "min_tokens")
            refused(port, "/generate", {"text": "hi", "sampling_params": {"min_new_tokens": 1.5}}, "min_new_tokens")

        @case
        def stream_options_without_stream_is_a_400():
            refused(port, "/v1/chat/completions",
                    {"messages": chat, "stream": False, "stream_options": {"include_usage": True}}, "stream_options")

        @case
        def n_choices_differ_at_the_default_temperature():
            r = client.chat.completions.create(model="default", messages=chat, max_tokens=12, n=4, seed=3)
            texts = [c.message.content for c in r.choices]
            check(len(set(texts)) > 1, f"all {len(texts)} choices identical: {texts[0]!r}")

        @case
        def without_a_seed_each_choice_and_each_request_is_its_own_sample():
            # The engine picks a seed per request: n choices differ, and so do
            # two identical requests. (At temperature 1, 32 such samples of 16
            # tokens were 32 different texts: a repeat by chance is rare.)
            story = [{"role": "user", "content": "Tell me a one-line story."}]
            r = client.chat.completions.create(model="default", messages=story, max_tokens=16, n=3, temperature=1.0)
            texts = [c.message.content for c in r.choices]
            check(len(set(texts)) == 3, f"choices without a seed repeat: {texts}")
            again = [client.chat.completions.create(model="default", messages=story, max_tokens=16,
                                                    temperature=1.0).choices[0].message.content for _ in range(2)]
            check(again[0] != again[1], f"two requests without a seed gave the same sample: {again[0]!r}")

        @case
        def first_stream_chunk_is_the_role_and_usage_counts_cached_tokens():
            long = [{"role": "user", "content": "Tell me about the sea. " * 20}]
            client.chat.completions.create(model="default", messages=long, max_tokens=2, temperature=0)
            stream = client.chat.completions.create(model="default", messages=long, max_tokens=4, temperature=0,
                                                    stream=True, stream_options={"include_usage": True})
            chunks = list(stream)
            first = chunks[0].choices[0].delta
            check(first.role == "assistant" and not first.content, f"first delta {first}")
            usage = chunks[-1].usage
            check(usage is not None and usage.prompt_tokens_details is not None, f"usage {usage}")
            check(usage.prompt_tokens_details.cached_tokens >= 100, f"cached {usage.prompt_tokens_details}")
            r = client.chat.completions.create(model="default", messages=long, max_tokens=2, temperature=0)
            check(r.usage.prompt_tokens_details.cached_tokens >= 100, f"cached {r.usage}")

        @case
        def too_long_prompts_and_max_tokens_are_400s():
            huge = "word " * 2000  # far past --context 512
            refused(port, "/v1/completions", {"prompt": huge, "max_tokens": 4}, "context")
            refused(port, "/v1/completions", {"prompt": huge, "max_tokens": 4, "stream": True}, "context")
            refused(port, "/v1/completions", {"prompt": "hi", "max_tokens": 600}, "max_tokens")
            refused(port, "/v1/chat/completions", {"messages": chat, "max_completion_tokens": 600},
                    "max_completion_tokens")

        @case
        def non_json_content_type_is_a_400():
            refused(port, "/v1/completions", None, "Content-Type", content_type="text/plain",
                    raw=b'{"prompt": "hi"}')

        @case
        def cancelled_requests_free_their_slots():
            body = json.dumps({"prompt": "Count: 1, 2, 3,", "max_tokens": 400, "temperature": 0,
                               "ignore_eos": True}).encode()
            for _ in range(10):
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " +
                          str(len(body)).encode() + b"\r\n\r\n" + body)
                time.sleep(0.05)
                s.close()
            time.sleep(1.0)
            t0 = time.monotonic()
            client.completions.create(model="default", prompt="Hi", max_tokens=2, temperature=0)
            took = time.monotonic() - t0
            m = server.metrics(KEY)
            check(m["actorlm_running_requests"] <= 1, f"{m['actorlm_running_requests']} still running")
            check(took < 5, f"the next request took {took:.1f} s")

        @case
        def odd_fields_and_values():
            refused(port, "/v1/completions", {"prompt": "hi", "seed": 2 ** 64}, "seed")
            refused(port, "/v1/completions", {"prompt": "hi", "seed": -2 ** 63 - 1}, "seed")
            # OpenAI's seed is an int64: negative seeds are seeds.
            a = client.completions.create(model="default", prompt="Hi", max_tokens=6, seed=-7)
            b = client.completions.create(model="default", prompt="Hi", max_tokens=6, seed=-7)
            check(a.choices[0].text == b.choices[0].text, f"seed -7 not reproducible: {a.choices[0].text!r}")
            refused(port, "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, "role")
            refused(port, "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "text")
            # Consecutive assistant turns are accepted, as OpenAI accepts them.
            r = client.chat.completions.create(model="default", max_tokens=2, temperature=0, messages=[
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"},
                {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])
            check(r.choices[0].finish_reason in ("stop", "length"), r)
            r = client.chat.completions.create(model="default", messages=chat, max_completion_tokens=3,
                                               temperature=0, stop=["zzz", "qqq"], user="u-1",
                                               metadata={"k": "v"}, store=False)
            check(r.usage.completion_tokens <= 3, r.usage)
            refused(port, "/v1/chat/completions", {"messages": chat, "stop": ["a", "b", "c", "d", "e"]}, "stop")

        @case
        def unsupported_fields_are_refused_by_name():
            # Never answered as if the field were not there.
            refused(port, "/v1/completions", {"prompt": "hi", "suffix": "end"}, "suffix")
            refused(port, "/v1/completions", {"prompt": "hi", "best_of": 2}, "best_of")
            refused(port, "/v1/chat/completions", {"messages": chat, "frobnicate": 1}, "frobnicate")
            refused(port, "/v1/completions", {"prompt": "hi", "messages": chat}, "messages")
            # null is absent, as for every optional field.
            r = client.chat.completions.create(model="default", messages=chat, max_tokens=2,
                                               extra_body={"frobnicate": None})
            check(r.choices[0].finish_reason in ("stop", "length"), r)

        @case
        def models_report_the_context_length():
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models",
                                         headers={"Authorization": f"Bearer {KEY}"})
            models = json.loads(urllib.request.urlopen(req, timeout=10).read())
            check(models["data"][0].get("context_length") == 512, models)

        @case
        def tokenize_and_detokenize():
            status, text = post(port, "/tokenize", {"text": "Hello world"})
            check(status == 200, f"{status} {text}")
            ids = json.loads(text)["tokens"]
            check(ids == [19556, 905], ids)
            status, text = post(port, "/detokenize", {"tokens": ids})
            check(status == 200 and json.loads(text)["text"] == "Hello world", text)
            refused(port, "/detokenize", {"tokens": [10 ** 9]}, "tokens")

        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10)
        check(health.status == 200, "server unhealthy after the run")
    if failures:
        raise SystemExit(f"{len(failures)} conformance checks failed: {', '.join(failures)}")
    print("openai conformance: ok")


if __name__ == "__main__":
    main()
