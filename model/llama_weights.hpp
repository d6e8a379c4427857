#pragma once
// Weights of a Llama-family model (Llama 2/3, SmolLM, Qwen2) in float32,
// loaded from a GGUF file or a Hugging Face folder (config.json +
// *.safetensors, sharded or not).
//
// Contract for the forward pass (the same whichever file the weights came from):
// - Matrices are row-major [out_features][in_features]: y = W x, and
//   row(r) is output feature r. Norm weights and biases are plain vectors.
// - RoPE layout: ADJACENT PAIRS ("interleaved", llama.cpp's LLAMA_ROPE_TYPE_NORM,
//   Meta's original complex-number form). Within each head h, q/k elements
//   x[h*head_dim + 2i] and x[h*head_dim + 2i + 1] form pair i and rotate by
//   angle pos * rope_theta^(-2i/head_dim) (divided by rope_freq_factors[i]
//   when present, or by the Llama 3 scaling in config.rope_scaling):
//     x'[2i]   = x[2i] cos - x[2i+1] sin
//     x'[2i+1] = x[2i] sin + x[2i+1] cos
//   llama.cpp's converter already stores Llama q/k rows this way in GGUF, so
//   they load unchanged. Hugging Face checkpoints (and Qwen2 GGUFs, which
//   llama.cpp runs with NEOX rotation) use the "rotate_half" layout that pairs
//   x[i] with x[i + head_dim/2]; the loader reorders their wq/wk rows (and
//   bq/bk) per head with permute_rope_rows(), which turns the half-split order
//   into the adjacent order. Attention scores are unchanged because q and k
//   are permuted alike and v/wo are untouched; so there is ONE RoPE code path.
// - A tied model has an empty lm_head; output() returns the embedding.
// - source_type records how a matrix was stored (Q4_1, Q8_0, F16, BF16, ...);
//   data is always the dequantized float32. Q4_1 and Q8_0 matrices from GGUF
//   also keep their on-disk blocks (row order as data, RoPE permutation
//   included), which the CPU backend multiplies from instead of data. Those
//   matrices are thus held twice (float32 for the embedding lookup and the
//   CUDA upload, blocks for the CPU products): ~97 MB more (the file's tensor
//   data) beside the default model's ~540 MB of float32.
// - Unsupported pieces (o_proj / FFN biases, partial RoPE, other
//   architectures, tensor types without a dequantizer) are ModelErrors.

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
  // The on-disk blocks too, for Q4_1 and Q8_0 matrices from GGUF (the CPU
  // backend's products read these: 20 or 34 bytes per 32 values instead of
  // 128); empty otherwise. Row r is bytes [r * blocks.size() / rows, ...).
  std::vector<uint8_t> blocks;

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
// half-split RoPE pairing to the adjacent-pair pairing, per head: output row
// h*d + 2i + j is input row h*d + j*d/2 + i (d = rows / n_heads, j in {0,1}).
// This is the row order llama.cpp's convert_hf_to_gguf.py writes for Llama.
// Throws ModelError unless n_heads divides rows into even head sizes and
// w.size() == rows * cols.
std::vector<float> permute_rope_rows(const std::vector<float>& w, int64_t rows, int64_t cols,
                                     int32_t n_heads);
// The same for a whole matrix: its float32 rows and, when present, its blocks.
void permute_rope_rows(WeightMatrix& w, int32_t n_heads);

}  // namespace actorlm
