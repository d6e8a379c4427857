#!/usr/bin/env python3
"""Reference renderings of real chat templates for actorlm's Jinja engine.

Every template under vendor/llama.cpp/models/templates/ in the llama-cpp-python
0.3.36 sdist (PyPI) is rendered on a fixed set of conversations by Python's
jinja2 set up the way Hugging Face transformers renders chat templates
(apply_chat_template): an ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and the loopcontrols extension, a tojson filter that calls
json.dumps(ensure_ascii=False), and the raise_exception and strftime_now
globals. strftime_now is pinned to 2026-01-02 03:04:05 so the fixture is
stable. A template that raises is recorded with the exception, which actorlm
must also raise.

Usage: jinja_template_fixture.py [TEMPLATES_DIR]
  (default: downloads the sdist with pip into ~/.cache/actorlm/reference)
Writes tests/fixtures/jinja/chat_templates.json:
  {"jinja2_version", "source", "conversations": [{"messages", "tools"?}],
   "templates": {name: source},
   "cases": [{"template", "conversation", "add_generation_prompt",
              "output" | "error"}]}
"""
import datetime
import json
import os
import subprocess
import sys
import tarfile

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SDIST = "llama-cpp-python==0.3.36"
FIXED_NOW = datetime.datetime(2026, 1, 2, 3, 4, 5)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "description": "Temperature unit", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hello! What is 2+2?"}]},
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Name a prime."}]},
    {"messages": [{"role": "system", "content": "Be kind."},
                  {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello! How can I help?"},
                  {"role": "user", "content": "Tell me a joke.\nA short one."}]},
    {"messages": [{"role": "user", "content": "  caf\u00e9 \u4f60\u597d \U0001F642\n\n\ttabs and  spaces  "},
                  {"role": "assistant", "content": "Noted: {{ not a template }} <|im_end|>"}]},
    {"messages": [{"role": "system", "content": "Use tools when needed."},
                  {"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"id": "abc123def", "type": "function",
                                   "function": {"name": "get_weather",
                                                "arguments": {"city": "Paris", "unit": "celsius"}}}]},
                  {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather",
                   "content": "{\"temperature\": 21}"}],
     "tools": [WEATHER_TOOL]},
]
# (conversation index, add_generation_prompt) pairs rendered for every template.
RENDERS = [(0, True), (1, True), (2, True), (2, False), (3, False), (4, True)]


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers
    uses it to mark assistant tokens)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def templates_dir(argv):
    if len(argv) > 1:
        return argv[1]
    cache = os.path.expanduser("~/.cache/actorlm/reference")
    os.makedirs(cache, exist_ok=True)
    unpacked = os.path.join(cache, "llama_cpp_python-0.3.36")
    if not os.path.isdir(unpacked):
        subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "-d", cache, SDIST])
        with tarfile.open(os.path.join(cache, "llama_cpp_python-0.3.36.tar.gz")) as t:
            t.extractall(cache)
    return os.path.join(unpacked, "vendor", "llama.cpp", "models", "templates")


def main():
    src = templates_dir(sys.argv)
    env = environment()
    templates, cases = {}, []
    for file in sorted(os.listdir(src)):
        if not file.endswith(".jinja"):
            continue
        name = file[:-len(".jinja")]
        with open(os.path.join(src, file), encoding="utf-8") as f:
            source = f.read()
        templates[name] = source
        try:
            compiled = env.from_string(source)
        except jinja2.TemplateError as e:
            compiled, compile_error = None, f"{type(e).__name__}: {e}"
        for conv, agp in RENDERS:
            case = {"template": name, "conversation": conv, "add_generation_prompt": agp}
            c = CONVERSATIONS[conv]
            if compiled is None:
                case["error"] = compile_error
            else:
                try:
                    case["output"] = compiled.render(messages=c["messages"], tools=c.get("tools"),
                                                     add_generation_prompt=agp, bos_token="<|bos|>",
                                                     eos_token="<|eos|>")
                except Exception as e:  # noqa: BLE001 - any failure is a reference outcome
                    case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)
    out = os.path.join(ROOT, "tests", "fixtures", "jinja", "chat_templates.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "source": SDIST + " vendor/llama.cpp/models/templates",
                   "conversations": CONVERSATIONS, "templates": templates, "cases": cases},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum(1 for c in cases if "error" in c)
    print(f"{len(templates)} templates, {len(cases)} cases ({errors} raise) -> {out}")


if __name__ == "__main__":
    main()
