#include "scheduler/kv_service.hpp"

namespace actorlm {

std::vector<int32_t> LocalKvService::match_lengths(std::span<const std::vector<int32_t>> keys) {
  std::vector<int32_t> out;
  for (const auto& k : keys) {
    std::span<const int32_t> key(k);
    out.push_back(static_cast<int32_t>(store_.radix().match_prefix(key.empty() ? key : key.first(key.size() - 1)).indices.size()));
  }
  return out;
}

size_t LocalKvService::admit(std::span<RequestKv* const> reqs, std::span<const std::vector<int32_t>> prompts) {
  size_t n = 0;
  for (; n < reqs.size(); ++n) {
    if (!store_.admit(*reqs[n], prompts[n])) break;
  }
  return n;
}

bool LocalKvService::extend(std::span<RequestKv* const> reqs, std::span<const std::vector<int32_t>> new_tokens) {
  std::vector<std::span<const int32_t>> spans(new_tokens.begin(), new_tokens.end());
  return store_.extend_batch(reqs, spans);
}

void LocalKvService::cache_unfinished(std::span<RequestKv* const> reqs) {
  for (RequestKv* r : reqs) store_.cache_unfinished(*r);
}

void LocalKvService::finish(std::span<RequestKv* const> reqs) {
  for (RequestKv* r : reqs) store_.finish(*r);
}

void LocalKvService::abort(std::span<RequestKv* const> reqs) {
  for (RequestKv* r : reqs) store_.abort(*r);
}

void LocalKvService::truncate(std::span<RequestKv* const> reqs, std::span<const size_t> lengths) {
  for (size_t i = 0; i < reqs.size(); ++i) store_.truncate(*reqs[i], lengths[i]);
}

KvUsage LocalKvService::usage() {
  return {store_.allocator().capacity(), store_.allocator().available_size(), store_.radix().evictable_size(),
          store_.radix().protected_size(), store_.req_to_token().available_size()};
}

int64_t LocalKvService::flush_cache() { return store_.evict_all(); }

std::string LocalKvService::check_idle() {
  if (store_.req_to_token().available_size() != store_.req_to_token().size()) return "request slots still held";
  if (store_.radix().protected_size() != 0) return "cache still locked";
  return store_.check_invariant({});
}

}  // namespace actorlm
