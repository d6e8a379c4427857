#!/usr/bin/env python3
"""Function calling through `actorlm serve` and the official openai client:
tools shown to the model (the default model's template has no place for
them, so they arrive in a system turn), tool_choice "required" and a named
function constrained to a well-formed call whose arguments validate against
the function's parameters, the calls streamed as delta.tool_calls, the
client's whole loop (assistant tool_calls turn, "tool" result turn, final
answer), "none" and "auto", and bad tool fields refused by name.

Usage: python3 tests/server/tool_calls_test.py path/to/actorlm
"""
import json
import sys

import jsonschema
import openai

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402

BIN = sys.argv[1]
KEY = "tools-key"

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}},
        "required": ["timezone"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Current time in a timezone",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def check_call(call, name=None):
    check(call.type == "function" and call.id.startswith("call_"), call)
    check(call.function.name in SCHEMAS and (name is None or call.function.name == name), call)
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def main():
    with ServerProcess(BIN, ["--api-key", KEY]) as server:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key=KEY, max_retries=0)

        # required: one call to some defined function, arguments valid.
        for seed in range(4):
            r = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, tool_choice="required",
                                               max_tokens=120, temperature=0.7, seed=seed)
            choice = r.choices[0]
            check(choice.finish_reason == "tool_calls", choice)
            check(choice.message.content is None and len(choice.message.tool_calls) == 1, choice.message)
            check_call(choice.message.tool_calls[0])

        # A named function.
        r = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, max_tokens=120, temperature=0,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}})
        check_call(r.choices[0].message.tool_calls[0], "get_time")

        # Streamed: the call arrives as delta.tool_calls, then finish "tool_calls".
        stream = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, tool_choice="required",
                                                max_tokens=120, temperature=0, stream=True)
        calls, finish, role = {}, None, None
        for chunk in stream:
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            role = role or d.role
            for tc in d.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        check(role == "assistant" and finish == "tool_calls" and len(calls) == 1, (role, finish, calls))
        call = calls[0]
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])

        # The client's loop: the call goes back as an assistant turn, its
        # result as a tool turn, and the model answers in text.
        first = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, tool_choice="required",
                                               max_tokens=120, temperature=0)
        tc = first.choices[0].message.tool_calls[0]
        history = ASK + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": tc.id, "type": "function", "function": {"name": tc.function.name, "arguments": tc.function.arguments}}]},
            {"role": "tool", "tool_call_id": tc.id, "content": json.dumps({"temperature": 18, "sky": "cloudy"})}]
        final = client.chat.completions.create(model="default", messages=history, tools=TOOLS, tool_choice="none",
                                               max_tokens=40, temperature=0)
        check(final.choices[0].message.content and not final.choices[0].message.tool_calls, final.choices[0])
        check(final.choices[0].finish_reason in ("stop", "length"), final.choices[0])

        # auto: whatever the model does, it is either text or valid calls.
        r = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, max_tokens=60, temperature=0)
        for call in r.choices[0].message.tool_calls or []:
            check_call(call)
        check(r.choices[0].message.content or r.choices[0].message.tool_calls, r.choices[0])
        # Streamed, the same answer: text arrives in several deltas (held back
        # only where a call could begin), calls as delta.tool_calls.
        stream = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, max_tokens=60,
                                                temperature=0, stream=True)
        pieces, streamed_calls = [], []
        for chunk in stream:
            if chunk.choices:
                d = chunk.choices[0].delta
                if d.content:
                    pieces.append(d.content)
                streamed_calls += d.tool_calls or []
        want = r.choices[0].message
        check(len(streamed_calls) == len(want.tool_calls or []), (streamed_calls, want))
        if want.content and not want.tool_calls:
            check("".join(pieces) == want.content, ("".join(pieces), want.content))
            check(len(pieces) > 3, f"the answer came in {len(pieces)} deltas")

        # The tools reach the prompt (a system turn for this template); with
        # "none" they are not shown.
        plain = client.chat.completions.create(model="default", messages=ASK, max_tokens=1, temperature=0)
        shown = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, max_tokens=1, temperature=0)
        hidden = client.chat.completions.create(model="default", messages=ASK, tools=TOOLS, tool_choice="none",
                                                max_tokens=1, temperature=0)
        check(shown.usage.prompt_tokens > plain.usage.prompt_tokens + 50, (shown.usage, plain.usage))
        check(hidden.usage.prompt_tokens == plain.usage.prompt_tokens, (hidden.usage, plain.usage))

        # Refused by name.
        def refused(param, **kw):
            try:
                client.chat.completions.create(model="default", max_tokens=4, **kw)
            except openai.BadRequestError as e:
                body = e.response.json()["error"]
                check(param in (body.get("param") or "") or param in body["message"], (param, body))
                return
            check(False, f"{param}: accepted {kw}")

        refused("tool_choice", messages=ASK, tool_choice="required")
        refused("tool_choice", messages=ASK, tools=TOOLS, tool_choice="sometimes")
        refused("tool_choice.function", messages=ASK, tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "nope"}})
        refused("tools[0].function.name", messages=ASK,
                tools=[{"type": "function", "function": {"name": "bad name!", "parameters": WEATHER}}])
        refused("tools", messages=ASK, tools=[])
        refused("tool_call_id", messages=ASK + [{"role": "tool", "content": "x"}])
        refused("tool_choice", messages=ASK, tools=TOOLS, tool_choice="required",
                response_format={"type": "json_object"})
        m = server.metrics(KEY)
        check(m["actorlm_running_requests"] == 0 and m["actorlm_kv_pool_locked_tokens"] == 0, m)
    print("tool calls: ok")


if __name__ == "__main__":
    main()
