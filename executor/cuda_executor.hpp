#pragma once
// The CUDA executor: a whole model resident on one GPU, its layer loop
// model/llama_model.cpp's (every architecture but mixture-of-experts ones)
// over CudaTensorOps (cuda_tensor_ops.cuh: bf16 weights with q|k|v and
// gate|up one GEMM each, cuBLAS with fp32 accumulation, actorlm's own
// kernels for the rest). The KV pool is bf16, req_to_token lives on the
// device, and decode steps replay CUDA graphs of the loop. Logits stay
// on the device: only sampled ids and logprobs come back, unless a batch asks
// for all logits.
//
// Plain C++ header (no CUDA types), so the engine can hold one without
// including CUDA headers.

#include <cstdint>
#include <memory>
#include <string>

#include "model/llama_weights.hpp"
#include "model/model_executor.hpp"

namespace actorlm::cuda {

class CudaExecutor final : public ModelExecutor {
 public:
  // Uploads the weights (converted to bf16) to `device`. Throws
  // std::runtime_error when there is no usable device or memory runs out.
  static std::unique_ptr<CudaExecutor> create(const LlamaWeights& weights, int device = 0);
  // Random bf16 weights drawn on the device, for benchmarks of configs too
  // large to build on the host.
  static std::unique_ptr<CudaExecutor> create_random(const ModelConfig& config, uint64_t seed, int device = 0);
  ~CudaExecutor() override;

  const ModelConfig& config() const override;
  void allocate(int64_t kv_pool_rows, int32_t max_requests, int32_t max_context) override;
  int64_t kv_bytes() const override;
  bool wants_kv_indices() const override { return false; }
  void write_req_to_token(int32_t slot, int32_t start, std::span<const int32_t> kv) override;
  ForwardOutput forward(const ForwardBatch& batch, const StepPlan& plan) override;
  std::vector<SampleResult> sample(const ForwardOutput& out, std::span<const SampleRequest> reqs) override;
  // KV row copies (ModelExecutor's layout, bf16): gathered on the device
  // into one packed buffer per call, then one copy to or from the host.
  int64_t kv_token_bytes() const override;
  std::string kv_dtype() const override { return "bf16"; }
  void read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
               std::span<uint8_t> out) const override;
  void write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                std::span<const uint8_t> in) override;

  // KV bytes per pool row (every layer's K and V for one token).
  int64_t kv_bytes_per_row() const;
  // Pool rows that fit when the weights and the KV pool together may take
  // `mem_fraction_static` of the device's memory (SGLang's meaning); the
  // rest is left for activations and cuBLAS.
  int64_t kv_rows_that_fit(double mem_fraction_static, int32_t max_requests, int32_t max_context) const;
  int64_t weight_bytes() const;
  std::string device_name() const;
  void synchronize() const;

 private:
  struct Impl;
  explicit CudaExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether a CUDA device can be used here; `why` says why not.
bool cuda_device_usable(std::string* why);

}  // namespace actorlm::cuda
