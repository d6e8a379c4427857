// The scheduler driving the radix-cache manager, memory-pool manager and
// worker actors purely through FlatBuffers messages.

#include <caf/all.hpp>
#include <chrono>
#include <cstdlib>
#include <catch2/catch.hpp>
#include <map>
#include <random>

#include "actorlm/config.hpp"
#include "actors/actor_kv_service.hpp"
#include "actors/pool_actor.hpp"
#include "actors/radix_actor.hpp"
#include "actors/worker_actor.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#if ACTORLM_HAVE_CUDA
#include "executor/cuda_executor.hpp"
#endif
#include "messages/envelope.hpp"
#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "scheduler/scheduler.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;
using Outputs = std::map<uint64_t, std::pair<Ids, FinishReason>>;

namespace {

const LlamaWeights& weights() {
  static LlamaWeights w = load_llama_weights(default_model_path());
  return w;
}

std::vector<Ids> prompts(int n) {
  static Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  ChatTemplate tpl = ChatTemplate::for_model(tok, nullptr);
  std::vector<Ids> out;
  for (int i = 0; i < n; ++i) {
    std::vector<ChatMessage> m{{"system", "You are a terse assistant for a museum; answer in one sentence, with care."},
                               {"user", "Name one thing about item " + std::to_string(i * 7) + "."}};
    out.push_back(tok.encode(tpl.render(m), false, true));
  }
  return out;
}

Request make(uint64_t id, const Ids& p, int max_new) {
  Request r;
  r.id = id;
  r.prompt = p;
  r.sampling.temperature = 0;
  r.stop.max_new_tokens = max_new;
  return r;
}

SchedulerConfig sched_config() {
  SchedulerConfig c;
  c.max_running_requests = 32;
  c.max_prefill_tokens = 512;
  c.chunked_prefill_size = 64;
  c.max_context = 256;
  c.eos_id = 2;
  return c;
}

Outputs drain(Scheduler& s, const std::function<void()>& each = {}) {
  Outputs out;
  while (!s.idle()) {
    if (each) each();
    for (const auto& e : s.step()) {
      if (e.token >= 0) out[e.id].first.push_back(e.token);
      if (e.finish != FinishReason::none) out[e.id].second = e.finish;
    }
  }
  return out;
}

// The worker's runner on the CPU backend or, for the [gpu] cases, the CUDA
// executor: the runtime must not care which.
std::shared_ptr<ModelRunner> make_runner(bool cuda, int64_t tokens, int32_t page) {
  ModelRunnerConfig rc{.kv_pool_rows = TokenToKVPoolAllocator(tokens, page).pool_rows(), .max_requests = 40, .max_context = 256};
#if ACTORLM_HAVE_CUDA
  if (cuda) return std::make_shared<ModelRunner>(cuda::CudaExecutor::create(weights()), rc);
#endif
  REQUIRE_FALSE(cuda);
  return std::make_shared<ModelRunner>(LlamaWeights(weights()), std::make_unique<cpu::CpuBackend>(2), rc);
}

// How long the scheduler waits for a manager reply, and for a word from the
// worker (a beat or a result). 120 s is far beyond a step here, but
// ThreadSanitizer makes everything 10-20x slower: scripts/tsan.sh raises it
// with ACTORLM_TEST_REPLY_TIMEOUT_S.
std::chrono::milliseconds reply_timeout() {
  const char* s = std::getenv("ACTORLM_TEST_REPLY_TIMEOUT_S");
  const long v = s ? std::strtol(s, nullptr, 10) : 0;
  return std::chrono::seconds(v > 0 ? v : 120);
}

struct ActorEngine {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  KvStoreConfig kv;
  caf::actor pool, radix, worker;
  caf::scoped_actor self{system};
  ActorKvService kv_service;
  ActorWorker worker_service;
  Scheduler scheduler;

