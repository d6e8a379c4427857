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
// Ownership and free contract: every page has exactly one owner at a time —
// the free list, the radix tree (a node's rows are whole pages), or one
// request (its private pages past its cached prefix). All used rows of a page
// therefore belong to the same owner, and that owner returns the page exactly
// once: free(rows) returns the page of every row it is given (rows of one
// page in one call count once; the unused rows of a partial last page need
// not be listed). Freeing a page that is already free — a second free by the
// owner, or a free by someone who never owned it — throws KvStoreError and
// frees nothing, so a double free is caught instead of handing one page to
// two requests.
//
// Every allocating call has a "can" twin with the same page arithmetic, so a
// caller can ask first (and evict cache) without side effects.
//
// Owned by the memory-pool manager (single writer); bookkeeping only, no
// tensors; not thread-safe.

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

  // Fresh rows for n >= 0 tokens at positions 0..n-1 of a request:
  // ceil(n / page_size) new pages, consecutive rows within each page; the
  // returned vector has exactly n rows. nullopt (nothing taken) when short.
  bool can_alloc(int64_t n) const;
  std::optional<std::vector<int32_t>> alloc(int64_t n);

  // Batch extend: request i has prefix_lens[i] tokens with KV already (its
  // last one in row last_locs[i]; pass -1 when prefix_lens[i] == 0 — the
  // value is only read when the last page is partial) and grows to
  // seq_lens[i]. Its partial last page is filled first (rows last_loc + 1,
  // ...), then whole new pages. Returns the rows for all new tokens, request
  // by request. All-or-nothing for the whole batch: nullopt when short.
  // Throws KvStoreError (taking nothing) for mismatched spans, a negative
  // prefix or seq_len < prefix_len, or a last_loc that is not an allocated
  // row at the right offset in its page.
  int64_t pages_needed(std::span<const int32_t> prefix_lens,
                       std::span<const int32_t> seq_lens) const;
  bool can_alloc_extend(std::span<const int32_t> prefix_lens,
                        std::span<const int32_t> seq_lens) const;
  std::optional<std::vector<int32_t>> alloc_extend(std::span<const int32_t> prefix_lens,
                                                   std::span<const int32_t> seq_lens,
                                                   std::span<const int32_t> last_locs);

  // Batch decode: request i grows by one token to seq_lens[i] (>= 1), the new
  // token at position seq_lens[i] - 1 directly after its last row
  // last_locs[i]. A new page is taken only where the last page is full
  // (position % page_size == 0); otherwise the row is last_locs[i] + 1.
  // All-or-nothing; returns one row per request.
  bool can_alloc_decode(std::span<const int32_t> seq_lens) const;
  std::optional<std::vector<int32_t>> alloc_decode(std::span<const int32_t> seq_lens,
                                                   std::span<const int32_t> last_locs);

  // Returns the pages holding these rows to the free list (see the free
  // contract above). Throws KvStoreError for a row of the reserved page 0, a
  // row outside the pool, or a page that is already free; on throw nothing
  // is freed.
  void free(std::span<const int32_t> rows);
  void clear();

  bool is_page_free(int64_t page) const;
  // Empty when the free list is consistent (no page listed twice, no
  // reserved or out-of-range page listed, list and per-page marks agree);
  // otherwise what is wrong.
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
