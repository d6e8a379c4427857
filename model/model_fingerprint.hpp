#pragma once
// A short identity of a model's files, for KV kept outside the process (the
// disk tier of the KV cache): two fine-tunes of one architecture share every
// shape and often the name and tokenizer, but not their weights, and KV from
// one must never be served to the other. Cheap on a many-GB file: the size
// and a hash of 16 evenly spaced 64 KiB samples of each file (for a Hugging
// Face folder, of its .json and .safetensors files).

#include <string>

namespace actorlm {

// 16 hex digits; throws std::runtime_error when the model cannot be read.
std::string model_fingerprint(const std::string& model_path);

}  // namespace actorlm
