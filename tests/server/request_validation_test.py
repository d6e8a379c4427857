#!/usr/bin/env python3
"""The request-parsing defects of issue 13 end to end, through a real
`actorlm serve` on loopback, once without and once with an API key: deeply
nested JSON in any field, client type errors, a NUL byte or trailing bytes
after the JSON, integers beyond their range, a huge echoed model name, and
stream_options without streaming. Each must get its 4xx with an OpenAI-format
error body (never a 500, never a crash), and the server must stay healthy
after: /health answers, a short chat completion works, nothing is left
running. Checks are explicit (they must survive python -O).

Usage: python3 tests/server/request_validation_test.py path/to/actorlm
"""
import json
import sys
import urllib.error
import urllib.request

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from server_process import ServerProcess  # noqa: E402

KEY = "validation-key"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
GENERATE = "/generate"
DEEP = b"[" * 100000 + b"]" * 100000  # the 200 KB sample from the report
U64_MAX = 2**64 - 1


def check(ok, message):
    if not ok:
        raise AssertionError(message)


def post(port, path, data, key=None):
    """POSTs bytes; returns (status, raw reply body)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError) as e:  # the server crashed or dropped us
        return 0, repr(e).encode()


def chat_body(**fields):
    body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "temperature": 0}
    body.update(fields)
    return json.dumps(body).encode()


def completion_body(**fields):
    body = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}
    body.update(fields)
    return json.dumps(body).encode()


def generate_body(**fields):
    body = {"text": "Hello", "sampling_params": {"max_new_tokens": 2, "temperature": 0}}
    body.update(fields)
    return json.dumps(body).encode()


def with_deep(body, at):
    """`body` (a JSON object's bytes) with a member holding DEEP at path `at`:
    ("x",) at the top level, ("sampling_params", "x") one object down."""
    if len(at) == 1:
        return body[:-1] + b', "' + at[0].encode() + b'": ' + DEEP + b"}"
    return body[:-1] + b', "' + at[0].encode() + b'": {"' + at[1].encode() + b'": ' + DEEP + b"}}"


def deep_cases():
    """(name, path, body): the nested-array sample in several fields of each route."""
    return [
        ("generate sampling_params", GENERATE, b'{"text":"hi","sampling_params":{"x":' + DEEP + b"}}"),
        ("generate input_ids", GENERATE, b'{"input_ids":' + DEEP + b"}"),
        ("generate text", GENERATE, b'{"text":' + DEEP + b"}"),
        ("generate top level", GENERATE, DEEP),
        ("completions prompt", COMPLETIONS, b'{"prompt":' + DEEP + b"}"),
        ("completions unknown field", COMPLETIONS, with_deep(completion_body(), ("x",))),
        ("completions stop", COMPLETIONS, with_deep(completion_body(), ("stop",))),
        ("chat messages", CHAT, b'{"messages":' + DEEP + b"}"),
        ("chat content", CHAT, b'{"messages":[{"role":"user","content":' + DEEP + b"}]}"),
        ("chat stream_options", CHAT, with_deep(chat_body(stream=True), ("stream_options", "include_usage"))),
        ("chat unknown field", CHAT, with_deep(chat_body(), ("x",))),
        ("chat top level", CHAT, DEEP),
    ]


def bad_cases():
    """(name, path, body, status, param or None): every other defect's sample and variants."""
    part = lambda t: [{"role": "user", "content": [{"type": t, "text": "hi"}]}]  # noqa: E731
    ok_chat, ok_gen = chat_body(), generate_body()
    cases = [
        ("content part type 5", CHAT, chat_body(messages=part(5)), 400, "messages[0].content[0].type"),
        ("content part type null", CHAT, chat_body(messages=part(None)), 400, "messages[0].content[0].type"),
        ("include_usage not a bool", CHAT, chat_body(stream=True, stream_options={"include_usage": "yes"}), 400,
         "stream_options.include_usage"),
        ("stream_options not an object", CHAT, chat_body(stream=True, stream_options="yes"), 400, "stream_options"),
        ("stream a string", CHAT, chat_body(stream="yes"), 400, "stream"),
        ("stream on /generate a string", GENERATE, generate_body(stream="yes"), 400, "stream"),
        ("ignore_eos a number", COMPLETIONS, completion_body(ignore_eos=1), 400, "ignore_eos"),
        ("stream_options without stream", CHAT, chat_body(stream=False, stream_options={"include_usage": True}), 400,
         "stream_options"),
        ("stream_options, stream left out", COMPLETIONS, completion_body(stream_options={}), 400, "stream_options"),
        ("NUL then garbage", CHAT, ok_chat + b"\x00garbage", 400, None),
        ("trailing NUL", GENERATE, ok_gen + b"\x00", 400, None),
        ("trailing garbage", COMPLETIONS, completion_body() + b" x", 400, None),
        ("two objects", CHAT, ok_chat + ok_chat, 400, None),
        ("top_k 2^64-1", CHAT, chat_body(top_k=U64_MAX), 400, "top_k"),
        ("top_k 2^64-1 on /generate", GENERATE,
         generate_body(sampling_params={"top_k": U64_MAX}), 400, "sampling_params.top_k"),
        ("max_tokens 5.5", CHAT, chat_body(max_tokens=5.5), 400, "max_tokens"),
        ("max_new_tokens as a string", GENERATE, generate_body(sampling_params={"max_new_tokens": "5"}), 400,
         "sampling_params.max_new_tokens"),
        ("n 1e30", COMPLETIONS, completion_body(n=1e30), 400, "n"),
        ("seed -2^63-1", CHAT, chat_body(seed=-2 ** 63 - 1), 400, "seed"),
        ("seed 2^64", CHAT, chat_body(seed=2**64), 400, "seed"),
        ("logprobs 2^64-1", COMPLETIONS, completion_body(logprobs=U64_MAX), 400, "logprobs"),
        ("top_logprobs -1", CHAT, chat_body(logprobs=True, top_logprobs=-1), 400, "top_logprobs"),
        ("token id 2^64-1", COMPLETIONS, completion_body(prompt=[U64_MAX]), 400, "prompt"),
        ("input_ids 2^32", GENERATE, json.dumps({"input_ids": [2**32]}).encode(), 400, "input_ids"),
        ("input_ids -1", GENERATE, json.dumps({"input_ids": [-1]}).encode(), 400, "input_ids"),
        ("text and input_ids", GENERATE, json.dumps({"text": "a", "input_ids": [1]}).encode(), 400, "text"),
        ("sampling_params a list", GENERATE, generate_body(sampling_params=[]), 400, "sampling_params"),
    ]
    for path, make in ((CHAT, chat_body), (COMPLETIONS, completion_body), (GENERATE, generate_body)):
        cases.append((f"1 MB model name on {path}", path, make(model="m" * (1 << 20)), 404, "model"))
    return cases


def run_cases(server, key):
    """Every case with `key` (its expected status) and without (401 when the
    server wants a key). Returns the list of failures."""
    port = server.port
    failures = []
    cases = [(name, path, body, 400, None) for name, path, body in deep_cases()] + bad_cases()
    for name, path, body, want, param in cases:
        for send_key in ([key, None] if key else [None]):
            expect = want if send_key == key else 401
            status, reply = post(port, path, body, send_key)
            problem = None
            try:
                error = json.loads(reply).get("error", {})
            except ValueError:
                error = None
            if status != expect:
                problem = f"got {status}, want {expect}"
            elif not isinstance(error, dict) or not isinstance(error.get("message"), str):
                problem = f"no OpenAI error object in {reply[:200]!r}"
            elif expect != 401 and param is not None and error.get("param") != param:
                problem = f"param {error.get('param')!r}, want {param!r}"
            elif len(reply) > 1024:
                problem = f"a {len(reply)}-byte error reply"
            if problem:
                failures.append(f"{name} on {path} ({'with' if send_key else 'without'} key): {problem}")
            if not healthy(port):
                failures.append(f"/health fails after {name} on {path} (server exit status {server.proc.poll()})")
                return failures, len(cases)
    return failures, len(cases)


def healthy(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError):
        return False


def check_still_serves(server, key):
    port = server.port
    status, reply = post(port, CHAT, chat_body(), key)
    check(status == 200, f"chat completion after the bad requests: {status} {reply[:300]!r}")
    check(json.loads(reply)["choices"][0]["message"]["content"], f"empty chat completion: {reply[:300]!r}")
    # A seed the old parser refused, the largest 64-bit one.
    status, reply = post(port, COMPLETIONS, completion_body(seed=U64_MAX), key)
    check(status == 200, f"completion with seed 2^64-1: {status} {reply[:300]!r}")
    status, reply = post(port, GENERATE, generate_body(), key)
    check(status == 200, f"/generate: {status} {reply[:300]!r}")
    out = json.loads(reply)
    check(isinstance(out.get("text"), str) and out["meta_info"]["completion_tokens"] > 0 and
          out["meta_info"]["finish_reason"] in ("length", "stop"), f"/generate reply: {out}")
    status, reply = post(port, GENERATE, generate_body(sampling_params={"max_new_tokens": 2, "n": 2}), key)
    check(status == 200 and isinstance(json.loads(reply), list) and len(json.loads(reply)) == 2,
          f"/generate with n = 2: {status} {reply[:300]!r}")
    status, reply = post(port, GENERATE, json.dumps({"input_ids": [1, 2, 3], "stream": True,
                                                      "sampling_params": {"max_new_tokens": 2}}).encode(), key)
    check(status == 200 and reply.rstrip().endswith(b"data: [DONE]") and b'"text_completion"' in reply,
          f"streamed /generate: {status} {reply[:300]!r}")
    metrics = server.metrics(key)
    for name in ("actorlm_running_requests", "actorlm_waiting_requests", "actorlm_kv_pool_locked_tokens"):
        check(metrics[name] == 0, f"{name} = {metrics[name]} after the test")


def main():
    total = 0
    for key in (None, KEY):
        args = ["--kv-tokens", "4096", "--context-length", "2048"] + (["--api-key", key] if key else [])
        with ServerProcess(sys.argv[1], args) as server:
            failures, n = run_cases(server, key)
            check(not failures, "\n".join(failures))
            check_still_serves(server, key)
            total += n
    print(f"request validation: {total} bad requests answered with their 4xx, with and without an API key; "
          f"server healthy after")


if __name__ == "__main__":
    main()
