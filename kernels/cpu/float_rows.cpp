#include "kernels/cpu/float_rows.hpp"

#include <algorithm>
#include <cstring>

#if defined(__FMA__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace actorlm::cpu {
namespace {

// Eight floats: one AVX register, two SSE ones in a portable build (the same
// sums either way).
typedef float V8 __attribute__((vector_size(32)));

// acc + a * b, rounded once where the CPU fuses it. Spelled out, and the
// file compiled with -ffp-contract=off: left to the compiler, whether a
// multiply and an add fuse differed between tile shapes, and so did the sums.
inline V8 madd(V8 acc, V8 a, V8 b) {
#if defined(__FMA__) && defined(__AVX__)
  return _mm256_fmadd_ps(a, b, acc);
#else
  return acc + a * b;
#endif
}

inline V8 load(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// A pair's sum from its accumulator (k < done) and the tail [done, cols):
// the one place the order is fixed for every tile.
inline float finish(V8 acc, const float* w, const float* x, int64_t done, int64_t cols) {
  float r = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (int64_t j = done; j < cols; ++j) r += w[j] * x[j];
  return r;
}

inline void store(float& o, float y, bool accumulate) { o = accumulate ? o + y : y; }

// W weight rows by T activation rows.
template <int W, int T>
void tile(const float* w, const float* x, int64_t cols, float* out, int64_t out_stride, bool accumulate) {
  V8 acc[W][T] = {};
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) {
    V8 xs[T];
    for (int t = 0; t < T; ++t) xs[t] = load(x + t * cols + k);
    for (int i = 0; i < W; ++i) {
      const V8 wv = load(w + i * cols + k);
      for (int t = 0; t < T; ++t) acc[i][t] = madd(acc[i][t], wv, xs[t]);
    }
  }
  for (int i = 0; i < W; ++i) {
    for (int t = 0; t < T; ++t) {
      store(out[t * out_stride + i], finish(acc[i][t], w + i * cols, x + t * cols, k, cols), accumulate);
    }
  }
}

// Weight rows [0, n) of a block: pairs of x rows in 4 x 2 tiles, then an
// odd last x row in 8 x 1 tiles (eight chains of multiply-adds, enough to
// keep one row, as at single-sequence decode, bound by memory).
void block(const float* w, int64_t n, const float* x, int64_t x_rows, int64_t cols, float* out, int64_t out_stride,
           bool accumulate) {
  const int64_t paired = x_rows / 2 * 2;
  for (int64_t t = 0; t < paired; t += 2) {
    const float* xt = x + t * cols;
    float* ot = out + t * out_stride;
    int64_t o = 0;
    for (; o + 4 <= n; o += 4) tile<4, 2>(w + o * cols, xt, cols, ot + o, out_stride, accumulate);
    for (; o < n; ++o) tile<1, 2>(w + o * cols, xt, cols, ot + o, out_stride, accumulate);
  }
  if (paired == x_rows) return;
  const float* xt = x + paired * cols;
  float* ot = out + paired * out_stride;
  int64_t o = 0;
  for (; o + 8 <= n; o += 8) tile<8, 1>(w + o * cols, xt, cols, ot + o, out_stride, accumulate);
  for (; o < n; ++o) tile<1, 1>(w + o * cols, xt, cols, ot + o, out_stride, accumulate);
}

}  // namespace

// In blocks of 16 weight rows (up to 96 KB at 1,536 columns), each read from
// memory once and then from L1/L2 for every pair of x rows.
void multiply_rows(const float* w, int64_t w_rows, const float* x, int64_t x_rows, int64_t cols, float* out,
                   int64_t out_stride, bool accumulate) {
  constexpr int64_t block_rows = 16;
  for (int64_t o = 0; o < w_rows; o += block_rows) {
    block(w + o * cols, std::min(block_rows, w_rows - o), x, x_rows, cols, out + o, out_stride, accumulate);
  }
}

}  // namespace actorlm::cpu
