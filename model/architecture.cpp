#include "model/architecture.hpp"

#include <array>
#include <cmath>

#include "model/gguf_file.hpp"

namespace actorlm {
namespace {

float key_float(const GgufFile& f, const std::string& key, float fallback) {
  return static_cast<float>(f.get_float(key).value_or(fallback));
}

// Gemma's GGUF norms already hold 1 + w (llama.cpp's converter adds the
// one), so they are plain RMS norms here. The attention scale is
// 1/sqrt(head_dim) except on the 27B models, whose query_pre_attn_scalar is
// hidden / heads; GGUF does not carry that scalar, so the layer count tells
// the 27B apart (as llama.cpp does).
void gemma_common(ModelConfig& c, int32_t layers_27b) {
  c.activation = ModelConfig::Activation::gelu_tanh;
  c.embedding_scale = std::sqrt(static_cast<float>(c.hidden));
  if (c.n_layers == layers_27b) c.attention_scale = 1.0f / std::sqrt(static_cast<float>(c.hidden / c.n_heads));
}

// Which layers slide: every layer but each `pattern`-th (pattern 2: even
// layers slide; 6: five of each six), unless the file lists them.
void sliding_pattern(const GgufFile& f, const std::string& a, ModelConfig& c, int64_t pattern) {
  const std::string key = a + "attention.sliding_window_pattern";
  c.sliding_layers.assign(static_cast<size_t>(c.n_layers), 0);
  if (f.is_array(key)) {
    const auto list = f.get_int_array(key);
    if (list->size() != static_cast<size_t>(c.n_layers)) {
      throw ModelError(key + " lists " + std::to_string(list->size()) + " layers, the model has " +
                       std::to_string(c.n_layers));
    }
    for (size_t l = 0; l < list->size(); ++l) c.sliding_layers[l] = (*list)[l] != 0;
    return;
  }
  if (auto n = f.get_int(key)) pattern = *n;
  if (pattern < 0 || pattern > 1024) throw ModelError(key + " = " + std::to_string(pattern) + " is out of range");
  for (int32_t l = 0; l < c.n_layers; ++l) c.sliding_layers[static_cast<size_t>(l)] = pattern == 0 || l % pattern < pattern - 1;
}

void sliding_window(const GgufFile& f, const std::string& a, ModelConfig& c, int64_t fallback) {
  const int64_t w = f.get_int(a + "attention.sliding_window").value_or(fallback);
  if (w < 0 || w > (int64_t{1} << 24)) {
    throw ModelError(a + "attention.sliding_window = " + std::to_string(w) + " is out of range");
  }
  c.sliding_window = static_cast<int32_t>(w);
}

void configure_nothing(const GgufFile&, const std::string&, ModelConfig&) {}

// Mistral's GGUFs say "llama". Mistral 7B v0.1 was trained with a 4096-token
// sliding window on every layer; llama.cpp's converter does not write it and
// llama.cpp ignores it, so such files run with full attention in both. A
// file that does state a window gets it on every layer, as the model was
// defined.
void configure_llama(const GgufFile& f, const std::string& a, ModelConfig& c) { sliding_window(f, a, c, 0); }

void configure_qwen3(const GgufFile&, const std::string&, ModelConfig& c) { c.qk_norm = true; }

void configure_gemma(const GgufFile&, const std::string&, ModelConfig& c) { gemma_common(c, -1); }

void configure_gemma2(const GgufFile& f, const std::string& a, ModelConfig& c) {
  gemma_common(c, 46);
  c.sandwich_norm = true;
  c.attn_softcap = key_float(f, a + "attn_logit_softcapping", 50.0f);
  c.final_softcap = key_float(f, a + "final_logit_softcapping", 30.0f);
  sliding_window(f, a, c, 4096);
  sliding_pattern(f, a, c, 2);
  c.rope_theta_swa = key_float(f, a + "rope.freq_base_swa", c.rope_theta);
}

void configure_gemma3(const GgufFile& f, const std::string& a, ModelConfig& c) {
  gemma_common(c, 62);
  c.sandwich_norm = true;
  c.qk_norm = true;
  c.final_softcap = key_float(f, a + "final_logit_softcapping", 0.0f);
  sliding_window(f, a, c, 0);
  if (c.sliding_window > 0) {
    sliding_pattern(f, a, c, 6);
    c.rope_theta_swa = key_float(f, a + "rope.freq_base_swa", 10000.0f);
  }
}

// Qwen3-MoE: Qwen3's attention, experts in every layer. Without an expert
// width in the file, llama.cpp splits the dense width over the used experts.
void configure_qwen3moe(const GgufFile& f, const std::string& a, ModelConfig& c) {
  c.qk_norm = true;
  if (c.n_experts == 0 || c.n_experts_used <= 0) {
    throw ModelError(a + "expert_count and expert_used_count must be positive: a qwen3moe model has experts");
  }
  if (!f.get_int(a + "expert_feed_forward_length")) c.expert_ffn_hidden = c.ffn_hidden / c.n_experts_used;
}

// Phi-3's 128k variants rotate with LongRoPE factors chosen by the context
// in use and an attention factor; not built, so refused by name. llama.cpp
// ignores Phi-3's sliding window (its converters write it wrongly), and so
// does this.
void configure_phi3(const GgufFile& f, const std::string&, ModelConfig&) {
  if (f.find_tensor("rope_factors_long.weight") || f.find_tensor("rope_factors_short.weight")) {
    throw ModelError("LongRoPE (the 128k-context Phi-3 variants: rope_factors_long/short) is not supported");
  }
}

// SmolLM3 leaves every fourth layer without RoPE.
void configure_smollm3(const GgufFile&, const std::string&, ModelConfig& c) {
  c.rope_layers.assign(static_cast<size_t>(c.n_layers), 1);
  for (int32_t l = 3; l < c.n_layers; l += 4) c.rope_layers[static_cast<size_t>(l)] = 0;
}

constexpr std::array<Architecture, 9> kArchitectures{{
    {"llama", false, configure_llama},  // also Mistral, Mixtral (experts) and SmolLM/SmolLM2 GGUFs
    {"qwen2", true, configure_nothing},   // q/k/v biases, found in the tensor table
    {"qwen3", true, configure_qwen3},
    {"qwen3moe", true, configure_qwen3moe},
    {"gemma", true, configure_gemma},
    {"gemma2", true, configure_gemma2},
    {"gemma3", true, configure_gemma3},
    {"phi3", true, configure_phi3},       // fused q/k/v and gate/up, split at load
    {"smollm3", false, configure_smollm3},
}};

}  // namespace

const Architecture* find_architecture(std::string_view name) {
  for (const Architecture& a : kArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string supported_architectures() {
  std::string out;
  for (const Architecture& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

}  // namespace actorlm
