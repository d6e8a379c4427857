#pragma once
// Weights of a decoder-only transformer (every architecture of
// architecture.hpp from GGUF; Llama and Qwen2 also from a Hugging Face
// folder: config.json + *.safetensors, sharded or not).
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
//   they load unchanged. Hugging Face checkpoints (and the GGUFs of the
//   architectures llama.cpp runs with NEOX rotation: Architecture::neox_rope) use the "rotate_half" layout that pairs
//   x[i] with x[i + head_dim/2]; the loader reorders their wq/wk rows (and
//   bq/bk and the per-head q/k norm weights) per head with
//   permute_rope_rows(), which turns the half-split order
//   into the adjacent order. Attention scores are unchanged because q and k
//   are permuted alike and v/wo are untouched; so there is ONE RoPE code path.
// - A tied model has an empty lm_head; output() returns the embedding.
// - Matrices keep the format they were stored in (Q4_K, Q8_0, F16, ...): a
//   GGUF matrix is a view into the memory-mapped file (q/k rows permuted for
//   RoPE are the one copy), so the process holds the file's pages and nothing
//   widened to float32. Hugging Face checkpoints are read as float32.
// - A fused q/k/v matrix (attn_qkv) or gate/up matrix (Phi-3's ffn_up of
//   2 x ffn rows) is split into row ranges of the same bytes.
// - Unsupported pieces (o_proj / FFN biases, partial RoPE, other
//   architectures, tensor types without a dequantizer) are ModelErrors.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/ggml_type.hpp"
#include "model/mapped_file.hpp"
#include "model/model_config.hpp"

namespace actorlm {

struct WeightMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  GgmlType type = GgmlType::F32;
  // rows * row_bytes() bytes in `type`'s layout. Shares ownership of what it
  // points into (the file mapping, or a buffer of its own), so copies are
  // cheap and stay valid.
  std::shared_ptr<const uint8_t> bytes;

  bool empty() const { return !bytes; }
  size_t row_bytes() const { return ggml_row_bytes(type, cols); }
  const uint8_t* row(int64_t r) const { return bytes.get() + static_cast<size_t>(r) * row_bytes(); }
  // Rows [begin, end) as float32 into out[(end - begin) * cols].
  void dequantize_rows(int64_t begin, int64_t end, float* out) const;
  std::vector<float> to_float() const;
  MatrixView view() const { return {bytes.get(), rows, cols, type}; }
  // Rows [begin, begin + n) sharing these bytes.
  WeightMatrix row_range(int64_t begin, int64_t n) const;

  // A float32 matrix owning a copy of `values` (rows * cols).
  static WeightMatrix from_floats(int64_t rows, int64_t cols, const std::vector<float>& values);
};

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  WeightMatrix wq, wk, wv, wo;   // [q_dim][hidden], [kv_dim][hidden] x2, [hidden][q_dim]
  std::vector<float> bq, bk, bv; // optional (Qwen2)
  std::vector<float> q_norm, k_norm;  // [head_dim] when config.qk_norm
  std::vector<float> post_attn_norm;  // [hidden] when config.sandwich_norm
  std::vector<float> ffn_norm;   // [hidden]
  WeightMatrix w_gate, w_up;     // [ffn][hidden]
  WeightMatrix w_down;           // [hidden][ffn]
  std::vector<float> post_ffn_norm;   // [hidden] when config.sandwich_norm
  // Mixture of experts (config.n_experts > 0) instead of w_gate/up/down:
  // the router and each expert's matrices (row ranges of the file's
  // [expert][rows][cols] tensors).
  struct Expert {
    WeightMatrix gate, up;  // [expert_ffn][hidden]
    WeightMatrix down;      // [hidden][expert_ffn]
  };
  WeightMatrix router;      // [n_experts][hidden]
  std::vector<Expert> experts;
};

struct LlamaWeights {
  ModelConfig config;
  WeightMatrix token_embedding;           // [vocab][hidden]
  std::vector<float> output_norm;         // [hidden]
  WeightMatrix lm_head;                   // [vocab][hidden]; empty when tied
  std::vector<LayerWeights> layers;
  std::vector<float> rope_freq_factors;   // optional per-pair divisors (Llama 3 GGUF)
  // The GGUF map the matrices point into (null for a safetensors folder).
  std::shared_ptr<const MappedFile> file;

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
