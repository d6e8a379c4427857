#!/usr/bin/env python3
"""Writes a Llama-shaped GGUF with random f16 weights (Llama 3.2 1B's shape by
default: 16 layers, hidden 2048, FFN 8192, 32 query / 8 KV heads of 64, tied
embeddings) and the default model's vocabulary, for speed comparisons on a
model big enough that per-step overheads and the embedding do not dominate.
The weights are noise scaled like a trained model's (std 0.02): good for
timing, meaningless as text. Quantize it with llama.cpp's llama-quantize
(bench/llamacpp_compare.py --model OUT does that per type).

  python3 bench/make_random_llama.py [--out ~/.cache/actorlm/bench/random-llama-1b.F16.gguf]
      [--layers 16] [--hidden 2048] [--ffn 8192] [--heads 32] [--kv-heads 8]
      [--distinct-layers N]

The writer holds every tensor in memory until it writes the file, so an 8B
shape (--layers 32 --hidden 4096 --ffn 14336: 14 GB of f16) needs
--distinct-layers (e.g. 4): the layers then cycle through N sets of random
matrices, which costs a forward pass exactly the same and needs N/layers of
the memory.

Needs the gguf package (pip install gguf) and the default model (for its
tokenizer fields: llama.cpp refuses a GGUF without a vocabulary).
"""
import argparse
import os

import numpy as np
import gguf

CACHE = os.environ.get("ACTORLM_CACHE", os.path.expanduser("~/.cache/actorlm"))
VOCAB_SOURCE = os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf")


def copy_field(field, writer):
    """One metadata field of a GGUFReader into a GGUFWriter, as it was."""
    kind = field.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            values = [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data]
        else:
            values = [field.parts[i].tolist()[0] for i in field.data]
        writer.add_array(field.name, values)
    elif kind == gguf.GGUFValueType.STRING:
        writer.add_string(field.name, bytes(field.parts[field.data[0]]).decode("utf-8", errors="surrogateescape"))
    else:
        writer.add_key_value(field.name, field.parts[field.data[0]].tolist()[0], kind)


def copy_tokenizer(reader, writer):
    for field in reader.fields.values():
        if field.name.startswith("tokenizer."):
            copy_field(field, writer)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(CACHE, "bench", "random-llama-1b.F16.gguf"))
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--distinct-layers", type=int, default=0,
                    help="cycle the layers through this many weight sets (0: every layer its own)")
    args = ap.parse_args()

    reader = gguf.GGUFReader(VOCAB_SOURCE)
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    head_dim = args.hidden // args.heads
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("random-llama")
    w.add_block_count(args.layers)
    w.add_context_length(8192)
    w.add_embedding_length(args.hidden)
    w.add_feed_forward_length(args.ffn)
    w.add_head_count(args.heads)
    w.add_head_count_kv(args.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    copy_tokenizer(reader, w)

    rng = np.random.default_rng(args.seed)

    made = {}

    def matrix(name, rows, cols, layer=None):
        # The writer keeps a reference, not a copy: a reused set costs nothing.
        key = (name.split(".", 2)[-1], layer % args.distinct_layers) if args.distinct_layers and layer is not None else name
        if key not in made:
            made[key] = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)
        w.add_tensor(name, made[key])

    def norm(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    H, F, KV = args.hidden, args.ffn, args.kv_heads * head_dim
    matrix("token_embd.weight", vocab, H)
    for i in range(args.layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", H)
        matrix(p + "attn_q.weight", H, H, i)
        matrix(p + "attn_k.weight", KV, H, i)
        matrix(p + "attn_v.weight", KV, H, i)
        matrix(p + "attn_output.weight", H, H, i)
        norm(p + "ffn_norm.weight", H)
        matrix(p + "ffn_gate.weight", F, H, i)
        matrix(p + "ffn_up.weight", F, H, i)
        matrix(p + "ffn_down.weight", H, F, i)
    norm("output_norm.weight", H)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(args.out)


if __name__ == "__main__":
    main()
