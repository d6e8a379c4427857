#include "kernels/low_rank.hpp"

#include <algorithm>
#include <vector>

namespace actorlm {
namespace {

// Sixteen running sums, each over every sixteenth element, then added in a
// fixed order: the compiler keeps them in vector registers without
// reordering anything, and the result depends only on a and b.
float fixed_order_dot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  }
  float sum = acc[0];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void one_row(const float* xr, int64_t in, float* yr, int64_t out_cols, const LowRankSlice& s, float* t) {
  for (int32_t k = 0; k < s.rank; ++k) t[k] = fixed_order_dot(xr, s.a + k * in, in);
  for (int32_t k = 0; k < s.rank; ++k) {
    const float tk = t[k];
    const float* b = s.bt + k * out_cols;
    for (int64_t o = 0; o < out_cols; ++o) yr[o] += tk * b[o];
  }
}

}  // namespace

int64_t low_rank_rows(std::span<const LowRankSlice> slices) {
  int64_t n = 0;
  for (const LowRankSlice& s : slices) n += s.rows;
  return n;
}

void low_rank_add_rows(const float* x, int64_t ldx, int64_t in, float* out, int64_t ldo, int64_t out_cols,
                       std::span<const LowRankSlice> slices, int64_t begin, int64_t end) {
  constexpr int32_t kStackRank = 256;
  float stack[kStackRank];
  std::vector<float> heap;
  int64_t first = 0;  // the global index of slice s's first row
  for (const LowRankSlice& s : slices) {
    const int64_t from = std::max(begin, first), to = std::min(end, first + s.rows);
    float* t = stack;
    if (s.rank > kStackRank) {
      heap.resize(static_cast<size_t>(s.rank));
      t = heap.data();
    }
    for (int64_t g = from; g < to; ++g) {
      const int64_t r = s.row_begin + (g - first);
      one_row(x + r * ldx, in, out + r * ldo, out_cols, s, t);
    }
    first += s.rows;
    if (first >= end) break;
  }
}

void Backend::low_rank_add(const float* x, int64_t ldx, int64_t in, float* out, int64_t ldo, int64_t out_cols,
                           std::span<const LowRankSlice> slices) {
  low_rank_add_rows(x, ldx, in, out, ldo, out_cols, slices, 0, low_rank_rows(slices));
}

}  // namespace actorlm
