#include "kvstore/kv_store.hpp"

#include <algorithm>

#include "kvstore/kv_error.hpp"

namespace actorlm {

KvStore::KvStore(const KvStoreConfig& config)
    : config_(config),
      req_to_token_(config.max_requests, config.max_context_len),
      allocator_(config.capacity_tokens, config.page_size),
      radix_(config.page_size, config.disable_radix_cache, config.eviction) {}

void KvStore::free_rows(std::span<const int32_t> rows) {
  if (!rows.empty()) allocator_.free(rows);
}

bool KvStore::admit(RequestKv& req, std::span<const int32_t> prompt) {
  if (req.slot >= 0) throw KvStoreError("KvStore::admit: request already holds a slot");
  if (static_cast<int64_t>(prompt.size()) > req_to_token_.max_context_len()) {
    throw KvStoreError("KvStore::admit: prompt of " + std::to_string(prompt.size()) +
                       " tokens exceeds the context length " +
                       std::to_string(req_to_token_.max_context_len()));
  }
  auto slot = req_to_token_.alloc(1);
  if (!slot) return false;
  req.slot = (*slot)[0];
  // The last prompt token is always computed: its forward pass yields the
  // logits of the first output token.
  auto match = radix_.match_prefix(prompt.empty() ? prompt : prompt.first(prompt.size() - 1), {req.priority, true});
  radix_.inc_lock_ref(match.last_node);
  req.prefix_len = static_cast<int32_t>(match.indices.size());
  req.cached_on_admit = req.prefix_len;
  req.last_node = match.last_node;
  req.tokens.assign(prompt.begin(), prompt.begin() + req.prefix_len);
  req.kv = std::move(match.indices);
  req_to_token_.write(req.slot, 0, req.kv);
  return true;
}

void KvStore::require_running(const RequestKv& req, const char* what) const {
  if (!req_to_token_.in_use(req.slot)) {
    throw KvStoreError(std::string("KvStore::") + what + ": request holds no slot (slot " +
                       std::to_string(req.slot) + ")");
  }
  if (req.tokens.size() != req.kv.size()) {
    throw KvStoreError(std::string("KvStore::") + what + ": request has " + std::to_string(req.tokens.size()) +
                       " tokens but " + std::to_string(req.kv.size()) + " rows");
  }
}

bool KvStore::extend(RequestKv& req, std::span<const int32_t> new_tokens) {
  RequestKv* one[] = {&req};
  std::span<const int32_t> toks[] = {new_tokens};
  return extend_batch(one, toks);
}

bool KvStore::extend_batch(std::span<RequestKv* const> reqs,
                           std::span<const std::span<const int32_t>> new_tokens) {
  if (reqs.size() != new_tokens.size()) throw KvStoreError("KvStore::extend_batch: size mismatch");
  std::vector<int32_t> prefix_lens, seq_lens, last_locs;
  // Everything is checked before the allocator is asked, so a bad request
  // cannot leave rows allocated but unrecorded.
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestKv& r = *reqs[i];
    require_running(r, "extend");
    for (size_t j = 0; j < i; ++j) {
      if (reqs[j]->slot == r.slot) throw KvStoreError("KvStore::extend: a request appears twice in one batch");
    }
    auto len = static_cast<int64_t>(r.kv.size());
    if (len + static_cast<int64_t>(new_tokens[i].size()) > req_to_token_.max_context_len()) {
      throw KvStoreError("KvStore::extend: request exceeds the context length");
    }
    prefix_lens.push_back(static_cast<int32_t>(len));
    seq_lens.push_back(static_cast<int32_t>(len + static_cast<int64_t>(new_tokens[i].size())));
    last_locs.push_back(r.kv.empty() ? -1 : r.kv.back());
  }
  int64_t short_pages = allocator_.pages_needed(prefix_lens, seq_lens) - allocator_.free_pages();
  if (short_pages > 0) {
    if (short_pages * allocator_.page_size() > radix_.evictable_size()) return false;
    free_rows(radix_.evict(short_pages * allocator_.page_size(), record_evictions_ ? &evicted_ : nullptr));
  }
  auto rows = allocator_.alloc_extend(prefix_lens, seq_lens, last_locs);
  if (!rows) return false;
  size_t at = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    RequestKv& r = *reqs[i];
    auto n = new_tokens[i].size();
    std::span<const int32_t> mine(rows->data() + at, n);
    req_to_token_.write(r.slot, static_cast<int32_t>(r.kv.size()), mine);
    r.tokens.insert(r.tokens.end(), new_tokens[i].begin(), new_tokens[i].end());
    r.kv.insert(r.kv.end(), mine.begin(), mine.end());
    at += n;
  }
  return true;
}

