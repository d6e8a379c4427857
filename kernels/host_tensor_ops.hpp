#pragma once
// TensorOps in host memory over any Backend (the CPU one; tests/kernels/cuda's
// op-by-op test backend too): every tensor is float32, products of a
// weight's parts go to separate buffers (Backend::matmul_many), and weights
// are the backend's prepared views of the caller's bytes.

#include <algorithm>
#include <memory>
#include <unordered_set>
#include <vector>

#include "kernels/prepared_weights.hpp"
#include "kernels/tensor_ops.hpp"

namespace actorlm {

class HostTensorOps final : public TensorOps {
 public:
  // shared: the loaded model's prepared matrices, when other runners may
  // hold the same weights (PreparedWeights); null prepares them here.
  explicit HostTensorOps(Backend& backend, std::shared_ptr<PreparedWeights> shared = nullptr)
      : backend_(backend), shared_(std::move(shared)) {}

  WeightId add_weights(std::span<const MatrixView> parts) override;
  WeightId add_table(MatrixView table) override;
  WeightId add_random_weights(std::span<const int64_t> part_rows, int64_t cols, uint64_t seed,
                              bool cols_scale) override;
  VectorId add_vector(std::span<const float> values) override;
  RopeId add_rope(const RopeTable& table) override;
  int64_t weight_bytes() const override { return weight_bytes_; }

  void begin_pass() override { used_ = 0; }
  Tensor alloc(int64_t rows, int64_t cols, Use use) override;
  std::vector<Tensor> alloc_products(int64_t rows, WeightId w) override;
  size_t mark() const override { return used_; }
  void release(size_t mark) override { used_ = std::min(mark, used_); }
  // The tensor's values, moved out of the scratch when they fill a buffer's
  // front (the logits: no copy); the buffer is made again next pass.
  std::vector<float> take(const Tensor& t);

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
  std::vector<ExpertChoice> route_experts(Tensor logits, int32_t k, bool normalize, float scale) override;
  void gather_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) override;
  void scatter_add_rows(Tensor dst, std::span<const int32_t> rows, std::span<const float> weights,
                        Tensor src) override;
  LoraId add_lora(std::span<const float> a, std::span<const float> b, int32_t rank, int64_t in,
                  int64_t out, float scale) override;
  void drop_lora(LoraId id) override;
  void lora(Tensor x, std::span<const LoraSlice> slices, Tensor out) override;
  int64_t lora_bytes() const override { return lora_bytes_; }

 private:
  struct LowRank {
    std::vector<uint16_t> a, bt;  // half precision: [rank][in], [rank][out] (B transposed); empty once dropped
    float scale = 1.0f;
    int32_t rank = 0;
    int64_t in = 0, out = 0;
  };
  const std::vector<MatrixView>& weight(WeightId w) const;
  const std::vector<float>& vector(VectorId v) const;
  void count_bytes(const MatrixView& m);

  Backend& backend_;
  std::shared_ptr<PreparedWeights> shared_;
  std::vector<std::vector<MatrixView>> weights_;
  std::vector<std::shared_ptr<const void>> storage_;  // prepared copies, random weights
  std::vector<std::vector<float>> vectors_;
  std::vector<RopeTable> ropes_;
  int64_t weight_bytes_ = 0;
  std::vector<LowRank> loras_;  // by LoraId; a dropped one's place is reused
  int64_t lora_bytes_ = 0;
  std::unordered_set<const void*> counted_;
  // Scratch buffers, reused pass after pass in the order they are asked
  // for (a pass asks for the same shapes each step, so steady state
  // allocates nothing); buffers [0, used_) belong to this pass.
  std::vector<std::vector<float>> scratch_;
  size_t used_ = 0;
};

}  // namespace actorlm
