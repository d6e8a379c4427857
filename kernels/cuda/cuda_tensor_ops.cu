#include "kernels/cuda/cuda_tensor_ops.cuh"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/ops.cuh"

namespace actorlm::cuda {
namespace {

constexpr size_t kAlign = 256;
constexpr size_t kOverflowChunk = size_t{64} << 20;

[[noreturn]] void misuse(const std::string& what) { throw std::logic_error("CUDA tensor ops: " + what); }

void need(bool ok, const char* what) {
  if (!ok) misuse(what);
}

template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

}  // namespace

// Weights arrive in their file's format (quantized blocks, f16, ...); they
// are widened on the host one row at a time on the way to bf16.
void upload_bf16(const MatrixView& m, bf16* device) {
  std::vector<bf16> host(static_cast<size_t>(m.rows * m.cols));
  std::vector<float> row(static_cast<size_t>(m.cols));
  const size_t row_bytes = ggml_row_bytes(m.type, m.cols);
  for (int64_t r = 0; r < m.rows; ++r) {
    dequantize_row(m.type, as<uint8_t>(m.data) + static_cast<size_t>(r) * row_bytes, row.data(), m.cols);
    for (int64_t c = 0; c < m.cols; ++c) host[static_cast<size_t>(r * m.cols + c)] = __float2bfloat16(row[c]);
  }
  ACTORLM_CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice));
}

WeightId CudaTensorOps::add_weights(std::span<const MatrixView> parts) {
  need(!parts.empty(), "a weight needs at least one matrix");
  // A tied model multiplies by its embedding table: one copy serves both.
  if (parts.size() == 1) {
    for (size_t i = 0; i < weights_.size(); ++i) {
      const Weights& w = weights_[i];
      if (w.source == parts[0].data && w.part_rows.size() == 1 && w.part_rows[0] == parts[0].rows &&
          w.cols == parts[0].cols) {
        return {static_cast<int32_t>(i)};
      }
    }
  }
  Weights w;
  w.cols = parts[0].cols;
  w.source = parts.size() == 1 ? parts[0].data : nullptr;
  int64_t rows = 0;
  for (const MatrixView& p : parts) {
    need(p.cols == w.cols, "a weight's parts must have the same columns");
    w.part_rows.push_back(p.rows);
    rows += p.rows;
  }
  w.data.grow(static_cast<size_t>(rows * w.cols));
  bf16* at = w.data.get();
  for (const MatrixView& p : parts) {
    upload_bf16(p, at);
    at += p.rows * p.cols;
  }
  weight_bytes_ += static_cast<int64_t>(w.data.bytes());
  weights_.push_back(std::move(w));
  return {static_cast<int32_t>(weights_.size() - 1)};
}

WeightId CudaTensorOps::add_table(MatrixView table) { return add_weights({&table, 1}); }

WeightId CudaTensorOps::add_random_weights(std::span<const int64_t> part_rows, int64_t cols, uint64_t seed,
                                           bool cols_scale) {
  Weights w;
  w.cols = cols;
  int64_t rows = 0;
  for (int64_t r : part_rows) {
    w.part_rows.push_back(r);
    rows += r;
  }
  w.data.grow(static_cast<size_t>(std::max<int64_t>(rows * cols, 1)));
  const float bound = cols_scale ? 1.0f / std::sqrt(static_cast<float>(cols)) : 1.0f;
  bf16* at = w.data.get();
  for (int64_t r : part_rows) {
    fill_random(at, r * cols, bound, seed++, stream_);
    at += r * cols;
  }
  ACTORLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  weight_bytes_ += static_cast<int64_t>(w.data.bytes());
  weights_.push_back(std::move(w));
  return {static_cast<int32_t>(weights_.size() - 1)};
}

VectorId CudaTensorOps::add_vector(std::span<const float> values) {
  Vector v;
  v.size = static_cast<int64_t>(values.size());
  v.data.grow(std::max<size_t>(values.size(), 1));
  ACTORLM_CUDA_CHECK(cudaMemcpy(v.data.get(), values.data(), values.size_bytes(), cudaMemcpyHostToDevice));
  vectors_.push_back(std::move(v));
  return {static_cast<int32_t>(vectors_.size() - 1)};
}

RopeId CudaTensorOps::add_rope(const RopeTable& table) {
  Rope r;
  r.head_dim = table.head_dim;
  r.inv_freq.grow(std::max<size_t>(table.inv_freq.size(), 1));
  ACTORLM_CUDA_CHECK(cudaMemcpy(r.inv_freq.get(), table.inv_freq.data(), table.inv_freq.size() * sizeof(float),
                                cudaMemcpyHostToDevice));
  ropes_.push_back(std::move(r));
  return {static_cast<int32_t>(ropes_.size() - 1)};
}

