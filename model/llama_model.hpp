#pragma once
// The forward pass of every architecture (architecture.hpp: Llama, Qwen2/3,
// Gemma 1/2/3, Phi-3, SmolLM3, Qwen3-MoE differ only in ModelConfig's
// features) over a batch of new tokens, reading and writing K/V in a paged
// pool. Written once against TensorOps (kernels/tensor_ops.hpp): the host
// executor runs it over the CPU backend, the CUDA executor on the GPU inside
// its graphs. Stateless apart from its weights' handles: the KV buffers and
// the attention plan come from the caller.

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "kernels/tensor_ops.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_layer_clock.hpp"
#include "model/llama_weights.hpp"
#include "model/lora_adapter.hpp"

namespace actorlm {

// One pass's inputs. Index arrays are in the TensorOps' memory (the
// executor put them there); kv has one view per layer; lora is host memory.
struct ForwardInputs {
  std::span<const int32_t> tokens;         // one per new token
  std::span<const int32_t> positions;      // one per new token
  std::span<const int32_t> out_cache_loc;  // one per new token
  std::span<const int32_t> logit_rows;     // token rows that get logits, in order
  std::span<const KvLayerView> kv;
  const AttentionPlan* plan = nullptr;
  std::span<const LoraRows> lora;
  // Told after each layer's KV is stored, when set (synchronous ops only:
  // a device's stores are queued, not done).
  KvLayerClock* clock = nullptr;
};

class LlamaModel {
 public:
  // Hands every weight to `ops` (which may copy it to a device or into a
  // layout of its own); `weights`' bytes must outlive `ops` unless ops
  // copies them.
  LlamaModel(const LlamaWeights& weights, TensorOps& ops);
  // Random weights drawn by `ops` where they live (benchmarks).
  static LlamaModel random(const ModelConfig& config, TensorOps& ops, uint64_t seed);

  const ModelConfig& config() const { return config_; }

  // One pass: logits [logit_rows][vocab], float32 in the ops' memory, valid
  // until its next begin_pass() (which the caller calls before this).
  Tensor forward(const ForwardInputs& in);

  // A LoRA adapter under id (> 0) for the rows ForwardInputs::lora gives
  // it, from the next pass on. std::invalid_argument for an id in use, an
  // adapter made for another shape (load_lora_adapter checks that), or
  // ops that do not run adapters; nothing is added then.
  void add_adapter(int32_t id, const LoraAdapter& adapter);
  void drop_adapter(int32_t id);  // std::invalid_argument for an unknown id
  bool has_adapter(int32_t id) const { return adapters_.count(id) != 0; }

 private:
  struct Layer {
    VectorId attn_norm, ffn_norm, post_attn_norm, post_ffn_norm, q_norm, k_norm;
    VectorId bq, bk, bv;
    WeightId qkv, wo, gate_up, down;  // qkv: parts q, k, v; gate_up: gate, up
    WeightId router;
    std::vector<std::pair<WeightId, WeightId>> experts;  // (gate|up, down)
    bool bias = false, has_q_norm = false, has_post_norms = false;
  };
  // An adapter's updates as the ops hold them (invalid: not adapted).
  struct AdapterIds {
    std::vector<std::array<LoraId, kLoraTargets>> layers;
    LoraId output;
  };
  LlamaModel(const ModelConfig& config, TensorOps& ops);
  // out += each adapter's update of `target` in `layer` (-1: the output
  // head, over logit rows) on the rows it runs on.
  void adapt(std::span<const LoraRows> lora, int32_t layer, LoraTarget target, Tensor x, Tensor out);
  // The FFN of a mixture-of-experts layer on the normed rows h; adds each
  // token's weighted expert outputs to x.
  void experts_into_residual(const Layer& L, Tensor h, Tensor x);

  ModelConfig config_;
  TensorOps& ops_;
  RopeId rope_, rope_sliding_;  // the second for sliding-window layers
  WeightId embedding_, output_;
  VectorId output_norm_;
  std::vector<Layer> layers_;
  std::map<int32_t, AdapterIds> adapters_;
};

// Rotation frequencies for a config (Llama 3 or linear scaling and per-pair
// GGUF factors applied). sliding: the table of the sliding-window layers
// (their own base, rope_theta_swa, and no scaling).
RopeTable make_rope_table(const ModelConfig& config, const std::vector<float>& freq_factors, bool sliding = false);

}  // namespace actorlm
