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

# ------------------------------------------------------------ openai_request: the other routes
write("openai_request_fuzz", "generate-0", "2" + json.dumps({"text": "Hi", "sampling_params": {"max_new_tokens": 4}}))
write("openai_request_fuzz", "generate-1", "2" + json.dumps({"input_ids": [1, 2, 3], "stream": True,
                                                             "sampling_params": {"temperature": 0, "stop": ["x"]}}))
write("openai_request_fuzz", "tokenize-0", "4" + json.dumps({"text": "Hello", "add_special_tokens": False}))
write("openai_request_fuzz", "tokenize-1", "4" + json.dumps({"prompt": "Hello"}))
write("openai_request_fuzz", "detokenize-0", "6" + json.dumps({"tokens": [1, 9906, 49151]}))

# ------------------------------------------------------------ http_request
http_requests = [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:30000\r\nAuthorization: Bearer fuzz-key-0123\r\n"
    b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /v1/models?x=1 HTTP/1.1\r\nHost: [::1]:8\r\n"
    b"Authorization: bearer fuzz-key-0123\r\nConnection: close\r\n\r\n",
    b"POST /generate HTTP/1.1\r\nHost: example.test\r\nContent-Type: application/json; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n4\r\n{\"a\"\r\n2\r\n:1\r\n0\r\n\r\n",
    b"GET /a/../metrics HTTP/1.0\r\n\r\n",
    b"GET http://evil/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    b"GET /%2e%2e/nodes HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
]
for i, r in enumerate(http_requests):
    write("http_request_fuzz", f"request-{i}", bytes([(i * 17) % 64]) + r)


# ------------------------------------------------------------ kv_chunk
def kv_chunk_payload(request_id, digest, dtype, token_bytes, n_layers, n_tokens, rng, data, crc=None):
    """A FlatBuffers KvChunk (messages/kv_transfer.fbs, identifier KVCH), laid out by hand: root offset and
    identifier, the vtable, an 8-aligned table, then the two strings and the data vector."""
    crc = zlib.crc32(data) if crc is None else crc
    vtable_at, table_at = 8, 40
    # Field offsets within the table, in schema order.
    fields = [8, 52, 56, 16, 24, 28, 32, 36, 40, 44, 60, 48]
    vtable = struct.pack("<HH", 4 + 2 * len(fields), 64) + struct.pack(f"<{len(fields)}H", *fields)
    tail = bytearray()
    refs = []
    for blob, nul in ((digest.encode(), True), (dtype.encode(), True), (data, False)):
        while (table_at + 64 + len(tail)) % 4:
            tail += b"\0"
        refs.append(table_at + 64 + len(tail))
        tail += struct.pack("<I", len(blob)) + blob + (b"\0" if nul else b"")
    table = bytearray(64)
    struct.pack_into("<i", table, 0, table_at - vtable_at)
    struct.pack_into("<Qq", table, 8, request_id, token_bytes)
    struct.pack_into("<6iI", table, 24, n_layers, n_tokens, *rng, crc)
    for field_at, target in zip((52, 56, 60), refs):
        struct.pack_into("<I", table, field_at, target - (table_at + field_at))
    head = struct.pack("<I", table_at) + b"KVCH" + vtable
    return head + b"\0" * (table_at - len(head)) + bytes(table) + bytes(tail)


# Mode 0: a payload the target seals as a KvChunk (layout "fuzz model", f32, 3 layers, 4 bytes a token).
write("kv_chunk_fuzz", "chunk-whole", b"\x00" + kv_chunk_payload(7, "fuzz model", "f32", 4, 3, 4, (0, 3, 0, 4), bytes(48)))
write("kv_chunk_fuzz", "chunk-part", b"\x00" + kv_chunk_payload(7, "fuzz model", "f32", 4, 3, 8, (1, 2, 2, 5), bytes(range(12))))
write("kv_chunk_fuzz", "chunk-bad-crc", b"\x00" + kv_chunk_payload(7, "fuzz model", "f32", 4, 3, 4, (0, 1, 0, 1), bytes(4), 5))
write("kv_chunk_fuzz", "chunk-foreign", b"\x00" + kv_chunk_payload(7, "other", "f16", 2, 3, 4, (0, 1, 0, 1), bytes(2)))
# Mode 1: a 4-token transfer: layers 0-1 whole, a repeat, layer 2 in two halves, then the commit.
write("kv_chunk_fuzz", "transfer-complete", b"\x01\x03" + bytes([0, 2, 0, 4, 0, 1, 0, 2, 0, 4, 0, 2,
                                                                2, 3, 0, 2, 0, 3, 2, 3, 2, 4, 8, 4]))
