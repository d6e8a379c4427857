#!/usr/bin/env python3
"""SentencePiece (Llama 2 style) tokenizer reference for actorlm's tests.

No Llama 2 vocabulary is available offline, so this script trains a small
SentencePiece BPE model the way Llama 2's was configured (BPE, byte
fallback, digits split, identity normalisation, dummy prefix, whitespace kept)
on local English text plus the strings of tokenizer_fixture.py, adds control
tokens <|im_start|> <|im_end|> and a user-defined token <|user|>, and writes:

  tests/fixtures/tokenizer/spm_tiny.gguf            vocabulary-only GGUF
      (tokenizer.ggml.model = "llama": tokens, scores, token types), as
      llama.cpp's converter writes a SentencePiece vocabulary
  tests/fixtures/tokenizer/spm_tiny/tokenizer.json  the same vocabulary in
      Hugging Face form (merges derived from the scores, byte_fallback,
      Prepend/Replace normalizer) + tokenizer_config.json
  tests/fixtures/tokenizer/spm_tiny_llamacpp.json   llama.cpp on the GGUF:
      {"add_bos", "bos", "eos", "eog_ids", "cases": [{"text",
        "ids" (add_bos=True, special=True), "ids_plain" (special=False),
        "ids_nobos" (add_bos=False, special=True),
        "decoded" (detokenize(ids, special=True), replacement on invalid),
        "sentencepiece" (sentencepiece's own encode, for information)}],
       "pieces": [{"id", "special": hex, "plain": hex}]}
  tests/fixtures/tokenizer/bad_*.gguf               small broken vocabularies

Usage: python3 scripts/reference/tokenizer_spm_fixture.py
"""
import ctypes
import glob
import json
import os
import sys
import tempfile

import llama_cpp
import sentencepiece as spm
from gguf import GGUFValueType as T

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_fixture import EXTRA, FIXED, MODEL, generated  # noqa: E402
from tokenizer_vocab_gguf import llama_hparams, read_fields, write_vocab_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
CONTROL = ["<|im_start|>", "<|im_end|>"]
USER_DEFINED = ["<|user|>"]


def corpus():
    lines = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="ignore") as fh:
                lines += [ln.rstrip("\n") for ln in fh if ln.strip()]
    lines += [t for t in FIXED + EXTRA + generated(300, seed=11) if "\n" not in t and t.strip()]
    return lines


def train(tmp):
    prefix = os.path.join(tmp, "spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()), model_prefix=prefix, vocab_size=1200, model_type="bpe",
        byte_fallback=True, split_digits=True, normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, character_coverage=0.9995,
        control_symbols=CONTROL, user_defined_symbols=USER_DEFINED, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        max_sentence_length=1 << 16, num_threads=1, minloglevel=2)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def token_type(sp, i):
    if sp.is_unknown(i):
        return 2
    if sp.is_control(i):
        return 3
    if sp.is_unused(i):
        return 5
    if sp.is_byte(i):
        return 6
    if sp.id_to_piece(i) in USER_DEFINED:
        return 4
    return 1


def tokenizer_json(sp, tokens, types, scores):
    vocab = {t: i for i, t in enumerate(tokens)}
    # Merges from scores: every split of a normal piece into two pieces of the
    # vocabulary, best-scoring result first (how SentencePiece BPE vocabularies
    # are converted to Hugging Face BPE).
    merges = []
    for i, piece in enumerate(tokens):
        if types[i] != 1 or len(piece) < 2:
            continue
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                merges.append((-scores[i], vocab[left], vocab[right], left, right))
    merges.sort()
    added = [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] != 4}
             for i in range(len(tokens)) if types[i] in (2, 3, 4)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{m[3]} {m[4]}" for m in merges]},
    }


def piece(vocab, token, special):
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    assert 0 <= n <= len(buf)
    return buf.raw[:n].hex()


