#pragma once
// Reads the frame headers of a CAF 0.17 BASP byte stream as it passes a
// relay, without buffering it, and says when a frame announces a payload over
// a bound. CAF's broker allocates a frame's whole payload as soon as it has
// read the 32-byte header, so the relay must refuse the header itself.
//
// BASP over TCP (caf/io/basp/header.hpp): a 32-byte header, then payload_len
// bytes of payload (none when 0), then the next header. The header is
//   operation u8, padding u8 u8, flags u8, payload_len u32, operation_data u64,
//   source_actor u64, dest_actor u64 — all in network byte order.
// Plain C++: no CAF.

#include <array>
#include <cstddef>
#include <cstdint>

namespace actorlm {

class BaspFrameMeter {
 public:
  static constexpr size_t header_size = 32;

  explicit BaspFrameMeter(uint64_t max_payload) : max_payload_(max_payload) {}

  // Feeds the next `n` bytes of the stream. False, for good, once a header
  // announces a payload above the bound (oversized() says how big).
  bool feed(const uint8_t* data, size_t n) {
    while (n > 0 && oversized_ == 0) {
      if (payload_left_ > 0) {
        const uint64_t take = payload_left_ < n ? payload_left_ : n;
        payload_left_ -= take;
        data += take;
        n -= static_cast<size_t>(take);
        continue;
      }
      header_[have_++] = *data++;
      --n;
      if (have_ < header_size) continue;
      have_ = 0;
      const uint64_t len = (uint64_t{header_[4]} << 24) | (uint64_t{header_[5]} << 16) | (uint64_t{header_[6]} << 8) | header_[7];
      if (len > max_payload_) oversized_ = len;
      payload_left_ = len;
    }
    return oversized_ == 0;
  }

  uint64_t oversized() const { return oversized_; }

 private:
  uint64_t max_payload_;
  std::array<uint8_t, header_size> header_{};
  size_t have_ = 0;
  uint64_t payload_left_ = 0;
  uint64_t oversized_ = 0;
};

}  // namespace actorlm
