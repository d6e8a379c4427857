#!/usr/bin/env python3
"""Renders the default model's own chat template (tokenizer.chat_template in
the GGUF, read with the `gguf` package) with Jinja2 for a few conversations,
plus llama.cpp's token ids for each rendered prompt.

Writes tests/fixtures/tokenizer/chat_template.json:
  {"cases": [{"messages": [{"role", "content"}], "add_generation_prompt": bool,
              "rendered": str, "ids": [int]}]}
"""
import json
import os
import sys

import gguf
import jinja2
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
    "~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")

source = gguf.GGUFReader(MODEL).fields["tokenizer.chat_template"].contents()
template = jinja2.Environment().from_string(source)
llm = llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)

conversations = [
    ([{"role": "user", "content": "Hi!"}], True),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}], True),
    ([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi, how can I help?"},
      {"role": "user", "content": "Tell me a joke.\nA short one."}], True),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], False),
    ([{"role": "user", "content": "  spaces kept  "}], True),
]
cases = []
for messages, gen in conversations:
    rendered = template.render(messages=messages, add_generation_prompt=gen)
    ids = llm.tokenize(rendered.encode(), add_bos=False, special=True)
    cases.append({"messages": messages, "add_generation_prompt": gen, "rendered": rendered, "ids": ids})
dest = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "chat_template.json")
with open(dest, "w") as fh:
    json.dump({"jinja2_version": jinja2.__version__, "cases": cases}, fh, ensure_ascii=False, indent=1)
print(f"wrote {dest}: {len(cases)} conversations")
