#pragma once
// The CPU backend: products read the weights in their stored format (integer
// kernels for the ggml block quantizations, split over a thread pool by
// weight row: quantized_matmul.hpp; OpenBLAS for float32 matrices), tiled
// paged attention on the same pool (paged_attention.hpp), own loops for the
// rest. OpenBLAS and the pool get the same thread count and never run at the
// same time, so the cores are not oversubscribed. Not thread-safe: one
// caller at a time.

#include <functional>
#include <memory>

#include "kernels/backend.hpp"
#include "kernels/cpu/quantized_matmul.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace actorlm::cpu {

class CpuBackend final : public Backend {
 public:
  // n_threads <= 0: all hardware threads.
  explicit CpuBackend(int n_threads = 0);

  void embed(MatrixView table, std::span<const int32_t> tokens, float* out) override;
  void rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t cols,
                float eps) override;
  // Block-quantized matrices are repacked into 8-row tiles
  // (packed_matrix.hpp) when the CPU has the AVX2 or AVX-512 VNNI kernels.
  PreparedMatrix prepare_weights(MatrixView w) override;
  void matmul(const float* x, int64_t rows, MatrixView w, float* out, bool accumulate) override;
  // Quantizes x once per activation scheme and runs every matrix's tiles as
  // one parallel loop (one wait instead of one per matrix).
  void matmul_many(const float* x, int64_t rows, std::span<const MatrixView> w, std::span<float* const> out) override;
  void add_bias(float* x, const float* bias, int64_t rows, int64_t cols) override;
  void rope(float* q, int32_t n_heads, float* k, int32_t n_kv_heads,
            std::span<const int32_t> positions, const RopeTable& table) override;
  void store_kv(KvLayerView cache, const float* k, const float* v,
                std::span<const int32_t> out_cache_loc) override;
  void attention(const float* q, KvLayerView cache, const AttentionPlan& plan, const LayerAttention& layer,
                 float* out) override;
  void swiglu(const float* gate, const float* up, float* out, int64_t n) override;
  void geglu(const float* gate, const float* up, float* out, int64_t n) override;
  void add(float* x, const float* y, int64_t n) override;
  void softcap(float* x, int64_t n, float cap) override;
  void scale(float* x, int64_t n, float s) override;
  std::vector<ExpertChoice> route_experts(const float* logits, int64_t rows, int32_t n_experts, int32_t k, bool normalize,
                                          float scale) override;
  void gather_rows(const float* src, int64_t cols, std::span<const int32_t> rows, float* dst) override;
  void scatter_add_rows(float* dst, int64_t cols, std::span<const int32_t> rows, std::span<const float> weights,
                        const float* src) override;
  std::vector<SampleResult> sample(const float* logits, int32_t vocab, std::span<const SampleRequest> reqs) override;
  // Rows split over the pool (each row whole on one thread).
  void low_rank_add(const float* x, int64_t ldx, int64_t in, float* out, int64_t ldo, int64_t out_cols,
                    std::span<const LowRankSlice> slices) override;

  int threads() const { return pool_.size(); }

 private:
  // fn(begin, end) over [0, rows) of row_size elements each, costing about
  // `cost` multiply-adds apiece: on the pool when there is enough work to
  // share, else on this thread.
  void elementwise(int64_t rows, int64_t row_size, int64_t cost, const std::function<void(int64_t, int64_t)>& fn);

  ThreadPool pool_;
  Activations activations_;  // matmul's scratch, kept to reuse its storage
  Activations shared_[3];     // matmul_many's, one per integer scheme (q8_0, q8_1, q8_K)
};

}  // namespace actorlm::cpu
