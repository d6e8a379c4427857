#pragma once
// Products out = x · Wᵀ read straight from ggml weight blocks (Q4_1, Q8_0)
// instead of their float32 copy: a row of 576 weights is 360 (Q4_1) or 612
// (Q8_0) bytes instead of 2304, and single-sequence decode is bound by those
// bytes.
//
// Each row of x is first quantized per 32-value block to int16 (scale =
// max|x_block| / 32767, round to nearest), so a block's dot product is an
// exact integer sum (AVX2 madd on int16) times d * scale; Q4_1's min term uses
// the sum of the quantized copy too:
//   sum_j (d q_j + m) x~_j = d * scale * sum_j q_j xq_j + m * scale * sum_j xq_j.
// So the result is W x~ up to float32 summation, x~ being x rounded per
// block; each x~_j is within max|x_block(j)| / 65534 of x_j, hence
//   |y_r - (W x)_r| <= sum_j |W_rj| * max|x_block(j)| / 65534 (+ float32 sums).
// Why int16 and not llama.cpp's int8: int8 activations (maddubs) were 10%
// faster in a one-thread kernel benchmark here but moved the default model's
// logits by up to 1.6 against float32 and took teacher-forced agreement with
// llama.cpp below the 98% its test asks (97.7%); int16 keeps the float32
// path's results (tests/model/llama_model_test).
//
// Batch invariance: every output element is computed by the same sequence of
// operations whatever the number of x rows and whatever row range a thread
// gets, so a token's result is bit-for-bit the same alone or in any batch
// (prefix reuse and continuous batching rely on that).

#include <cstdint>
#include <vector>

#include "kernels/backend.hpp"

namespace actorlm::cpu {

inline constexpr int64_t block_values = 32;

// Bytes of one 32-value block: 20 for Q4_1, 34 for Q8_0, 0 for none.
int64_t block_bytes(BlockFormat f);

// True when block_matmul_rows can read w: blocks set, a known format, and
// cols a (positive) multiple of 32.
bool block_matmul_supported(const MatrixView& w);

// x [rows][cols] quantized once per product, shared by every weight row.
struct BlockActivations {
  int64_t rows = 0, cols = 0;
  std::vector<int16_t> q;    // rows * cols values in [-32767, 32767]
  std::vector<float> scale;  // per block: x_j ~= scale * q_j
  std::vector<float> sum;    // per block: scale * sum of q (Q4_1's min term)
};

// Sizes `out` for x [rows][cols] (cols a positive multiple of 32), reusing
// its storage; then quantize_rows fills x rows [begin, end), so callers may
// split the rows over threads.
void prepare_activations(int64_t rows, int64_t cols, BlockActivations& out);
void quantize_rows(const float* x, int64_t begin, int64_t end, BlockActivations& out);

enum class MatmulImpl { best, scalar };

// For every x row t and weight row r in [begin, end):
//   out[t * w.rows + r] = row r of w · x_t  (+ the old value when accumulate).
// Precondition: block_matmul_supported(w) and x.cols == w.cols. `best` uses
// AVX2 where the build targets it and is otherwise the scalar loop; `scalar`
// is there so tests cover both (the two may differ in float32 rounding).
void block_matmul_rows(const MatrixView& w, const BlockActivations& x, float* out, int64_t begin, int64_t end,
                       bool accumulate, MatmulImpl impl = MatmulImpl::best);

}  // namespace actorlm::cpu
