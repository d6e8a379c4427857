#!/usr/bin/env python3
"""llama.cpp's token ids for every vocabulary family it ships, on our corpus.

The llama-cpp-python 0.3.36 sdist (PyPI) carries vocabulary-only GGUFs under
vendor/llama.cpp/models/ggml-vocab-*.gguf. Each is tokenized by llama-tokenize
built from the same sdist (see docs/BENCHMARKS.md for the build), with its
defaults as actorlm's tokenizer has them (and --no-escape, so the text is taken as it is): special-token text parsed, BOS when
the vocabulary asks for it.

Usage: tokenizer_families_fixture.py LLAMA_TOKENIZE VOCAB_DIR
Writes tests/fixtures/tokenizer/vocab_families.json:
  {"source", "corpus": [text...],
   "families": {name: {"file", "sha256", "ids": [[id...] per text] | null,
                       "error": str (when llama.cpp refuses the file)}}}
scripts/fetch_vocabularies.sh puts the same files where the test finds them.
"""
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CORPUS = [
    "Hello world",
    " Hello world",
    "Hello World! How are you?",
    "hello   world\n\n\tnew line",
    "   leading and trailing spaces   ",
    "\n\n\n",
    "\t\t tabs and\r\nCRLF",
    "1234567890",
    "3.14159 and 1,000,000 and 2024-01-02 and 007",
    "x = a+b*c; // comment",
    "def f(x):\n    return x ** 2\n",
    "int main() { printf(\"%d\\n\", 42); return 0; }",
    "    indented code\n        more indented\n",
    "naïve café résumé Ångström ﬁ",
    "Привет, мир! Как дела?",
    "你好，世界。今天天气很好。",
    "こんにちは世界 カタカナ ひらがな",
    "안녕하세요 세계",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "emoji 🙂🚀 family 👩‍👩‍👧‍👦 flag 🇫🇷",
    "🙂🙂🙂🙂🙂",
    "mixed: abc123DEF456_ghi camelCaseWord snake_case_word",
    "URL https://example.com/path?q=1&r=2#frag and mail a.b@c.org",
    "'s 't 're 've 'm 'll 'd I'M YOU'RE it’s",
    "a\u00a0b\u2003c\u3000d",
    "zero\u200bwidth and soft\u00adhyphen",
    "ab" * 60,
    "<|im_start|>user\nhi<|im_end|>",
    "<s>[INST] hi [/INST]</s>",
    "<|endoftext|> after",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>",
]


def main():
    tokenize, vocab_dir = sys.argv[1], sys.argv[2]
    families = {}
    for file in sorted(os.listdir(vocab_dir)):
        if not (file.startswith("ggml-vocab-") and file.endswith(".gguf")):
            continue
        name = file[len("ggml-vocab-"):-len(".gguf")]
        path = os.path.join(vocab_dir, file)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        entry = {"file": file, "sha256": digest, "ids": []}
        for text in CORPUS:
            r = subprocess.run([tokenize, "-m", path, "-p", text, "--ids", "--no-escape", "--log-disable"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                entry = {"file": file, "sha256": digest, "ids": None,
                         "error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]}
                break
            entry["ids"].append(json.loads(r.stdout.strip().splitlines()[-1]))
        families[name] = entry
        print(name, "ok" if entry["ids"] is not None else entry["error"])
    out = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "vocab_families.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"source": "llama-cpp-python==0.3.36 vendor/llama.cpp (llama-tokenize, models/ggml-vocab-*.gguf)",
                   "corpus": CORPUS, "families": families}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
