#!/usr/bin/env python3
"""Structured output through `actorlm serve`: response_format json_schema and
json_object through the official openai client, SGLang's regex / ebnf /
json_schema on /generate, and schemas that do not compile refused with a
400. The corpus: 52 JSON schemas (nested objects, arrays with bounds, enums,
required and optional properties, string patterns and lengths, numbers with
bounds, $ref/$defs, anyOf, const), each answered greedily and with sampling;
every output must parse and validate (jsonschema). A constrained output
that is cut by max_tokens would not parse, so the schemas bound their sizes
and finish_reason must be "stop".

Usage: python3 tests/server/structured_output_test.py path/to/actorlm
"""
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from http_client import check  # noqa: E402
from server_process import ServerProcess  # noqa: E402

BIN = sys.argv[1]
KEY = "structured-key"

NAME = {"type": "string", "maxLength": 20}
SHORT = {"type": "string", "maxLength": 12}


def obj(props, required=None, **extra):
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": False, **extra}


def corpus():
    s = [
        obj({"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
        obj({"city": NAME, "country": NAME, "population": {"type": "integer", "minimum": 0}}),
        obj({"color": {"enum": ["red", "green", "blue"]}}),
        obj({"answer": {"type": "boolean"}}),
        obj({"score": {"type": "number", "minimum": 0, "maximum": 1}}),
        obj({"temperature": {"type": "number", "exclusiveMinimum": -50, "exclusiveMaximum": 60}}),
        obj({"count": {"type": "integer", "minimum": 1, "maximum": 9}}),
        obj({"tags": {"type": "array", "items": SHORT, "minItems": 1, "maxItems": 3}}),
        obj({"numbers": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
                         "minItems": 2, "maxItems": 4}}),
        obj({"person": obj({"first": NAME, "last": NAME})}),
        obj({"a": obj({"b": obj({"c": {"type": "integer", "minimum": 0, "maximum": 9}})})}),
        obj({"title": NAME, "year": {"type": "integer", "minimum": 1900, "maximum": 2030}, "rating": {"enum": [1, 2, 3, 4, 5]}}),
        obj({"name": NAME, "nickname": SHORT}, required=["name"]),
        obj({"email": {"type": "string", "pattern": "^[a-z]{1,8}@[a-z]{1,8}\\.com$"}}),
        obj({"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}),
        obj({"date": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"}}),
        obj({"code": {"type": "string", "minLength": 3, "maxLength": 3}}),
        obj({"kind": {"const": "point"}, "x": {"type": "integer", "minimum": -9, "maximum": 9}, "y": {"type": "integer", "minimum": -9, "maximum": 9}}),
        obj({"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 5}]}}),
        obj({"maybe": {"type": ["string", "null"], "maxLength": 8}}),
        obj({"items": {"type": "array", "maxItems": 2, "items": obj({"id": {"type": "integer", "minimum": 0, "maximum": 99}, "label": SHORT})}}),
        obj({"matrix": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}}),
        {"$defs": {"pt": obj({"x": {"type": "integer", "minimum": 0, "maximum": 9}, "y": {"type": "integer", "minimum": 0, "maximum": 9}})},
         **obj({"start": {"$ref": "#/$defs/pt"}, "end": {"$ref": "#/$defs/pt"}})},
        {"$defs": {"name": NAME}, **obj({"first": {"$ref": "#/$defs/name"}, "last": {"$ref": "#/$defs/name"}})},
        {"$defs": {"status": {"enum": ["open", "closed", "pending"]}}, **obj({"status": {"$ref": "#/$defs/status"}, "id": {"type": "integer", "minimum": 0, "maximum": 999}})},
        obj({"ok": {"type": "boolean"}, "error": {"type": ["string", "null"], "maxLength": 10}}),
        obj({"language": {"enum": ["en", "fr", "de", "es"]}, "confidence": {"type": "number", "minimum": 0, "maximum": 1}}),
        obj({"sentiment": {"enum": ["positive", "negative", "neutral"]}, "reason": NAME}),
        obj({"steps": {"type": "array", "minItems": 1, "maxItems": 3, "items": SHORT}, "done": {"type": "boolean"}}),
        obj({"user": obj({"id": {"type": "integer", "minimum": 1, "maximum": 1000}, "roles": {"type": "array", "maxItems": 2, "items": {"enum": ["admin", "user", "guest"]}}})}),
        obj({"price": {"type": "number", "minimum": 0, "maximum": 1000}, "currency": {"enum": ["USD", "EUR", "GBP"]}}),
        obj({"latitude": {"type": "number", "minimum": -90, "maximum": 90}, "longitude": {"type": "number", "minimum": -180, "maximum": 180}}),
        obj({"hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}}),
        obj({"version": {"type": "string", "pattern": "^[0-9]\\.[0-9]\\.[0-9]$"}}),
        obj({"flag": {"const": True}}),
        obj({"nothing": {"type": "null"}}),
        obj({"first": NAME, "second": NAME, "third": NAME}, required=["first"]),
        obj({"book": obj({"title": NAME, "author": obj({"name": NAME, "born": {"type": "integer", "minimum": 1000, "maximum": 2020}})})}),
        obj({"pairs": {"type": "array", "maxItems": 3, "items": {"type": "array", "minItems": 2, "maxItems": 2, "items": SHORT}}}),
        obj({"word": {"type": "string", "pattern": "^[A-Z][a-z]{2,6}$"}}),
        obj({"choice": {"oneOf": [{"const": "yes"}, {"const": "no"}]}}),
        obj({"level": {"type": "integer", "enum": [1, 2, 3]}}),
        obj({"ratio": {"type": "number", "minimum": 0.5, "maximum": 2.5}}),
        obj({"event": obj({"name": NAME, "when": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}, "where": NAME})}),
        obj({"ids": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 5}}),
        obj({"animal": {"enum": ["cat", "dog", "bird"]}, "legs": {"type": "integer", "minimum": 0, "maximum": 4}, "can_fly": {"type": "boolean"}}),
        obj({"greeting": NAME, "language": {"enum": ["en", "fr"]}}),
        obj({"config": obj({"debug": {"type": "boolean"}, "level": {"enum": ["low", "high"]}, "retries": {"type": "integer", "minimum": 0, "maximum": 5}})}),
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 4},
        {"type": "array", "items": obj({"k": SHORT}), "minItems": 1, "maxItems": 2},
        obj({"q": {"type": "string", "enum": ["a", "b"]}, "n": {"type": "integer", "minimum": 0, "maximum": 3}}),
        # $refs through $refs (a recursive schema is valid too, but nothing
        # bounds how deep a 135M model nests it before max_tokens).
        {"$defs": {"address": obj({"street": NAME, "city": NAME}), "person": obj({"name": NAME, "home": {"$ref": "#/$defs/address"}})},
         "$ref": "#/$defs/person"},
    ]
    return s


def main():
    with ServerProcess(BIN, ["--api-key", KEY, "--kv-tokens", "16384"]) as server:
        port = server.port
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        schemas = corpus()
        check(len(schemas) >= 50, len(schemas))

        def answer(i, schema, sampled):
            extra = {"temperature": 0.8, "seed": i} if sampled else {"temperature": 0}
            r = client.chat.completions.create(
                model="default", max_tokens=200,
                messages=[{"role": "user", "content": "Reply with a JSON value for this schema: " + json.dumps(schema)}],
                response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}, **extra)
            text = r.choices[0].message.content
            try:
                value = json.loads(text)
                jsonschema.validate(value, schema)
            except Exception as e:  # noqa: BLE001 - every failure is listed
                return f"schema {i} ({'sampled' if sampled else 'greedy'}): {type(e).__name__} {str(e)[:200]} in {text!r}"
            if r.choices[0].finish_reason != "stop":
                return f"schema {i}: finish_reason {r.choices[0].finish_reason}"
            return None

        jobs = [(i, s, sampled) for i, s in enumerate(schemas) for sampled in (False, True)]
        with ThreadPoolExecutor(4) as pool:
            failures = [f for f in pool.map(lambda j: answer(*j), jobs) if f]
        check(not failures, f"{len(failures)} of {len(jobs)} outputs invalid:\n" + "\n".join(failures))
        print(f"json_schema: {len(jobs)} outputs over {len(schemas)} schemas, all valid")

        # Properties come in the schema's order, not sorted (OpenAI's order).
        ordered = obj({"zeta": {"type": "integer", "minimum": 0, "maximum": 9}, "alpha": SHORT})
        r = client.chat.completions.create(model="default", max_tokens=60, temperature=0,
                                           messages=[{"role": "user", "content": "Fill it in."}],
                                           response_format={"type": "json_schema", "json_schema": {"name": "o", "schema": ordered}})
        text = r.choices[0].message.content
        check(text.index('"zeta"') < text.index('"alpha"'), text)

        # json_object: any JSON object, through completions too. A 135M
        # model's free-form object may run past max_tokens (greedy text
        # differs between CPUs by float rounding, and so does its length):
        # an answer that stopped must parse, one cut at the limit must be a
        # constrained start of an object, and the short prompts must stop.
        def json_object_answer(text, finish_reason, what, must_stop):
            check(finish_reason in ("stop", "length"), f"{what}: finish_reason {finish_reason}")
            if finish_reason == "stop":
                check(isinstance(json.loads(text), (dict, list)), f"{what}: {text!r}")
            else:
                check(not must_stop, f"{what}: ran to max_tokens: {text!r}")
                check(text.lstrip()[:1] in ("{", "["), f"{what}: cut at max_tokens and not JSON: {text!r}")
            return finish_reason == "stop"

        for prompt, must_stop in (("Describe a cat as JSON.", False),
                                  ('Answer with the JSON object {"ok": true}.', True),
                                  ("Give a JSON object with a name and an age.", True)):
            r = client.chat.completions.create(model="default", max_tokens=200, temperature=0,
                                               messages=[{"role": "user", "content": prompt}],
                                               response_format={"type": "json_object"})
            json_object_answer(r.choices[0].message.content, r.choices[0].finish_reason, prompt, must_stop)
        r = client.completions.create(model="default", prompt="A JSON list of three fruits:", max_tokens=200,
                                      temperature=0, extra_body={"response_format": {"type": "json_object"}})
        json_object_answer(r.choices[0].text, r.choices[0].finish_reason, "completions", False)
        # "text" is no constraint.
        r = client.chat.completions.create(model="default", max_tokens=8, temperature=0,
                                           messages=[{"role": "user", "content": "Hi"}], response_format={"type": "text"})
        check(r.choices[0].message.content, r)

        # Streaming keeps the constraint.
        stream = client.chat.completions.create(
            model="default", max_tokens=200, temperature=0, stream=True,
            messages=[{"role": "user", "content": "Give me a person."}],
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schemas[0]}})
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        jsonschema.validate(json.loads(text), schemas[0])

        # SGLang's /generate: regex, ebnf, json_schema as a string.
        import urllib.request

        def generate(sampling):
            body = json.dumps({"text": "The phone number is", "sampling_params": {"max_new_tokens": 40, "temperature": 0, **sampling}})
            req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=body.encode(), method="POST",
                                         headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
            try:
                with urllib.request.urlopen(req, timeout=120) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        status, out = generate({"regex": "[0-9]{3}-[0-9]{4}"})
        check(status == 200 and re.fullmatch("[0-9]{3}-[0-9]{4}", out["text"]), out)
        status, out = generate({"ebnf": 'root ::= "call " ("home" | "work")'})
        check(status == 200 and out["text"] in ("call home", "call work"), out)
        status, out = generate({"json_schema": json.dumps(schemas[2])})
        check(status == 200, out)
        jsonschema.validate(json.loads(out["text"]), schemas[2])

        # What does not compile is a 400 that says why; the server goes on.
        for sampling, field in (({"regex": "(unclosed"}, None), ({"ebnf": "root ::= nowhere"}, None),
                                ({"regex": "a", "ebnf": 'root ::= "a"'}, "sampling_params.ebnf")):
            status, out = generate(sampling)
            check(status == 400, (sampling, status, out))
            if field:
                check(out["error"]["param"] == field, out)
        try:
            client.chat.completions.create(model="default", max_tokens=8, messages=[{"role": "user", "content": "x"}],
                                           response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "frobnicate"}}})
            check(False, "a schema with an unknown type was accepted")
        except openai.BadRequestError as e:
            check("constraint" in str(e), str(e))
        try:
            client.chat.completions.create(model="default", max_tokens=8, messages=[{"role": "user", "content": "x"}],
                                           response_format={"type": "yaml"})
            check(False, "response_format yaml was accepted")
        except openai.BadRequestError as e:
            check("response_format.type" in str(e), str(e))
        m = server.metrics(KEY)
        check(m["actorlm_running_requests"] == 0 and m["actorlm_kv_pool_locked_tokens"] == 0, m)
    print("structured output: ok")


if __name__ == "__main__":
    main()
