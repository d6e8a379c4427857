// The scheduler tells a slow step from a lost worker (issue 32): a worker
// that beats is waited for however long its step takes; one whose actor
// ends, or that falls silent past the deadline, fails the step at once with
// WorkerLost, and every later step too. With a restart, an ended worker
// actor is started again over the same runner and its step runs again.

#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "actors/actor_kv_service.hpp"
#include "actors/forward_codec.hpp"
#include "actors/pool_actor.hpp"
#include "actors/radix_actor.hpp"
#include "actors/wire.hpp"
#include "actors/worker_actor.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "scheduler/scheduler.hpp"

using namespace actorlm;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<ModelRunner> make_runner() {
  static LlamaWeights w = load_llama_weights(default_model_path());
  return std::make_shared<ModelRunner>(LlamaWeights(w), std::make_unique<cpu::CpuBackend>(2),
                                       ModelRunnerConfig{.kv_pool_rows = TokenToKVPoolAllocator(1024, 1).pool_rows(),
                                                         .max_requests = 8, .max_context = 256});
}

// A worker whose actor ends on its first forward, without an answer.
// (The `name` arguments: CAF 0.17 spawns an actor function that takes none
// by dereferencing a null pointer, which the UBSan build reports.)
caf::behavior quits_on_forward(caf::event_based_actor* self, std::string /*name*/) {
  return {[self](forward_atom, uint64_t, const WireMessage&, const caf::actor&, int32_t) { self->quit(); }};
}

// A worker that takes every forward and never answers or beats (a hung
// device call in a worker whose process is gone quiet).
caf::behavior silent(caf::event_based_actor*, std::string /*name*/) {
  return {[](forward_atom, uint64_t, const WireMessage&, const caf::actor&, int32_t) {}};
}

// A worker whose every step takes `delay`, beating all along, then runs the
// batch on the real worker: a slow model.
caf::behavior slow_but_beating(caf::event_based_actor* self, caf::actor real, std::chrono::milliseconds delay) {
  return {[self, real, delay](forward_atom, uint64_t id, const WireMessage& in, const caf::actor& reply_to,
                              int32_t interval_ms) {
    const auto until = std::chrono::steady_clock::now() + delay;
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      caf::anon_send(reply_to, heartbeat_atom::value, id);
    }
    self->request(real, caf::infinite, forward_atom::value, in).then([self, id, reply_to](WireMessage& m) {
      self->send(reply_to, step_done_atom::value, id, std::move(m));
    });
  }};
}

struct Rig {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  KvStoreConfig kv{1024, 1, 8, 256, false};
  caf::actor pool = spawn_pool_manager(system, kv);
  caf::actor radix = spawn_radix_manager(system, 1, false);
  caf::scoped_actor self{system};
  ActorKvService kv_service{self.ptr(), pool, radix, std::chrono::seconds(30)};

  ~Rig() {
    for (const auto& a : {pool, radix}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  }

  SchedulerConfig config() const {
    SchedulerConfig c;
    c.max_context = 256;
    c.eos_id = 2;
    return c;
  }

  static Request request(uint64_t id) {
    Request r;
    r.id = id;
    r.prompt = {504, 3575, 282, 4649, 314};
    r.sampling.temperature = 0;
    r.stop.max_new_tokens = 4;
    r.stop.ignore_eos = true;
    return r;
  }
};

// The message of the WorkerLost that stepping `s` throws, and how long it
// took; "" when it finished without one.
std::pair<std::string, double> lost_after(Scheduler& s) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    while (!s.idle()) s.step();
  } catch (const WorkerLost& e) {
    return {e.what(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  }
  return {"", 0};
}

}  // namespace

