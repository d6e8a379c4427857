#include "kernels/ggml_type.hpp"

#include <cstring>

#include "kernels/half.hpp"

namespace actorlm {
namespace {

struct Layout {
  uint32_t id;
  const char* name;
  size_t block_elements;
  size_t block_bytes;
  bool dequantizable;
};

// Block sizes of the ggml formats this reader understands; the K-quants pack
// 256 elements per super-block.
constexpr Layout layouts[] = {
    {0, "F32", 1, 4, true},      {1, "F16", 1, 2, true},       {2, "Q4_0", 32, 18, true},
    {3, "Q4_1", 32, 20, true},   {6, "Q5_0", 32, 22, true},    {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},   {9, "Q8_1", 32, 36, false},   {10, "Q2_K", 256, 84, false},
    {11, "Q3_K", 256, 110, false}, {12, "Q4_K", 256, 144, true}, {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true}, {15, "Q8_K", 256, 292, false}, {30, "BF16", 1, 2, true},
};

const Layout* find(uint32_t id) {
  for (const auto& l : layouts) {
    if (l.id == id) return &l;
  }
  return nullptr;
}

const Layout& layout_or_throw(GgmlType t) {
  const Layout* l = find(static_cast<uint32_t>(t));
  if (!l) throw WeightFormatError("unsupported ggml tensor type " + ggml_type_name(t));
  return *l;
}

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float rdh(const uint8_t* p) { return f16_to_f32(rd16(p)); }

// Scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block: eight
// 6-bit pairs packed into 12 bytes.
void k_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// 32-element blocks: low nibbles are elements 0..15, high nibbles 16..31.
void deq_q4(const uint8_t* b, float* y, bool has_min) {
  float d = rdh(b);
  float m = has_min ? rdh(b + 2) : 0.0f;
  const uint8_t* qs = b + (has_min ? 4 : 2);
  float bias = has_min ? m : -8.0f * d;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xf) * d + bias;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + bias;
  }
}

// Q5: a fifth bit per element in a 32-bit mask.
void deq_q5(const uint8_t* b, float* y, bool has_min) {
  float d = rdh(b);
  float m = has_min ? rdh(b + 2) : 0.0f;
  const uint8_t* qhp = b + (has_min ? 4 : 2);
  uint32_t qh = static_cast<uint32_t>(qhp[0]) | static_cast<uint32_t>(qhp[1]) << 8 |
                static_cast<uint32_t>(qhp[2]) << 16 | static_cast<uint32_t>(qhp[3]) << 24;
  const uint8_t* qs = qhp + 4;
  for (int j = 0; j < 16; ++j) {
    int lo = (qs[j] & 0xf) | static_cast<int>(((qh >> j) & 1u) << 4);
    int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    if (has_min) {
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    } else {
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void deq_q8_0(const uint8_t* b, float* y) {
  float d = rdh(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

void deq_q4_k(const uint8_t* b, float* y) {
  float d = rdh(b), dmin = rdh(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0; j < 8; j += 2) {
    uint8_t sc, mn;
    k_scale_min(j, scales, &sc, &mn);
    float d1 = d * sc, m1 = dmin * mn;
    k_scale_min(j + 1, scales, &sc, &mn);
    float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xf) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
  }
}

void deq_q5_k(const uint8_t* b, float* y) {
  float d = rdh(b), dmin = rdh(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t bit_lo = 1, bit_hi = 2;
  for (int j = 0; j < 8; j += 2) {
    uint8_t sc, mn;
    k_scale_min(j, scales, &sc, &mn);
    float d1 = d * sc, m1 = dmin * mn;
    k_scale_min(j + 1, scales, &sc, &mn);
    float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l)
      *y++ = d1 * static_cast<float>((ql[l] & 0xf) + ((qh[l] & bit_lo) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & bit_hi) ? 16 : 0)) - m2;
    ql += 32;
    bit_lo = static_cast<uint8_t>(bit_lo << 2);
    bit_hi = static_cast<uint8_t>(bit_hi << 2);
  }
}

void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  float d = rdh(b + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      int is = l / 16;
      int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
      int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
      int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

std::string ggml_type_name(uint32_t type_id) {
  const Layout* l = find(type_id);
  return l ? l->name : "type#" + std::to_string(type_id);
}

bool ggml_type_supported(uint32_t type_id) {
  const Layout* l = find(type_id);
  return l && l->dequantizable;
}

bool ggml_type_known(uint32_t type_id) { return find(type_id) != nullptr; }

size_t ggml_block_elements(GgmlType t) { return layout_or_throw(t).block_elements; }
size_t ggml_block_bytes(GgmlType t) { return layout_or_throw(t).block_bytes; }

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const Layout& l = layout_or_throw(t);
  if (n < 0 || static_cast<size_t>(n) % l.block_elements != 0) {
    throw WeightFormatError("a row of " + std::to_string(n) + " elements is not a whole number of " +
                     l.name + " blocks of " + std::to_string(l.block_elements));
  }
  return static_cast<size_t>(n) / l.block_elements * l.block_bytes;
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  const Layout& l = layout_or_throw(t);
  if (!l.dequantizable) throw WeightFormatError("dequantization of " + std::string(l.name) + " is not supported");
  size_t row_bytes = ggml_row_bytes(t, n);
  const auto* p = static_cast<const uint8_t*>(src);
  size_t blocks = static_cast<size_t>(n) / l.block_elements;
  switch (t) {
    case GgmlType::F32:
      std::memcpy(dst, p, row_bytes);
      return;
    case GgmlType::F16:
      for (size_t i = 0; i < blocks; ++i) dst[i] = f16_to_f32(rd16(p + 2 * i));
      return;
    case GgmlType::BF16:
      for (size_t i = 0; i < blocks; ++i) dst[i] = bf16_to_f32(rd16(p + 2 * i));
      return;
    default:
      break;
  }
  for (size_t i = 0; i < blocks; ++i) {
    const uint8_t* b = p + i * l.block_bytes;
    float* y = dst + i * l.block_elements;
    switch (t) {
      case GgmlType::Q4_0: deq_q4(b, y, false); break;
      case GgmlType::Q4_1: deq_q4(b, y, true); break;
      case GgmlType::Q5_0: deq_q5(b, y, false); break;
      case GgmlType::Q5_1: deq_q5(b, y, true); break;
      case GgmlType::Q8_0: deq_q8_0(b, y); break;
      case GgmlType::Q4_K: deq_q4_k(b, y); break;
      case GgmlType::Q5_K: deq_q5_k(b, y); break;
      case GgmlType::Q6_K: deq_q6_k(b, y); break;
      default: throw WeightFormatError("dequantization of " + std::string(l.name) + " is not supported");
    }
  }
}

void dequantize_rows(GgmlType t, const void* src, float* dst, int64_t rows, int64_t cols) {
  const size_t row_bytes = ggml_row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t, static_cast<const uint8_t*>(src) + static_cast<size_t>(r) * row_bytes, dst + r * cols, cols);
  }
}

}  // namespace actorlm
