#pragma once
// The Backend interface (kernels/backend.hpp) over host pointers, each op
// running the CUDA executor's own kernel: inputs are copied to the device
// (weights and KV converted to bf16, as the executor stores them), the
// kernel runs, results come back as float32. Far too slow to serve with; it
// exists so every CUDA kernel can be checked op by op against the CPU
// backend on the same inputs.

#include <memory>

#include "kernels/backend.hpp"

namespace actorlm::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;

  void embed(MatrixView table, std::span<const int32_t> tokens, float* out) override;
  void rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t cols, float eps) override;
  void matmul(const float* x, int64_t rows, MatrixView w, float* out, bool accumulate) override;
  void add_bias(float* x, const float* bias, int64_t rows, int64_t cols) override;
  void rope(float* q, int32_t n_heads, float* k, int32_t n_kv_heads, std::span<const int32_t> positions,
            const RopeTable& table) override;
  void store_kv(KvLayerView cache, const float* k, const float* v, std::span<const int32_t> out_cache_loc) override;
  void attention(const float* q, KvLayerView cache, const AttentionPlan& plan, const LayerAttention& layer,
                 float* out) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;
  void add(float* x, const float* y, int64_t n) override;
  void softcap(float* x, int64_t n, float cap) override;
  void scale(float* x, int64_t n, float s) override;
  // Mixture of experts is not on the device yet: std::logic_error.
  std::vector<ExpertChoice> route_experts(const float* logits, int64_t rows, int32_t n_experts, int32_t k, bool normalize,
                                          float scale) override;
  void gather_rows(const float* src, int64_t cols, std::span<const int32_t> rows, float* dst) override;
  void scatter_add_rows(float* dst, int64_t cols, std::span<const int32_t> rows, std::span<const float> weights,
                        const float* src) override;
  std::vector<SampleResult> sample(const float* logits, int32_t vocab, std::span<const SampleRequest> reqs) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace actorlm::cuda
