#include "kernels/cpu/float_rows.hpp"

#include <algorithm>
#include <cstdint>
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

// Asks for the weights two tiles on. A tile of several x rows computes
// long enough per weight byte that the hardware's prefetcher, left alone,
// let the loads wait on memory (2-6 x rows took 1.2-2x a one-row pass on a
// Zen 4 VM, against 1.0-1.3x with this). One x row's eight weight rows are
// eight streams the prefetcher keeps up with; asking there made it slower.
// A prefetch past the matrix's end is harmless: it never faults (and the
// address is formed as an integer, so no pointer leaves the array).
template <int T>
inline void ahead(const float* p, int64_t floats) {
  if constexpr (T > 1) {
    __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) +
                                                     static_cast<uintptr_t>(floats) * sizeof(float)));
  }
}

// W weight rows by T activation rows. Whichever of the two is fewer stays in
// registers over the other's loads: W * T accumulators and min(W, T) + 1
// vectors, at most 16 (AVX2's registers) in every shape an AVX2 build uses.
template <int W, int T>
void tile(const float* w, const float* x, int64_t cols, float* out, int64_t out_stride, bool accumulate) {
  V8 acc[W][T] = {};
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) {
    if constexpr (W <= T) {
      V8 ws[W];
      for (int i = 0; i < W; ++i) ahead<T>(w, (2 * W + i) * cols + k);
      for (int i = 0; i < W; ++i) ws[i] = load(w + i * cols + k);
      for (int t = 0; t < T; ++t) {
        const V8 xv = load(x + t * cols + k);
        for (int i = 0; i < W; ++i) acc[i][t] = madd(acc[i][t], ws[i], xv);
      }
    } else {
      V8 xs[T];
      for (int t = 0; t < T; ++t) xs[t] = load(x + t * cols + k);
      for (int i = 0; i < W; ++i) {
        ahead<T>(w, (2 * W + i) * cols + k);
        const V8 wv = load(w + i * cols + k);
        for (int t = 0; t < T; ++t) acc[i][t] = madd(acc[i][t], wv, xs[t]);
      }
    }
  }
  for (int i = 0; i < W; ++i) {
    for (int t = 0; t < T; ++t) {
      store(out[t * out_stride + i], finish(acc[i][t], w + i * cols, x + t * cols, k, cols), accumulate);
    }
  }
}

// T x rows against weight rows [0, n): tiles of W weight rows, then the
// last few one at a time.
template <int W, int T>
void pass(const float* w, int64_t n, const float* x, int64_t cols, float* out, int64_t out_stride, bool accumulate) {
  int64_t o = 0;
  for (; o + W <= n; o += W) tile<W, T>(w + o * cols, x, cols, out + o, out_stride, accumulate);
  for (; o < n; ++o) tile<1, T>(w + o * cols, x, cols, out + o, out_stride, accumulate);
}

// The most x rows one pass over the weights takes. An x row is an operand
// read from L1 by each multiply-add, so a 2 x T tile holds 2T accumulators
// and its two weight vectors in registers: up to 2 x 6 in AVX2's 16, 2 x 8
// in AVX-512's 32 (the 256-bit operations use them all with AVX512VL).
// Without AVX (a portable build) an eight-float vector is two SSE
// registers, so tiles stay as small as the first form's: 4 x 2.
#if defined(__AVX512VL__)
constexpr int64_t pass_rows = 8;
#elif defined(__AVX__)
constexpr int64_t pass_rows = 6;
#else
constexpr int64_t pass_rows = 2;
#endif

// One pass of t <= pass_rows x rows (the larger shapes are compiled
// everywhere but reached only where pass_rows allows). One row: eight
// weight rows at a time, eight independent chains of multiply-adds, enough
// to keep a single sequence's decode bound by memory. More: the shape with
// the fewest loads a multiply-add that still fits the registers.
void pass_of(int64_t t, const float* w, int64_t n, const float* x, int64_t cols, float* out, int64_t out_stride,
             bool accumulate) {
  switch (t) {
    case 1: return pass<8, 1>(w, n, x, cols, out, out_stride, accumulate);
    case 2: return pass<pass_rows == 2 ? 4 : 6, 2>(w, n, x, cols, out, out_stride, accumulate);
    case 3: return pass<4, 3>(w, n, x, cols, out, out_stride, accumulate);
    case 4: return pass<3, 4>(w, n, x, cols, out, out_stride, accumulate);
    case 5: return pass<2, 5>(w, n, x, cols, out, out_stride, accumulate);
    case 6: return pass<2, 6>(w, n, x, cols, out, out_stride, accumulate);
    case 7: return pass<2, 7>(w, n, x, cols, out, out_stride, accumulate);
    default: return pass<2, 8>(w, n, x, cols, out, out_stride, accumulate);
  }
}

// Weight rows [0, n) of a block against every x row, in as few passes as
// pass_rows allows, the passes as even as they can be (8 rows: 4 + 4).
// The first pass reads the block from memory, the others from L2.
void block(const float* w, int64_t n, const float* x, int64_t x_rows, int64_t cols, float* out, int64_t out_stride,
           bool accumulate) {
  const int64_t passes = (x_rows + pass_rows - 1) / pass_rows;
  int64_t t = 0;
  for (int64_t p = 0; p < passes; ++p) {
    const int64_t left = passes - p;
    const int64_t rows = (x_rows - t + left - 1) / left;
    pass_of(rows, w, n, x + t * cols, cols, out + t * out_stride, out_stride, accumulate);
    t += rows;
  }
}

}  // namespace

// In blocks of float_block_rows weight rows (144 KB at 1,536 columns), each
// read from memory once and then from L2 for every further pass.
void multiply_rows(const float* w, int64_t w_rows, const float* x, int64_t x_rows, int64_t cols, float* out,
                   int64_t out_stride, bool accumulate) {
  constexpr int64_t block_rows = float_block_rows;
  for (int64_t o = 0; o < w_rows; o += block_rows) {
    block(w + o * cols, std::min(block_rows, w_rows - o), x, x_rows, cols, out + o, out_stride, accumulate);
  }
}

}  // namespace actorlm::cpu