def main():
    base = llama_hparams(read_fields(MODEL))
    with tempfile.TemporaryDirectory() as tmp:
        sp = train(tmp)
    n = sp.get_piece_size()
    tokens = [sp.id_to_piece(i) for i in range(n)]
    scores = [sp.get_score(i) for i in range(n)]
    types = [token_type(sp, i) for i in range(n)]
    fields = dict(base)
    fields["llama.vocab_size"] = (n, [T.UINT32])
    tok = {
        "tokenizer.ggml.model": ("llama", [T.STRING]),
        "tokenizer.ggml.tokens": (tokens, [T.ARRAY, T.STRING]),
        "tokenizer.ggml.scores": (scores, [T.ARRAY, T.FLOAT32]),
        "tokenizer.ggml.token_type": (types, [T.ARRAY, T.INT32]),
        "tokenizer.ggml.bos_token_id": (1, [T.UINT32]),
        "tokenizer.ggml.eos_token_id": (2, [T.UINT32]),
        "tokenizer.ggml.unknown_token_id": (0, [T.UINT32]),
        "tokenizer.ggml.add_bos_token": (True, [T.BOOL]),
        "tokenizer.ggml.add_eos_token": (False, [T.BOOL]),
    }
    gguf_path = os.path.join(OUT, "spm_tiny.gguf")
    write_vocab_gguf(gguf_path, fields, tok)

    hf_dir = os.path.join(OUT, "spm_tiny")
    os.makedirs(hf_dir, exist_ok=True)
    with open(os.path.join(hf_dir, "tokenizer.json"), "w") as fh:
        json.dump(tokenizer_json(sp, tokens, types, scores), fh, ensure_ascii=False)
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as fh:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "chat_template": "{% for m in messages %}[INST] {{ m.content }}{% endfor %}"},
                  fh, indent=1)

    llm = llama_cpp.Llama(model_path=gguf_path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    texts = FIXED + EXTRA + generated(60) + [
        "<|user|>hi", "a<|user|>b", "<|im_start|>user\nHi<|im_end|>", " <|im_start|> x", "<s>text</s>",
        "\u00e9\u00e8\u00ea byte fallback \u0416\u0436 \U0001F600", "\U0001F9D1\u200D\U0001F680 astronaut",
        "  two leading", "trailing  ", "\u2581literal lower block", "<0x41> not a byte token"]
    texts = list(dict.fromkeys(texts))
    cases = []
    for t in texts:
        b = t.encode("utf-8")
        ids = llm.tokenize(b, add_bos=True, special=True)
        cases.append({"text": t, "ids": ids,
                      "ids_plain": llm.tokenize(b, add_bos=True, special=False),
                      "ids_nobos": llm.tokenize(b, add_bos=False, special=True),
                      "decoded": llm.detokenize(ids, special=True).decode("utf-8", "replace"),
                      "sentencepiece": sp.encode(t)})
    pieces = [{"id": i, "special": piece(vocab, i, True), "plain": piece(vocab, i, False)} for i in range(n)]
    out = {"llama_cpp_version": llama_cpp.__version__, "add_bos": True, "bos": llm.token_bos(), "eos": llm.token_eos(),
           "eog_ids": [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)], "cases": cases, "pieces": pieces}
    with open(os.path.join(OUT, "spm_tiny_llamacpp.json"), "w") as fh:
        json.dump(out, fh, ensure_ascii=False, separators=(",", ":"))
    same_as_sp = sum(c["ids_nobos"] == c["sentencepiece"] for c in cases)
    print(f"vocab {n}; {len(cases)} strings; sentencepiece agrees with llama.cpp on {same_as_sp}")

    # Broken vocabularies for error tests.
    small = dict(tok)
    small["tokenizer.ggml.tokens"] = (tokens[:300], [T.ARRAY, T.STRING])
    small["tokenizer.ggml.scores"] = (scores[:300], [T.ARRAY, T.FLOAT32])
    small["tokenizer.ggml.token_type"] = (types[:300], [T.ARRAY, T.INT32])
    bad = {
        "bad_model": {"tokenizer.ggml.model": ("bert", [T.STRING])},
        "bad_no_scores": {"tokenizer.ggml.scores": None},
        "bad_types_length": {"tokenizer.ggml.token_type": (types[:10], [T.ARRAY, T.INT32])},
        "bad_no_tokens": {"tokenizer.ggml.tokens": None},
        "bad_bos_range": {"tokenizer.ggml.bos_token_id": (100000, [T.UINT32])},
        "bad_gpt2_no_merges": {"tokenizer.ggml.model": ("gpt2", [T.STRING])},
    }
    for name, change in bad.items():
        write_vocab_gguf(os.path.join(OUT, name + ".gguf"), base, {**small, **change})
    print("wrote", ", ".join(sorted(bad)))


if __name__ == "__main__":
    main()
