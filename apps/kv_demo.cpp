#include "apps/kv_demo.hpp"

#include <cstdio>
#include <vector>

#include "kvstore/kv_store.hpp"

namespace actorlm {

// Three chat turns that share a system prompt go through the KV store the way
// the scheduler drives it, printing what is reused and what the pool holds.
int run_kv_demo() {
  KvStore store({.capacity_tokens = 256, .page_size = 4, .max_requests = 8, .max_context_len = 128,
                 .disable_radix_cache = false});
  std::vector<int32_t> system(48);
  for (size_t i = 0; i < system.size(); ++i) system[i] = 1000 + static_cast<int32_t>(i);
  auto report = [&](const char* what) {
    std::printf("  %-34s free %3lld  cached(evictable) %3lld  locked %3lld  of %lld rows\n", what,
                static_cast<long long>(store.allocator().available_size()),
                static_cast<long long>(store.radix().evictable_size()),
                static_cast<long long>(store.radix().protected_size()),
                static_cast<long long>(store.allocator().capacity()));
  };
  std::printf("KV store demo (page size 4, 256 rows):\n");
  for (int turn = 0; turn < 3; ++turn) {
    std::vector<int32_t> prompt = system;
    for (int i = 0; i < 10; ++i) prompt.push_back(2000 + turn * 10 + i);
    RequestKv req;
    if (!store.admit(req, prompt)) return 1;
    std::printf(" request %d: %zu prompt tokens, %d reused from the radix cache\n", turn,
                prompt.size(), req.cached_on_admit);
    std::vector<int32_t> rest(prompt.begin() + req.prefix_len, prompt.end());
    if (!store.extend(req, rest)) return 1;
    for (int step = 0; step < 6; ++step) {
      int32_t token = 3000 + step;
      if (!store.extend(req, std::vector<int32_t>{token})) return 1;
    }
    report("after prefill + 6 decode steps:");
    store.finish(req);
    report("after finish (KV kept for reuse):");
  }
  store.evict_all();
  report("after flushing the cache:");
  const RequestKv* none[] = {nullptr};
  auto err = store.check_invariant(std::span<const RequestKv* const>(none, 0));
  std::printf("  pool invariant: %s\n", err.empty() ? "holds" : err.c_str());
  return err.empty() ? 0 : 1;
}

}  // namespace actorlm
