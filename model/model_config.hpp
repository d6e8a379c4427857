#pragma once
// Hyper-parameters of a decoder-only transformer, read from GGUF metadata or
// a Hugging Face config.json. Both loaders call validate(); a config that
// comes back from them is consistent and every size is within the bounds
// validate() states, so callers may multiply sizes in int64 without overflow
// checks.
//
// One layer loop (model/llama_model.cpp) runs every architecture; what sets
// them apart is the set of features below, and model/architecture.cpp says
// which features each GGUF architecture has and where its keys are.
// Anything else (other activations, partial rotary, YaRN / LongRoPE
// scaling, mixture-of-experts) is refused with a ModelError that says what.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace actorlm {

class GgufFile;

struct RopeScaling {
  // linear: positions divided by `factor` (Gemma 3's global layers).
  enum class Kind { none, llama3, linear };
  Kind kind = Kind::none;
  // Llama 3.1 "rope_type": "llama3" parameters (used only when kind == llama3).
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position = 8192;
};

struct ModelConfig {
  std::string architecture = "llama";  // general.architecture (see architecture.hpp)
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

  // Architecture features; the defaults are Llama's.
  enum class Activation { silu, gelu_tanh };
  Activation activation = Activation::silu;  // of the gated FFN: act(gate) * up
  bool qk_norm = false;         // RMS norm of each q and k head before RoPE (Qwen3, Gemma 3)
  bool sandwich_norm = false;   // RMS norm of the attention and FFN outputs too (Gemma 2/3)
  float embedding_scale = 1.0f; // token embeddings multiplied by this (Gemma: sqrt(hidden))
  float attention_scale = 0.0f; // score scale; 0 means 1/sqrt(head_dim)
  float attn_softcap = 0.0f;    // scores s -> cap * tanh(s / cap) when > 0 (Gemma 2)
  float final_softcap = 0.0f;   // the same for logits (Gemma 2)
  // Sliding-window attention: a query at position p sees keys p - window + 1
  // .. p on the layers marked in sliding_layers (all of them when that is
  // empty and window > 0). Those layers rotate with rope_theta_swa and no
  // position scaling (Gemma 2/3).
  int32_t sliding_window = 0;
  std::vector<uint8_t> sliding_layers;  // per layer, 1 = windowed
  float rope_theta_swa = 0.0f;          // 0: rope_theta
  // Layers without RoPE (SmolLM3 leaves every fourth one unrotated); empty
  // means every layer rotates.
  std::vector<uint8_t> rope_layers;     // per layer, 1 = rotated

  // Mixture of experts (Qwen3-MoE; Mixtral as "llama"): n_experts > 0
  // replaces every layer's FFN with experts of expert_ffn_hidden, each token
  // going through the n_experts_used most probable under a softmax router,
  // their outputs weighted by those probabilities (renormalized over the
  // chosen ones, then times expert_weights_scale).
  int32_t n_experts = 0;
  int32_t n_experts_used = 0;
  int32_t expert_ffn_hidden = 0;
  float expert_weights_scale = 1.0f;

  bool layer_is_sliding(int32_t l) const {
    if (sliding_window <= 0) return false;
    return sliding_layers.empty() || sliding_layers[static_cast<size_t>(l)] != 0;
  }
  bool layer_has_rope(int32_t l) const { return rope_layers.empty() || rope_layers[static_cast<size_t>(l)] != 0; }
  // The features above that Llama and Qwen2 do not have, by name ("q/k
  // norms, GELU, ..."); empty when there are none.
  std::string features_beyond_llama() const;
  // The features above that the CUDA executor's kernels lack (the rest run
  // there through the shared layer loop), or "".
  std::string features_not_on_cuda() const;
  float score_scale() const { return attention_scale > 0 ? attention_scale : 1.0f / std::sqrt(static_cast<float>(head_dim)); }
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
  // rope_theta > 0 and finite, 0 < rms_norm_eps < 1, token ids < vocab_size,
  // per-layer lists empty or n_layers long, scales and caps finite.
  void validate() const;
};

// From the `<arch>.*` keys every architecture has (block_count,
// embedding_length, attention.head_count, attention.head_count_kv, attention.key_length or embedding_length /
// head_count, feed_forward_length, context_length, rope.freq_base,
// rope.dimension_count (must equal head_dim), attention.layer_norm_rms_epsilon,
// vocab_size or the tokenizer.ggml.tokens length). Tied embeddings and q/k/v
// biases are read off the tensor table; the architecture's own keys and
// features come from architecture.hpp. Errors name the file and key.
ModelConfig config_from_gguf(const GgufFile& file);
// path: a Hugging Face config.json. Errors name the file and key.
ModelConfig config_from_hf_json(const std::string& path);

}  // namespace actorlm
