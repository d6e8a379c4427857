#include "kvstore/req_to_token_pool.hpp"

#include <string>

#include "kvstore/kv_error.hpp"

namespace actorlm {

ReqToTokenPool::ReqToTokenPool(int32_t size, int32_t max_context_len)
    : size_(size), max_context_len_(max_context_len) {
  if (size < 1 || max_context_len < 1) {
    throw KvStoreError("ReqToTokenPool: size and max_context_len must be >= 1");
  }
  table_.assign(static_cast<size_t>(size) * static_cast<size_t>(max_context_len), 0);
  clear();
}

void ReqToTokenPool::clear() {
  free_slots_.clear();
  // Reverse order so the first allocations get slots 0, 1, 2, ...
  for (int32_t s = size_ - 1; s >= 0; --s) free_slots_.push_back(s);
  in_use_.assign(static_cast<size_t>(size_), 0);
}

bool ReqToTokenPool::in_use(int32_t slot) const {
  return slot >= 0 && slot < size_ && in_use_[static_cast<size_t>(slot)] != 0;
}

std::optional<std::vector<int32_t>> ReqToTokenPool::alloc(int32_t n) {
  if (n < 0) throw KvStoreError("ReqToTokenPool::alloc: negative count");
  if (n > available_size()) return std::nullopt;
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (auto& s : slots) {
    s = free_slots_.back();
    free_slots_.pop_back();
    in_use_[static_cast<size_t>(s)] = 1;
  }
  return slots;
}

void ReqToTokenPool::check_slot(int32_t slot) const {
  if (slot < 0 || slot >= size_) {
    throw KvStoreError("ReqToTokenPool: slot " + std::to_string(slot) + " out of range [0, " +
                       std::to_string(size_) + ")");
  }
  if (!in_use_[static_cast<size_t>(slot)]) {
    throw KvStoreError("ReqToTokenPool: slot " + std::to_string(slot) + " is not allocated");
  }
}

void ReqToTokenPool::free(int32_t slot) {
  check_slot(slot);
  in_use_[static_cast<size_t>(slot)] = 0;
  free_slots_.push_back(slot);
}

void ReqToTokenPool::write(int32_t slot, int32_t start, std::span<const int32_t> kv) {
  check_slot(slot);
  if (start < 0 || static_cast<int64_t>(start) + static_cast<int64_t>(kv.size()) > max_context_len_) {
    throw KvStoreError("ReqToTokenPool::write: positions [" + std::to_string(start) + ", " +
                       std::to_string(start + static_cast<int64_t>(kv.size())) +
                       ") outside the row of " + std::to_string(max_context_len_));
  }
  auto* row = table_.data() + static_cast<size_t>(slot) * static_cast<size_t>(max_context_len_);
  std::copy(kv.begin(), kv.end(), row + start);
}

std::span<const int32_t> ReqToTokenPool::read(int32_t slot, int32_t len) const {
  check_slot(slot);
  if (len < 0 || len > max_context_len_) {
    throw KvStoreError("ReqToTokenPool::read: length " + std::to_string(len) + " out of range");
  }
  const auto* row = table_.data() + static_cast<size_t>(slot) * static_cast<size_t>(max_context_len_);
  return {row, static_cast<size_t>(len)};
}

}  // namespace actorlm
