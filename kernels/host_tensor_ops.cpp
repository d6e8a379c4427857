#include "kernels/host_tensor_ops.hpp"

#include "kernels/half.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

namespace actorlm {
namespace {

// Every tensor here is one this class handed out (float32); the Backend's
// element-wise ops want whole rows back to back.
void need_contiguous(const Tensor& t, const char* op) {
  if (!t.contiguous() || t.dtype != DType::f32) {
    throw std::logic_error(std::string("host tensor ops: ") + op + " needs a contiguous float32 tensor");
  }
}

}  // namespace

const std::vector<MatrixView>& HostTensorOps::weight(WeightId w) const {
  return weights_.at(static_cast<size_t>(w.index));
}

const std::vector<float>& HostTensorOps::vector(VectorId v) const { return vectors_.at(static_cast<size_t>(v.index)); }

// A tied model hands its embedding in twice (table and lm_head): counted once.
void HostTensorOps::count_bytes(const MatrixView& m) {
  if (counted_.insert(m.data).second) weight_bytes_ += static_cast<int64_t>(ggml_row_bytes(m.type, m.cols)) * m.rows;
}

WeightId HostTensorOps::add_weights(std::span<const MatrixView> parts) {
  std::vector<MatrixView> views;
  for (const MatrixView& p : parts) {
    PreparedMatrix prepared = shared_ ? shared_->prepare(backend_, p) : backend_.prepare_weights(p);
    if (prepared.storage) storage_.push_back(std::move(prepared.storage));
    views.push_back(prepared.view);
    count_bytes(p);
  }
  weights_.push_back(std::move(views));
  return {static_cast<int32_t>(weights_.size() - 1)};
}

WeightId HostTensorOps::add_table(MatrixView table) {
  weights_.push_back({table});
  count_bytes(table);
  return {static_cast<int32_t>(weights_.size() - 1)};
}

WeightId HostTensorOps::add_random_weights(std::span<const int64_t> part_rows, int64_t cols, uint64_t seed,
                                           bool cols_scale) {
  const float bound = cols_scale ? 1.0f / std::sqrt(static_cast<float>(cols)) : 1.0f;
  std::vector<MatrixView> parts;
  for (int64_t rows : part_rows) {
    auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * cols));
    std::mt19937_64 rng(seed++);
    std::uniform_real_distribution<float> draw(-bound, bound);
    for (float& v : *values) v = draw(rng);
    parts.push_back({values->data(), rows, cols, GgmlType::F32});
    storage_.push_back(std::move(values));
  }
  return add_weights(parts);
}

VectorId HostTensorOps::add_vector(std::span<const float> values) {
  vectors_.emplace_back(values.begin(), values.end());
  return {static_cast<int32_t>(vectors_.size() - 1)};
}

RopeId HostTensorOps::add_rope(const RopeTable& table) {
  ropes_.push_back(table);
  return {static_cast<int32_t>(ropes_.size() - 1)};
}

Tensor HostTensorOps::alloc(int64_t rows, int64_t cols, Use) {
  const auto n = static_cast<size_t>(rows * cols);
  if (used_ == scratch_.size()) scratch_.emplace_back();
  std::vector<float>& buffer = scratch_[used_++];
  if (buffer.size() < n) buffer = std::vector<float>(n);
  return {buffer.data(), rows, cols, cols, DType::f32};
}

std::vector<float> HostTensorOps::take(const Tensor& t) {
  const auto n = static_cast<size_t>(t.rows * t.cols);
  for (size_t i = 0; i < used_; ++i) {
    if (scratch_[i].data() == t.data && t.contiguous()) {
      std::vector<float> out = std::move(scratch_[i]);
      out.resize(n);
      scratch_[i] = {};
      return out;
    }
  }
  std::vector<float> out;
  for (int64_t r = 0; r < t.rows; ++r) out.insert(out.end(), t.f32() + r * t.ld, t.f32() + r * t.ld + t.cols);
  return out;
}

std::vector<Tensor> HostTensorOps::alloc_products(int64_t rows, WeightId w) {
  std::vector<Tensor> out;
  for (const MatrixView& part : weight(w)) out.push_back(alloc(rows, part.rows, Use::state));
  return out;
}

