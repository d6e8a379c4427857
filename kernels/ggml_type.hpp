#pragma once
// The ggml tensor element types that appear in GGUF files, with their block
// layout, and dequantization to float32.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace actorlm {

// A type or row length the block layouts below cannot describe (the file
// readers turn it into a ModelError naming the file and tensor).
class WeightFormatError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Values are the on-disk ggml type ids.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

// "Q4_K", "F16", ... ; "type#<id>" for ids this enum does not name.
std::string ggml_type_name(uint32_t type_id);
inline std::string ggml_type_name(GgmlType t) { return ggml_type_name(static_cast<uint32_t>(t)); }

// True for the types dequantize_row supports (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
bool ggml_type_supported(uint32_t type_id);
// True for every type whose block layout is known (so a file holding it can
// be opened even if its tensors cannot be dequantized).
bool ggml_type_known(uint32_t type_id);

// Elements per block and bytes per block (1 and sizeof(element) for F32/F16/BF16).
size_t ggml_block_elements(GgmlType t);
size_t ggml_block_bytes(GgmlType t);
// Bytes that `n` elements occupy; n must be a multiple of the block size.
size_t ggml_row_bytes(GgmlType t, int64_t n);

// Dequantizes n elements (a multiple of the block size) from src to dst.
// Throws WeightFormatError for unsupported types, naming the type.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
// The same for `rows` consecutive rows of `cols` elements each.
void dequantize_rows(GgmlType t, const void* src, float* dst, int64_t rows, int64_t cols);

}  // namespace actorlm
