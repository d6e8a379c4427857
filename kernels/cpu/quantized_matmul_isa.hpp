#pragma once
// Entry points of the ISA-specific translation units (x86-64 builds only):
// each returns false for a weight type without an integer kernel.

#include <cstdint>

#include "kernels/cpu/packed_matrix.hpp"
#include "kernels/cpu/quantized_matmul.hpp"

namespace actorlm::cpu {

bool integer_matmul_avx2(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end,
                         bool accumulate);
bool integer_matmul_avx_vnni(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end,
                             bool accumulate);
bool integer_matmul_avx512_vnni(const PackedMatrix& w, const Activations& x, float* out, int64_t begin, int64_t end,
                                bool accumulate);

// quantize_block.hpp's block quantization compiled for AVX2 + F16C and for
// AVX-512 (the same bytes as the portable copy).
int32_t quantize_block_32_avx2(const float* x, bool f16_sum, int8_t* q, float* d, float* s);
int32_t quantize_block_32_avx512(const float* x, bool f16_sum, int8_t* q, float* d, float* s);
void quantize_block_256_avx2(const float* x, int8_t* q, float* d, float* s, int32_t* sum32, int32_t* pairs);
void quantize_block_256_avx512(const float* x, int8_t* q, float* d, float* s, int32_t* sum32, int32_t* pairs);

}  // namespace actorlm::cpu
