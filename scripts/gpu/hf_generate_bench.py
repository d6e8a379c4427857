#!/usr/bin/env python3
"""End-to-end generation with Hugging Face transformers, the peer for
`cuda_bench e2e` on the same GPU in the same run.

usage: hf_generate_bench.py make DIR            writes a random Llama (1B-class
                                                shape, bf16 safetensors) to DIR
       hf_generate_bench.py run DIR BATCH NEW [PROMPT_LEN]
                                                greedy generate(), bf16, static
                                                batch; prints output tokens/s
"""
import sys
import time

import torch
import transformers


def make(path: str) -> None:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False, initializer_range=0.02,
    )
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    print(f"wrote {path}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")


def run(path: str, batch: int, new: int, prompt_len: int) -> None:
    model = transformers.LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt_len), generator=gen).cuda()
    mask = torch.ones_like(ids)
    for attempt in range(2):  # the first warms up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                 pad_token_id=0)
        torch.cuda.synchronize()
        sec = time.perf_counter() - t0
    generated = (out.shape[1] - prompt_len) * batch
    print(f"transformers {transformers.__version__} generate: batch {batch}, prompt {prompt_len}, {new} new tokens: "
          f"{sec:.3f} s, {generated / sec:.0f} output tokens/s")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 128)
