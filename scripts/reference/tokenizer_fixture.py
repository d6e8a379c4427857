#!/usr/bin/env python3
"""Tokenization reference from llama.cpp (llama-cpp-python built from source)
on the default model's vocabulary, for actorlm's tokenizer tests.

Writes tests/fixtures/tokenizer/smollm2_llamacpp.json:
  {"llama_cpp_version", "model_sha256", "add_bos", "bos", "eos",
   "eog_ids": [int],            # llama_vocab_is_eog over the whole vocabulary
   "cases": [
     {"text": str,
      "ids": [int],             # tokenize(add_bos=<metadata>, special=True)
      "ids_plain": [int],       # tokenize(add_bos=<metadata>, special=False)
      "decoded": str,           # detokenize(ids, special=True), UTF-8 (replacement on invalid)
      "ids_llama3": [int],      # the same vocabulary with tokenizer.ggml.pre = "llama-bpe"
      "ids_qwen2": [int]}],     #   ... and with tokenizer.ggml.pre = "qwen2" (special=True)
   "pieces": [{"id", "special": hex, "plain": hex}]}  # llama_token_to_piece, special on/off
The model's metadata says add_bos_token = false, so no BOS is added. The two
variants are vocabulary-only GGUF copies of the model's metadata with only the
pre-tokenizer name changed, so llama.cpp runs its Llama 3 and Qwen2 split
rules (and Llama 3's ignore_merges) on a real 49k vocabulary.

Usage: python3 scripts/reference/tokenizer_fixture.py [model.gguf]
"""
import hashlib
import json
import os
import random
import sys

import ctypes
import tempfile

import llama_cpp
from gguf import GGUFValueType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_vocab_gguf import read_fields, write_vocab_gguf  # noqa: E402

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

EXTRA = [
    "\u00a0nbsp", "a\u3000b", "x\u2028y", "tab\t\tsep", "   leading three", "\n\n\n", "\r\r\n\n", " \t \n \t ",
    "a" + " " * 20 + "b", "line\n    indented\n\tTabbed\n", "end with newline\n", "  \n  \n", "x \n y",
    "I'M", "You'LL", "She'D", "they'VE", "We'RE", "it'S", "don'T", "'S", "''s", "x's's", "'ll've'd",
    "a" * 1000, "ab" * 800, "9" * 300, "\U0001F642" * 50, "\u4f60" * 200, "x" * 64 + "y" * 64 + "z" * 64,
    "https://example.com/" + "very-long-path-segment/" * 20,
    "Antidisestablishmentarianism" * 8,
    "<|im_end|><|im_start|>", "a<|endoftext|>b", "<|im_start|>assistant\n", "<file_sep><filename>x.py",
    "<jupyter_code>print(1)", "<|im_start|> user", "<<|im_start|>>", "<|im_start|>user<|im_start|>",
    "<|im_start|><|im_end|><|endoftext|><repo_name><reponame><file_sep><filename><gh_stars>",
    "\u00dcn\u00efc\u00f6d\u00e9 \u00c0\u00c9\u00ce\u00d5\u00dc", "\u0130stanbul", "\u01c5 titlecase",
    "\u216b\u2163 roman numerals", "\u00b2\u00b3 superscripts", "\u0663\u0664\u0665 arabic digits",
    "\u0967\u0968\u0969 devanagari digits", "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522",
    "\U0001F3F3\uFE0F\u200D\U0001F308", "\U0001F469\U0001F3FD\u200D\U0001F4BB", "\U0001F1FA\U0001F1F3\U0001F1EA\U0001F1FA",
    "\u200b zero width", "soft\u00adhyphen", "e\u0308\u0301", "Hangul \ud55c\uae00 \u1100\u1101 jamo",
    "Thai \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22", "keycap 1\ufe0f\u20e3", "math \U0001d465\u00b2 + \U0001d466\u00b2",
    "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n", "func main() {\n\tfmt.Println(\"hi\")\n}\n",
    "main :: IO ()\nmain = putStrLn \"hello\"\n", "for f in *.txt; do echo \"$f\"; done",
    "key: value\nlist:\n  - a\n  - b\n", "| a | b |\n|---|---|\n| 1 | 2 |\n", "\\frac{a}{b} + \\sqrt{x^2}",
    "public static void main(String[] args) {}", "<?php echo $x; ?>", "    return x  # comment\n",
    "The year 1999 and 2000; 3.5% of 1,234,567.89 USD.", "Call 555-0123 or +1 (800) 555-0199.",
    "\u0410\u0411\u0412 \u0430\u0431\u0432 \u0401\u0451", "\u0391\u03b8\u03ae\u03bd\u03b1 2024",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 123", "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
    "\ud55c\uad6d\uc5b4\uc640 English \uadf8\ub9ac\uace0 \u65e5\u672c\u8a9e",
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


def tokenize_all(llm, texts, add_bos, special):
    return [llm.tokenize(t.encode("utf-8"), add_bos=add_bos, special=special) for t in texts]


def piece(vocab, token, special):
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    assert 0 <= n <= len(buf)
    return buf.raw[:n].hex()


def main():
    llm = llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    texts = FIXED + EXTRA + generated(100)
    assert len(set(texts)) == len(texts), "duplicate test strings"

    variants = {}
    fields = read_fields(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        for name, pre in (("llama3", "llama-bpe"), ("qwen2", "qwen2")):
            path = os.path.join(tmp, name + ".gguf")
            write_vocab_gguf(path, fields, {"tokenizer.ggml.pre": (pre, [GGUFValueType.STRING])})
            v = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
            variants[name] = tokenize_all(v, texts, add_bos, True)
            del v

    cases = []
    for i, t in enumerate(texts):
        b = t.encode("utf-8")
        ids = llm.tokenize(b, add_bos=add_bos, special=True)
        plain = llm.tokenize(b, add_bos=add_bos, special=False)
        dec = llm.detokenize(ids, special=True).decode("utf-8", "replace")
        cases.append({"text": t, "ids": ids, "ids_plain": plain, "decoded": dec,
                      "ids_llama3": variants["llama3"][i], "ids_qwen2": variants["qwen2"][i]})
    # Pieces of the control tokens and byte images at the start of the
    # vocabulary, then a spread over the rest.
    sample = sorted(set(range(0, 300)) | set(range(300, n_vocab, 97)) | {n_vocab - 1})
    pieces = [{"id": t, "special": piece(vocab, t, True), "plain": piece(vocab, t, False)} for t in sample]
    out = {"llama_cpp_version": llama_cpp.__version__,
           "model_sha256": hashlib.sha256(open(MODEL, "rb").read()).hexdigest(),
           "add_bos": add_bos, "bos": llm.token_bos(), "eos": llm.token_eos(),
           "eog_ids": [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)],
           "cases": cases, "pieces": pieces}
    dest = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "smollm2_llamacpp.json")
    with open(dest, "w") as fh:
        json.dump(out, fh, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {dest}: {len(cases)} strings, {len(pieces)} pieces, eog {out['eog_ids']}")


if __name__ == "__main__":
    main()
