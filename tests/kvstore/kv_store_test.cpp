#include "kvstore/kv_store.hpp"

#include "kvstore/kv_error.hpp"

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

using actorlm::KvStore;
using actorlm::KvStoreConfig;
using actorlm::RequestKv;
using V = std::vector<int32_t>;

namespace {

// One simulated request: a prompt drawn from a few shared "system prompts"
// plus a random tail, prefilled in random chunks, then decoded.
struct SimRequest {
  V prompt;
  int32_t output_len = 0;
  RequestKv kv;
  bool admitted = false;
};

struct SimResult {
  uint64_t trace = 1469598103934665603ull;  // FNV-1a over what happened
  int64_t operations = 0;
  int64_t finished = 0, aborted = 0, retracted = 0, evictions = 0, cache_hits = 0, truncations = 0;
};

void mix(SimResult& r, int64_t v) {
  r.trace ^= static_cast<uint64_t>(v);
  r.trace *= 1099511628211ull;
}

SimResult simulate(uint64_t seed, int32_t page_size, int operations,
                   actorlm::EvictionPolicy policy = actorlm::EvictionPolicy::lru) {
  KvStoreConfig cfg;
  cfg.eviction = policy;
  cfg.capacity_tokens = 768;
  cfg.page_size = page_size;
  cfg.max_requests = 12;
  cfg.max_context_len = 200;
  KvStore store(cfg);
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  std::vector<V> system_prompts;
  for (int s = 0; s < 4; ++s) {
    V p(static_cast<size_t>(uniform(8, 60)));
    for (auto& t : p) t = uniform(0, 40);
    system_prompts.push_back(p);
  }

  std::vector<SimRequest> waiting, running;
  SimResult result;
  auto running_kv = [&] {
    std::vector<const RequestKv*> v;
    for (auto& r : running) v.push_back(&r.kv);
    return v;
  };
  // Retract: cache what it computed and send it back to wait with its tokens
  // so far as the new prompt (as the scheduler does when decode runs short).
  auto retract = [&](size_t i) {
    SimRequest r = std::move(running[i]);
    running.erase(running.begin() + static_cast<ptrdiff_t>(i));
    int32_t produced = static_cast<int32_t>(r.kv.tokens.size()) - static_cast<int32_t>(r.prompt.size());
    if (produced > 0) {
      r.prompt = r.kv.tokens;
      r.output_len = std::max(1, r.output_len - produced);
    }
    const int64_t priority = r.kv.priority;
    store.finish(r.kv);
    r.kv.priority = priority;
    r.admitted = false;
    waiting.push_back(std::move(r));
    ++result.retracted;
  };

  for (int op = 0; op < operations; ++op) {
    int kind = uniform(0, 99);
    mix(result, kind);
    if (kind < 15) {  // a request arrives
      SimRequest r;
      r.prompt = system_prompts[static_cast<size_t>(uniform(0, 3))];
      int tail = uniform(1, 40);
      for (int i = 0; i < tail; ++i) r.prompt.push_back(uniform(0, 40));
      r.output_len = uniform(1, 30);
      r.kv.priority = uniform(-3, 3);
      waiting.push_back(std::move(r));
    } else if (kind < 30 && !waiting.empty()) {  // admit one waiting request
      size_t i = static_cast<size_t>(uniform(0, static_cast<int>(waiting.size()) - 1));
      if (store.admit(waiting[i].kv, waiting[i].prompt)) {
        waiting[i].admitted = true;
        result.cache_hits += waiting[i].kv.cached_on_admit;
        mix(result, waiting[i].kv.cached_on_admit);
        running.push_back(std::move(waiting[i]));
        waiting.erase(waiting.begin() + static_cast<ptrdiff_t>(i));
      }
    } else if (kind < 80 && !running.empty()) {  // one step of one running request
      size_t i = static_cast<size_t>(uniform(0, static_cast<int>(running.size()) - 1));
      SimRequest& r = running[i];
      size_t have = r.kv.tokens.size();
      V next;
      bool prefill = have < r.prompt.size();
      if (prefill) {
        size_t chunk = std::min(r.prompt.size() - have, static_cast<size_t>(uniform(1, 24)));
        next.assign(r.prompt.begin() + static_cast<ptrdiff_t>(have),
                    r.prompt.begin() + static_cast<ptrdiff_t>(have + chunk));
      } else {
        // A decode step, speculative one time in three: the last token and
        // up to 5 drafts, of which verification keeps a random prefix.
        const int drafts = uniform(0, 2) == 0 ? uniform(1, 5) : 0;
        for (int d = 0; d <= drafts; ++d) next.push_back(uniform(0, 40));
      }
      const bool extended = store.extend(r.kv, next);
      if (extended && !prefill && next.size() > 1) {
        const size_t kept = static_cast<size_t>(uniform(1, static_cast<int>(next.size())));
        mix(result, static_cast<int64_t>(kept));
        store.truncate(r.kv, have + kept);
        ++result.truncations;
      }
      if (!extended) {
        retract(i);  // the pool is short even after eviction
      } else if (prefill && r.kv.tokens.size() < r.prompt.size()) {
        store.cache_unfinished(r.kv);
      } else if (!prefill && static_cast<int32_t>(r.kv.tokens.size()) >=
                                 static_cast<int32_t>(r.prompt.size()) + r.output_len) {
        store.finish(r.kv);
        running.erase(running.begin() + static_cast<ptrdiff_t>(i));
        ++result.finished;
      }
    } else if (kind < 86 && !running.empty()) {  // abort at a random point
      size_t i = static_cast<size_t>(uniform(0, static_cast<int>(running.size()) - 1));
      store.abort(running[i].kv);
      running.erase(running.begin() + static_cast<ptrdiff_t>(i));
      ++result.aborted;
    } else if (kind < 90 && !running.empty()) {  // retract under pressure
      retract(static_cast<size_t>(uniform(0, static_cast<int>(running.size()) - 1)));
    } else if (kind < 95) {  // evict some cache
      mix(result, store.evict(uniform(1, 64)));
      ++result.evictions;
    }
    auto rk = running_kv();
    auto err = store.check_invariant(rk);
    if (!err.empty()) {
      FAIL_CHECK("op " << op << " (kind " << kind << "): " << err);
      return result;
    }
    mix(result, store.allocator().available_size());
    mix(result, store.radix().evictable_size());
    mix(result, store.radix().protected_size());
    ++result.operations;
  }

  // Drain: finish everything, flush the cache, and the pool is full again.
  while (!running.empty()) {
    store.finish(running.back().kv);
    running.pop_back();
    auto rk = running_kv();
    REQUIRE(store.check_invariant(rk).empty());
  }
  store.evict_all();
  CHECK(store.allocator().available_size() == store.allocator().capacity());
  CHECK(store.radix().total_size() == 0);
  CHECK(store.req_to_token().available_size() == cfg.max_requests);
  return result;
}

}  // namespace