  ActorEngine(int64_t tokens, int32_t page, bool cuda = false)
      : kv{tokens, page, 40, 256, false},
        pool(spawn_pool_manager(system, kv)),
        radix(spawn_radix_manager(system, page, false)),
        worker(spawn_worker(system, make_runner(cuda, tokens, page))),
        kv_service(self.ptr(), pool, radix, reply_timeout()),
        worker_service(self.ptr(), worker, {.heartbeats = true, .silence = reply_timeout(), .copy_timeout = reply_timeout()}),
        scheduler(sched_config(), kv_service, worker_service) {}
};

Outputs in_process(const std::vector<Ids>& ps, int max_new, bool cuda = false) {
  LocalKvService kv({8192, 1, 40, 256, false});
  auto runner = make_runner(cuda, 8192, 1);
  LocalWorker worker(*runner);
  Scheduler s(sched_config(), kv, worker);
  for (size_t i = 0; i < ps.size(); ++i) REQUIRE_FALSE(s.submit(make(i, ps[i], max_new)));
  return drain(s);
}

void concurrent_through_actors(bool cuda) {
  auto ps = prompts(32);
  Outputs want = in_process(ps, 10, cuda);
  ActorEngine e(8192, 1, cuda);
  for (size_t i = 0; i < ps.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, ps[i], 10)));
  int64_t steps_before = e.scheduler.stats().steps;
  Outputs got = drain(e.scheduler);
  for (size_t i = 0; i < ps.size(); ++i) {
    INFO("request " << i);
    CHECK(got[i].first == want[i].first);
  }
  CHECK(e.scheduler.stats().cache_hit_rate() > 0.0);
  // Round trips per step do not grow with the number of requests.
  double per_step = double(e.kv_service.round_trips()) / double(e.scheduler.stats().steps - steps_before);
  INFO("manager round trips per step: " << per_step);
  CHECK(per_step <= 8.0);
  CHECK(e.kv_service.check_idle().empty());
  e.kv_service.flush_cache();
  KvUsage u = e.kv_service.usage();
  CHECK(u.free == u.capacity);
}

void aborts_through_actors(bool cuda) {
  ActorEngine e(384, 4, cuda);
  auto ps = prompts(8);
  std::mt19937 rng(3);
  for (uint64_t i = 0; i < 100; ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, ps[i % 8], 2 + static_cast<int>(rng() % 10))));
  std::vector<uint64_t> order(100);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t next = 0;
  Outputs got = drain(e.scheduler, [&] {
    if (next < order.size() && rng() % 2) e.scheduler.abort(order[next++]);
  });
  CHECK(got.size() == 100);
  CHECK(e.scheduler.stats().retractions > 0);
  CHECK(e.kv_service.check_idle().empty());
  e.kv_service.flush_cache();
  KvUsage u = e.kv_service.usage();
  CHECK(u.free == u.capacity);
  CHECK(u.free_slots == 40);
}

void retraction_through_actors(bool cuda) {
  auto ps = prompts(8);
  Outputs want = in_process(ps, 16, cuda);
  ActorEngine e(320, 4, cuda);
  for (size_t i = 0; i < ps.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, ps[i], 16)));
  Outputs got = drain(e.scheduler);
  for (size_t i = 0; i < ps.size(); ++i) {
    INFO("request " << i);
    CHECK(got[i].first == want[i].first);
  }
  CHECK(e.scheduler.stats().retractions > 0);
  CHECK(e.kv_service.check_idle().empty());
}

}  // namespace

TEST_CASE("Through actors, concurrent requests get the in-process engine's outputs", "[actors][engine]") {
  concurrent_through_actors(false);
}

TEST_CASE("Through actors, retraction and 100 random aborts leave the pool full", "[actors][engine]") {
  aborts_through_actors(false);
}

TEST_CASE("Through actors, retraction under a small pool keeps every output identical", "[actors][engine]") {
  retraction_through_actors(false);
}

TEST_CASE("With the CUDA worker, concurrent requests get the in-process engine's outputs", "[gpu][actors][engine]") {
  concurrent_through_actors(true);
}

TEST_CASE("With the CUDA worker, retraction and 100 random aborts leave the pool full", "[gpu][actors][engine]") {
  aborts_through_actors(true);
}

