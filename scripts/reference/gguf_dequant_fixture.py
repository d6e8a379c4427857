#!/usr/bin/env python3
"""Reference data for actorlm's GGUF reader and dequantizers, made with the
`gguf` Python package's own reader and dequantizer (pip install gguf numpy).

Writes tests/fixtures/gguf/dequant.json:
  model:     metadata of the default model file and every tensor's name/type/shape
  tensors:   for a few tensors covering each type in that file: the first
             `rows` rows (first 64 values each) and float64 sum / sum of squares
             of the whole dequantized tensor
  synthetic: for each supported type: random blocks (valid scales) as hex with
             gguf's dequantized values

Usage: python3 scripts/reference/gguf_dequant_fixture.py [model.gguf]
"""
import hashlib
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
model = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
    "~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf")

reader = gguf.GGUFReader(model)


def field(name):
    f = reader.fields[name]
    v = f.contents()
    return v


meta_keys = ["general.architecture", "llama.block_count", "llama.context_length",
             "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
             "llama.attention.head_count_kv", "llama.rope.freq_base",
             "llama.attention.layer_norm_rms_epsilon", "llama.vocab_size",
             "llama.rope.dimension_count", "tokenizer.ggml.model", "tokenizer.ggml.pre",
             "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"]
out = {
    "gguf_version": gguf.__version__ if hasattr(gguf, "__version__") else "unknown",
    "model": {
        "file": os.path.basename(model),
        "sha256": hashlib.sha256(open(model, "rb").read()).hexdigest(),
        "version": int(field("GGUF.version")),
        "metadata": {k: field(k) for k in meta_keys},
        "token_count": len(reader.fields["tokenizer.ggml.tokens"].data),
        "tensors": [{"name": t.name, "type": t.tensor_type.name,
                     "shape": [int(d) for d in t.shape]} for t in reader.tensors],
    },
    "tensors": [],
    "synthetic": [],
}

picks = ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_norm.weight",
         "blk.29.ffn_down.weight", "output_norm.weight"]
by_name = {t.name: t for t in reader.tensors}
for name in picks:
    t = by_name[name]
    x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    x = x.reshape(-1, int(t.shape[0]))  # rows of ne0 elements
    x64 = x.astype(np.float64)
    out["tensors"].append({
        "name": name, "type": t.tensor_type.name,
        "rows": [[float(v) for v in row[:64]] for row in x[:3]],
        "sum": float(x64.sum()), "sumsq": float((x64 * x64).sum()),
    })

rng = np.random.default_rng(1234)
# (type, bytes per block, elements per block, offsets of f16 scale fields)
layouts = [
    (Q.Q4_0, 18, 32, [0]), (Q.Q4_1, 20, 32, [0, 2]), (Q.Q5_0, 22, 32, [0]),
    (Q.Q5_1, 24, 32, [0, 2]), (Q.Q8_0, 34, 32, [0]), (Q.Q4_K, 144, 256, [0, 2]),
    (Q.Q5_K, 176, 256, [0, 2]), (Q.Q6_K, 210, 256, [208]),
]
for qtype, bsize, belems, scales in layouts:
    blocks = 3
    raw = rng.integers(0, 256, size=(blocks, bsize), dtype=np.uint8)
    for b in range(blocks):
        for off in scales:
            h = np.array([rng.uniform(-0.05, 0.05)], dtype=np.float16).view(np.uint8)
            raw[b, off:off + 2] = h
    vals = gguf.quants.dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
    assert vals.size == blocks * belems
    out["synthetic"].append({"type": qtype.name, "n": int(vals.size),
                             "hex": raw.reshape(-1).tobytes().hex(),
                             "values": [float(v) for v in vals]})
for qtype, dt in [(Q.F16, np.float16), (Q.BF16, None)]:
    f = rng.normal(0, 3, size=64).astype(np.float32)
    if dt is not None:
        raw = f.astype(dt).view(np.uint8)
    else:  # bf16: the upper half of each float32
        raw = (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    vals = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(-1)
    out["synthetic"].append({"type": qtype.name, "n": int(vals.size), "hex": raw.tobytes().hex(),
                             "values": [float(v) for v in vals]})

dest = os.path.join(ROOT, "tests", "fixtures", "gguf", "dequant.json")
with open(dest, "w") as fh:
    json.dump(out, fh, separators=(",", ":"))
print(f"wrote {dest} ({os.path.getsize(dest)} bytes)")