TEST_CASE("Randomized KV store run keeps the pool invariant after every operation", "[kvstore][random]") {
  int32_t page = GENERATE(1, 4, 16);
  // Requests of random priorities; every eviction order keeps the invariants.
  auto policy = GENERATE(actorlm::EvictionPolicy::lru, actorlm::EvictionPolicy::lfu, actorlm::EvictionPolicy::priority);
  SimResult r = simulate(42 + static_cast<uint64_t>(page), page, 12000, policy);
  CHECK(r.operations == 12000);
  // The run must actually exercise the interesting paths.
  CHECK(r.finished > 50);
  CHECK(r.aborted > 50);
  CHECK(r.retracted > 50);
  CHECK(r.cache_hits > 0);
  CHECK(r.truncations > 100);
}

TEST_CASE("Truncating after rejected drafts frees exactly the pages only they used", "[kvstore]") {
  KvStore store({.capacity_tokens = 64, .page_size = 4, .max_requests = 2, .max_context_len = 64,
                 .disable_radix_cache = false});
  RequestKv r;
  V prompt{1, 2, 3, 4, 5, 6};
  REQUIRE(store.admit(r, prompt));
  REQUIRE(store.extend(r, prompt));
  const int64_t free_before = store.allocator().available_size();
  // Last token + 7 drafts: positions 6..13, filling the second page and two more.
  REQUIRE(store.extend(r, V{7, 8, 9, 10, 11, 12, 13, 14}));
  CHECK(store.allocator().available_size() == free_before - 8);
  // One kept (position 6): its page stays, the two after it go.
  store.truncate(r, 7);
  CHECK(r.kv.size() == 7);
  CHECK(r.tokens == V{1, 2, 3, 4, 5, 6, 7});
  CHECK(store.allocator().available_size() == free_before);
  const RequestKv* running[] = {&r};
  CHECK(store.check_invariant(running).empty());
  // The next token continues the kept page.
  REQUIRE(store.extend(r, V{9}));
  CHECK(r.kv[7] == r.kv[6] + 1);
  // Cut at a page's end, the next token takes a fresh page.
  REQUIRE(store.extend(r, V{10, 11}));
  store.truncate(r, 8);
  CHECK(store.allocator().available_size() == free_before);
  // Never into the cached prefix, never past the end.
  store.cache_unfinished(r);
  CHECK(r.prefix_len == 8);
  CHECK_THROWS_AS(store.truncate(r, 7), actorlm::KvStoreError);
  CHECK_THROWS_AS(store.truncate(r, 9), actorlm::KvStoreError);
  CHECK(store.check_invariant(running).empty());
  store.finish(r);
}

