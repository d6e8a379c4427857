#pragma once
// A LoRA adapter in llama.cpp's GGUF form (what convert_lora_to_gguf.py
// writes): general.type = "adapter", adapter.type = "lora",
// adapter.lora.alpha, and for each adapted matrix W (named as in the base
// model, e.g. blk.3.attn_q.weight) a pair W.lora_a [rank][in] and
// W.lora_b [out][rank] (ggml shapes {in, rank} and {rank, out}). A row x's
// product becomes x·Wᵀ + s·(x·Aᵀ)·Bᵀ with s = scale · alpha / rank (scale
// alone when alpha is 0), as llama.cpp applies it.
//
// Read as float32 (the host keeps the matrices in half precision, as
// adapters are shipped: bytes() counts that), checked against the base
// model's architecture and every matrix's shape. Adapted: the attention and FFN
// projections of dense layers (q, k, v, output, gate, up, down) and the
// output head; an adapter for anything else (token embeddings, fused q/k/v
// or gate/up, experts) is refused by name rather than half applied.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/model_config.hpp"

namespace actorlm {

struct LowRankMatrix {
  std::vector<float> a;  // [rank][in]
  std::vector<float> b;  // [out][rank]
  float scale = 1.0f;    // scale * alpha / rank, or scale without an alpha
  int32_t rank = 0;
  int64_t in = 0, out = 0;
};

// The matrices of a dense layer an adapter may change, in this order.
enum class LoraTarget : uint8_t { q, k, v, o, gate, up, down };
inline constexpr size_t kLoraTargets = 7;
// Their names in a GGUF file (blk.N.<name>.weight).
inline constexpr std::array<const char*, kLoraTargets> kLoraTargetNames{"attn_q",   "attn_k", "attn_v", "attn_output",
                                                                        "ffn_gate", "ffn_up", "ffn_down"};
// The base matrix's rows (out) and columns (in) for a target of a dense layer.
std::pair<int64_t, int64_t> lora_target_shape(const ModelConfig& c, LoraTarget t);

struct LoraAdapter {
  std::string path;
  float alpha = 0;  // adapter.lora.alpha (0: none given)
  float scale = 1;  // the user's scale on top
  // Per layer, per LoraTarget: the update, or none.
  std::vector<std::array<std::optional<LowRankMatrix>, kLoraTargets>> layers;
  std::optional<LowRankMatrix> output;

  int64_t matrices() const;
  int64_t bytes() const;  // of the matrices in half precision
};

// Throws ModelError (model/gguf_file.hpp) naming the file and the key or
// tensor at fault: not an adapter, another architecture, a pair missing one
// half, a tensor the base model does not have or cannot adapt, a shape that
// does not match the base model's matrix, ranks that disagree within a pair,
// an unsupported element type, no tensors at all. scale must be finite.
LoraAdapter load_lora_adapter(const std::string& path, const ModelConfig& base, float scale = 1.0f);

}  // namespace actorlm
