#include "kernels/cpu/packed_matrix.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

namespace actorlm::cpu {
namespace {

// One unit of one row, as integers: stored values (offset added), the raw
// f16 scale and min, and the K-quants' sub-block scales and mins. extract()
// sets every field its type uses.
struct Unit {
  std::array<int, 256> u{};
  uint16_t d = 0, m = 0;
  std::array<int, 16> scale{}, min{};
};

uint16_t half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return h;
}

// 16 bytes of nibbles: low nibbles are values 0..15, high ones 16..31.
void nibbles(const uint8_t* qs, int* u) {
  for (int j = 0; j < 16; ++j) {
    u[j] = qs[j] & 15;
    u[j + 16] = qs[j] >> 4;
  }
}

void fifth_bits(const uint8_t* qh, int* u) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  for (int j = 0; j < 32; ++j) u[j] |= static_cast<int>((bits >> j) & 1) << 4;
}

// Scale and min of K-quant sub-block j (0..7): eight 6-bit pairs in 12 bytes.
void k_scale_min(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void extract(GgmlType t, const uint8_t* b, Unit& x) {
  int* u = x.u.data();
  x.d = half_at(b);
  switch (t) {
    case GgmlType::Q4_0: nibbles(b + 2, u); break;
    case GgmlType::Q4_1:
      x.m = half_at(b + 2);
      nibbles(b + 4, u);
      break;
    case GgmlType::Q5_0:
      nibbles(b + 6, u);
      fifth_bits(b + 2, u);
      break;
    case GgmlType::Q5_1:
      x.m = half_at(b + 2);
      nibbles(b + 8, u);
      fifth_bits(b + 4, u);
      break;
    case GgmlType::Q8_0:
      for (int j = 0; j < 32; ++j) u[j] = static_cast<int8_t>(b[2 + j]) + 128;
      break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      x.m = half_at(b + 2);
      const bool five = t == GgmlType::Q5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int j = 0; j < 8; ++j) {
        k_scale_min(j, b + 4, &x.scale[static_cast<size_t>(j)], &x.min[static_cast<size_t>(j)]);
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * (j / 2) + l];
          int v = (j % 2 == 0) ? (byte & 15) : (byte >> 4);
          if (five) v |= ((qh[l] >> j) & 1) << 4;
          u[32 * j + l] = v;
        }
      }
      break;
    }
    case GgmlType::Q6_K: {
      x.d = half_at(b + 208);
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int j = 0; j < 16; ++j) x.scale[static_cast<size_t>(j)] = sc[j];
      for (int h = 0; h < 2; ++h) {
        const uint8_t* ql = b + 64 * h;
        const uint8_t* qh = b + 128 + 32 * h;
        for (int l = 0; l < 32; ++l) {
          int* o = u + 128 * h + l;
          o[0] = (ql[l] & 15) | ((qh[l] & 3) << 4);
          o[32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
          o[64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
          o[96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
      }
      break;
    }
    default: throw std::logic_error("packed_matrix: no layout for this type");
  }
}

constexpr PackedLayout layout(int64_t values, int64_t offset, int64_t bits, bool has_min, int64_t scale_bytes) {
  const int64_t chunks = values / 32;
  const int64_t high = bits == 5 ? 32 : bits == 6 ? 64 : 0;
  const int64_t body = bits == 8 ? 256 : 128;
  const auto bytes = 16 * (has_min ? 2 : 1) + scale_bytes + chunks * (body + high);
  return {values, offset, bits, has_min, scale_bytes, static_cast<size_t>(bytes)};
}

constexpr PackedLayout q4_0 = layout(32, 8, 4, false, 0), q4_1 = layout(32, 0, 4, true, 0),
                       q5_0 = layout(32, 16, 5, false, 0), q5_1 = layout(32, 0, 5, true, 0),
                       q8_0 = layout(32, 128, 8, false, 0), q4_k = layout(256, 0, 4, true, 128),
                       q5_k = layout(256, 0, 5, true, 128), q6_k = layout(256, 32, 6, false, 128);

// Writes row `lane` of one tile's unit.
void place(const PackedLayout& l, const Unit& x, int lane, uint8_t* p) {
  std::memcpy(p + 2 * lane, &x.d, 2);
  p += 16;
  if (l.has_min) {
    std::memcpy(p + 2 * lane, &x.m, 2);
    p += 16;
  }
  if (l.scale_bytes > 0 && l.has_min) {  // Q4_K, Q5_K
    for (int c = 0; c < 8; ++c) p[8 * c + lane] = static_cast<uint8_t>(x.scale[static_cast<size_t>(c)]);
    for (int pair = 0; pair < 4; ++pair) {
      p[64 + 16 * pair + 2 * lane] = static_cast<uint8_t>(x.min[static_cast<size_t>(2 * pair)]);
      p[64 + 16 * pair + 2 * lane + 1] = static_cast<uint8_t>(x.min[static_cast<size_t>(2 * pair + 1)]);
    }
  } else if (l.scale_bytes > 0) {  // Q6_K: int8
    for (int c = 0; c < 8; ++c) {
      p[16 * c + 2 * lane] = static_cast<uint8_t>(x.scale[static_cast<size_t>(2 * c)]);
      p[16 * c + 2 * lane + 1] = static_cast<uint8_t>(x.scale[static_cast<size_t>(2 * c + 1)]);
    }
  }
  p += l.scale_bytes;
  const int64_t chunks = l.values / 32;
  for (int64_t c = 0; c < chunks; ++c) {
    const int* u = x.u.data() + 32 * c;
    for (int k = 0; k < 8; ++k) {
      for (int i = 0; i < 4; ++i) {
        const int v = u[4 * k + i];
        if (l.value_bits == 8) {
          p[32 * k + 4 * lane + i] = static_cast<uint8_t>(v);
        } else {
          p[32 * (k % 4) + 4 * lane + i] |= static_cast<uint8_t>((v & 15) << (k < 4 ? 0 : 4));
        }
      }
    }
    p += l.value_bits == 8 ? 256 : 128;
  }
  for (int64_t c = 0; c < chunks && l.value_bits > 4 && l.value_bits < 8; ++c) {
    const int* u = x.u.data() + 32 * c;
    for (int k = 0; k < 8; ++k) {
      for (int i = 0; i < 4; ++i) {
        const int high = u[4 * k + i] >> 4;
        if (l.value_bits == 5) {
          p[4 * lane + i] |= static_cast<uint8_t>(high << k);
        } else {
          p[32 * (k / 4) + 4 * lane + i] |= static_cast<uint8_t>(high << (2 * (k % 4)));
        }
      }
    }
    p += l.value_bits == 5 ? 32 : 64;
  }
}

void free_aligned(uint8_t* p) { std::free(p); }

}  // namespace

