#!/usr/bin/env python3
"""Tiny random-weight GGUFs of every architecture actorlm runs, and the
logits llama.cpp computes on them, for tests/model/architectures_test.cpp.

Each file is written with gguf-py (PyPI `gguf`) the way llama.cpp's converter
lays that architecture out (its metadata keys, its tensor names, fused q/k/v
and gate/up where the architecture has them, Gemma's norms holding 1 + w),
with float32 weights so the comparison is tight, and the 600-token
SentencePiece vocabulary of tests/fixtures/tokenizer/spm_tiny.gguf so that
`actorlm run` can use the files too. Sizes are small but keep what each
architecture does visible: GQA (4 query heads over 2 KV heads), a head_dim
that is not hidden / heads (Gemma 3), a sliding window of 5 positions on
a 24-token sequence (Gemma 2/3), small softcaps (Gemma 2), linear RoPE
scaling and a second RoPE base (Gemma 3), a NoPE layer (SmolLM3), experts of their own width with top-2 routing
(Qwen3-MoE; Mixtral, which GGUF calls "llama").

Writes tests/fixtures/architectures/<arch>.gguf and
tests/fixtures/architectures/logits.json:
  {"llama_cpp_version", "tokens": [24 ids], "positions": [...],
   "models": {arch: {"file": "<arch>.gguf", "logits": [[vocab floats] per position]}}}
logits[i] is llama.cpp's output after tokens[0..positions[i]] from one
batched pass over all 24 tokens (logits_all); greedy: the 32 tokens argmax
picks after the 24, decoded one at a time; smallest_gap: the smallest
top-1 minus top-2 logit over those steps (a near tie there could flip on
rounding).

Needs llama-cpp-python importable against a libllama built from the same
sdist (scripts/reference README in docs/BENCHMARKS.md: put the sdist on
sys.path and LLAMA_CPP_LIB_PATH at its build/bin), numpy and gguf.
Usage: python3 scripts/reference/architectures_fixture.py
"""
import json
import os
import sys

import numpy as np
import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "architectures")
VOCAB = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "spm_tiny.gguf")

HIDDEN, HEADS, KV_HEADS, FFN = 32, 4, 2, 64
TOKENS = [1, 45, 310, 77, 502, 9, 188, 260, 33, 599, 412, 5, 123, 76, 300, 18, 444, 250, 61, 90, 7, 333, 555, 140]
POSITIONS = [0, 5, 11, 17, 23]
GREEDY = 32


def vocab_fields():
    r = gguf.GGUFReader(VOCAB)
    tokens = [bytes(r.fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
              for i in r.fields["tokenizer.ggml.tokens"].data]
    scores = [float(r.fields["tokenizer.ggml.scores"].parts[i][0]) for i in r.fields["tokenizer.ggml.scores"].data]
    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0]) for i in r.fields["tokenizer.ggml.token_type"].data]
    def scalar(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]
    return tokens, scores, types, int(scalar("tokenizer.ggml.bos_token_id")), int(scalar("tokenizer.ggml.eos_token_id")), \
        int(scalar("tokenizer.ggml.unknown_token_id"))


# What each architecture is built from. head_dim: per head; layers; extra
# metadata; flags for tensors.
ARCHS = {
    "llama": dict(layers=2, head_dim=8, tied=False),
    "qwen2": dict(layers=2, head_dim=8, bias=True),
    "qwen3": dict(layers=2, head_dim=8, qk_norm=True),
    "gemma": dict(layers=2, head_dim=8, norm_shift=True),
    "gemma2": dict(layers=2, head_dim=8, norm_shift=True, post_norms=True,
                   meta=dict(sliding_window=5, attn_logit_softcapping=1.5, final_logit_softcapping=10.0)),
    "gemma3": dict(layers=2, head_dim=16, norm_shift=True, post_norms=True, qk_norm=True,
                   meta=dict(sliding_window=5, sliding_window_pattern=2, rope_linear=4.0, rope_base=1e6)),
    "phi3": dict(layers=2, head_dim=8, fused=True),
    "smollm3": dict(layers=4, head_dim=8),
    "qwen3moe": dict(layers=2, head_dim=8, qk_norm=True, experts=(6, 2, 24)),
    # Mixtral's GGUFs say "llama" and carry experts.
    "mixtral": dict(arch="llama", layers=2, head_dim=8, experts=(4, 2, FFN)),
}


