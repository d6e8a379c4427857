#pragma once
// The host executor: LlamaModel over HostTensorOps over a Backend (the CPU
// one), with the KV pool in host memory as float32 or f16, one K and one V
// buffer per layer.

#include <memory>

#include "kernels/host_tensor_ops.hpp"
#include "model/llama_model.hpp"
#include "model/model_executor.hpp"

namespace actorlm {

class HostExecutor final : public ModelExecutor {
 public:
  // f16_kv: keep K and V as IEEE halves (half the memory and bandwidth).
  HostExecutor(LlamaWeights weights, std::unique_ptr<Backend> backend, bool f16_kv = false);

  const ModelConfig& config() const override { return model_.config(); }
  void allocate(int64_t kv_pool_rows, int32_t max_requests, int32_t max_context) override;
  int64_t kv_bytes() const override;
  bool wants_kv_indices() const override { return true; }
  void write_req_to_token(int32_t, int32_t, std::span<const int32_t>) override {}  // rows come with the plan
  ForwardOutput forward(const ForwardBatch& batch, const StepPlan& plan) override;
  std::vector<SampleResult> sample(const ForwardOutput& out, std::span<const SampleRequest> reqs) override;
  void add_adapter(int32_t id, const LoraAdapter& adapter) override { model_.add_adapter(id, adapter); }
  void drop_adapter(int32_t id) override { model_.drop_adapter(id); }
  bool has_adapter(int32_t id) const override { return model_.has_adapter(id); }
  int64_t adapter_bytes() const override { return ops_.lora_bytes(); }
  int64_t kv_token_bytes() const override;
  std::string kv_dtype() const override { return f16_kv_ ? "f16" : "f32"; }
  void read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
               std::span<uint8_t> out) const override;
  void write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                std::span<const uint8_t> in) override;
  bool kv_spans(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                std::vector<std::span<uint8_t>>& out) override;

 private:
  std::unique_ptr<Backend> backend_;
  LlamaWeights weights_;  // the bytes the prepared views point into
  HostTensorOps ops_;
  LlamaModel model_;
  int64_t pool_rows_ = 0;
  bool f16_kv_ = false;
  std::vector<float> k_cache_, v_cache_;  // [layers][pool_rows][kv_heads][head_dim]
  std::vector<uint16_t> k16_, v16_;       // the same, when f16_kv_

  // Where row `row` of layer `layer` starts in a K or V pool, in elements.
  int64_t row_at(int32_t layer, int32_t row) const;
};

// The prepared matrices the runners over w's file share while any of them
// lives (kernels/prepared_weights.hpp); null when none does, or when w is
// not a mapped file (each runner then prepares its own).
std::shared_ptr<PreparedWeights> prepared_weights_of(const LlamaWeights& w);

}  // namespace actorlm