void KvStore::cache_unfinished(RequestKv& req) {
  require_running(req, "cache_unfinished");
  auto res = radix_.cache_unfinished_req(req.tokens, req.kv, req.prefix_len, req.last_node, req.priority);
  free_rows(res.to_free);
  if (res.new_prefix_len > req.prefix_len) {
    std::span<const int32_t> fresh(res.new_prefix_indices);
    fresh = fresh.subspan(static_cast<size_t>(req.prefix_len));
    req_to_token_.write(req.slot, req.prefix_len, fresh);
    std::copy(fresh.begin(), fresh.end(), req.kv.begin() + req.prefix_len);
  }
  req.prefix_len = res.new_prefix_len;
  req.last_node = res.new_last_node;
}

void KvStore::finish(RequestKv& req) {
  require_running(req, "finish");
  auto res = radix_.cache_finished_req(req.tokens, req.kv, req.prefix_len, req.last_node, req.priority);
  free_rows(res.to_free);
  req_to_token_.free(req.slot);
  req = RequestKv{};
}

void KvStore::abort(RequestKv& req) {
  if (req.slot < 0) return;
  require_running(req, "abort");
  auto rows = radix_.release_req(req.kv, req.prefix_len, req.last_node);
  free_rows(rows);
  req_to_token_.free(req.slot);
  req = RequestKv{};
}

std::vector<int32_t> truncated_rows(const RequestKv& req, size_t length, int32_t page_size) {
  if (length < static_cast<size_t>(req.prefix_len) || length > req.kv.size()) {
    throw KvStoreError("truncate: length " + std::to_string(length) + " outside [" + std::to_string(req.prefix_len) +
                       ", " + std::to_string(req.kv.size()) + "]");
  }
  // The page that position length - 1 lives in stays; every later page
  // holds dropped positions only (a request's private rows fill its pages
  // in position order).
  const int64_t kept_page = length > 0 ? req.kv[length - 1] / page_size : -1;
  std::vector<int32_t> rows;
  for (size_t i = length; i < req.kv.size(); ++i) {
    const int64_t page = req.kv[i] / page_size;
    if (page != kept_page && (rows.empty() || rows.back() / page_size != page)) rows.push_back(req.kv[i]);
  }
  return rows;
}

void KvStore::truncate(RequestKv& req, size_t length) {
  require_running(req, "truncate");
  free_rows(truncated_rows(req, length, allocator_.page_size()));
  req.kv.resize(length);
  req.tokens.resize(length);
}

int64_t KvStore::evict(int64_t num_tokens) {
  auto rows = radix_.evict(num_tokens);
  free_rows(rows);
  return static_cast<int64_t>(rows.size());
}

int64_t KvStore::private_rows(const RequestKv& req) const {
  int64_t p = allocator_.page_size();
  int64_t pages = 0;
  int64_t last_page = -1;
  for (size_t i = static_cast<size_t>(req.prefix_len); i < req.kv.size(); ++i) {
    int64_t page = req.kv[i] / p;
    if (page != last_page) ++pages;
    last_page = page;
  }
  return pages * p;
}

