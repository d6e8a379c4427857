#include "kernels/cpu/cpu_backend.hpp"

#include "kernels/low_rank.hpp"

#include "kernels/cpu/activation_math.hpp"
#include "kernels/cpu/float_rows.hpp"
#include "kernels/cpu/packed_matrix.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/quantized_matmul.hpp"
#include "kernels/cpu/sampler.hpp"
#include "kernels/half.hpp"

#include <cblas.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

namespace actorlm::cpu {
namespace {

int resolve_threads(int n) {
  if (n > 0) return n;
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

// Whether products with w read a packed copy on this CPU.
bool packs(const MatrixView& w) {
  return best_isa() != Isa::portable && packed_layout(w.type) != nullptr && matmul_supported(w);
}

// Asks the kernel to drop the resident pages of [p, p + n) (whole pages
// inside it): after packing, the file's copy of a matrix is read again only
// by the embedding lookup, if at all, and would otherwise stay resident next
// to the packed one. MADV_PAGEOUT keeps the contents (a file-backed page is
// read back on its next use; an anonymous one, as in tests, is swapped or
// kept), unlike MADV_DONTNEED, which would zero anonymous memory.
// With `partial`, also the pages [p, p + n) only partly covers.
void release_pages(const void* p, size_t n, bool partial = false) {
#ifdef MADV_PAGEOUT
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto at = reinterpret_cast<uintptr_t>(p);
  const auto begin = (partial ? at : at + page - 1) / page * page;
  const auto end = (partial ? at + n + page - 1 : at + n) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_PAGEOUT);  // advice only
#else
  (void)p;
  (void)n;
  (void)partial;
#endif
}

}  // namespace

CpuBackend::CpuBackend(int n_threads) : pool_(resolve_threads(n_threads)) {
  openblas_set_num_threads(pool_.size());
}

void CpuBackend::embed(MatrixView table, std::span<const int32_t> tokens, float* out) {
  const size_t row_bytes = ggml_row_bytes(table.type, table.cols);
  for (size_t t = 0; t < tokens.size(); ++t) {
    int32_t id = tokens[t];
    if (id < 0 || id >= table.rows) {
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary of " +
                              std::to_string(table.rows));
    }
    dequantize_row(table.type, static_cast<const uint8_t*>(table.data) + static_cast<size_t>(id) * row_bytes,
                   out + static_cast<int64_t>(t) * table.cols, table.cols);
  }
}

void CpuBackend::elementwise(int64_t rows, int64_t row_size, int64_t cost,
                             const std::function<void(int64_t, int64_t)>& fn) {
  // Below this much work (elements times their cost, in multiply-adds) a
  // parallel loop's hand-off and end barrier cost more than the second
  // thread saves. Serial work here leaves every other thread idle, so the
  // bar is low: one decode token's norm stays serial, eight tokens' is split.
  // Each row's result is the same either way.
  constexpr int64_t parallel_work = 4096;
  if (rows < 2 || rows * row_size * cost < parallel_work) {
    fn(0, rows);
  } else {
    pool_.parallel_for(rows, fn);
  }
}

void CpuBackend::low_rank_add(const float* x, int64_t ldx, int64_t in, float* out, int64_t ldo, int64_t out_cols,
                              std::span<const LowRankSlice> slices) {
  if (slices.empty()) return;
  const int64_t rows = low_rank_rows(slices);
  elementwise(rows, in + out_cols, slices.front().rank, [&](int64_t begin, int64_t end) {
    low_rank_add_rows(x, ldx, in, out, ldo, out_cols, slices, begin, end);
  });
}

void CpuBackend::rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t cols,
                          float eps) {
  elementwise(rows, cols, /*cost=*/1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * cols;
      double ss = 0.0;
      for (int64_t i = 0; i < cols; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      auto scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(cols) + eps));
      float* o = out + r * cols;
      for (int64_t i = 0; i < cols; ++i) o[i] = xr[i] * scale * weight[i];
    }
  });
}

