#pragma once
// Products out = x · Wᵀ read straight from a weight matrix in its file's
// format (ggml blocks, f16, bf16, f32): nothing is widened to float32 ahead of
// time, so single-sequence decode streams the file's bytes (a Q4_K row of
// 576 weights is 324 bytes, not 2,304).
//
// For the block quantizations (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
// Q6_K) each row of x is first quantized to int8 the way llama.cpp does it
// for the same weight type, so that logits track llama.cpp's:
//   q8_0 (Q4_0, Q5_0, Q8_0) and q8_1 (Q4_1, Q5_1): per 32 values,
//     d = max|x| / 127 rounded to f16, q = round(x * 127 / max|x|) (ties to
//     even); q8_1's block sum s = d * sum q (which the mins of Q4_1/Q5_1
//     multiply) is rounded to f16 too;
//   q8_K (the K-quants): per 256 values, d = -max / 127 where max is the value
//     of largest magnitude, q = round(x / d).
// A block's product with the weights is then an exact integer sum times
// float scales: the result is W x~ up to float32 summation, x~ = d q being x
// rounded per block (|x~_j - x_j| <= about d / 2).
//
// Which code runs is chosen at run time from CPUID: AVX-512 VNNI (vpdpbusd
// on 512-bit vectors), AVX-VNNI (the same instruction VEX-encoded, on 256-bit
// vectors) or AVX2 (vpmaddubsw + vpmaddwd) over the matrix packed
// into 8-row tiles (packed_matrix.hpp, MatrixView::packed), or portable C++
// that dequantizes a row and multiplies in float. Every output element is
// computed by the same operations whatever the number of x rows and whatever
// row range a thread gets, so a token's result is bit-for-bit the same alone
// or in any batch (prefix reuse and continuous batching rely on that), for a
// given ISA.

#include <cstdint>
#include <vector>

#include "kernels/backend.hpp"

namespace actorlm::cpu {

inline constexpr int64_t block_values = 32;

// From narrowest to widest. AVX-VNNI and AVX-512 VNNI are separate
// extensions (Zen 4 has the second only, Alder Lake the first only).
enum class Isa { portable, avx2, avx_vnni, avx512_vnni };
const char* isa_name(Isa isa);
// The widest ISA this CPU runs and this build compiled.
Isa best_isa();
bool isa_available(Isa isa);

// True when matmul_rows can multiply by w: a type ggml_type.hpp can
// dequantize and cols a positive whole number of its blocks (any width for
// F32/F16/BF16).
bool matmul_supported(const MatrixView& w);

// How x is quantized for a weight type (see above); none for the float formats.
enum class ActivationScheme { none, q8_0, q8_1, q8_K };
ActivationScheme activation_scheme(GgmlType weights);

// x [rows][cols] prepared once per product and shared by every weight row:
// int8 blocks for the integer kernels, or the float rows as they are. Scales
// are kept per 32 values whatever the scheme (q8_K's repeats over its 256),
// so the kernels read one layout.
struct Activations {
  int64_t rows = 0, cols = 0;
  ActivationScheme scheme = ActivationScheme::none;
  const float* x = nullptr;  // the float rows (the float-weight products read these)
  std::vector<int8_t> q;     // rows * cols values in [-127, 127]
  std::vector<float> d;      // per 32 values: x~_j = d * q_j
  std::vector<float> s;      // per 32 values: d * sum of their q (the min term of Q4_1, Q5_1)
  std::vector<int32_t> sum32;  // per 32 values: sum of their q (offsets and K-quant mins, exactly)
  // q8_K only, per 256 values: the sums of q over 32-value sub-blocks 2p and
  // 2p + 1 as a pair of int16 (p < 4), then over 16-value ones (p < 8).
  std::vector<int32_t> pairs;
};

// Sizes `out` for x [rows][cols] multiplied by weights of type `weights`
// (cols a positive multiple of the scheme's block), reusing its storage;
// then quantize_rows fills rows [begin, end) (nothing to do for the float
// formats), so callers may split the rows over threads.
void prepare_activations(const float* x, int64_t rows, int64_t cols, GgmlType weights, Activations& out);
void quantize_rows(int64_t begin, int64_t end, Activations& out);

// For every x row t and weight row r in [begin, end):
//   out[t * w.rows + r] = row r of w · x_t  (+ the old value when accumulate).
// Precondition: matmul_supported(w), x prepared for w.type and quantized.
// `isa` must be available (tests pick narrower ones; the results of two ISAs
// differ only in float32 rounding). The SIMD kernels read w.packed (a
// PackedMatrix from pack_matrix); a view without one takes the portable path.
void matmul_rows(const MatrixView& w, const Activations& x, float* out, int64_t begin, int64_t end, bool accumulate,
                 Isa isa = best_isa());

}  // namespace actorlm::cpu
