#pragma once
// A block-quantized weight matrix repacked once at load for the x86 integer
// kernels (block_dot_x86.hpp): rows in tiles of 8, each 32-bit lane of a
// 256-bit vector holding one row. One int8 dot instruction against a
// broadcast group of four activation bytes then advances 8 rows at once and
// leaves each row's sum in its own lane, so a block's float work (scales,
// mins) is done once per 8 rows instead of once per row, and a tile is one
// contiguous stream for the prefetchers.
//
// The integer weights are stored unsigned, with the type's offset added
// where it has one (value = d * (u - offset)): Q4_0 8, Q5_0 16, Q8_0 128,
// Q6_K 32; the kernels subtract offset * (sum of the activation block) as an
// exact integer, so every block's integer sum is exactly the one of the
// original signed values. Within a 32-value chunk, dword k (values 4k..4k+3)
// of row r sits in lane r of:
//   low 4 bits:  nibble vector k % 4, low nibbles for k < 4, high for k >= 4
//                (4 vectors, 128 bytes per chunk);
//   5th bit:     one vector per chunk, bit k of byte i of lane r is bit 4 of
//                value 4k + i;
//   Q6_K's bits 4-5: two vectors per chunk (k < 4, k >= 4), bits 2(k % 4)
//                and up of byte i;
//   Q8_0:        8 vectors of whole bytes.
// Per unit (a 32-value block, or a 256-value K-quant super-block), in order:
// the 8 rows' f16 scales (d; then the f16 mins or dmins where the type has
// them), the K-quants' sub-block scales as bytes (Q4_K/Q5_K: per chunk the 8
// rows' 6-bit scales, then per chunk pair the rows' two 6-bit mins side by
// side; Q6_K: per chunk the rows' two int8 scales side by side), then the
// chunks' value vectors, then their high-bit vectors. The packed matrix is
// the size of the file's (Q4_0/Q4_1/Q5_x/Q8_0/Q6_K) or 2-3% larger (Q4_K,
// Q5_K: their scales unpacked from 6 bits to 8); rows past the last are
// zero. Single-sequence decode streams these bytes, so every extra byte
// costs memory-bound decode its share.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/backend.hpp"

namespace actorlm::cpu {

inline constexpr int64_t tile_rows = 8;
// The unit in which the backend shares a product's rows among threads: two
// tiles, which the 512-bit kernels take together (block_dot_x86.hpp's Z16).
inline constexpr int64_t split_rows = 2 * tile_rows;

struct PackedLayout {
  int64_t values = 0;      // per unit: 32 or 256
  int64_t offset = 0;      // added to every stored value (see above)
  int64_t value_bits = 0;  // 4, 5, 6 or 8
  bool has_min = false;    // Q4_1, Q5_1, Q4_K, Q5_K
  int64_t scale_bytes = 0;  // K-quant sub-block scales (and mins), per unit of a tile
  size_t unit_bytes = 0;      // one unit of one tile
};

// The layout for a weight type, or nullptr when it is not packed (float
// formats; block types without an integer kernel).
const PackedLayout* packed_layout(GgmlType type);

struct PackedMatrix {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0, cols = 0;
  int64_t units = 0;        // per row
  size_t tile_bytes = 0;    // units * unit_bytes
  std::unique_ptr<uint8_t[], void (*)(uint8_t*)> bytes{nullptr, nullptr};

  const uint8_t* tile(int64_t t) const { return bytes.get() + static_cast<size_t>(t) * tile_bytes; }
  int64_t tiles() const { return (rows + tile_rows - 1) / tile_rows; }
};

// Repacks w (a type packed_layout knows, whole units per row); the result
// does not refer to w's bytes. `consumed`, when given, is called with each
// stretch of w's bytes (about 1 MB at a time) once it has been read.
std::shared_ptr<const PackedMatrix> pack_matrix(const MatrixView& w,
                                                const std::function<void(const void*, size_t)>& consumed = {});

// The same in two steps, so that threads can share the packing: the zeroed
// matrix (throws std::invalid_argument where pack_matrix would), then tiles
// [tile_begin, tile_end) of it (disjoint ranges may run concurrently).
std::shared_ptr<PackedMatrix> allocate_packed(const MatrixView& w);
void pack_tiles(const MatrixView& w, PackedMatrix& m, int64_t tile_begin, int64_t tile_end,
                const std::function<void(const void*, size_t)>& consumed = {});

}  // namespace actorlm::cpu
