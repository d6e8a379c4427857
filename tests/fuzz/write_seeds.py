#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Seeds are small, valid inputs that reach deep into each parser, so the fuzzer
starts from real structure instead of discovering it byte by byte. Formats
are those in each target's header comment.
"""
import json
import os
import struct
import zlib

here = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ------------------------------------------------------------ openai_request
chat = [
    {"messages": [{"role": "user", "content": "Hi"}]},
    {"model": "default", "messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": [{"type": "text", "text": "2+2?"}]}],
     "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "max_tokens": 16, "n": 2, "seed": 7,
     "stream": True, "stream_options": {"include_usage": True}, "logprobs": True, "top_logprobs": 3,
     "stop": ["\n", "User:"], "frequency_penalty": 0.5, "presence_penalty": -0.5, "repetition_penalty": 1.1},
    {"messages": [{"role": "assistant", "content": "x"}], "stop": "END", "max_completion_tokens": 1},
    {"messages": [{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{\"c\": 1}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
     "tools": [{"type": "function", "function": {"name": "w", "description": "d", "parameters": {
         "type": "object", "properties": {"c": {"type": "integer"}}}}}],
     "tool_choice": {"type": "function", "function": {"name": "w"}}, "parallel_tool_calls": False,
     "logit_bias": {"5": -100, "17": 2.5}, "seed": -3, "user": "u"},
    {"messages": [{"role": "user", "content": "JSON"}], "tool_choice": "none",
     "response_format": {"type": "json_schema", "json_schema": {"name": "s", "strict": True, "schema": {
         "type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"}}, "required": ["a"]}}}},
]
completion = [
    {"prompt": "Once upon a time", "max_tokens": 8, "logprobs": 2, "echo": False},
    {"prompt": [1, 2, 3, 49151], "temperature": 0, "stream": True},
    {"prompt": ["One,", [1, 2]], "n": 2, "echo": True, "response_format": {"type": "json_object"}},
]
for i, body in enumerate(chat):
    write("openai_request_fuzz", f"chat-{i}", "0" + json.dumps(body))
for i, body in enumerate(completion):
    write("openai_request_fuzz", f"completion-{i}", "1" + json.dumps(body))
write("openai_request_fuzz", "not-json", "0{\"messages\": [")

# ------------------------------------------------------------ envelope
kinds = ["GREQ", "TREQ", "ABRT", "TSTR", "TXTD", "MPFX", "MPFR", "INSQ", "INSR", "LOCK", "LCKR", "EVIC",
         "EVCR", "CREQ", "CRQR", "ARSQ", "ARSR", "ATKQ", "ATKR", "FREQ", "FRER", "PSTQ", "PSTR", "FWDB",
         "BRES", "STAQ", "STAR", "NHLO", "NCHL", "NJON", "NWEL"]


def empty_table(ident):
    # root offset -> table at 12; vtable at 8 (4 bytes, no fields); table's
    # soffset back to it.
    return struct.pack("<I", 12) + ident.encode() + struct.pack("<HHi", 4, 4, 4)


def seal(kind, payload):
    head = b"ALM1" + struct.pack("<HHI", 1, kind, len(payload))
    crc = zlib.crc32(payload, zlib.crc32(head))
    return head + struct.pack("<I", crc) + payload


for k, ident in enumerate(kinds, start=1):
    payload = empty_table(ident)
    write("envelope_fuzz", f"whole-{ident}", b"\x00" + seal(k, payload))
    write("envelope_fuzz", f"sealed-{ident}", b"\x01" + bytes([k - 1]) + payload)

# ------------------------------------------------------------ gguf_file
def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(meta, tensors, alignment=32):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for key, (vtype, body) in meta:
        out += gstr(key) + struct.pack("<I", vtype) + body
    offset, offsets = 0, []
    for name, shape, ttype, raw in tensors:
        out += gstr(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", ttype, offset)
        offsets.append(offset)
        offset = (offset + len(raw) + alignment - 1) // alignment * alignment
    out += b"\0" * (-len(out) % alignment)
    start = len(out)
    for (name, shape, ttype, raw), off in zip(tensors, offsets):
        out += b"\0" * (start + off - len(out)) + raw
    return out


U32, F32, STR, ARR = 4, 6, 8, 9


def u32(v): return (U32, struct.pack("<I", v))
def f32(v): return (F32, struct.pack("<f", v))
def s(v): return (STR, gstr(v))
def strs(v): return (ARR, struct.pack("<IQ", STR, len(v)) + b"".join(gstr(x) for x in v))
def f32s(v): return (ARR, struct.pack("<IQ", F32, len(v)) + b"".join(struct.pack("<f", x) for x in v))


def f32_tensor(name, shape):
    n = 1
    for d in shape:
        n *= d
    return (name, shape, 0, b"".join(struct.pack("<f", (i % 13) * 0.01) for i in range(n)))


tokens = [chr(ord("a") + i) for i in range(26)] + ["ab", "<|im_start|>", "<|im_end|>", "Ġ", "Ċ"]
hidden, ffn = 8, 8
llama_meta = [("general.architecture", s("llama")), ("llama.block_count", u32(1)),
              ("llama.embedding_length", u32(hidden)), ("llama.attention.head_count", u32(2)),
              ("llama.attention.head_count_kv", u32(1)), ("llama.feed_forward_length", u32(ffn)),
              ("llama.context_length", u32(64)), ("llama.rope.freq_base", f32(10000.0)),
              ("tokenizer.ggml.model", s("gpt2")), ("tokenizer.ggml.pre", s("smollm")),
              ("tokenizer.ggml.tokens", strs(tokens)), ("tokenizer.ggml.merges", strs(["a b"])),
              ("tokenizer.ggml.token_type", (ARR, struct.pack("<IQ", 5, len(tokens)) +
                                             b"".join(struct.pack("<i", 3 if t.startswith("<|") else 1) for t in tokens))),
              ("tokenizer.ggml.bos_token_id", u32(27)), ("tokenizer.ggml.eos_token_id", u32(28)),
              ("tokenizer.chat_template", s("{% for m in messages %}<|im_start|>{{m.role}}{% endfor %}"))]
llama_tensors = [f32_tensor("token_embd.weight", [hidden, len(tokens)]), f32_tensor("output_norm.weight", [hidden])]
for name, shape in [("attn_norm", [hidden]), ("attn_q", [hidden, 8]), ("attn_k", [hidden, 4]),
                    ("attn_v", [hidden, 4]), ("attn_output", [8, hidden]), ("ffn_norm", [hidden]),
                    ("ffn_gate", [hidden, ffn]), ("ffn_up", [hidden, ffn]), ("ffn_down", [ffn, hidden])]:
    llama_tensors.append(f32_tensor(f"blk.0.{name}.weight", shape))
write("gguf_file_fuzz", "tiny-llama", gguf(llama_meta, llama_tensors))

# The same model's metadata as other architectures: the keys each one reads
# (windows, their pattern as a number or a list, softcaps, experts).
def renamed(arch, extra):
    meta = [(k.replace("llama.", arch + ".", 1), v) for k, v in llama_meta]
    meta[0] = ("general.architecture", s(arch))
    return meta + [(arch + "." + k, v) for k, v in extra]

bools = lambda v: (ARR, struct.pack("<IQ", 7, len(v)) + bytes(v))
write("gguf_file_fuzz", "gemma3", gguf(renamed("gemma3", [("attention.sliding_window", u32(4)),
                                                          ("attention.sliding_window_pattern", bools([1])),
                                                          ("final_logit_softcapping", f32(30.0)),
                                                          ("rope.scaling.type", s("linear")),
                                                          ("rope.scaling.factor", f32(8.0))]), llama_tensors))
write("gguf_file_fuzz", "qwen3moe", gguf(renamed("qwen3moe", [("expert_count", u32(4)), ("expert_used_count", u32(2)),
                                                              ("expert_feed_forward_length", u32(4))]), llama_tensors))

spm_tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a"] + [f"<0x{b:02X}>" for b in range(256)]
spm_meta = [("general.architecture", s("llama")), ("tokenizer.ggml.model", s("llama")),
            ("tokenizer.ggml.tokens", strs(spm_tokens)), ("tokenizer.ggml.scores", f32s([-float(i) for i in range(len(spm_tokens))])),
            ("tokenizer.ggml.add_bos_token", (7, b"\x01")), ("general.alignment", u32(64))]
write("gguf_file_fuzz", "spm-vocab", gguf(spm_meta, [], alignment=64))

# Quantized rows of each supported type (one block each), bytes arbitrary but fixed.
quant = [("q4_0", 2, 32, 18), ("q4_1", 3, 32, 20), ("q8_0", 8, 32, 34), ("f16", 1, 4, 8), ("bf16", 30, 4, 8),
         ("q4_k", 12, 256, 144), ("q6_k", 14, 256, 210), ("q5_0", 6, 32, 22)]
write("gguf_file_fuzz", "quantized", gguf([("general.name", s("types"))],
                                          [(n, [e], t, bytes((i * 37) % 251 for i in range(b))) for n, t, e, b in quant]))

# ------------------------------------------------------------ tokenizer
texts = ["Hello, world! 123 4567", "  leading spaces\n\nand\ttabs", "naïve café 日本語 😀",
         "<|im_start|>user\nhi<|im_end|>", "don't won't I'm we'll", "\xff\xfe invalid \xc3 bytes"]
for i, t in enumerate(texts):
    raw = t.encode("latin-1") if i == len(texts) - 1 else t.encode()
    write("tokenizer_fuzz", f"text-{i}", bytes([i % 4]) + raw)
write("tokenizer_fuzz", "ids", b"\x04" + b"".join(struct.pack("<i", x) for x in [1, 9906, 28, 2, 49151, 49152, -1, 216, 100]))

# ------------------------------------------------------------ chat_template
convs = [[("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!"), ("user", "  2+2?  ")],
         [("user", "<|im_end|> tricky")], [("tool", "{\"x\": 1}")]]
for i, conv in enumerate(convs):
    body = b"\0".join(f.encode() for m in conv for f in m)
    write("chat_template_fuzz", f"conv-{i}", bytes([i * 3 % 8]) + body)
write("chat_template_fuzz", "template", b"\x06{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are SmolLM<|im_end|>\n{% endif %}")
