#pragma once
// Register-blocked pieces of paged attention (paged_attention.cpp) for
// AVX-512, compiled for exactly that ISA (attention_block_avx512.cpp) and
// chosen at run time. They serve several queries per load of a K or V row,
// where the per-query loops load every row once per query.
//
// Each keeps the per-query kernels' arithmetic exactly, so the two paths give
// the same bits (tested):
// - a score is sum over p = 0..15 of t_p, added in order of p onto 0, where
//   t_p is the FMA chain over dimensions d = p, p + 16, ... (dimensions past
//   the last whole 16 continue chain 0);
// - an output element is acc * alpha, then one FMA per key in key order.

#include <cstdint>

namespace actorlm::cpu::attention_block {

// Keys per block (paged_attention's online-softmax step); kt rows are this wide.
inline constexpr int32_t keys = 64;

// kt[d * keys + j] = k[j][d] for j < n (n <= keys, head_dim hd), and 0 for
// j in [n, n rounded up to 16).
void transpose_keys(const float* const* k, int32_t n, int32_t hd, float* kt);
void transpose_keys(const uint16_t* const* k, int32_t n, int32_t hd, float* kt);  // f16 rows

// out[j * hd + d] = v[j][d] widened, for j < n.
void widen_rows(const uint16_t* const* v, int32_t n, int32_t hd, float* out);

// scores[i][j] = q[i] · key j for i < nq, j < n rounded up to 16 (row
// stride `keys`).
void scores(const float* const* q, int32_t nq, const float* kt, int32_t n, int32_t hd, float* scores);

// For each i < nq (at most 4): acc[i] = acc[i] * alpha[i] + sum over
// j in [j0, j1), in order, of p[i][j - p_offset] * v[j].
void accumulate(const float* const* v, int32_t j0, int32_t j1, int32_t hd, const float* const* p, int32_t p_offset,
                const float* alpha, float* const* acc, int32_t nq);

}  // namespace actorlm::cpu::attention_block
