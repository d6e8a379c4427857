#!/usr/bin/env python3
"""Chat templates through a real `actorlm serve` and the official openai
client: --chat-template-file replaces the model's template, the
chat_template_kwargs request field (vLLM's and SGLang's extension) reaches
it as template variables, and what the template or the field refuses comes
back as a 400 naming why, with the server healthy after. Checks are explicit
(they must survive python -O).

Usage: python3 tests/server/chat_template_test.py path/to/actorlm
"""
import os
import sys
import tempfile

import openai

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from server_process import ServerProcess  # noqa: E402

TEMPLATE = """{%- if refuse %}{{ raise_exception('refused by the template') }}{% endif -%}
{%- if verbose %}<|im_start|>system
Answer carefully, thoroughly and politely, taking every detail of the question below into account.<|im_end|>
{% endif -%}
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
"""


def check(ok, message):
    if not ok:
        raise AssertionError(message)


def main():
    binary = sys.argv[1]
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(TEMPLATE)
        path = f.name
    try:
        with ServerProcess(binary, ["--chat-template-file", path]) as server:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="unused", max_retries=0)
            messages = [{"role": "user", "content": "What is 2+2?"}]
            model = client.models.list().data[0].id

            def ask(**extra):
                return client.chat.completions.create(model=model, messages=messages, max_tokens=4,
                                                      temperature=0, **extra)

            plain = ask().usage.prompt_tokens
            # "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n": the file's
            # template, not SmolLM2's (which adds its own default system prompt).
            check(plain < 20, f"the file's template was not used: {plain} prompt tokens")
            verbose = ask(extra_body={"chat_template_kwargs": {"verbose": True}}).usage.prompt_tokens
            check(verbose > plain + 10, f"chat_template_kwargs did not reach the template: {plain} -> {verbose}")
            check(ask(extra_body={"chat_template_kwargs": {"verbose": False}}).usage.prompt_tokens == plain,
                  "verbose=false changed the prompt")

            def refused(kwargs, words):
                try:
                    ask(extra_body={"chat_template_kwargs": kwargs})
                except openai.BadRequestError as e:
                    check(words in str(e), f"the 400 for {kwargs!r} does not say {words!r}: {e}")
                    return
                raise AssertionError(f"chat_template_kwargs {kwargs!r} was accepted")

            refused({"refuse": True}, "refused by the template")
            refused("verbose", "chat_template_kwargs")
            refused({"messages": []}, "messages")
            check(ask().usage.prompt_tokens == plain, "the server did not keep serving after refusals")
    finally:
        os.unlink(path)
    print("chat template tests passed")


if __name__ == "__main__":
    main()
