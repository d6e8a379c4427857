#!/usr/bin/env python3
"""Tokenization reference from llama.cpp (llama-cpp-python built from source)
on the default model's vocabulary, for actorlm's tokenizer test.

Writes tests/fixtures/tokenizer/smollm2_llamacpp.json:
  {"llama_cpp_version", "model_sha256", "cases": [
     {"text": str,
      "ids": [int],            # tokenize(add_bos=False, special=True)
      "ids_plain": [int],      # tokenize(add_bos=False, special=False)
      "decoded": str}]}        # detokenize(ids, special=True), UTF-8 (replacement on invalid)
The model's metadata says add_bos_token = false, so no BOS is added.

Usage: python3 scripts/reference/tokenizer_fixture.py [model.gguf]
"""
import hashlib
import json
import os
import random
import sys

import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
    "~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")

FIXED = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\t  \n", "a", "A", " a", "  a",
    "Hello world", "Hello, world!", "hello   world", "Hello\nworld", "Hello\n\nworld", " leading space",
    "trailing space ", "trailing spaces   ", "The quick brown fox jumps over the lazy dog.",
    "It's", "it's", "IT'S", "don't", "DON'T", "we're", "We'Re", "they've", "I'm", "you'll", "he'd",
    "'s 't 're 've 'm 'll 'd", "rock'n'roll", "o'clock", "''", "'",
    "0", "7", "42", "123", "1234", "12345678901234567890", "3.14159", "-273.15", "1,000,000",
    "1e-9", "0x1F", "v1.2.3", "2026-11-22", "12:34:56", "$100", "50%", "#1", "x86_64",
    "def main():\n    print('hi')\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "#include <stdio.h>\nint main(void) { return 0; }", "fn main() -> Result<(), Box<dyn Error>> {}",
    "SELECT * FROM users WHERE id = 1;", "console.log(`x = ${x}`);", "x = [i**2 for i in range(10)]",
    "if (a && b || !c) return;", "<div class=\"a\">text</div>", "{\"key\": [1, 2.5, null, true]}",
    "    indented four", "\tindented tab", "a\tb\tc", "line1\nline2\r\nline3",
    "你好，世界", "日本語のテキストです。", "한국어 문장입니다.", "中文English混合", "Привет, мир!",
    "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Ελληνικά και English",
    "café", "naïve", "Zürich", "señor", "façade", "e\u0301", "a\u0300\u0301\u0302", "ﬁ ligature",
    "🙂", "🙂🙂🙂", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "I ❤️ NY", "emoji😀inside", "✓ done ✗ failed",
    "…", "—", "«quotes»", "“smart quotes”", "a · b", "°C", "½ ¼ ¾", "∑∫∂√∞", "→ ← ↑ ↓", "©®™",
    "!!!", "???", "...", "---", "***", "@#$%^&*()", "a.b.c", "a,b;c:d", "(parens) [brackets] {braces}",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "text<|im_end|>more", "<|im_start|><|im_start|>", "<|im_start", "im_start|>", "<repo_name>x",
    "<|fake_token|>", "<s>", "</s>",
    "supercalifragilisticexpialidocious", "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababababab",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
    "/usr/local/bin/actorlm", "snake_case_name", "camelCaseName", "PascalCaseName", "kebab-case-name",
    "SCREAMING_SNAKE", "MiXeD CaSe", "ALLCAPS WORDS HERE", "Mr. Smith went to Washington.",
    "Dr. Jekyll & Mr. Hyde", "U.S.A.", "e.g., i.e., etc.", "A B C D E", "a  b   c    d",
]

CJK = "你好世界日本語中文한국어テキスト"
EMOJI = ["🙂", "🚀", "🎉", "👍", "❤️", "🇯🇵", "🤖"]
WORDS = ["the", "model", "cache", "radix", "token", "actor", "GPU", "kernel", "Paris", "don't",
         "it's", "123", "4.5", "x", "—", "naïve", "über", "東京", "код", "λ"]
SEPS = [" ", "  ", "\n", "\t", ", ", ". ", " - ", "", "\n\n", "   "]


def generated(n, seed=7):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(2, 9)):
            kind = rng.random()
            if kind < 0.6:
                parts.append(rng.choice(WORDS))
            elif kind < 0.75:
                parts.append("".join(rng.choice(CJK) for _ in range(rng.randint(1, 4))))
            elif kind < 0.85:
                parts.append(rng.choice(EMOJI))
            else:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 8))))
            parts.append(rng.choice(SEPS))
        out.append("".join(parts))
    return out


def main():
    llm = llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)
    texts = FIXED + generated(100)
    cases = []
    for t in texts:
        b = t.encode("utf-8")
        ids = llm.tokenize(b, add_bos=False, special=True)
        plain = llm.tokenize(b, add_bos=False, special=False)
        dec = llm.detokenize(ids, special=True).decode("utf-8", "replace")
        cases.append({"text": t, "ids": ids, "ids_plain": plain, "decoded": dec})
    out = {"llama_cpp_version": llama_cpp.__version__,
           "model_sha256": hashlib.sha256(open(MODEL, "rb").read()).hexdigest(),
           "cases": cases}
    dest = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "smollm2_llamacpp.json")
    with open(dest, "w") as fh:
        json.dump(out, fh, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {dest}: {len(cases)} strings")


if __name__ == "__main__":
    main()
