#pragma once
// Hyper-parameters of a Llama-family model, read from GGUF metadata or a
// Hugging Face config.json. validate() is called by both loaders; a config
// that comes back from them is consistent.

#include <cstdint>
#include <optional>
#include <string>

namespace actorlm {

class GgufFile;

struct RopeScaling {
  enum class Kind { none, llama3 };
  Kind kind = Kind::none;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position = 8192;
};

struct ModelConfig {
  std::string architecture = "llama";  // "llama" or "qwen2"
  int32_t n_layers = 0;
  int32_t hidden = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t ffn_hidden = 0;
  int32_t vocab_size = 0;
  int32_t max_context = 0;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  float rms_norm_eps = 1e-5f;
  bool tied_embeddings = false;
  bool attention_bias = false;  // Qwen2: biases on q, k, v
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;

  int32_t q_dim() const { return n_heads * head_dim; }
  int32_t kv_dim() const { return n_kv_heads * head_dim; }
  // Throws ModelError describing the first inconsistency.
  void validate() const;
};

ModelConfig config_from_gguf(const GgufFile& file);
// path: a Hugging Face config.json.
ModelConfig config_from_hf_json(const std::string& path);

}  // namespace actorlm