TEST_CASE("Same seed gives the same run, another seed another run", "[kvstore][random]") {
  int32_t page = GENERATE(1, 16);
  SimResult a = simulate(7, page, 3000);
  SimResult b = simulate(7, page, 3000);
  SimResult c = simulate(8, page, 3000);
  CHECK(a.trace == b.trace);
  CHECK(a.trace != c.trace);
}

TEST_CASE("Admit matches and locks the cached prefix of a prompt", "[kvstore]") {
  KvStore store({.capacity_tokens = 64, .page_size = 4, .max_requests = 4, .max_context_len = 64,
                 .disable_radix_cache = false});
  V prompt{1, 2, 3, 4, 5, 6, 7, 8, 9};
  RequestKv first;
  REQUIRE(store.admit(first, prompt));
  CHECK(first.prefix_len == 0);
  REQUIRE(store.extend(first, prompt));
  store.finish(first);
  // The same prompt again: 8 tokens (2 pages) are cached; the 9th must be
  // computed so the model has a position to produce logits from.
  RequestKv second;
  REQUIRE(store.admit(second, prompt));
  CHECK(second.prefix_len == 8);
  CHECK(store.radix().protected_size() == 8);
  const RequestKv* running[] = {&second};
  CHECK(store.check_invariant(running).empty());
  store.abort(second);
  CHECK(store.radix().protected_size() == 0);
  CHECK(store.allocator().available_size() + store.radix().evictable_size() == 64);
}