void CpuBackend::matmul(const float* x, int64_t rows, MatrixView w, float* out, bool accumulate) {
  if (rows <= 0) return;
  if (w.type == GgmlType::F32) {
    const auto* data = static_cast<const float*>(w.data);
    if (rows <= few_rows) {
      // Decode and verify row counts: each weight row read once for every
      // x row (float_rows.hpp), and a row's result whatever the count.
      constexpr int64_t piece = 2 * float_block_rows;
      const int64_t pieces = (w.rows + piece - 1) / piece;
      pool_.parallel_for(pieces, [&](int64_t begin, int64_t end) {
        const int64_t first = begin * piece, last = std::min(w.rows, end * piece);
        multiply_rows(data + first * w.cols, last - first, x, rows, w.cols, out + first, w.rows, accumulate);
      });
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(w.rows),
                static_cast<blasint>(w.cols), 1.0f, x, static_cast<blasint>(w.cols), data,
                static_cast<blasint>(w.cols), accumulate ? 1.0f : 0.0f, out, static_cast<blasint>(w.rows));
    return;
  }
  if (!matmul_supported(w)) {
    throw std::invalid_argument("no CPU product for a " + ggml_type_name(w.type) + " matrix of " +
                                std::to_string(w.cols) + " columns");
  }
  // A view that did not go through prepare_weights is packed for this one
  // product (correct, but the packing costs more than the product).
  std::shared_ptr<const PackedMatrix> scratch;
  if (w.packed == nullptr && packs(w)) {
    scratch = pack_matrix(w);
    w.packed = scratch.get();
  }
  // From the stored format, for every row count: a token's product is then
  // the same alone or in a batch (quantized_matmul.hpp).
  prepare_activations(x, rows, w.cols, w.type, activations_);
  if (activations_.scheme != ActivationScheme::none) {
    pool_.parallel_for(rows, [&](int64_t begin, int64_t end) { quantize_rows(begin, end, activations_); });
  }
  // Split by whole pairs of tiles of the packed layout (a thread never
  // computes a tile another one writes, and the 512-bit kernels get pairs).
  const int64_t pieces = (w.rows + split_rows - 1) / split_rows;
  pool_.parallel_for(pieces, [&](int64_t begin, int64_t end) {
    matmul_rows(w, activations_, out, begin * split_rows, std::min(w.rows, end * split_rows), accumulate);
  });
}

void CpuBackend::matmul_many(const float* x, int64_t rows, std::span<const MatrixView> w,
                             std::span<float* const> out) {
  if (w.size() != out.size() || std::any_of(w.begin(), w.end(), [&](const MatrixView& m) { return m.cols != w[0].cols; })) {
    throw std::invalid_argument("matmul_many: one output per matrix, all matrices as wide as x");
  }
  // Only packed integer matrices share: anything else goes one at a time.
  const bool shareable = rows > 0 && std::all_of(w.begin(), w.end(), [](const MatrixView& m) {
    return m.packed != nullptr && activation_scheme(m.type) != ActivationScheme::none;
  });
  if (!shareable) {
    Backend::matmul_many(x, rows, w, out);
    return;
  }
  auto slot = [](GgmlType t) {
    return static_cast<size_t>(activation_scheme(t)) - static_cast<size_t>(ActivationScheme::q8_0);
  };
  bool quantized[3] = {false, false, false};
  for (const MatrixView& m : w) {
    const size_t s = slot(m.type);
    if (quantized[s]) continue;
    quantized[s] = true;
    prepare_activations(x, rows, m.cols, m.type, shared_[s]);
    pool_.parallel_for(rows, [&](int64_t begin, int64_t end) { quantize_rows(begin, end, shared_[s]); });
  }
  // Pairs of tiles of every matrix, numbered one after another.
  std::vector<int64_t> first_piece(w.size() + 1, 0);
  for (size_t i = 0; i < w.size(); ++i) first_piece[i + 1] = first_piece[i] + (w[i].rows + split_rows - 1) / split_rows;
  pool_.parallel_for(first_piece.back(), [&](int64_t begin, int64_t end) {
    for (size_t i = 0; i < w.size(); ++i) {
      const int64_t b = std::max(begin, first_piece[i]) - first_piece[i];
      const int64_t e = std::min(end, first_piece[i + 1]) - first_piece[i];
      if (b >= e) continue;
      matmul_rows(w[i], shared_[slot(w[i].type)], out[i], b * split_rows, std::min(w[i].rows, e * split_rows), false);
    }
  });
}

