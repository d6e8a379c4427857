#pragma once
// Weights of a Llama-family model (Llama 2/3, SmolLM, Qwen2) in float32,
// loaded from a GGUF file or a Hugging Face folder (config.json +
// *.safetensors).
//
// Layout contract for the forward pass:
// - Matrices are row-major [out_features][in_features]: y = W x.
// - RoPE convention: rows of wq / wk (and bq / bk) are ordered so that within
//   each head the rotation pairs are ADJACENT elements (x[2i], x[2i+1]) with
//   frequency theta^(-2i/head_dim). This is how llama.cpp stores Llama in GGUF.
//   Hugging Face checkpoints (and Qwen2 GGUFs) pair x[i] with x[i + d/2]; the
//   loader permutes their q/k rows into the adjacent-pair order, so there is
//   one RoPE code path and the attention scores are unchanged.
// - A tied model has an empty lm_head; output() returns the embedding.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/ggml_type.hpp"
#include "model/model_config.hpp"

namespace actorlm {

struct WeightMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  GgmlType source_type = GgmlType::F32;  // how it was stored on disk
  std::vector<float> data;               // rows * cols

  const float* row(int64_t r) const { return data.data() + r * cols; }
  bool empty() const { return data.empty(); }
};

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  WeightMatrix wq, wk, wv, wo;   // [q_dim][hidden], [kv_dim][hidden] x2, [hidden][q_dim]
  std::vector<float> bq, bk, bv; // optional (Qwen2)
  std::vector<float> ffn_norm;   // [hidden]
  WeightMatrix w_gate, w_up;     // [ffn][hidden]
  WeightMatrix w_down;           // [hidden][ffn]
};

struct LlamaWeights {
  ModelConfig config;
  WeightMatrix token_embedding;           // [vocab][hidden]
  std::vector<float> output_norm;         // [hidden]
  WeightMatrix lm_head;                   // [vocab][hidden]; empty when tied
  std::vector<LayerWeights> layers;
  std::vector<float> rope_freq_factors;   // optional per-pair divisors (Llama 3 GGUF)

  const WeightMatrix& output() const { return lm_head.empty() ? token_embedding : lm_head; }
};

// (tensors loaded, total tensors): for a progress display.
using LoadProgress = std::function<void(int, int)>;

// path: a .gguf file, or a folder with config.json and *.safetensors.
// Throws ModelError naming the file and tensor on any problem.
LlamaWeights load_llama_weights(const std::string& path, const LoadProgress& progress = {});

// Reorders the rows of a q or k projection (or bias, cols == 1) from the
// half-split RoPE pairing to the adjacent-pair pairing, per head.
std::vector<float> permute_rope_rows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                     int32_t n_heads);

}  // namespace actorlm
