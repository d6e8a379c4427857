"""Helpers for the tokenizer reference scripts: vocabulary-only GGUF files
(metadata, no tensors) that llama.cpp loads with vocab_only=True, as its own
ggml-vocab-*.gguf test files are."""
import gguf
from gguf import GGUFValueType as T


def read_fields(path):
    """{key: (value, types)} of a GGUF's metadata (without GGUF.* pseudo keys)."""
    r = gguf.GGUFReader(path)
    return {k: (f.contents(), f.types) for k, f in r.fields.items() if not k.startswith("GGUF.")}


def write_vocab_gguf(path, fields, overrides=None):
    """Writes fields (as read_fields returns them), with overrides
    {key: (value, types)} replacing or adding keys; a value of None drops it."""
    fields = dict(fields)
    for k, v in (overrides or {}).items():
        if v is None:
            fields.pop(k, None)
        else:
            fields[k] = v
    arch = fields.pop("general.architecture")[0]
    w = gguf.GGUFWriter(path, arch)
    for key, (value, types) in fields.items():
        if types[0] == T.ARRAY:
            w.add_key_value(key, list(value), T.ARRAY, sub_type=types[1] if len(types) > 1 else None)
        else:
            w.add_key_value(key, value, types[0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_hparams(fields):
    """The llama.* keys llama.cpp needs to load any llama-architecture file."""
    return {k: v for k, v in fields.items() if k.startswith("llama.") or k == "general.architecture"}