def write(arch, spec, rng, vocab):
    tokens, scores, types, bos, eos, unk = vocab
    n_vocab = len(tokens)
    hd = spec["head_dim"]
    layers = spec["layers"]
    meta = spec.get("meta", {})
    path = os.path.join(OUT, f"{arch}.gguf")
    w = gguf.GGUFWriter(path, spec.get("arch", arch))
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(meta.get("rope_base", 10000.0))
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(n_vocab)
    if "experts" in spec:
        n_exp, used, width = spec["experts"]
        w.add_expert_count(n_exp)
        w.add_expert_used_count(used)
        if width != FFN:
            w.add_expert_feed_forward_length(width)
    if "sliding_window" in meta:
        w.add_sliding_window(meta["sliding_window"])
    if "sliding_window_pattern" in meta:
        w.add_sliding_window_pattern(meta["sliding_window_pattern"])
    if "attn_logit_softcapping" in meta:
        w.add_attn_logit_softcapping(meta["attn_logit_softcapping"])
    if "final_logit_softcapping" in meta:
        w.add_final_logit_softcapping(meta["final_logit_softcapping"])
    if "rope_linear" in meta:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(meta["rope_linear"])
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(unk)
    w.add_add_bos_token(True)

    def mat(rows, cols, scale=None):
        s = scale if scale is not None else 1.0 / np.sqrt(cols)
        return (rng.standard_normal((rows, cols)) * s).astype(np.float32)

    def norm(n):  # as stored: Gemma's converter has already added its 1
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    q, kv = HEADS * hd, KV_HEADS * hd
    w.add_tensor("token_embd.weight", mat(n_vocab, HIDDEN, 0.15 if spec.get("norm_shift") else 0.5))
    w.add_tensor("output_norm.weight", norm(HIDDEN))
    if spec.get("tied") is False:
        w.add_tensor("output.weight", mat(n_vocab, HIDDEN))
    for l in range(layers):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", norm(HIDDEN))
        if spec.get("fused"):
            w.add_tensor(p + "attn_qkv.weight", mat(q + 2 * kv, HIDDEN))
        else:
            w.add_tensor(p + "attn_q.weight", mat(q, HIDDEN))
            w.add_tensor(p + "attn_k.weight", mat(kv, HIDDEN))
            w.add_tensor(p + "attn_v.weight", mat(kv, HIDDEN))
        if spec.get("bias"):
            w.add_tensor(p + "attn_q.bias", (0.3 * rng.standard_normal(q)).astype(np.float32))
            w.add_tensor(p + "attn_k.bias", (0.3 * rng.standard_normal(kv)).astype(np.float32))
            w.add_tensor(p + "attn_v.bias", (0.3 * rng.standard_normal(kv)).astype(np.float32))
        if spec.get("qk_norm"):
            w.add_tensor(p + "attn_q_norm.weight", norm(hd))
            w.add_tensor(p + "attn_k_norm.weight", norm(hd))
        w.add_tensor(p + "attn_output.weight", mat(HIDDEN, q))
        if spec.get("post_norms"):
            w.add_tensor(p + "post_attention_norm.weight", norm(HIDDEN))
        w.add_tensor(p + "ffn_norm.weight", norm(HIDDEN))
        if "experts" in spec:
            n_exp, _, width = spec["experts"]
            w.add_tensor(p + "ffn_gate_inp.weight", mat(n_exp, HIDDEN, 1.0))
            w.add_tensor(p + "ffn_gate_exps.weight", np.stack([mat(width, HIDDEN) for _ in range(n_exp)]))
            w.add_tensor(p + "ffn_up_exps.weight", np.stack([mat(width, HIDDEN) for _ in range(n_exp)]))
            w.add_tensor(p + "ffn_down_exps.weight", np.stack([mat(HIDDEN, width) for _ in range(n_exp)]))
        elif spec.get("fused"):
            w.add_tensor(p + "ffn_up.weight", mat(2 * FFN, HIDDEN))
        else:
            w.add_tensor(p + "ffn_gate.weight", mat(FFN, HIDDEN))
            w.add_tensor(p + "ffn_up.weight", mat(FFN, HIDDEN))
        if "experts" not in spec:
            w.add_tensor(p + "ffn_down.weight", mat(HIDDEN, FFN))
        if spec.get("post_norms"):
            w.add_tensor(p + "post_ffw_norm.weight", norm(HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def logits_of(path):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=64, n_ubatch=64, n_threads=2, logits_all=True,
                          verbose=False)
    llm.eval(TOKENS)
    scores = np.array(llm.scores[: len(TOKENS)], dtype=np.float32)
    logits = [[float(f"{x:.6g}") for x in scores[p]] for p in POSITIONS]
    # Greedy: the prompt's last logits, then one token at a time.
    greedy, gaps = [], []
    row = scores[len(TOKENS) - 1]
    for _ in range(GREEDY):
        top2 = np.sort(row)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        t = int(np.argmax(row))
        greedy.append(t)
        llm.eval([t])
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    del llm
    return logits, greedy, min(gaps), llama_cpp.__version__


def main():
    os.makedirs(OUT, exist_ok=True)
    vocab = vocab_fields()
    out = {"tokens": TOKENS, "positions": POSITIONS, "models": {}}
    for i, (arch, spec) in enumerate(ARCHS.items()):
        rng = np.random.RandomState(1000 + i)  # legacy generator: a frozen stream
        path = write(arch, spec, rng, vocab)
        logits, greedy, gap, version = logits_of(path)
        out["llama_cpp_version"] = version
        out["models"][arch] = {"file": f"{arch}.gguf", "logits": logits, "greedy": greedy, "smallest_gap": gap}
        print(f"{arch}: {os.path.getsize(path)} bytes, greedy {greedy[:8]}..., smallest top-2 gap {gap:.4g}")
    with open(os.path.join(OUT, "logits.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