PreparedMatrix CpuBackend::prepare_weights(MatrixView w) {
  if (!packs(w)) return {w, nullptr};
  // On every thread (an 8B model is ~5 GB to repack); the file's pages are
  // let go as they are read, so that peak memory is the packed copy plus a
  // megabyte or so per thread, not plus the largest matrix.
  std::shared_ptr<PackedMatrix> packed = allocate_packed(w);
  pool_.parallel_for(packed->tiles(), [&](int64_t begin, int64_t end) {
    pack_tiles(w, *packed, begin, end, [](const void* p, size_t n) { release_pages(p, n); });
  });
  // Each thread let go of the whole pages of its own rows only; the pages
  // two threads' rows (or two matrices) share were still resident: about
  // 30 KB per matrix, 7 MB over the default model's 211.
  release_pages(w.data, ggml_row_bytes(w.type, w.cols) * static_cast<size_t>(w.rows), true);
  w.packed = packed.get();
  return {w, std::move(packed)};
}

void CpuBackend::add_bias(float* x, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) x[r * cols + i] += bias[i];
  }
}

void CpuBackend::rope(float* q, int32_t n_heads, float* k, int32_t n_kv_heads,
                      std::span<const int32_t> positions, const RopeTable& table) {
  const int32_t hd = table.head_dim;
  const int32_t pairs = hd / 2;
  std::vector<float> cs(static_cast<size_t>(hd));
  for (size_t t = 0; t < positions.size(); ++t) {
    // The angle in double: in float, position 4000 would already be off by
    // ~2e-4 rad for the fastest pair.
    auto pos = static_cast<double>(positions[t]);
    for (int32_t i = 0; i < pairs; ++i) {
      double theta = pos * table.inv_freq[static_cast<size_t>(i)];
      cs[static_cast<size_t>(2 * i)] = static_cast<float>(std::cos(theta));
      cs[static_cast<size_t>(2 * i + 1)] = static_cast<float>(std::sin(theta));
    }
    auto rotate = [&](float* head) {
      for (int32_t i = 0; i < pairs; ++i) {
        float c = cs[static_cast<size_t>(2 * i)], s = cs[static_cast<size_t>(2 * i + 1)];
        float x0 = head[2 * i], x1 = head[2 * i + 1];
        head[2 * i] = x0 * c - x1 * s;
        head[2 * i + 1] = x0 * s + x1 * c;
      }
    };
    for (int32_t h = 0; h < n_heads; ++h) rotate(q + (static_cast<int64_t>(t) * n_heads + h) * hd);
    for (int32_t h = 0; h < n_kv_heads; ++h) rotate(k + (static_cast<int64_t>(t) * n_kv_heads + h) * hd);
  }
}

void CpuBackend::store_kv(KvLayerView cache, const float* k, const float* v,
                          std::span<const int32_t> out_cache_loc) {
  const int64_t row = static_cast<int64_t>(cache.n_kv_heads) * cache.head_dim;
  for (size_t t = 0; t < out_cache_loc.size(); ++t) {
    int64_t r = out_cache_loc[t];
    if (r < 0 || r >= cache.pool_rows) {
      throw std::out_of_range("KV row " + std::to_string(r) + " outside the pool of " +
                              std::to_string(cache.pool_rows));
    }
    const float* kt = k + static_cast<int64_t>(t) * row;
    const float* vt = v + static_cast<int64_t>(t) * row;
    if (cache.k16 != nullptr) {  // rounded to nearest (even), as F16C and llama.cpp's f16 cache do
      for (int64_t i = 0; i < row; ++i) {
        cache.k16[r * row + i] = f32_to_f16(kt[i]);
        cache.v16[r * row + i] = f32_to_f16(vt[i]);
      }
      continue;
    }
    std::memcpy(cache.k + r * row, kt, static_cast<size_t>(row) * sizeof(float));
    std::memcpy(cache.v + r * row, vt, static_cast<size_t>(row) * sizeof(float));
  }
}