write("kv_chunk_fuzz", "transfer-early-commit", b"\x01\x07" + bytes([0, 1, 0, 8, 8, 9]))
# Layer 0 of a 4-token transfer whose request is aborted before its write lands, then a late chunk.
write("kv_chunk_fuzz", "transfer-abort-in-flight", b"\x01\x03" + bytes([0, 1, 0, 4, 16, 5, 1, 2, 0, 4, 0, 6]))
write("kv_chunk_fuzz", "transfer-refused", b"\x01\x03" + bytes([0, 3, 0, 4, 1, 0, 0, 3, 0, 4, 2, 0, 0, 3, 0, 4, 4, 0,
                                                                0, 4, 0, 4, 0, 0, 3, 1, 0, 4, 8, 0]))

# ------------------------------------------------------------ kv_disk_file
write("kv_disk_file_fuzz", "untouched-restart", b"\x00")
write("kv_disk_file_fuzz", "untouched-loaded", b"\x03")
write("kv_disk_file_fuzz", "magic-byte", b"\x00" + bytes([1, 0, ord("X")]))
write("kv_disk_file_fuzz", "header-byte", b"\x02" + bytes([40, 0, 0xff]))
write("kv_disk_file_fuzz", "data-byte", b"\x01" + bytes([0xf0, 0, 0x5a]))
write("kv_disk_file_fuzz", "truncated", b"\x0a" + bytes([100, 0, 0]))
write("kv_disk_file_fuzz", "replaced", b"\x04AKVB\x01\x00\x00\x00\x10\x00\x00\x00" + bytes(16))

# ------------------------------------------------------------ node_gate
nonce = bytes(range(32))
write("node_gate_fuzz", "hello-only", b"\x00ALMGATE1" + nonce)
write("node_gate_fuzz", "hello-wrong-proof", b"\x00ALMGATE1" + nonce + bytes(32))
write("node_gate_fuzz", "wrong-magic", b"\x00ALMGATE2" + nonce)
write("node_gate_fuzz", "basp-like", b"\x00" + bytes(32))


def basp(payload_len, payload=b""):
    return struct.pack(">BBBBIQQQ", 1, 0, 0, 0, payload_len, 0, 1, 2) + payload


write("node_gate_fuzz", "frames", b"\x01" + basp(5, b"hello") + basp(0) + basp(3, b"abc"))
write("node_gate_fuzz", "oversized-frame", b"\x01" + basp(4, b"okay") + basp(1 << 20) + bytes(64))
write("node_gate_fuzz", "split-header", b"\x01" + basp(4096, bytes(4096)) + basp(4097)[:20])

# ------------------------------------------------------------ data_channel
def frames_spec(frames):
    return b"".join(bytes([len(h), len(p)]) + h + p for h, p in frames)


three = [(b"\x01\x02\x03", bytes(range(40))), (b"", b""), (bytes(28), bytes(200))]
write("data_channel_fuzz", "sealed-frames", b"\x02\x00\x00\x00" + frames_spec(three))
write("data_channel_fuzz", "trusted-frames", b"\x03\x00\x00\x00" + frames_spec(three))
write("data_channel_fuzz", "sealed-flipped", b"\x02\x01\x00\x50" + frames_spec(three))
write("data_channel_fuzz", "trusted-flipped", b"\x03\x01\x01\x00" + frames_spec(three))
# Raw streams: a prefix announcing a header over the bound, and a bare prefix.
write("data_channel_fuzz", "raw-big-header", b"\x00" + struct.pack("<IQ", 1 << 20, 5))
write("data_channel_fuzz", "raw-prefix", b"\x01" + struct.pack("<IQ", 3, 70000) + bytes(19))

# ------------------------------------------------------------ constraint
schemas = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["a", 1, None, True]}, "minItems": 1, "maxItems": 3},
    {"anyOf": [{"type": "number"}, {"type": "string", "pattern": "^[a-c]{2,4}$"}]},
    {"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
]
for i, schema in enumerate(schemas):
    write("constraint_fuzz", f"schema-{i}", bytes([0, i * 7]) + json.dumps(schema).encode())
for i, regex in enumerate([r"[0-9]{3}-[a-z]+", r"(true|false)", r"\w+@\w+\.com", r"a*b?c{1,}"]):
    write("constraint_fuzz", f"regex-{i}", bytes([1, i * 5]) + regex.encode())
for i, ebnf in enumerate(['root ::= "yes" | "no"', 'root ::= item ("," item)*\nitem ::= [0-9]+',
                          'root ::= "{" ws "}"\nws ::= [ \\t]*']):
    write("constraint_fuzz", f"ebnf-{i}", bytes([2, i * 3]) + ebnf.encode())
