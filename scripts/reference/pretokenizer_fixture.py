#!/usr/bin/env python3
"""Splits of the tokenizer fixture's strings by the original pre-tokenizer
regular expressions, run with the `regex` package (pip install regex), for
actorlm's hand-written split rules.

Writes tests/fixtures/tokenizer/pretokenizer_regex.json:
  {"cases": [{"text": str, "gpt2": [str], "llama3": [str], "qwen2": [str]}]}
"""
import json
import os

import regex

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
src = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "smollm2_llamacpp.json")
texts = [c["text"] for c in json.load(open(src))["cases"]]
texts += ["I'M HERE", "x\r\n\r\ny", "  \n  \n  x", "abc123456def", "!!!\n\nnext", "a\u00a0b"]
cases = [{"text": t, **{k: regex.findall(p, t) for k, p in PATTERNS.items()}} for t in texts]
for c in cases:
    for k in PATTERNS:
        assert "".join(c[k]) == c["text"], (k, c["text"])  # every character is in some piece
dest = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "pretokenizer_regex.json")
with open(dest, "w") as fh:
    json.dump({"regex_version": regex.__version__, "cases": cases}, fh, ensure_ascii=False)
print(f"wrote {dest}: {len(cases)} strings")
