#include "kvstore/token_to_kv_pool_allocator.hpp"

#include <algorithm>
#include <limits>

#include "kvstore/kv_error.hpp"

namespace actorlm {
namespace {

int64_t pages_for(int64_t tokens, int32_t page_size) { return (tokens + page_size - 1) / page_size; }

// Decode is an extend by one token: [seq_len - 1, seq_len).
std::vector<int32_t> decode_prefix_lens(std::span<const int32_t> seq_lens) {
  std::vector<int32_t> prefix(seq_lens.begin(), seq_lens.end());
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (prefix[i] < 1) {
      throw KvStoreError("alloc_decode: request " + std::to_string(i) + " has seq_len " +
                         std::to_string(prefix[i]) + " (must be >= 1: it includes the new token)");
    }
    --prefix[i];
  }
  return prefix;
}

}  // namespace

TokenToKVPoolAllocator::TokenToKVPoolAllocator(int64_t capacity_tokens, int32_t page_size)
    : page_size_(page_size), num_pages_(page_size > 0 ? capacity_tokens / page_size : 0) {
  if (page_size < 1) throw KvStoreError("TokenToKVPoolAllocator: page_size must be >= 1");
  if (num_pages_ < 1) {
    throw KvStoreError("TokenToKVPoolAllocator: capacity " + std::to_string(capacity_tokens) +
                       " is less than one page of " + std::to_string(page_size));
  }
  // Rows are int32 everywhere downstream (req_to_token, out_cache_loc).
  if (num_pages_ >= std::numeric_limits<int32_t>::max() / page_size_) {
    throw KvStoreError("TokenToKVPoolAllocator: capacity exceeds int32 rows");
  }
  clear();
}

void TokenToKVPoolAllocator::clear() {
  free_pages_.clear();
  free_pages_.reserve(static_cast<size_t>(num_pages_));
  // Reverse order so pages are handed out 1, 2, 3, ... on a fresh pool.
  for (int64_t p = num_pages_; p >= 1; --p) free_pages_.push_back(static_cast<int32_t>(p));
  page_free_.assign(static_cast<size_t>(num_pages_ + 1), 1);
  page_free_[0] = 0;
}

int32_t TokenToKVPoolAllocator::take_page() {
  int32_t page = free_pages_.back();
  free_pages_.pop_back();
  page_free_[static_cast<size_t>(page)] = 0;
  return page;
}

bool TokenToKVPoolAllocator::can_alloc(int64_t n) const {
  return n >= 0 && pages_for(n, page_size_) <= free_pages();
}

std::optional<std::vector<int32_t>> TokenToKVPoolAllocator::alloc(int64_t n) {
  if (n < 0) throw KvStoreError("TokenToKVPoolAllocator::alloc: negative count");
  if (!can_alloc(n)) return std::nullopt;
  std::vector<int32_t> rows;
  rows.reserve(static_cast<size_t>(n));
  while (static_cast<int64_t>(rows.size()) < n) {
    int32_t base = take_page() * page_size_;
    for (int32_t i = 0; i < page_size_ && static_cast<int64_t>(rows.size()) < n; ++i) {
      rows.push_back(base + i);
    }
  }
  return rows;
}

void TokenToKVPoolAllocator::check_extend_args(std::span<const int32_t> prefix_lens,
                                               std::span<const int32_t> seq_lens) const {
  if (prefix_lens.size() != seq_lens.size()) {
    throw KvStoreError("alloc_extend: prefix_lens and seq_lens differ in length");
  }
  for (size_t i = 0; i < prefix_lens.size(); ++i) {
    if (prefix_lens[i] < 0 || seq_lens[i] < prefix_lens[i]) {
      throw KvStoreError("alloc_extend: request " + std::to_string(i) + " has prefix_len " +
                         std::to_string(prefix_lens[i]) + " > seq_len " +
                         std::to_string(seq_lens[i]));
    }
  }
}

int64_t TokenToKVPoolAllocator::pages_needed(std::span<const int32_t> prefix_lens,
                                             std::span<const int32_t> seq_lens) const {
  check_extend_args(prefix_lens, seq_lens);
  int64_t pages = 0;
  for (size_t i = 0; i < prefix_lens.size(); ++i) {
    pages += pages_for(seq_lens[i], page_size_) - pages_for(prefix_lens[i], page_size_);
  }
  return pages;
}

bool TokenToKVPoolAllocator::can_alloc_extend(std::span<const int32_t> prefix_lens,
                                              std::span<const int32_t> seq_lens) const {
  return pages_needed(prefix_lens, seq_lens) <= free_pages();
}