std::string KvStore::check_invariant(std::span<const RequestKv* const> running) const {
  if (auto e = allocator_.check_integrity(); !e.empty()) return "allocator: " + e;
  if (auto e = radix_.check_integrity(); !e.empty()) return "radix: " + e;
  std::vector<int32_t> slots;
  for (const RequestKv* r : running) slots.push_back(r->slot);
  std::sort(slots.begin(), slots.end());
  if (std::adjacent_find(slots.begin(), slots.end()) != slots.end()) return "two running requests share a slot";
  if (static_cast<int32_t>(slots.size()) != req_to_token_.size() - req_to_token_.available_size()) {
    return std::to_string(req_to_token_.size() - req_to_token_.available_size()) + " slots in use but " +
           std::to_string(slots.size()) + " running requests listed";
  }
  int64_t held = 0;
  for (const RequestKv* r : running) held += private_rows(*r);
  int64_t sum = allocator_.available_size() + radix_.evictable_size() + radix_.protected_size() + held;
  if (sum != allocator_.capacity()) {
    return "pool accounting: free " + std::to_string(allocator_.available_size()) + " + evictable " +
           std::to_string(radix_.evictable_size()) + " + protected " +
           std::to_string(radix_.protected_size()) + " + held " + std::to_string(held) +
           " != capacity " + std::to_string(allocator_.capacity());
  }
  // Every page has exactly one owner: the free list, the tree, or one request.
  int64_t p = allocator_.page_size();
  std::vector<int8_t> owner(static_cast<size_t>(allocator_.num_pages() + 1), 0);
  auto claim = [&](int32_t row, const char* who) -> std::string {
    int64_t page = row / p;
    if (page < 1 || page > allocator_.num_pages()) return std::string(who) + " holds invalid row " + std::to_string(row);
    if (allocator_.is_page_free(page)) return std::string(who) + " holds row " + std::to_string(row) + " of a free page";
    owner[static_cast<size_t>(page)] = 1;
    return {};
  };
  std::vector<int32_t> tree_rows = radix_.all_rows();
  for (int32_t r : tree_rows) {
    if (auto e = claim(r, "tree"); !e.empty()) return e;
  }
  std::vector<int8_t> tree_page(owner);
  for (const RequestKv* r : running) {
    if (r->kv.size() != r->tokens.size()) return "request tokens and kv differ in length";
    if (!req_to_token_.in_use(r->slot)) return "a running request holds no slot";
    if (static_cast<int64_t>(r->kv.size()) > req_to_token_.max_context_len()) return "a request is longer than its row";
    auto row = req_to_token_.read(r->slot, static_cast<int32_t>(r->kv.size()));
    if (!std::equal(row.begin(), row.end(), r->kv.begin())) return "req_to_token disagrees with a request";
    if (auto e = radix_.check_request_prefix(r->tokens, r->kv, r->prefix_len, r->last_node); !e.empty()) {
      return "request prefix: " + e;
    }
    for (size_t i = static_cast<size_t>(r->prefix_len); i < r->kv.size(); ++i) {
      int64_t page = r->kv[i] / p;
      if (page >= 1 && page <= allocator_.num_pages() && tree_page[static_cast<size_t>(page)]) {
        return "row " + std::to_string(r->kv[i]) + " is owned by a request and the tree";
      }
      if (auto e = claim(r->kv[i], "request"); !e.empty()) return e;
    }
  }
  // Locks belong to running requests only: a lock left behind by a finished
  // or aborted request keeps the accounting above balanced (its rows just
  // stay protected), so count holders per node instead.
  std::vector<NodeId> holders;
  for (const RequestKv* r : running) holders.push_back(r->last_node);
  if (auto e = radix_.check_lock_holders(holders); !e.empty()) return "locks: " + e;
  // Private pages of two requests must not overlap either.
  std::vector<int32_t> private_pages;
  for (const RequestKv* r : running) {
    std::vector<int32_t> mine;
    for (size_t i = static_cast<size_t>(r->prefix_len); i < r->kv.size(); ++i) mine.push_back(static_cast<int32_t>(r->kv[i] / p));
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    private_pages.insert(private_pages.end(), mine.begin(), mine.end());
  }
  std::sort(private_pages.begin(), private_pages.end());
  if (std::adjacent_find(private_pages.begin(), private_pages.end()) != private_pages.end()) {
    return "a page is owned by two requests";
  }
  return {};
}

}  // namespace actorlm
