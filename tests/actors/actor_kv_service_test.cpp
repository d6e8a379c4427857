// ActorKvService over the memory-pool and radix-cache manager actors (no
// worker, no model): extend evicts enough cache when a batch is short by
// several pages, and refuses without touching the cache when it cannot.

#include "actors/actor_kv_service.hpp"

#include <caf/all.hpp>
#include <catch2/catch.hpp>

#include "actors/pool_actor.hpp"
#include "actors/radix_actor.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

struct Managers {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  caf::actor pool, radix;
  caf::scoped_actor self{system};
  ActorKvService kv;

  Managers(int32_t page, int64_t pages)
      : pool(spawn_pool_manager(system, {pages * page, page, 8, 1024, false})),
        radix(spawn_radix_manager(system, page, false)),
        kv(self.ptr(), pool, radix, std::chrono::seconds(10)) {}

  ~Managers() {
    self->send_exit(pool, caf::exit_reason::user_shutdown);
    self->send_exit(radix, caf::exit_reason::user_shutdown);
  }

  void admit(RequestKv& r, const Ids& prompt) {
    RequestKv* one[] = {&r};
    std::vector<Ids> p{prompt};
    REQUIRE(kv.admit(one, p) == 1);
  }
  bool extend(std::vector<RequestKv*> reqs, std::vector<Ids> toks) { return kv.extend(reqs, toks); }
};

// `cached` one-page leaves, each under its own first token (separate leaves,
// leaf 0 least recently used): evicting "at least n rows" then frees exactly
// the pages n rounds up to, so a shortfall counted in pages instead of rows
// leaves the retry short.
void fill_cache(Managers& m, int32_t page, int cached) {
  for (int i = 0; i < cached; ++i) {
    Ids tokens(static_cast<size_t>(page), 1000 + i);
    RequestKv r;
    m.admit(r, tokens);
    REQUIRE(m.extend({&r}, {tokens}));
    RequestKv* one[] = {&r};
    m.kv.finish(one);
  }
  REQUIRE(m.kv.usage().evictable == cached * page);
}

Ids filled(int64_t n, int32_t token) { return Ids(static_cast<size_t>(n), token); }

}  // namespace

TEST_CASE("Through the managers, an extend short by several pages evicts enough", "[actors][evict]") {
  int32_t page = GENERATE(1, 4, 16);
  INFO("page size " << page);
  Managers m(page, 6);
  fill_cache(m, page, 4);  // 2 free pages + 4 evictable
  RequestKv r;
  m.admit(r, {7});
  REQUIRE(m.extend({&r}, {filled(4 * page, 7)}));
  CHECK(r.kv.size() == static_cast<size_t>(4 * page));
  KvUsage u = m.kv.usage();
  CHECK(u.evictable == 2 * page);  // exactly the two oldest leaves went
  CHECK(u.free == 0);
  RequestKv* one[] = {&r};
  m.kv.finish(one);
  CHECK(m.kv.check_idle().empty());
}

TEST_CASE("Through the managers, a batch with a partial page short by several pages evicts enough", "[actors][evict]") {
  int32_t page = GENERATE(4, 16);
  INFO("page size " << page);
  Managers m(page, 6);
  fill_cache(m, page, 3);
  RequestKv a, b;
  m.admit(a, {7});
  REQUIRE(m.extend({&a}, {filled(page + 1, 7)}));  // a: one page and one row
  m.admit(b, {8});
  REQUIRE(m.kv.usage().free == page);
  // a fills its partial page and takes one more, b takes two: 3 pages, 1 free.
  REQUIRE(m.extend({&a, &b}, {filled(2 * page - 1, 7), filled(2 * page, 8)}));
  CHECK(a.kv.size() == static_cast<size_t>(3 * page));
  CHECK(b.kv.size() == static_cast<size_t>(2 * page));
  CHECK(a.kv[static_cast<size_t>(page + 1)] == a.kv[static_cast<size_t>(page)] + 1);
  CHECK(m.kv.usage().evictable == page);
  RequestKv* both[] = {&a, &b};
  m.kv.abort(both);
  CHECK(m.kv.check_idle().empty());
}

TEST_CASE("Through the managers, an extend that eviction cannot cover is refused and the cache kept", "[actors][evict]") {
  int32_t page = GENERATE(1, 4, 16);
  INFO("page size " << page);
  Managers m(page, 6);
  fill_cache(m, page, 4);
  RequestKv r;
  m.admit(r, {7});
  CHECK_FALSE(m.extend({&r}, {filled(7 * page, 7)}));  // 2 free + 4 evictable < 7
  CHECK(r.kv.empty());
  KvUsage u = m.kv.usage();
  CHECK(u.evictable == 4 * page);  // KvService::extend: false leaves everything as it was
  CHECK(u.free == 2 * page);
  REQUIRE(m.extend({&r}, {filled(6 * page, 7)}));
  CHECK(m.kv.usage().evictable == 0);
  RequestKv* one[] = {&r};
  m.kv.abort(one);
  CHECK(m.kv.check_idle().empty());
}