TEST_CASE("A worker whose actor ends fails the step at once, and every later one", "[actors][liveness]") {
  Rig rig;
  caf::actor worker = rig.system.spawn(quits_on_forward, std::string("quits"));
  // A silence deadline far beyond the test: only the down message can end it.
  ActorWorker w(rig.self.ptr(), worker, {.heartbeats = true, .silence = 600s});
  Scheduler s(rig.config(), rig.kv_service, w);
  REQUIRE_FALSE(s.submit(Rig::request(1)));
  auto [why, seconds] = lost_after(s);
  INFO(why);
  CHECK(why.find("worker lost: the worker stopped") != std::string::npos);
  CHECK(seconds < 60);  // not the 600 s deadline
  CHECK(w.lost() != "");
  // The request is failed, and what it held is given back.
  auto failed = s.fail_all(why, ErrorKind::unavailable);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].error_kind == ErrorKind::unavailable);
  CHECK(rig.kv_service.check_idle().empty());
  // Nothing is sent to a lost worker again.
  REQUIRE_FALSE(s.submit(Rig::request(2)));
  CHECK(lost_after(s).first.find("worker lost") != std::string::npos);
}

namespace {

// Every token each request streamed, by id, until the scheduler is idle.
std::map<uint64_t, std::vector<int32_t>> run_to_idle(Scheduler& s) {
  std::map<uint64_t, std::vector<int32_t>> out;
  while (!s.idle()) {
    for (const auto& e : s.step()) {
      if (e.token >= 0) out[e.id].push_back(e.token);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("A worker actor that ends is started again over the same runner, and no request is lost", "[actors][liveness]") {
  Rig rig;
  auto runner = make_runner();
  std::map<uint64_t, std::vector<int32_t>> reference;
  {
    ActorWorker plain(rig.self.ptr(), spawn_worker(rig.system, runner), {.heartbeats = true, .silence = 600s});
    Scheduler s(rig.config(), rig.kv_service, plain);
    REQUIRE_FALSE(s.submit(Rig::request(1)));
    reference = run_to_idle(s);
    REQUIRE(reference[1].size() == 4);
  }
  std::vector<caf::actor> spawned;
  WorkerLiveness liveness{.heartbeats = true, .silence = 600s};
  liveness.restart = [&] {
    spawned.push_back(spawn_worker(rig.system, runner));
    return spawned.back();
  };
  {
    // The first actor ends on its first forward: the step fails, its
    // request runs again on the new actor, with the tokens it would have had.
    ActorWorker w(rig.self.ptr(), rig.system.spawn(quits_on_forward, std::string("quits")), liveness);
    Scheduler s(rig.config(), rig.kv_service, w);
    REQUIRE_FALSE(s.submit(Rig::request(1)));
    CHECK(run_to_idle(s) == reference);
    CHECK(w.restarts() == 1);
    CHECK(w.lost() == "");
    CHECK(s.stats().failed_steps == 1);
    CHECK(rig.kv_service.check_idle().empty());
  }
  // The worker it started is stopped with it (the engine stops only its own).
  CHECK(spawned.size() == 1);

  // Actors that end every time: after max_restarts it is lost as before.
  liveness.max_restarts = 2;
  liveness.restart = [&] { return rig.system.spawn(quits_on_forward, std::string("quits again")); };
  ActorWorker w(rig.self.ptr(), rig.system.spawn(quits_on_forward, std::string("quits")), liveness);
  Scheduler s(rig.config(), rig.kv_service, w);
  // Its request fails twice (two restarts) and is failed alone as a poison
  // request would be; the next ends the third actor, with no restart left.
  REQUIRE_FALSE(s.submit(Rig::request(2)));
  run_to_idle(s);
  CHECK(w.restarts() == 2);
  CHECK(w.lost() == "");
  REQUIRE_FALSE(s.submit(Rig::request(3)));
  auto [why, seconds] = lost_after(s);
  INFO(why);
  CHECK(why.find("the worker stopped") != std::string::npos);
  CHECK(why.find("after 2 restarts") != std::string::npos);
  CHECK(w.restarts() == 2);
  CHECK(s.fail_all(why, ErrorKind::unavailable).size() == 1);
  CHECK(rig.kv_service.check_idle().empty());
  // The engine's own stop is never answered with a restart.
  int restarts = 0;
  liveness.restart = [&] {
    ++restarts;
    return spawn_worker(rig.system, runner);
  };
  caf::actor stopped = spawn_worker(rig.system, runner);
  ActorWorker v(rig.self.ptr(), stopped, liveness);
  caf::anon_send_exit(stopped, caf::exit_reason::user_shutdown);
  // (Earlier workers' down messages may come first.)
  bool seen = false;
  for (int i = 0; i < 10 && !seen; ++i) {
    rig.self->receive([&](caf::down_msg& d) { seen = v.on_down(d); }, caf::after(std::chrono::seconds(10)) >> [] {});
  }
  CHECK(seen);
  CHECK(restarts == 0);
  CHECK(v.lost() != "");
}

TEST_CASE("A worker silent past the deadline is lost, its late work not waited for", "[actors][liveness]") {
  Rig rig;
  caf::actor worker = rig.system.spawn(silent, std::string("silent"));
  ActorWorker w(rig.self.ptr(), worker, {.heartbeats = true, .silence = 300ms});
  Scheduler s(rig.config(), rig.kv_service, w);
  REQUIRE_FALSE(s.submit(Rig::request(1)));
  auto [why, seconds] = lost_after(s);
  INFO(why);
  CHECK(why.find("no heartbeat or result from the worker for 0.3 s") != std::string::npos);
  CHECK(seconds >= 0.3);
  CHECK(seconds < 30);
  s.fail_all(why, ErrorKind::unavailable);
  CHECK(rig.kv_service.check_idle().empty());
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
}

TEST_CASE("A step far longer than the deadline succeeds while the worker beats", "[actors][liveness]") {
  Rig rig;
  caf::actor real = spawn_worker(rig.system, make_runner());
  // Each step takes 1.5 s against a 500 ms silence deadline. (200 ms was
  // missed once by a heartbeat thread starved under ASan on a loaded 2-core
  // machine; the point is a step several deadlines long.)
  caf::actor worker = rig.system.spawn<caf::detached>(slow_but_beating, real, 1500ms);
  ActorWorker w(rig.self.ptr(), worker, {.heartbeats = true, .silence = 500ms});
  Scheduler s(rig.config(), rig.kv_service, w);
  REQUIRE_FALSE(s.submit(Rig::request(1)));
  std::vector<int32_t> tokens;
  const auto t0 = std::chrono::steady_clock::now();
  while (!s.idle()) {
    for (const auto& e : s.step()) {
      CHECK(e.error.empty());
      if (e.token >= 0) tokens.push_back(e.token);
    }
  }
  CHECK(std::chrono::steady_clock::now() - t0 >= 1500ms);
  // "The capital of France is" -> " Paris" greedily, as the worker test has it.
  REQUIRE(tokens.size() == 4);
  CHECK(tokens[0] == 7042);
  CHECK(w.lost().empty());
  CHECK(rig.kv_service.check_idle().empty());
  for (const auto& a : {worker, real}) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

TEST_CASE("The worker actor beats to whoever asked while it computes", "[actors][liveness]") {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  auto runner = make_runner();
  caf::actor worker = spawn_worker(system, runner);
  caf::scoped_actor self{system};
  // 200 prompt tokens: a forward of tens of milliseconds or more on the
  // default model, against beats every millisecond.
  ForwardBatch b;
  b.reqs = {{0, 0, 200}};
  for (int32_t i = 0; i < 200; ++i) {
    b.token_ids.push_back(100 + i);
    b.out_cache_loc.push_back(1 + i);
  }
  b.writes = {{0, 0, b.out_cache_loc}};
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<SampleRequest> sampling{{greedy, {}, {}, 0, 0, {}}};
  int beats = 0;
  bool answered = false;
  self->send(worker, forward_atom::value, uint64_t{5}, WireMessage{encode_forward(5, b, {1}, sampling)},
             caf::actor_cast<caf::actor>(self), int32_t{1});
  while (!answered) {
    self->receive([&](heartbeat_atom, uint64_t id) {
      CHECK(id == 5);
      ++beats;
    },
                  [&](step_done_atom, uint64_t id, const WireMessage& reply) {
                    CHECK(id == 5);
                    std::string error;
                    auto r = decode_result(reply.bytes, &error);
                    REQUIRE(r);
                    CHECK(r->error.empty());
                    answered = true;
                  },
                  caf::after(std::chrono::seconds(60)) >> [&] { FAIL("no answer from the worker"); });
  }
  CHECK(beats >= 1);
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
}