void CudaTensorOps::begin_pass() {
  // The last pass outgrew the arena: one allocation of its high-water mark
  // (and a quarter more) replaces the overflow pieces.
  if (high_water_ > arena_.bytes()) {
    overflow_.clear();
    arena_ = DeviceBuffer<char>();
    arena_.grow(high_water_ + high_water_ / 4);
    ++generation_;
  }
  used_ = 0;
}

void* CudaTensorOps::take(size_t bytes) {
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  const size_t at = used_;
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  if (used_ <= arena_.bytes()) return arena_.get() + at;
  if (capturing_) throw ArenaFull("the scratch arena is full during graph capture");
  // Past the arena: pieces of at least kOverflowChunk, bump-allocated too,
  // so a first pass costs a few allocations, not one per tensor.
  if (overflow_.empty() || overflow_used_ + bytes > overflow_.back().bytes()) {
    overflow_.emplace_back(std::max(bytes, kOverflowChunk));
    overflow_used_ = 0;
  }
  void* p = overflow_.back().get() + overflow_used_;
  overflow_used_ += bytes;
  return p;
}

Tensor CudaTensorOps::alloc(int64_t rows, int64_t cols, Use use) {
  const DType type = use == Use::matmul_input ? DType::bf16 : DType::f32;
  Tensor t{nullptr, rows, cols, cols, type};
  t.data = take(static_cast<size_t>(rows * cols) * t.element_bytes());
  return t;
}

std::vector<Tensor> CudaTensorOps::alloc_products(int64_t rows, WeightId id) {
  const Weights& w = weights_.at(static_cast<size_t>(id.index));
  int64_t total = 0;
  for (int64_t r : w.part_rows) total += r;
  // Side by side in one buffer: matmul() then makes them in one GEMM.
  const Tensor all = alloc(rows, total, Use::state);
  std::vector<Tensor> out;
  int64_t col = 0;
  for (int64_t r : w.part_rows) {
    out.push_back(all.columns(col, r));
    col += r;
  }
  return out;
}

void CudaTensorOps::gemm(const bf16* x, int64_t ldx, int64_t rows, const bf16* w, int64_t n, int64_t k, float* y,
                         int64_t ldy, float beta) {
  if (rows == 0 || n == 0) return;
  const float alpha = 1.0f;
  // cuBLAS is column-major: this is yᵀ = w · xᵀ with w read transposed.
  ACTORLM_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(rows),
                                    static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(k), x, CUDA_R_16BF,
                                    static_cast<int>(ldx), &beta, y, CUDA_R_32F, static_cast<int>(ldy),
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaTensorOps::matmul(Tensor x, WeightId id, std::span<const Tensor> out, bool accumulate) {
  const Weights& w = weights_.at(static_cast<size_t>(id.index));
  need(out.size() == w.part_rows.size(), "matmul needs one output per part");
  need(x.cols == w.cols, "matmul: input columns differ from the weight's");
  if (x.dtype == DType::f32) {  // GEMM inputs are bf16
    need(x.contiguous(), "matmul of a float32 view");
    Tensor narrow = alloc(x.rows, x.cols, Use::matmul_input);
    to_bf16(x.f32(), static_cast<bf16*>(narrow.data), x.rows * x.cols, stream_);
    x = narrow;
  }
  const float beta = accumulate ? 1.0f : 0.0f;
  const auto* xin = static_cast<const bf16*>(x.data);
  // Outputs side by side in one buffer, in part order: one GEMM.
  bool fused = true;
  int64_t col = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    fused = fused && out[i].dtype == DType::f32 && out[i].ld == out[0].ld &&
            out[i].f32() == out[0].f32() + col && out[i].cols == w.part_rows[i];
    col += w.part_rows[i];
  }
  if (fused) return gemm(xin, x.ld, x.rows, w.data.get(), col, w.cols, out[0].f32(), out[0].ld, beta);
  const bf16* part = w.data.get();
  for (size_t i = 0; i < out.size(); ++i) {
    need(out[i].dtype == DType::f32 && out[i].cols == w.part_rows[i] && out[i].rows == x.rows,
         "matmul output shape or type");
    gemm(xin, x.ld, x.rows, part, w.part_rows[i], w.cols, out[i].f32(), out[i].ld, beta);
    part += w.part_rows[i] * w.cols;
  }
}

void CudaTensorOps::embed(WeightId table, std::span<const int32_t> tokens, Tensor out) {
  const Weights& w = weights_.at(static_cast<size_t>(table.index));
  need(out.dtype == DType::f32 && out.contiguous() && out.cols == w.cols, "embed output");
  cuda::embed(w.data.get(), w.cols, tokens.data(), static_cast<int32_t>(tokens.size()), out.f32(), stream_);
}

