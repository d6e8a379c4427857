#!/usr/bin/env python3
"""Writes a randomly initialised Llama (4 layers, GQA 8/2) with Hugging Face
transformers, and what transformers computes with it, for
tests/executor/cuda_executor_test.cpp to compare against.

usage: hf_reference.py OUT_DIR

OUT_DIR gets config.json + model.safetensors (bf16 weights, so both sides
start from the same numbers) and reference.json: for each prompt, the greedy
continuation from transformers' generate() and the logits of every position
of prompt + continuation (teacher forcing), computed in float64 on the CPU
from the bf16 weights: an exact reference (float32 on the GPU lets PyTorch use
reduced-precision paths whose error grows with the sequence).
"""
import json
import os
import sys

import torch
import transformers


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    cfg = transformers.LlamaConfig(
        vocab_size=512, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        initializer_range=0.05, bos_token_id=1, eos_token_id=2,
    )
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    # Norm weights away from 1 so a missing or misplaced norm shows.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    # Spell RoPE out in the pre-v5 keys too, whatever this transformers writes.
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    c["rope_theta"] = 10000.0
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)

    # Reload instead of model.double(): .to(bfloat16) above also rounded the
    # rotary inv_freq buffer to bf16, an angle error that grows with the
    # position. Loading recomputes it.
    model = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float64).eval()
    gen = torch.Generator().manual_seed(99)
    cases = []
    for n in (1, 5, 16, 200):
        prompt = torch.randint(3, cfg.vocab_size, (n,), generator=gen).tolist()
        ids = torch.tensor([prompt])
        with torch.no_grad():
            seq = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)[0].tolist()
            logits = model(torch.tensor([seq])).logits[0].float()
        cases.append({"prompt": prompt, "continuation": seq[n:], "logits": logits.flatten().tolist()})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "vocab": cfg.vocab_size, "cases": cases}, f)
    print(f"hf_reference: wrote {out} (transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
