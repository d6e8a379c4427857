#pragma once
// Products of a float weight row with a few activation rows: each weight row
// is read from memory once, while it sits in L1 every activation row is
// multiplied by it, and every dot product is summed in one fixed order (32
// lanes, then the lanes pairwise), so a token's result does not depend on
// how many rows share its step. Used where the product is bound by reading
// the weights: float32 matrices at decode and speculative-verify row counts
// (OpenBLAS's sgemm copies the whole matrix first, which made 2-16 rows cost
// twice one row), and the rows that other formats widen to float.

#include <cstdint>

namespace actorlm::cpu {

// Row counts up to this go through dot_rows instead of OpenBLAS (float32).
inline constexpr int64_t few_rows = 16;

// out[t * out_stride] (= or +=, by accumulate) dot(w, x + t * cols) for
// t < x_rows.
void dot_rows(const float* w, const float* x, int64_t x_rows, int64_t cols, float* out, int64_t out_stride,
              bool accumulate);

}  // namespace actorlm::cpu
