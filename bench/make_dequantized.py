#!/usr/bin/env python3
"""Writes a GGUF file's weights dequantized to f32 (or f16 matrices), every
metadata field kept: the same model, several times the bytes per token.

For speculative decoding with a draft model on a machine that holds only the
default model: the dequantized file is the target, the quantized original its draft
(the same weights, so its guesses are usually the target's), and
llama-server gets the same pair (`--model-draft`). Timing that pair measures
what drafting saves when the target reads several times the draft's bytes
per token (f32: 5.5x the Q4_1 file), as a 0.5B draft does for a 3B target.

  python3 bench/make_dequantized.py [--src ~/.cache/actorlm/SmolLM2-135M-Instruct.Q4_1.gguf]
      [--dtype f32|f16] [--out ~/.cache/actorlm/bench/SmolLM2-135M-Instruct.F32.gguf]

Needs the gguf package (pip install gguf).
"""
import argparse
import os

import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_random_llama import copy_field  # noqa: E402

CACHE = os.environ.get("ACTORLM_CACHE", os.path.expanduser("~/.cache/actorlm"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--dtype", choices=["f32", "f16"], default="f32")
    ap.add_argument("--out")
    args = ap.parse_args()
    args.out = args.out or os.path.join(CACHE, "bench", f"SmolLM2-135M-Instruct.{args.dtype.upper()}.gguf")

    reader = gguf.GGUFReader(args.src)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    w = gguf.GGUFWriter(args.out, arch)
    # The writer adds the architecture itself; the file type changes.
    skip = {"general.architecture", "general.file_type", "general.quantization_version"}
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in skip:
            continue
        copy_field(field, w)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if args.dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        values = np.asarray(values, dtype=np.float32).reshape(list(reversed([int(d) for d in t.shape])))
        w.add_tensor(t.name, values.astype(np.float16) if args.dtype == "f16" and values.ndim > 1 else values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(args.out)


if __name__ == "__main__":
    main()
