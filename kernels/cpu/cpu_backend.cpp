#include "kernels/cpu/cpu_backend.hpp"

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

// 8 floats, and 8 doubles, as GCC's generic vectors: AVX-512 or AVX registers
// where the build has them, narrower ones otherwise, the same arithmetic in
// each.
using v8f = float __attribute__((vector_size(32)));
using v8d = double __attribute__((vector_size(64)));
using v8l = int64_t __attribute__((vector_size(64)));

// expf of 8 values, evaluated in double and rounded once to float, so that
// it is the correctly rounded exp(x) libm's expf also returns: on a sweep of
// every second float in [-87, 88.7] the two differ by an ulp on 0.008% of
// inputs (those inspected sat a hair from a rounding midpoint). (A float polynomial of 1 ulp moved
// 10% of values by an ulp, and that alone moved teacher-forced agreement with
// llama.cpp from 98.08% to 97.63%.) x = n ln2 + r with |r| <= ln2 / 2;
// exp(r) by its Taylor series to r^11 (relative error under 1e-14); 2^n
// written into the exponent bits. x is clamped to [-104, 89], beyond which
// the float result is 0 or inf anyway; NaN compares false and stays NaN.
// libm's expf, one value per call, was the largest serial cost of SwiGLU.
inline v8f expf8(v8f xf) {
  v8d x = __builtin_convertvector(xf, v8d);
  x = x < -104.0 ? v8d{} - 104.0 : x;
  x = x > 89.0 ? v8d{} + 89.0 : x;
  constexpr double round_magic = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  const v8d n = (x * 1.4426950408889634 + round_magic) - round_magic;
  // ln 2 in two parts, the first short enough that n times it is exact.
  const v8d r = (x - n * 0.6931471803691238) - n * 1.9082149292705877e-10;
  v8d p = r * (1.0 / 39916800) + 1.0 / 3628800;
  for (double c : {1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0}) {
    p = p * r + c;
  }
  const v8l bits = (__builtin_convertvector(n, v8l) + 1023) << 52;  // n in [-151, 129]
  v8d scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return __builtin_convertvector(p * scale, v8f);
}

// out[i] = silu(gate[i]) * up[i] for 8 values, in float as the scalar
// gate / (1 + expf(-gate)) * up.
inline void swiglu8(const float* gate, const float* up, float* out) {
  v8f g, u;
  std::memcpy(&g, gate, sizeof g);
  std::memcpy(&u, up, sizeof u);
  const v8f o = g / (1.0f + expf8(-g)) * u;
  std::memcpy(out, &o, sizeof o);
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
    if (rows == 1) {
      // One row (single-sequence decode): sgemm would first copy ("pack")
      // the whole weight matrix; sgemv streams it once.
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(w.rows), static_cast<blasint>(w.cols), 1.0f,
                  data, static_cast<blasint>(w.cols), x, 1, accumulate ? 1.0f : 0.0f, out, 1);
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
  elementwise((n + piece - 1) / piece, piece, /*cost=*/2, [&](int64_t begin, int64_t end) {
    const int64_t last = std::min(n, end * piece);
    int64_t i = begin * piece;
    for (; i + 8 <= last; i += 8) swiglu8(gate + i, up + i, out + i);
    if (i < last) {
      // The array's last few values through the same arithmetic, so a
      // value's result never depends on where in the batch it sits.
      float g[8] = {}, u[8] = {}, o[8];
      const auto rest = static_cast<size_t>(last - i);
      std::copy_n(gate + i, rest, g);
      std::copy_n(up + i, rest, u);
      swiglu8(g, u, o);
      std::copy_n(o, rest, out + i);
    }
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
