#pragma once
// Products of float weight rows with a few activation rows: each block of
// weight rows is read from memory once and multiplied by up to six
// activation rows (eight with AVX-512's registers) in tiles of 8 x 1 to
// 2 x 6 products, then from L2 for the next six. Every dot product has one
// accumulator of eight lanes and is summed in one fixed order (k in steps of
// eight, then the lanes pairwise, then the tail), whichever tile computes
// it, so a token's result does not depend on how many rows share its step or which
// weight rows a thread was given. Used where the product is bound by
// reading the weights: float32 matrices at decode and speculative-verify
// row counts (OpenBLAS's sgemm copies the whole matrix first, which made
// 2-16 rows cost twice one row), and the rows f16 and bf16 widen to float.

#include <cstdint>

namespace actorlm::cpu {

// Row counts up to this go through multiply_rows instead of OpenBLAS
// (float32): past it sgemm's compute wins over reading the weights once
// (Zen 3, 2 threads, the default model as float32: 24 rows 118 against 109
// tokens/s, 40 rows 124 against 148 with 4 x 2 tiles; docs/BENCHMARKS.md).
// The larger tiles since beat sgemm up to 48 rows in the engine on a Zen 4
// VM but lose to it on one thread from 32, so the limit stayed.
inline constexpr int64_t few_rows = 32;

// Weight rows a block holds; every tile width (8, 6, 4, 3, 2) divides it, so
// a share of weight rows that is a multiple of it leaves no row to multiply
// alone.
inline constexpr int64_t float_block_rows = 24;

// out[t * out_stride + o] (= or +=, by accumulate) dot(w + o * cols,
// x + t * cols) for o < w_rows, t < x_rows.
void multiply_rows(const float* w, int64_t w_rows, const float* x, int64_t x_rows, int64_t cols, float* out,
                   int64_t out_stride, bool accumulate);

}  // namespace actorlm::cpu