void CudaTensorOps::rms_norm(Tensor x, VectorId id, float eps, Tensor out, std::span<const int32_t> rows) {
  const Vector& w = vectors_.at(static_cast<size_t>(id.index));
  need(x.dtype == DType::f32 && out.cols == x.cols && w.size > 0 && x.cols % w.size == 0, "rms_norm shapes");
  const auto n_rows = static_cast<int32_t>(rows.empty() ? x.rows : static_cast<int64_t>(rows.size()));
  need(out.rows == n_rows, "rms_norm output rows");
  cuda::rms_norm(x.f32(), x.ld, rows.empty() ? nullptr : rows.data(), w.data.get(), w.size, out.data,
                 out.dtype == DType::bf16, out.ld, n_rows, x.cols, eps, stream_);
}

void CudaTensorOps::add_bias(Tensor x, VectorId id) {
  const Vector& b = vectors_.at(static_cast<size_t>(id.index));
  need(x.dtype == DType::f32 && b.size == x.cols, "add_bias shapes");
  cuda::add_bias(x.f32(), x.ld, b.data.get(), static_cast<int32_t>(x.rows), x.cols, stream_);
}

void CudaTensorOps::rope(Tensor q, int32_t n_heads, Tensor k, int32_t n_kv_heads, std::span<const int32_t> positions,
                         RopeId id) {
  const Rope& r = ropes_.at(static_cast<size_t>(id.index));
  need(q.dtype == DType::f32 && k.dtype == DType::f32, "rope of float32 tensors");
  cuda::rope(q.f32(), q.ld, n_heads, k.f32(), k.ld, n_kv_heads, r.head_dim, positions.data(), r.inv_freq.get(),
             static_cast<int32_t>(positions.size()), stream_);
}

void CudaTensorOps::store_kv(const KvLayerView& cache, Tensor k, Tensor v, std::span<const int32_t> out_cache_loc) {
  need(cache.k_device && cache.v_device, "store_kv needs a device cache");
  need(k.ld == v.ld && k.cols == v.cols && k.dtype == DType::f32, "store_kv: k and v of one layout");
  cuda::store_kv(k.f32(), v.f32(), k.ld, static_cast<int32_t>(k.cols), out_cache_loc.data(),
                 static_cast<int32_t>(out_cache_loc.size()), static_cast<bf16*>(cache.k_device),
                 static_cast<bf16*>(cache.v_device), stream_);
}

void CudaTensorOps::attention(Tensor q, const KvLayerView& cache, const AttentionPlan&, const LayerAttention& layer,
                              Tensor out) {
  need(schedule_ != nullptr, "attention before set_attention");
  need(out.dtype == DType::bf16 && out.contiguous() && q.dtype == DType::f32, "attention tensors");
  PagedAttentionArgs a = attn_;
  a.q = q.f32();
  a.q_ld = q.ld;
  a.k_cache = static_cast<const bf16*>(cache.k_device);
  a.v_cache = static_cast<const bf16*>(cache.v_device);
  a.out = static_cast<bf16*>(out.data);
  a.sliding_window = layer.sliding_window;
  a.softcap = layer.softcap;
  paged_attention(a, *schedule_, stream_);
}

void CudaTensorOps::glu(Glu act, Tensor gate, Tensor up, Tensor out) {
  need(gate.ld == up.ld && gate.dtype == DType::f32 && up.dtype == DType::f32, "glu: gate and up of one layout");
  need(out.dtype == DType::bf16 && out.contiguous() && out.cols == gate.cols, "glu output");
  cuda::glu(gate.f32(), up.f32(), gate.ld, static_cast<bf16*>(out.data), static_cast<int32_t>(out.rows), out.cols,
            act == Glu::gelu_tanh, stream_);
}

void CudaTensorOps::add(Tensor x, Tensor y) {
  need(x.contiguous() && y.contiguous() && x.dtype == DType::f32 && y.dtype == DType::f32, "add of float32 tensors");
  cuda::add(x.f32(), y.f32(), x.rows * x.cols, stream_);
}

void CudaTensorOps::scale(Tensor x, float s) {
  need(x.contiguous() && x.dtype == DType::f32, "scale of a float32 tensor");
  cuda::scale(x.f32(), x.rows * x.cols, s, stream_);
}

void CudaTensorOps::softcap(Tensor x, float cap) {
  need(x.contiguous() && x.dtype == DType::f32, "softcap of a float32 tensor");
  cuda::softcap(x.f32(), x.rows * x.cols, cap, stream_);
}

std::vector<ExpertChoice> CudaTensorOps::route_experts(Tensor, int32_t, bool, float) {
  misuse("mixture-of-experts layers are not on the GPU yet");
}

void CudaTensorOps::gather_rows(Tensor, std::span<const int32_t>, Tensor) {
  misuse("mixture-of-experts layers are not on the GPU yet");
}

void CudaTensorOps::scatter_add_rows(Tensor, std::span<const int32_t>, std::span<const float>, Tensor) {
  misuse("mixture-of-experts layers are not on the GPU yet");
}

}  // namespace actorlm::cuda
