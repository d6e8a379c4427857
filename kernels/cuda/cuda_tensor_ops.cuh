#pragma once
// TensorOps (kernels/tensor_ops.hpp) on one GPU, what the CUDA executor runs
// the model's layer loop with:
// - weights bf16 in device memory, a weight's parts stacked so q|k|v and
//   gate|up are one cuBLAS GEMM each (bf16 in, fp32 accumulate);
// - scratch from one device arena, taken in call order, so a pass of the
//   same shapes gets the same addresses again: what CUDA graph replay needs;
// - actorlm's own kernels for the rest (ops.cuh, attention.cuh).
// Every call only enqueues work on the stream, so a pass can be captured.

#include <cublas_v2.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/device_buffer.cuh"
#include "kernels/tensor_ops.hpp"

namespace actorlm::cuda {

// m (any ggml format) as m.rows * m.cols bf16 values at `device`.
void upload_bf16(const MatrixView& m, bf16* device);

// Thrown by alloc() while a graph is captured and the arena is too small
// (it cannot grow then); the executor runs that pass directly instead, and
// the arena grows before the next one.
struct ArenaFull : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class CudaTensorOps final : public TensorOps {
 public:
  CudaTensorOps(cudaStream_t stream, cublasHandle_t blas) : stream_(stream), blas_(blas) {}

  // The step's attention: what every layer shares (table, requests, work
  // items, workspace, scale); attention() fills in q, K/V and the output.
  void set_attention(const PagedAttentionArgs& shared, const AttnSchedule& schedule) {
    attn_ = shared;
    schedule_ = &schedule;
  }
  void set_capturing(bool on) { capturing_ = on; }
  // Bumped whenever the arena moves: graphs captured before are stale.
  uint64_t generation() const { return generation_; }

  WeightId add_weights(std::span<const MatrixView> parts) override;
  WeightId add_table(MatrixView table) override;
  WeightId add_random_weights(std::span<const int64_t> part_rows, int64_t cols, uint64_t seed,
                              bool cols_scale) override;
  VectorId add_vector(std::span<const float> values) override;
  RopeId add_rope(const RopeTable& table) override;
  int64_t weight_bytes() const override { return weight_bytes_; }

  void begin_pass() override;
  Tensor alloc(int64_t rows, int64_t cols, Use use) override;
  std::vector<Tensor> alloc_products(int64_t rows, WeightId w) override;
  size_t mark() const override { return used_; }
  void release(size_t mark) override { used_ = std::min(mark, used_); }

  void embed(WeightId table, std::span<const int32_t> tokens, Tensor out) override;
  void rms_norm(Tensor x, VectorId w, float eps, Tensor out, std::span<const int32_t> rows) override;
  void matmul(Tensor x, WeightId w, std::span<const Tensor> out, bool accumulate) override;
  void add_bias(Tensor x, VectorId bias) override;
  void rope(Tensor q, int32_t n_heads, Tensor k, int32_t n_kv_heads, std::span<const int32_t> positions,
            RopeId table) override;
  void store_kv(const KvLayerView& cache, Tensor k, Tensor v, std::span<const int32_t> out_cache_loc) override;
  void attention(Tensor q, const KvLayerView& cache, const AttentionPlan& plan, const LayerAttention& layer,
                 Tensor out) override;
  void glu(Glu act, Tensor gate, Tensor up, Tensor out) override;
  void add(Tensor x, Tensor y) override;
  void scale(Tensor x, float s) override;
  void softcap(Tensor x, float cap) override;
  // Mixture of experts routes on the host: not on the GPU yet (std::logic_error).
  std::vector<ExpertChoice> route_experts(Tensor logits, int32_t k, bool normalize, float scale) override;
  void gather_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) override;
  void scatter_add_rows(Tensor dst, std::span<const int32_t> rows, std::span<const float> weights,
                        Tensor src) override;

 private:
  struct Weights {
    DeviceBuffer<bf16> data;  // the parts' rows one after another
    std::vector<int64_t> part_rows;
    int64_t cols = 0;
    const void* source = nullptr;  // the host bytes it came from (a tied lm_head reuses the table)
  };
  struct Vector {
    DeviceBuffer<float> data;
    int64_t size = 0;
  };
  struct Rope {
    DeviceBuffer<float> inv_freq;
    int32_t head_dim = 0;
  };
  void* take(size_t bytes);
  // y[rows][n] (row stride ldy) = x · wᵀ + beta * y.
  void gemm(const bf16* x, int64_t ldx, int64_t rows, const bf16* w, int64_t n, int64_t k, float* y, int64_t ldy,
            float beta);

  cudaStream_t stream_;
  cublasHandle_t blas_;
  std::vector<Weights> weights_;
  std::vector<Vector> vectors_;
  std::vector<Rope> ropes_;
  int64_t weight_bytes_ = 0;

  DeviceBuffer<char> arena_;
  std::vector<DeviceBuffer<char>> overflow_;  // this pass's tensors beyond the arena
  size_t overflow_used_ = 0;                  // of overflow_.back()
  size_t used_ = 0, high_water_ = 0;
  bool capturing_ = false;
  uint64_t generation_ = 0;

  PagedAttentionArgs attn_;
  const AttnSchedule* schedule_ = nullptr;
};

}  // namespace actorlm::cuda
