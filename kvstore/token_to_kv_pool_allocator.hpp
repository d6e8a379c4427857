#pragma once
// Second level of the two-level KV memory: hands out KV rows ("slots") of the
// token-to-KV pool, a page at a time.
//
// Layout contract (shared with the worker's KV buffers and the attention
// kernels): the pool has (num_pages + 1) * page_size rows. Page 0 — rows
// [0, page_size) — is reserved: padded tokens write their K/V there and it is
// never handed out. A request's token at position p always sits in row
// page_base + p % page_size of some page it owns, so a partially filled last
// page is continued in place (rows last_loc + 1, ...).
//
// Ownership contract: every row of a page belongs to exactly one owner (the
// free list, the radix tree, or one request). free() takes any rows and
// returns their pages; freeing a page that is already free throws. Owned by
// the memory-pool manager (single writer); bookkeeping only, no tensors.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace actorlm {

class TokenToKVPoolAllocator {
 public:
  // capacity_tokens is rounded down to whole pages; at least one page.
  TokenToKVPoolAllocator(int64_t capacity_tokens, int32_t page_size);

  int32_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  // Usable rows (excludes the reserved page 0).
  int64_t capacity() const { return num_pages_ * page_size_; }
  // Rows the KV buffers must have, including the reserved page.
  int64_t pool_rows() const { return (num_pages_ + 1) * page_size_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }
  // Free rows (whole free pages).
  int64_t available_size() const { return free_pages() * page_size_; }

  // Fresh rows for n tokens at positions 0..n-1 of a request: ceil(n / page)
  // new pages; the returned vector has exactly n rows. All-or-nothing.
  bool can_alloc(int64_t n) const;
  std::optional<std::vector<int32_t>> alloc(int64_t n);

  // Batch extend: request i has prefix_lens[i] tokens with KV already (its
  // last one in row last_locs[i]; ignored when prefix_lens[i] == 0) and
  // grows to seq_lens[i]. Its partial last page is filled first, then new
  // pages. Returns the rows for all new tokens, request by request.
  // All-or-nothing for the whole batch.
  int64_t pages_needed(std::span<const int32_t> prefix_lens,
                       std::span<const int32_t> seq_lens) const;
  bool can_alloc_extend(std::span<const int32_t> prefix_lens,
                        std::span<const int32_t> seq_lens) const;
  std::optional<std::vector<int32_t>> alloc_extend(std::span<const int32_t> prefix_lens,
                                                   std::span<const int32_t> seq_lens,
                                                   std::span<const int32_t> last_locs);

  // Batch decode: one new token per request at position cur_lens[i] (a
  // new page only where cur_lens[i] is a multiple of the page size).
  bool can_alloc_decode(std::span<const int32_t> cur_lens) const;
  std::optional<std::vector<int32_t>> alloc_decode(std::span<const int32_t> cur_lens,
                                                   std::span<const int32_t> last_locs);

  // Returns the pages holding these rows (several rows of one page count
  // once). Throws KvStoreError for row 0..page_size-1, out-of-range rows, or
  // a page that is already free; on throw nothing is freed.
  void free(std::span<const int32_t> rows);
  void clear();

  bool is_page_free(int64_t page) const;
  // Empty when the free list is consistent; otherwise what is wrong.
  std::string check_integrity() const;

 private:
  int32_t take_page();
  void check_extend_args(std::span<const int32_t> prefix_lens,
                         std::span<const int32_t> seq_lens) const;

  int32_t page_size_;
  int64_t num_pages_;
  std::vector<int32_t> free_pages_;  // a stack of page numbers in [1, num_pages]
  std::vector<uint8_t> page_free_;   // indexed by page number; [0] unused
};

}  // namespace actorlm