void HostTensorOps::embed(WeightId table, std::span<const int32_t> tokens, Tensor out) {
  need_contiguous(out, "embed");
  backend_.embed(weight(table).at(0), tokens, out.f32());
}

void HostTensorOps::rms_norm(Tensor x, VectorId w, float eps, Tensor out, std::span<const int32_t> rows) {
  need_contiguous(x, "rms_norm");
  need_contiguous(out, "rms_norm");
  const std::vector<float>& weight = vector(w);
  const auto group = static_cast<int64_t>(weight.size());
  const float* in = x.f32();
  if (!rows.empty()) {
    for (size_t r = 0; r < rows.size(); ++r) {
      std::copy_n(x.f32() + rows[r] * x.cols, x.cols, out.f32() + static_cast<int64_t>(r) * out.cols);
    }
    in = out.f32();
  }
  backend_.rms_norm(in, weight.data(), out.f32(), out.rows * out.cols / group, group, eps);
}

void HostTensorOps::matmul(Tensor x, WeightId w, std::span<const Tensor> out, bool accumulate) {
  need_contiguous(x, "matmul");
  const std::vector<MatrixView>& parts = weight(w);
  if (out.size() != parts.size()) throw std::logic_error("host tensor ops: matmul needs one output per part");
  bool direct = true;
  for (const Tensor& o : out) direct = direct && o.contiguous() && o.dtype == DType::f32;
  if (direct && !accumulate) {
    std::vector<float*> outs;
    for (const Tensor& o : out) outs.push_back(o.f32());
    return backend_.matmul_many(x.f32(), x.rows, parts, outs);
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& o = out[i];
    if (o.contiguous()) {
      backend_.matmul(x.f32(), x.rows, parts[i], o.f32(), accumulate);
      continue;
    }
    // A view into a wider buffer: multiply into a packed copy, then place it.
    std::vector<float> packed(static_cast<size_t>(o.rows * o.cols));
    backend_.matmul(x.f32(), x.rows, parts[i], packed.data(), false);
    for (int64_t r = 0; r < o.rows; ++r) {
      float* dst = o.f32() + r * o.ld;
      const float* src = packed.data() + r * o.cols;
      for (int64_t c = 0; c < o.cols; ++c) dst[c] = accumulate ? dst[c] + src[c] : src[c];
    }
  }
}

void HostTensorOps::add_bias(Tensor x, VectorId bias) {
  need_contiguous(x, "add_bias");
  backend_.add_bias(x.f32(), vector(bias).data(), x.rows, x.cols);
}

void HostTensorOps::rope(Tensor q, int32_t n_heads, Tensor k, int32_t n_kv_heads, std::span<const int32_t> positions,
                         RopeId table) {
  need_contiguous(q, "rope");
  need_contiguous(k, "rope");
  backend_.rope(q.f32(), n_heads, k.f32(), n_kv_heads, positions, ropes_.at(static_cast<size_t>(table.index)));
}

void HostTensorOps::store_kv(const KvLayerView& cache, Tensor k, Tensor v, std::span<const int32_t> out_cache_loc) {
  need_contiguous(k, "store_kv");
  need_contiguous(v, "store_kv");
  backend_.store_kv(cache, k.f32(), v.f32(), out_cache_loc);
}

void HostTensorOps::attention(Tensor q, const KvLayerView& cache, const AttentionPlan& plan,
                              const LayerAttention& layer, Tensor out) {
  need_contiguous(q, "attention");
  need_contiguous(out, "attention");
  backend_.attention(q.f32(), cache, plan, layer, out.f32());
}

void HostTensorOps::glu(Glu act, Tensor gate, Tensor up, Tensor out) {
  need_contiguous(gate, "glu");
  need_contiguous(up, "glu");
  need_contiguous(out, "glu");
  const int64_t n = out.rows * out.cols;
  if (act == Glu::gelu_tanh) return backend_.geglu(gate.f32(), up.f32(), out.f32(), n);
  backend_.swiglu(gate.f32(), up.f32(), out.f32(), n);
}

void HostTensorOps::add(Tensor x, Tensor y) {
  need_contiguous(x, "add");
  need_contiguous(y, "add");
  backend_.add(x.f32(), y.f32(), x.rows * x.cols);
}

