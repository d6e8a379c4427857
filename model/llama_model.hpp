#pragma once
// The forward pass of every architecture (architecture.hpp: Llama, Qwen2/3,
// Gemma 1/2/3, Phi-3, SmolLM3 differ only in ModelConfig's features) over a
// batch of new tokens,
// reading and writing K/V in a paged pool through a backend. Stateless apart
// from its weights: the KV buffers and the attention plan come from the caller
// (ModelRunner).

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "model/llama_weights.hpp"

namespace actorlm {

class LlamaModel {
 public:
  LlamaModel(LlamaWeights weights, Backend& backend);

  const ModelConfig& config() const { return weights_.config; }
  const LlamaWeights& weights() const { return weights_; }

  // tokens/positions/out_cache_loc: one entry per new token. kv: one view per
  // layer. logit_rows: which token rows get logits (in order). Returns
  // logits [logit_rows.size()][vocab].
  std::vector<float> forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                             std::span<const int32_t> out_cache_loc, std::span<const KvLayerView> kv,
                             const AttentionPlan& plan, std::span<const int32_t> logit_rows);

 private:
  // The matrices as the backend wants them multiplied (prepare_weights: the
  // CPU backend's packed tiles), and what keeps those copies alive.
  struct LayerViews {
    MatrixView wq, wk, wv, wo, gate, up, down;
    MatrixView router;
    std::vector<std::array<MatrixView, 3>> experts;  // gate, up, down
  };
  // The FFN of a mixture-of-experts layer on the normed rows h; adds each
  // token's weighted expert outputs to x.
  void experts_into_residual(const LayerViews& M, const float* h, int64_t T, float* x);
  MatrixView prepare(const WeightMatrix& w);

  LlamaWeights weights_;
  Backend& backend_;
  RopeTable rope_, rope_sliding_;  // the second for sliding-window layers
  std::vector<std::shared_ptr<const void>> prepared_storage_;
  std::vector<LayerViews> layer_views_;
  MatrixView output_view_;
};

// Rotation frequencies for a config (Llama 3 or linear scaling and per-pair
// GGUF factors applied). sliding: the table of the sliding-window layers
// (their own base, rope_theta_swa, and no scaling).
RopeTable make_rope_table(const ModelConfig& config, const std::vector<float>& freq_factors, bool sliding = false);

}  // namespace actorlm
