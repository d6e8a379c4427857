#pragma once
// Hyper-parameters of a Llama-family model, read from GGUF metadata or a
// Hugging Face config.json. Both loaders call validate(); a config that comes
// back from them is consistent and every size is within the bounds validate()
// states, so callers may multiply sizes in int64 without overflow checks.
//
// Supported: architecture "llama" (Llama 2/3, SmolLM, Mistral-style GQA) and
// "qwen2" (q/k/v biases). Anything else (other activations, partial rotary,
// YaRN / linear RoPE scaling) is refused with a ModelError that says what.

#include <cstdint>
#include <optional>
#include <string>

namespace actorlm {

class GgufFile;

struct RopeScaling {
  enum class Kind { none, llama3 };
  Kind kind = Kind::none;
  // Llama 3.1 "rope_type": "llama3" parameters (used only when kind == llama3).
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position = 8192;
};

struct ModelConfig {
  std::string architecture = "llama";  // "llama" or "qwen2"
  int32_t n_layers = 0;
  int32_t hidden = 0;       // embedding width
  int32_t n_heads = 0;      // query heads
  int32_t n_kv_heads = 0;   // key/value heads (GQA); divides n_heads
  int32_t head_dim = 0;     // per head; q_dim() need not equal hidden
  int32_t ffn_hidden = 0;   // SwiGLU inner width
  int32_t vocab_size = 0;   // rows of the token embedding
  int32_t max_context = 0;  // trained context length (GGUF context_length)
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  float rms_norm_eps = 1e-5f;
  bool tied_embeddings = false;  // lm_head is the token embedding
  bool attention_bias = false;   // biases on q, k, v (Qwen2)
  // From tokenizer.ggml.{bos,eos}_token_id or config.json (first id when
  // config.json lists several eos ids). The tokenizer remains the authority
  // on end-of-generation tokens; these are informational.
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;

  int32_t q_dim() const { return n_heads * head_dim; }
  int32_t kv_dim() const { return n_kv_heads * head_dim; }

  // Throws ModelError ("invalid model config: ...") describing the first
  // inconsistency. Bounds: 1 <= n_layers <= 1024, hidden <= 65536,
  // n_heads <= 1024, n_kv_heads divides n_heads, head_dim even and <= 1024,
  // ffn_hidden <= 2^20, 2 <= vocab_size <= 2^23, max_context <= 2^24,
  // rope_theta > 0 and finite, 0 < rms_norm_eps < 1, token ids < vocab_size.
  void validate() const;
};

// From `<arch>.*` keys (block_count, embedding_length, attention.head_count,
// attention.head_count_kv, attention.key_length or embedding_length /
// head_count, feed_forward_length, context_length, rope.freq_base,
// rope.dimension_count (must equal head_dim), attention.layer_norm_rms_epsilon,
// vocab_size or the tokenizer.ggml.tokens length). Tied embeddings and q/k/v
// biases are read off the tensor table. Errors name the file and key.
ModelConfig config_from_gguf(const GgufFile& file);
// path: a Hugging Face config.json. Errors name the file and key.
ModelConfig config_from_hf_json(const std::string& path);

}  // namespace actorlm