std::optional<std::vector<int32_t>> TokenToKVPoolAllocator::alloc_extend(
    std::span<const int32_t> prefix_lens, std::span<const int32_t> seq_lens,
    std::span<const int32_t> last_locs) {
  if (last_locs.size() != prefix_lens.size()) {
    throw KvStoreError("alloc_extend: last_locs and prefix_lens differ in length");
  }
  if (!can_alloc_extend(prefix_lens, seq_lens)) return std::nullopt;
  // Validate every partial page before taking any page, so a bad argument
  // leaves the allocator untouched.
  for (size_t i = 0; i < prefix_lens.size(); ++i) {
    if (prefix_lens[i] % page_size_ == 0) continue;
    int32_t loc = last_locs[i];
    if (loc < page_size_ || loc >= pool_rows() || !(loc % page_size_ == (prefix_lens[i] - 1) % page_size_) ||
        page_free_[static_cast<size_t>(loc / page_size_)]) {
      throw KvStoreError("alloc_extend: request " + std::to_string(i) + " last_loc " +
                         std::to_string(loc) + " is not an owned row at position " +
                         std::to_string(prefix_lens[i] - 1));
    }
  }
  int64_t total = 0;
  for (size_t i = 0; i < prefix_lens.size(); ++i) total += seq_lens[i] - prefix_lens[i];
  std::vector<int32_t> rows;
  rows.reserve(static_cast<size_t>(total));
  for (size_t i = 0; i < prefix_lens.size(); ++i) {
    int32_t next = last_locs.empty() || prefix_lens[i] % page_size_ == 0 ? -1 : last_locs[i] + 1;
    for (int32_t pos = prefix_lens[i]; pos < seq_lens[i]; ++pos) {
      if (pos % page_size_ == 0) next = take_page() * page_size_;
      rows.push_back(next++);
    }
  }
  return rows;
}

bool TokenToKVPoolAllocator::can_alloc_decode(std::span<const int32_t> seq_lens) const {
  return can_alloc_extend(decode_prefix_lens(seq_lens), seq_lens);
}

std::optional<std::vector<int32_t>> TokenToKVPoolAllocator::alloc_decode(
    std::span<const int32_t> seq_lens, std::span<const int32_t> last_locs) {
  return alloc_extend(decode_prefix_lens(seq_lens), seq_lens, last_locs);
}

void TokenToKVPoolAllocator::free(std::span<const int32_t> rows) {
  std::vector<int32_t> pages;
  pages.reserve(rows.size());
  for (int32_t r : rows) {
    if (r < page_size_ || r >= pool_rows()) {
      throw KvStoreError("TokenToKVPoolAllocator::free: row " + std::to_string(r) +
                         " is reserved or out of range");
    }
    pages.push_back(r / page_size_);
  }
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  for (int32_t p : pages) {
    if (page_free_[static_cast<size_t>(p)]) {
      throw KvStoreError("TokenToKVPoolAllocator::free: page " + std::to_string(p) +
                         " (rows " + std::to_string(p * page_size_) + "..) is already free");
    }
  }
  // Onto the stack highest first, so the next allocation takes them lowest
  // first: a request's rows then run upwards in the pool, as on a fresh one,
  // and its KV moves (data plane, tiers) as a few long copies instead of one
  // per row.
  for (auto it = pages.rbegin(); it != pages.rend(); ++it) {
    page_free_[static_cast<size_t>(*it)] = 1;
    free_pages_.push_back(*it);
  }
}

bool TokenToKVPoolAllocator::is_page_free(int64_t page) const {
  return page >= 1 && page <= num_pages_ && page_free_[static_cast<size_t>(page)] != 0;
}

std::string TokenToKVPoolAllocator::check_integrity() const {
  std::vector<uint8_t> seen(static_cast<size_t>(num_pages_ + 1), 0);
  for (int32_t p : free_pages_) {
    if (p < 1 || p > num_pages_) return "free list holds invalid page " + std::to_string(p);
    if (seen[static_cast<size_t>(p)]) return "page " + std::to_string(p) + " is on the free list twice";
    if (!page_free_[static_cast<size_t>(p)]) return "page " + std::to_string(p) + " listed free but marked used";
    seen[static_cast<size_t>(p)] = 1;
  }
  int64_t marked = 0;
  for (int64_t p = 1; p <= num_pages_; ++p) marked += page_free_[static_cast<size_t>(p)];
  if (marked != free_pages()) return "free marks and free list disagree";
  if (page_free_[0]) return "reserved page 0 marked free";
  return {};
}

}  // namespace actorlm
