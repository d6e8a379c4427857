#pragma once
// First level of the two-level KV memory: a table of request slots, each row
// mapping a token position of that request to its KV row (`out_cache_loc`)
// in the token-to-KV pool.
//
// Owned by the memory-pool manager (single writer). The worker keeps a device
// mirror and applies the same writes, carried in each ForwardBatch.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace actorlm {

class ReqToTokenPool {
 public:
  // size request slots of max_context_len positions each. Both must be >= 1.
  ReqToTokenPool(int32_t size, int32_t max_context_len);

  int32_t size() const { return size_; }
  int32_t max_context_len() const { return max_context_len_; }
  int32_t available_size() const { return static_cast<int32_t>(free_slots_.size()); }
  bool in_use(int32_t slot) const;

  // All-or-nothing: n distinct free slots, or nullopt when fewer are free.
  std::optional<std::vector<int32_t>> alloc(int32_t n);
  // Throws KvStoreError for an out-of-range or already-free slot.
  void free(int32_t slot);
  // Frees every slot.
  void clear();

  // row[slot][start .. start + kv.size()) = kv. The slot must be in use and
  // the range inside the row.
  void write(int32_t slot, int32_t start, std::span<const int32_t> kv);
  // The first len entries of a slot's row.
  std::span<const int32_t> read(int32_t slot, int32_t len) const;

 private:
  void check_slot(int32_t slot) const;

  int32_t size_;
  int32_t max_context_len_;
  std::vector<int32_t> table_;       // size_ * max_context_len_
  std::vector<int32_t> free_slots_;  // a stack; popped from the back
  std::vector<uint8_t> in_use_;
};

}  // namespace actorlm