TEST_CASE("With the CUDA worker, retraction under a small pool keeps every output identical", "[gpu][actors][engine]") {
  retraction_through_actors(true);
}

namespace {

// A stand-in manager that answers every request with the same bytes.
caf::behavior answering(caf::event_based_actor*, WireMessage reply) {
  return {[reply](kv_atom, const WireMessage&) { return reply; }};
}

// The message of what `call` throws, or "" when it returns.
std::string thrown_by(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("A manager that answers garbage is reported, not trusted", "[actors]") {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  caf::actor pool = spawn_pool_manager(system, {64, 1, 2, 16, false});
  caf::scoped_actor self{system};
  // The pool manager refuses a message meant for the radix manager.
  fb::EvictT evict;
  evict.num_tokens = 4;
  self->request(pool, std::chrono::seconds(5), kv_atom::value, WireMessage{msg::pack(evict)})
      .receive(
          [&](const WireMessage& reply) {
            std::string err;
            auto r = msg::unpack<fb::FreeReply>(reply.bytes, &err);
            REQUIRE(r);
            CHECK(r->error.find("does not handle Evict") != std::string::npos);
          },
          [&](const caf::error&) { FAIL("no reply"); });
  // Freeing a slot that was never handed out is refused with the reason.
  fb::FreeT bad;
  bad.req_slots = {1};
  self->request(pool, std::chrono::seconds(5), kv_atom::value, WireMessage{msg::pack(bad)})
      .receive(
          [&](const WireMessage& reply) {
            std::string err;
            auto r = msg::unpack<fb::FreeReply>(reply.bytes, &err);
            REQUIRE(r);
            CHECK(r->error.find("not allocated") != std::string::npos);
            CHECK(r->free_req_slots == 2);
          },
          [&](const caf::error&) { FAIL("no reply"); });

  // The scheduler's side: a reply it cannot read, or one whose sizes do not
  // fit the question, is an error naming the manager, never indexed into.
  std::vector<Ids> keys{{1, 2, 3}, {4, 5, 6}};
  caf::actor noise = system.spawn(answering, WireMessage{{1, 2, 3, 4, 5, 6, 7, 8}});
  ActorKvService noisy(self.ptr(), noise, noise, std::chrono::seconds(5));
  CHECK(thrown_by([&] { noisy.usage(); }).find("memory-pool manager sent an unreadable reply") != std::string::npos);
  CHECK(thrown_by([&] { noisy.match_lengths(keys); }).find("radix-cache manager sent an unreadable reply") !=
        std::string::npos);
  // A readable reply of another kind (the pool answering a radix question).
  ActorKvService crossed(self.ptr(), pool, pool, std::chrono::seconds(5));
  CHECK(thrown_by([&] { crossed.match_lengths(keys); }).find("radix-cache manager sent an unreadable reply") !=
        std::string::npos);
  // The right kind with too few entries.
  caf::actor no_matches = system.spawn(answering, WireMessage{msg::pack(fb::MatchPrefixReplyT{})});
  ActorKvService short_radix(self.ptr(), pool, no_matches, std::chrono::seconds(5));
  CHECK(thrown_by([&] { short_radix.match_lengths(keys); }).find("answered with 0 matches for 2") != std::string::npos);
  fb::AllocTokensReplyT few;
  few.ok = true;
  few.out_cache_loc = {7};
  caf::actor short_pool = system.spawn(answering, WireMessage{msg::pack(few)});
  ActorKvService short_kv(self.ptr(), short_pool, no_matches, std::chrono::seconds(5));
  RequestKv req;
  req.slot = 0;
  std::vector<RequestKv*> reqs{&req};
  std::vector<Ids> new_tokens{{1, 2, 3}};
  CHECK(thrown_by([&] { short_kv.extend(reqs, new_tokens); }).find("answered with 1 KV rows for 3") !=
        std::string::npos);
  CHECK(req.kv.empty());
  caf::anon_send_exit(noise, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(no_matches, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(short_pool, caf::exit_reason::user_shutdown);
}