const PackedLayout* packed_layout(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: return &q4_0;
    case GgmlType::Q4_1: return &q4_1;
    case GgmlType::Q5_0: return &q5_0;
    case GgmlType::Q5_1: return &q5_1;
    case GgmlType::Q8_0: return &q8_0;
    case GgmlType::Q4_K: return &q4_k;
    case GgmlType::Q5_K: return &q5_k;
    case GgmlType::Q6_K: return &q6_k;
    default: return nullptr;
  }
}

std::shared_ptr<PackedMatrix> allocate_packed(const MatrixView& w) {
  const PackedLayout* l = packed_layout(w.type);
  if (l == nullptr || w.data == nullptr || w.rows <= 0 || w.cols <= 0 || w.cols % l->values != 0) {
    throw std::invalid_argument("pack_matrix: " + ggml_type_name(w.type) + " matrix of " + std::to_string(w.cols) +
                                " columns has no packed layout");
  }
  auto m = std::make_shared<PackedMatrix>();
  m->type = w.type;
  m->rows = w.rows;
  m->cols = w.cols;
  m->units = w.cols / l->values;
  m->tile_bytes = static_cast<size_t>(m->units) * l->unit_bytes;
  const size_t total = static_cast<size_t>(m->tiles()) * m->tile_bytes;
  // 64-byte aligned (a size that is a multiple of the alignment, as
  // aligned_alloc wants), zeroed: padding rows and the OR-ed bit fields.
  auto* raw = static_cast<uint8_t*>(std::aligned_alloc(64, (total + 63) / 64 * 64));
  if (raw == nullptr) throw std::bad_alloc();
  std::memset(raw, 0, total);
  m->bytes = {raw, free_aligned};
  return m;
}

void pack_tiles(const MatrixView& w, PackedMatrix& m, int64_t tile_begin, int64_t tile_end,
                const std::function<void(const void*, size_t)>& consumed) {
  const PackedLayout& l = *packed_layout(w.type);
  const size_t row_bytes = ggml_row_bytes(w.type, w.cols);
  const size_t block_bytes = ggml_block_bytes(w.type);
  const int64_t r0 = tile_begin * tile_rows, r1 = std::min(w.rows, tile_end * tile_rows);
  if (r0 >= r1) return;
  Unit x;
  const auto* src = static_cast<const uint8_t*>(w.data);
  const size_t stretch = std::max<size_t>(row_bytes, size_t{1} << 20);
  size_t reported = static_cast<size_t>(r0) * row_bytes;  // w's bytes before this are handed to `consumed`
  for (int64_t r = r0; r < r1; ++r) {
    const size_t read = static_cast<size_t>(r) * row_bytes;
    if (consumed && read - reported >= stretch) {
      consumed(src + reported, read - reported);
      reported = read;
    }
    uint8_t* tile = m.bytes.get() + static_cast<size_t>(r / tile_rows) * m.tile_bytes;
    for (int64_t j = 0; j < m.units; ++j) {
      extract(w.type, src + read + static_cast<size_t>(j) * block_bytes, x);
      place(l, x, static_cast<int>(r % tile_rows), tile + static_cast<size_t>(j) * l.unit_bytes);
    }
  }
  if (consumed) consumed(src + reported, static_cast<size_t>(r1) * row_bytes - reported);
}

std::shared_ptr<const PackedMatrix> pack_matrix(const MatrixView& w,
                                                const std::function<void(const void*, size_t)>& consumed) {
  std::shared_ptr<PackedMatrix> m = allocate_packed(w);
  pack_tiles(w, *m, 0, m->tiles(), consumed);
  return m;
}

}  // namespace actorlm::cpu