void CpuBackend::attention(const float* q, KvLayerView cache, const AttentionPlan& plan, const LayerAttention& layer,
                           float* out) {
  paged_attention(q, cache, plan, layer, out, pool_);
}

// The activations run over 256-element pieces, so that a batch's gate (one
// flat array here) splits evenly between threads; GeGLU's libm tanh per value
// makes even one token's worth splitting.
constexpr int64_t piece = 256;

void CpuBackend::swiglu(const float* gate, const float* up, float* out, int64_t n) {
  const auto& math = activation_math::for_isa(best_isa());
  elementwise((n + piece - 1) / piece, piece, /*cost=*/2, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * piece;
    math.swiglu(gate + first, up + first, out + first, std::min(n, end * piece) - first);
  });
}

// The tanh form, as llama.cpp's and PyTorch's gelu(approximate="tanh"):
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
void CpuBackend::geglu(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  elementwise((n + piece - 1) / piece, piece, /*cost=*/8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * piece; i < std::min(n, end * piece); ++i) {
      const float g = gate[i];
      out[i] = 0.5f * g * (1.0f + std::tanh(k * g * (1.0f + 0.044715f * g * g))) * up[i];
    }
  });
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuBackend::softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void CpuBackend::scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

std::vector<ExpertChoice> CpuBackend::route_experts(const float* logits, int64_t rows, int32_t n_experts, int32_t k,
                                                    bool normalize, float scale) {
  if (n_experts <= 0 || k <= 0 || k > n_experts) {
    throw std::invalid_argument("route_experts: top " + std::to_string(k) + " of " + std::to_string(n_experts));
  }
  std::vector<ExpertChoice> out(static_cast<size_t>(rows * k));
  std::vector<float> p(static_cast<size_t>(n_experts));
  std::vector<int32_t> order(static_cast<size_t>(n_experts));
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * n_experts;
    const float mx = *std::max_element(l, l + n_experts);
    float sum = 0.0f;
    for (int32_t e = 0; e < n_experts; ++e) sum += (p[static_cast<size_t>(e)] = std::exp(l[e] - mx));
    for (float& v : p) v /= sum;
    std::iota(order.begin(), order.end(), 0);
    // Ties go to the lower index, so the choice is deterministic.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] ||
             (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
    });
    float chosen = 0.0f;
    for (int32_t j = 0; j < k; ++j) chosen += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
    // llama.cpp clamps the sum at the smallest normal f16 before dividing.
    const float norm = normalize ? 1.0f / std::max(chosen, 6.103515625e-5f) : 1.0f;
    for (int32_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      out[static_cast<size_t>(r * k + j)] = {e, p[static_cast<size_t>(e)] * norm * scale};
    }
  }
  return out;
}

void CpuBackend::gather_rows(const float* src, int64_t cols, std::span<const int32_t> rows, float* dst) {
  for (size_t i = 0; i < rows.size(); ++i) std::copy_n(src + rows[i] * cols, cols, dst + static_cast<int64_t>(i) * cols);
}

void CpuBackend::scatter_add_rows(float* dst, int64_t cols, std::span<const int32_t> rows, std::span<const float> weights,
                                  const float* src) {
  for (size_t i = 0; i < rows.size(); ++i) {
    float* d = dst + rows[i] * cols;
    const float* s = src + static_cast<int64_t>(i) * cols;
    for (int64_t c = 0; c < cols; ++c) d[c] += weights[i] * s[c];
  }
}

// Rows are independent (each request owns its RNG), so they are sampled in
// parallel; results land in request order.
std::vector<SampleResult> CpuBackend::sample(const float* logits, int32_t vocab, std::span<const SampleRequest> reqs) {
  std::vector<SampleResult> out(reqs.size());
  pool_.parallel_for(static_cast<int64_t>(reqs.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const SampleRequest& r = reqs[static_cast<size_t>(i)];
      out[static_cast<size_t>(i)] = sample_token(std::span<const float>(logits + i * vocab, static_cast<size_t>(vocab)),
                                                 r.params, r.prompt, r.output, r.step, r.top_n, r.allowed);
    }
  });
  return out;
}

}  // namespace actorlm::cpu