void HostTensorOps::scale(Tensor x, float s) {
  need_contiguous(x, "scale");
  backend_.scale(x.f32(), x.rows * x.cols, s);
}

void HostTensorOps::softcap(Tensor x, float cap) {
  need_contiguous(x, "softcap");
  backend_.softcap(x.f32(), x.rows * x.cols, cap);
}

std::vector<ExpertChoice> HostTensorOps::route_experts(Tensor logits, int32_t k, bool normalize, float scale) {
  need_contiguous(logits, "route_experts");
  return backend_.route_experts(logits.f32(), logits.rows, static_cast<int32_t>(logits.cols), k, normalize, scale);
}

void HostTensorOps::gather_rows(Tensor src, std::span<const int32_t> rows, Tensor dst) {
  need_contiguous(src, "gather_rows");
  need_contiguous(dst, "gather_rows");
  backend_.gather_rows(src.f32(), src.cols, rows, dst.f32());
}

void HostTensorOps::scatter_add_rows(Tensor dst, std::span<const int32_t> rows, std::span<const float> weights,
                                     Tensor src) {
  need_contiguous(dst, "scatter_add_rows");
  need_contiguous(src, "scatter_add_rows");
  backend_.scatter_add_rows(dst.f32(), dst.cols, rows, weights, src.f32());
}

}  // namespace actorlm

namespace actorlm {

LoraId HostTensorOps::add_lora(std::span<const float> a, std::span<const float> b, int32_t rank, int64_t in,
                               int64_t out, float scale) {
  if (rank <= 0 || in <= 0 || out <= 0 || a.size() != static_cast<size_t>(rank * in) ||
      b.size() != static_cast<size_t>(out * rank)) {
    throw std::invalid_argument("host tensor ops: a LoRA update needs a of [rank][in] and b of [out][rank]");
  }
  LowRank m{std::vector<uint16_t>(a.size()), std::vector<uint16_t>(b.size()), scale, rank, in, out};
  for (size_t i = 0; i < a.size(); ++i) m.a[i] = f32_to_f16(a[i]);
  for (int64_t o = 0; o < out; ++o) {
    for (int32_t k = 0; k < rank; ++k) {
      m.bt[static_cast<size_t>(k * out + o)] = f32_to_f16(b[static_cast<size_t>(o * rank + k)]);
    }
  }
  lora_bytes_ += static_cast<int64_t>((m.a.size() + m.bt.size()) * sizeof(uint16_t));
  for (size_t i = 0; i < loras_.size(); ++i) {
    if (loras_[i].rank == 0) {
      loras_[i] = std::move(m);
      return {static_cast<int32_t>(i)};
    }
  }
  loras_.push_back(std::move(m));
  return {static_cast<int32_t>(loras_.size() - 1)};
}

void HostTensorOps::drop_lora(LoraId id) {
  LowRank& m = loras_.at(static_cast<size_t>(id.index));
  lora_bytes_ -= static_cast<int64_t>((m.a.size() + m.bt.size()) * sizeof(uint16_t));
  m = {};
}

void HostTensorOps::lora(Tensor x, std::span<const LoraSlice> slices, Tensor out) {
  if (x.dtype != DType::f32 || out.dtype != DType::f32) throw std::logic_error("host tensor ops: lora needs float32");
  std::vector<LowRankSlice> run;
  run.reserve(slices.size());
  for (const LoraSlice& s : slices) {
    const LowRank& m = loras_.at(static_cast<size_t>(s.id.index));
    if (m.rank == 0 || x.cols != m.in || out.cols != m.out || s.row_begin < 0 || s.rows < 0 ||
        s.row_begin + s.rows > x.rows || s.row_begin + s.rows > out.rows) {
      throw std::logic_error("host tensor ops: lora's shapes do not match its update");
    }
    run.push_back({m.a.data(), m.bt.data(), m.scale * s.scale, m.rank, s.row_begin, s.rows});
  }
  backend_.low_rank_add(x.f32(), x.ld, x.cols, out.f32(), out.ld, out.cols, run);
}

}  // namespace actorlm
