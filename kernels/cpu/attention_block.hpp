#pragma once
// Register-blocked pieces of paged attention (paged_attention.cpp), written
// once over the vector width (attention_block_x86.hpp) and compiled for
// AVX2 and for AVX-512 in their own translation units; paged_attention picks
// one at run time. They serve several queries per load of a K or V row,
// where the per-query loops load every row once per query.
//
// Each keeps the per-query kernels' arithmetic exactly, so every path gives
// the same bits (tested):
// - a score is sum over p = 0..15 of t_p, added in order of p onto 0, where
//   t_p is the FMA chain over dimensions d = p, p + 16, ... (dimensions past
//   the last whole 16 continue chain 0); a key sits in one lane, so the
//   vector width does not enter the sum;
// - an output element is acc * alpha, then one FMA per key in key order.

#include <cstdint>

namespace actorlm::cpu::attention_block {

// Keys per block (paged_attention's online-softmax step); kt rows are this wide.
inline constexpr int32_t keys = 64;

// One ISA's kernels.
struct Kernels {
  // kt[d * keys + j] = k[j][d] for j < n (n <= keys, head_dim hd), and 0 for
  // j in [n, n rounded up to 16).
  void (*transpose_keys)(const float* const* k, int32_t n, int32_t hd, float* kt);
  void (*transpose_keys_f16)(const uint16_t* const* k, int32_t n, int32_t hd, float* kt);

  // out[j * hd + d] = v[j][d] widened, for j < n.
  void (*widen_rows)(const uint16_t* const* v, int32_t n, int32_t hd, float* out);

  // scores[i][j] = q[i] · key j for i < nq, j < n (row stride `keys`; the
  // entries up to n rounded up to 16 may be written too).
  void (*scores)(const float* const* q, int32_t nq, const float* kt, int32_t n, int32_t hd, float* scores);

  // For each i < nq (at most 4): acc[i] = acc[i] * alpha[i] + sum over
  // j in [j0, j1), in order, of p[i][j - p_offset] * v[j].
  void (*accumulate)(const float* const* v, int32_t j0, int32_t j1, int32_t hd, const float* const* p,
                     int32_t p_offset, const float* alpha, float* const* acc, int32_t nq);
};

// Defined on x86-64 only; the caller checks the CPU first.
extern const Kernels avx2;    // AVX2 + FMA + F16C
extern const Kernels avx512;  // AVX-512F + FMA + F16C

}  // namespace actorlm::cpu::attention_block
