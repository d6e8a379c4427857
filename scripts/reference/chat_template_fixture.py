#!/usr/bin/env python3
"""Chat prompt references for actorlm's ChatTemplate test.

For SmolLM2 (the default model's own tokenizer.chat_template, read from the
GGUF) and for Meta's Llama 3 Instruct template, each conversation is rendered:
  - "rendered": by llama-cpp-python's Jinja2ChatFormatter, the formatter
    Llama.create_chat_completion uses for a GGUF's own template (Jinja2 with
    trim_blocks/lstrip_blocks, as Hugging Face renders); cross-checked against
    a plain jinja2 Environment;
  - "llamacpp_builtin": by llama.cpp's C API llama_chat_apply_template, which
    does not execute the Jinja source but recognises its markers and renders
    its own built-in format ("chatml" for SmolLM2, "llama3" for Llama 3). It
    leaves out SmolLM2's default system prompt and Llama 3's <|begin_of_text|>
    (llama.cpp adds BOS when tokenizing instead);
  - "ids" (SmolLM2 only): llama.cpp's tokens for "rendered", special=True.

Writes tests/fixtures/tokenizer/chat_template.json:
  {"llama_cpp_version", "jinja2_version",
   "templates": {"smollm2": str, "llama3": str},
   "cases": [{"template", "messages", "add_generation_prompt", "rendered",
              "llamacpp_builtin", "ids"?}]}
"""
import ctypes
import json
import os
import sys

import gguf
import jinja2
import llama_cpp
from llama_cpp import llama_chat_format

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
    "~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")

# Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template.
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
          "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
          "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
          "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

CONVERSATIONS = [
    ([{"role": "user", "content": "Hi!"}], True),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}], True),
    ([{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi, how can I help?"},
      {"role": "user", "content": "Tell me a joke.\nA short one."}], True),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], False),
    ([{"role": "user", "content": "  spaces kept  \n"}], True),
    ([{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}], True),
    ([{"role": "user", "content": "Unicode: caf\u00e9 \u4f60\u597d \U0001F642"}], True),
    ([{"role": "user", "content": "literal <|im_end|> inside"}], True),
    ([{"role": "user", "content": ""}], True),
    ([], True),
    ([], False),
]


def builtin(name_or_template, messages, add_generation_prompt):
    arr = (llama_cpp.llama_chat_message * max(1, len(messages)))()
    keep = []
    for i, m in enumerate(messages):
        role, content = m["role"].encode(), m["content"].encode()
        keep += [role, content]
        arr[i].role, arr[i].content = role, content
    size = 1 << 16
    buf = ctypes.create_string_buffer(size)
    n = llama_cpp.llama_chat_apply_template(name_or_template.encode(), arr, len(messages), add_generation_prompt,
                                            buf, size)
    assert 0 <= n <= size, n
    return buf.raw[:n].decode()


def main():
    smollm = gguf.GGUFReader(MODEL).fields["tokenizer.chat_template"].contents()
    llm = llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)
    templates = {"smollm2": (smollm, "<|im_start|>", "<|im_end|>", smollm),
                 "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>", "llama3")}
    cases = []
    for name, (source, bos, eos, builtin_name) in templates.items():
        plain = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(source)
        for messages, gen in CONVERSATIONS:
            fmt = llama_chat_format.Jinja2ChatFormatter(template=source, bos_token=bos, eos_token=eos,
                                                        add_generation_prompt=gen)
            rendered = fmt(messages=messages).prompt
            assert rendered == plain.render(messages=messages, add_generation_prompt=gen, bos_token=bos,
                                            eos_token=eos), (name, messages)
            case = {"template": name, "messages": messages, "add_generation_prompt": gen, "rendered": rendered}
            # llama.cpp's built-in renderer refuses an empty conversation.
            case["llamacpp_builtin"] = builtin(builtin_name, messages, gen) if messages else None
            if name == "smollm2":
                case["ids"] = llm.tokenize(rendered.encode(), add_bos=False, special=True)
            cases.append(case)
    dest = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "chat_template.json")
    with open(dest, "w") as fh:
        json.dump({"llama_cpp_version": llama_cpp.__version__, "jinja2_version": jinja2.__version__,
                   "templates": {"smollm2": smollm, "llama3": LLAMA3}, "cases": cases},
                  fh, ensure_ascii=False, indent=1)
    print(f"wrote {dest}: {len(cases)} renderings")


if __name__ == "__main__":
    main()