TEST_CASE("Extend evicts cache when short and fails cleanly when it cannot", "[kvstore]") {
  KvStore store({.capacity_tokens = 16, .page_size = 1, .max_requests = 4, .max_context_len = 64,
                 .disable_radix_cache = false});
  RequestKv a;
  REQUIRE(store.admit(a, V{1}));
  REQUIRE(store.extend(a, V{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  store.finish(a);  // 10 rows now cached, unlocked
  RequestKv b;
  REQUIRE(store.admit(b, V{50}));
  REQUIRE(store.extend(b, V{50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61}));  // needs eviction
  CHECK(store.radix().total_size() <= 4);
  std::vector<int32_t> too_many(10, 7);
  auto free_before = store.allocator().available_size();
  CHECK_FALSE(store.extend(b, too_many));  // 4 free + evictable < 10: nothing changes
  CHECK(store.allocator().available_size() == free_before);
  CHECK(b.tokens.size() == 12);
  const RequestKv* running[] = {&b};
  CHECK(store.check_invariant(running).empty());
}

namespace {

// A store of `pages` pages whose tree holds `cached` one-page leaves, each
// under its own first token so that each is a separate leaf (leaf 0 the least
// recently used), and whose other pages are free. Separate one-page leaves
// matter: evicting "at least n rows" then frees exactly as many pages as n
// rounds up to, so asking for too few rows shows up as a refused extend.
KvStore store_with_cache(int32_t page, int64_t pages, int cached) {
  KvStore store({.capacity_tokens = pages * page, .page_size = page, .max_requests = 8, .max_context_len = 1024,
                 .disable_radix_cache = false});
  for (int i = 0; i < cached; ++i) {
    V tokens(static_cast<size_t>(page), 1000 + i);
    RequestKv r;
    REQUIRE(store.admit(r, tokens));
    REQUIRE(store.extend(r, tokens));
    store.finish(r);
  }
  REQUIRE(store.radix().evictable_size() == cached * page);
  REQUIRE(store.allocator().free_pages() == pages - cached);
  return store;
}

V filled(int64_t n, int32_t token) { return V(static_cast<size_t>(n), token); }

}  // namespace

TEST_CASE("Extend short by several pages evicts whole pages' worth of cache", "[kvstore][evict]") {
  int32_t page = GENERATE(1, 4, 16);
  INFO("page size " << page);
  // 2 free pages + 4 evictable; 4 pages asked: 2 short, which eviction covers.
  KvStore store = store_with_cache(page, 6, 4);
  RequestKv r;
  REQUIRE(store.admit(r, V{7}));
  REQUIRE(store.extend(r, filled(4 * page, 7)));
  CHECK(r.kv.size() == static_cast<size_t>(4 * page));
  // Exactly the two least recently used leaves went; the others stay cached.
  CHECK(store.radix().evictable_size() == 2 * page);
  CHECK(store.allocator().free_pages() == 0);
  V leaf2(static_cast<size_t>(page), 1002);
  leaf2.push_back(0);  // match_prefix looks at all but the last token
  CHECK(store.radix().match_prefix(leaf2).indices.size() == static_cast<size_t>(page));
  const RequestKv* running[] = {&r};
  CHECK(store.check_invariant(running).empty());
}

TEST_CASE("Extend refuses, changing nothing, when even eviction falls short", "[kvstore][evict]") {
  int32_t page = GENERATE(1, 4, 16);
  INFO("page size " << page);
  KvStore store = store_with_cache(page, 6, 4);
  RequestKv r;
  REQUIRE(store.admit(r, V{7}));
  // 2 free + 4 evictable = 6 pages; 7 asked.
  CHECK_FALSE(store.extend(r, filled(7 * page, 7)));
  CHECK(r.kv.empty());
  CHECK(store.radix().evictable_size() == 4 * page);  // the cache was not thrown away for nothing
  CHECK(store.allocator().free_pages() == 2);
  // One page fewer fits, taking every evictable page.
  REQUIRE(store.extend(r, filled(6 * page, 7)));
  CHECK(store.radix().evictable_size() == 0);
  const RequestKv* running[] = {&r};
  CHECK(store.check_invariant(running).empty());
}

TEST_CASE("A batch extend short by several pages, one request continuing a partial page, evicts enough", "[kvstore][evict]") {
  int32_t page = GENERATE(4, 16);  // a partial page needs page size > 1
  INFO("page size " << page);
  // a holds one full page and one row of the next: 2 pages. 1 page free, 3
  // cached leaves.
  KvStore store = store_with_cache(page, 6, 3);
  RequestKv a, b;
  REQUIRE(store.admit(a, V{7}));
  REQUIRE(store.extend(a, filled(page + 1, 7)));
  REQUIRE(store.admit(b, V{8}));
  REQUIRE(store.allocator().free_pages() == 1);
  // a: page - 1 rows fill its partial page, then one new page; b: two pages.
  // 3 new pages, 1 free: 2 short, 3 evictable.
  V more_a = filled(2 * page - 1, 7), more_b = filled(2 * page, 8);
  RequestKv* reqs[] = {&a, &b};
  std::span<const int32_t> toks[] = {more_a, more_b};
  REQUIRE(store.extend_batch(reqs, toks));
  CHECK(a.kv.size() == static_cast<size_t>(3 * page));
  CHECK(b.kv.size() == static_cast<size_t>(2 * page));
  // a's rows continue its partial page in place.
  CHECK(a.kv[static_cast<size_t>(page + 1)] == a.kv[static_cast<size_t>(page)] + 1);
  CHECK(store.radix().evictable_size() == page);
  const RequestKv* running[] = {&a, &b};
  CHECK(store.check_invariant(running).empty());
  // Now 0 free + 1 evictable: another 2 pages for b are refused, nothing changes.
  V two_pages = filled(2 * page, 8);
  CHECK_FALSE(store.extend(b, two_pages));
  CHECK(store.radix().evictable_size() == page);
  CHECK(b.kv.size() == static_cast<size_t>(2 * page));
}

TEST_CASE("The self-check fails at the step a lock outlives its request", "[kvstore]") {
  KvStore store({.capacity_tokens = 64, .page_size = 4, .max_requests = 4, .max_context_len = 64,
                 .disable_radix_cache = false});
  V prompt{1, 2, 3, 4, 5, 6, 7, 8, 9};
  RequestKv first;
  REQUIRE(store.admit(first, prompt));
  REQUIRE(store.extend(first, prompt));
  store.finish(first);
  RequestKv a, b;
  REQUIRE(store.admit(a, prompt));
  REQUIRE(store.admit(b, prompt));
  REQUIRE(a.prefix_len == 8);
  const RequestKv* both[] = {&a, &b};
  REQUIRE(store.check_invariant(both).empty());
  // Listing only one of two holders: each node of the shared path is locked
  // twice but held once, and the pool accounting cannot tell.
  store.radix().inc_lock_ref(a.last_node);
  CHECK(store.check_invariant(both).find("locks:") == 0);
  store.radix().dec_lock_ref(a.last_node);
  store.abort(b);
  const RequestKv* one[] = {&a};
  CHECK(store.check_invariant(one).empty());
  store.abort(a);
  CHECK(store.check_invariant({}).empty());
}
