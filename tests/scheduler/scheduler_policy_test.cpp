// Scheduling policy, step by step, with a stub worker (no model): admission
// order under lpm and fcfs, the prefill token budget, the running-request
// cap, memory-short gating and retraction. After every step the KV
// self-check ties the tree's locks to the running requests. (scheduler.cpp's
// other test, scheduler_test.cpp, runs the real model; this one checks which
// requests each step's batch holds, which needs no logits.)

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "kernels/cpu/sampler.hpp"
#include "scheduler/scheduler.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

constexpr int32_t kToken = 7;  // every sampled token; no EOS is configured

// Samples kToken for every request and records, per forward pass, which
// requests were in the batch (found by their prompt) and how many new tokens
// each brought.
struct FixedTokenWorker final : Worker {
  std::map<Ids, uint64_t> id_of_prompt;
  std::vector<std::vector<uint64_t>> batches;
  std::vector<std::vector<int32_t>> extend_lens;

  std::function<void(const ForwardBatch&)> on_run;  // e.g. a test's clock advanced by the step's cost

  std::vector<SampleResult> run(const ForwardBatch& batch, std::span<const SampleRequest> sampling) override {
    if (on_run) on_run(batch);
    std::vector<uint64_t> ids;
    std::vector<int32_t> lens;
    for (size_t i = 0; i < sampling.size(); ++i) {
      Ids prompt(sampling[i].prompt.begin(), sampling[i].prompt.end());
      ids.push_back(id_of_prompt.at(prompt));
      // A verify step (speculative decoding) samples more rows than the
      // batch has requests; lens are per request, read without speculation.
      lens.push_back(i < batch.reqs.size() ? batch.reqs[i].extend_len : 0);
    }
    batches.push_back(ids);
    extend_lens.push_back(lens);
    std::vector<SampleResult> out(sampling.size());
    for (auto& r : out) r.token = kToken;
    return out;
  }
};

SchedulerConfig config(SchedulePolicy policy, int32_t max_running, int32_t max_prefill, int32_t chunk) {
  SchedulerConfig c;
  c.policy = policy;
  c.max_running_requests = max_running;
  c.max_prefill_tokens = max_prefill;
  c.chunked_prefill_size = chunk;
  c.max_context = 256;
  return c;
}

struct Harness {
  LocalKvService kv;
  FixedTokenWorker worker;
  Scheduler scheduler;
  std::map<uint64_t, Ids> outputs;
  std::map<uint64_t, FinishReason> finish;
  std::map<uint64_t, ErrorKind> kinds;

  Harness(int64_t pool_tokens, int32_t page, const SchedulerConfig& c, EvictionPolicy eviction = EvictionPolicy::lru)
      : kv({pool_tokens, page, 16, c.max_context, false, eviction}), scheduler(c, kv, worker) {}

  void submit(uint64_t id, const Ids& prompt, int max_new, int32_t priority = 0) {
    REQUIRE_FALSE(try_submit(id, prompt, max_new, priority));
  }
  std::optional<std::string> try_submit(uint64_t id, const Ids& prompt, int max_new, int32_t priority = 0,
                                        int32_t tenant = 0, double tenant_weight = 0, int64_t tenant_kv_quota = 0) {
    Request r;
    r.id = id;
    r.prompt = prompt;
    r.sampling.temperature = 0;
    r.stop.max_new_tokens = max_new;
    r.priority = priority;
    r.tenant = tenant;
    r.tenant_weight = tenant_weight;
    r.tenant_kv_quota = tenant_kv_quota;
    worker.id_of_prompt[prompt] = id;
    return scheduler.submit(std::move(r));
  }

  // One step; the ids in its forward batch (empty when it ran none). The KV
  // self-check must hold after every step, not only once idle.
  std::vector<uint64_t> step() {
    size_t before = worker.batches.size();
    for (const auto& e : scheduler.step()) {
      if (e.token >= 0) outputs[e.id].push_back(e.token);
      if (e.finish != FinishReason::none) finish[e.id] = e.finish;
      if (e.error_kind != ErrorKind::none) kinds[e.id] = e.error_kind;
    }
    auto running = scheduler.running_kv();
    INFO("after step " << scheduler.stats().steps);
    REQUIRE(kv.check_running(running) == "");
    return worker.batches.size() > before ? worker.batches.back() : std::vector<uint64_t>{};
  }
  std::vector<int32_t> last_extends() const { return worker.extend_lens.back(); }

  void drain() {
    for (int guard = 0; !scheduler.idle() && guard < 1000; ++guard) step();
    REQUIRE(scheduler.idle());
    CHECK(kv.check_idle() == "");
  }
};

using B = std::vector<uint64_t>;

Ids range(int32_t from, int32_t n) {
  Ids v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = from + i;
  return v;
}

}  // namespace

TEST_CASE("lpm admits the longest cached prefix first, fcfs admits by arrival", "[scheduler][policy]") {
  auto policy = GENERATE(SchedulePolicy::lpm, SchedulePolicy::fcfs);
  bool lpm = policy == SchedulePolicy::lpm;
  INFO((lpm ? "lpm" : "fcfs"));
  // One request at a time, each done in its prefill step (max_new 1), so each
  // step's batch is the policy's next choice.
  Harness h(1024, 1, config(policy, 1, 2048, 0));
  Ids shared = range(1, 32);
  h.submit(100, shared, 1);
  CHECK(h.step() == B{100});  // leaves `shared` in the cache
  Ids b = Ids(shared.begin(), shared.begin() + 24);
  b.insert(b.end(), {300, 301, 302, 303, 304, 305});
  h.submit(1, range(200, 10), 1);  // nothing cached
  h.submit(2, b, 1);               // 24 tokens cached
  h.submit(3, range(400, 10), 1);  // nothing cached
  if (lpm) {
    CHECK(h.step() == B{2});
    CHECK(h.last_extends() == std::vector<int32_t>{6});  // only the uncached tail is computed
    CHECK(h.step() == B{1});
  } else {
    CHECK(h.step() == B{1});
    CHECK(h.step() == B{2});
  }
  CHECK(h.step() == B{3});
  h.drain();
}

TEST_CASE("max_prefill_tokens bounds the new tokens of each prefill step", "[scheduler][policy]") {
  SECTION("without chunking a request that does not fit the rest of the budget waits") {
    Harness h(1024, 1, config(SchedulePolicy::fcfs, 16, 20, 0));
    for (uint64_t i = 1; i <= 4; ++i) h.submit(i, range(static_cast<int32_t>(100 * i), 8), 1);
    CHECK(h.step() == B{1, 2});
    CHECK(h.last_extends() == std::vector<int32_t>{8, 8});
    CHECK(h.scheduler.waiting() == 2);
    CHECK(h.step() == B{3, 4});
    h.drain();
  }
  SECTION("with chunking the last admitted request takes what is left of the budget") {
    Harness h(1024, 1, config(SchedulePolicy::fcfs, 16, 20, 512));
    for (uint64_t i = 1; i <= 4; ++i) h.submit(i, range(static_cast<int32_t>(100 * i), 8), 1);
    CHECK(h.step() == B{1, 2, 3});
    CHECK(h.last_extends() == std::vector<int32_t>{8, 8, 4});
    CHECK(h.outputs.count(3) == 0);  // a chunk that is not the last samples nothing
    CHECK(h.step() == B{3, 4});       // the half-prefilled request goes first
    CHECK(h.last_extends() == std::vector<int32_t>{4, 8});
    CHECK(h.outputs[3] == Ids{kToken});
    h.drain();
  }
}

TEST_CASE("max_running_requests caps the running batch and the rest wait for a finish", "[scheduler][policy]") {
  Harness h(1024, 1, config(SchedulePolicy::fcfs, 2, 2048, 0));
  for (uint64_t i = 1; i <= 4; ++i) h.submit(i, range(static_cast<int32_t>(100 * i), 8), 3);
  CHECK(h.step() == B{1, 2});  // prefill
  CHECK(h.step() == B{1, 2});  // decode: 3 and 4 find no room
  CHECK(h.last_extends() == std::vector<int32_t>{1, 1});
  CHECK(h.scheduler.waiting() == 2);
  CHECK(h.step() == B{1, 2});  // third token: both finish
  CHECK(h.step() == B{3, 4});
  CHECK(h.step() == B{3, 4});
  CHECK(h.step() == B{3, 4});
  CHECK(h.scheduler.idle());
  for (uint64_t i = 1; i <= 4; ++i) CHECK(h.outputs[i] == Ids(3, kToken));
  h.drain();
}

TEST_CASE("A prefill that does not fit waits, and gates new admissions, until memory frees", "[scheduler][policy]") {
  // 40 rows. big (30) + small (15) do not fit together.
  Harness h(40, 1, config(SchedulePolicy::fcfs, 8, 2048, 0));
  h.submit(1, range(100, 30), 3);  // big
  h.submit(2, range(200, 15), 3);  // small
  // Both admitted, the batch does not fit and nothing decodes: the newest
  // goes back to wait and no forward runs.
  CHECK(h.step() == B{});
  CHECK(h.scheduler.running() == 1);
  CHECK(h.scheduler.waiting() == 1);
  CHECK(h.scheduler.stats().retractions == 1);
  CHECK(h.step() == B{1});  // big alone fits (10 rows left)
  CHECK(h.step() == B{1});  // small (15) does not fit: big decodes instead
  CHECK(h.scheduler.running() == 2);  // small holds a slot, waiting for rows
  h.submit(3, range(300, 2), 1);     // tiny would fit, but memory is short: it must wait
  CHECK(h.step() == B{1});  // big's last token; it finishes and its rows become cache
  CHECK(h.scheduler.waiting() == 1);
  CHECK(h.step() == B{2});  // small evicts big's cache; tiny still gated this step
  CHECK(h.last_extends() == std::vector<int32_t>{15});
  CHECK(h.step() == B{3, 2});  // memory is no longer short: tiny is admitted, small decodes beside it
  CHECK(h.step() == B{2});
  CHECK(h.scheduler.idle());
  CHECK(h.outputs[1] == Ids(3, kToken));
  CHECK(h.outputs[2] == Ids(3, kToken));
  CHECK(h.outputs[3] == Ids(1, kToken));
  h.drain();
}

TEST_CASE("Decode short of rows retracts the newest request, which later resumes with its output", "[scheduler][policy]") {
  // 24 rows; two 10-token prompts decoding 10 tokens each cannot both finish.
  Harness h(24, 1, config(SchedulePolicy::fcfs, 8, 2048, 0));
  h.submit(1, range(100, 10), 10);
  h.submit(2, range(200, 10), 10);
  CHECK(h.step() == B{1, 2});  // 20 rows
  CHECK(h.step() == B{1, 2});  // 22
  CHECK(h.step() == B{1, 2});  // 24: full
  CHECK(h.scheduler.stats().retractions == 0);
  CHECK(h.step() == B{1});     // 2 is retracted, its rows cached; 1 evicts some
  CHECK(h.scheduler.stats().retractions == 1);
  CHECK(h.scheduler.waiting() == 1);
  CHECK(h.outputs[2].size() == 3);
  h.drain();
  CHECK(h.outputs[1] == Ids(10, kToken));
  CHECK(h.outputs[2] == Ids(10, kToken));  // nothing lost or repeated across retraction
  CHECK(h.finish[2] == FinishReason::length);
}

TEST_CASE("Aborting between two prefill chunks releases the request's locks at once", "[scheduler][policy]") {
  int32_t page = GENERATE(1, 4, 16);
  INFO("page size " << page);
  Harness h(256, page, config(SchedulePolicy::fcfs, 8, 2048, 24));
  h.submit(1, range(100, 60), 4);
  h.submit(2, range(100, 70), 4);  // shares its first 60 tokens with 1
  CHECK(h.step() == B{1, 2});
  CHECK(h.last_extends() == std::vector<int32_t>{24, 24});
  // Both cached their first chunk: 2 now shares 1's pages and locks them too.
  REQUIRE(h.kv.store().radix().protected_size() >= page);
  h.scheduler.abort(2);
  // The abort applies first; step()'s self-check then finds a lock of 2's
  // left behind, if any, while 1 still holds the same path.
  CHECK(h.step() == B{1});
  CHECK(h.finish[2] == FinishReason::abort);
  CHECK(h.outputs.count(2) == 0);
  h.drain();
  CHECK(h.outputs[1] == Ids(4, kToken));
  CHECK(h.kv.store().radix().protected_size() == 0);
}

TEST_CASE("While a request decodes, each step prefills one chunk in all beside its token", "[scheduler][policy]") {
  Harness h(512, 1, config(SchedulePolicy::fcfs, 8, 2048, 24));
  h.submit(1, range(100, 10), 8);
  CHECK(h.step() == B{1});  // alone: nothing decodes, a whole chunk per request
  h.submit(2, range(200, 60), 2);
  h.submit(3, range(300, 60), 2);
  // 2 and 3 are both admitted, but the step prefills 24 tokens in all (2's
  // first chunk) and carries 1's token.
  CHECK(h.step() == B{2, 1});
  CHECK(h.last_extends() == std::vector<int32_t>{24, 1});
  CHECK(h.step() == B{2, 1});
  CHECK(h.last_extends() == std::vector<int32_t>{24, 1});
  CHECK(h.step() == B{2, 3, 1});  // 2's last 12 tokens, then 12 of 3's
  CHECK(h.last_extends() == std::vector<int32_t>{12, 12, 1});
  h.drain();
  CHECK(h.outputs[1] == Ids(8, kToken));
  CHECK(h.outputs[2] == Ids(2, kToken));
  CHECK(h.outputs[3] == Ids(2, kToken));
  // Without a stream decoding, both long prompts take a chunk each per step.
  Harness g(512, 1, config(SchedulePolicy::fcfs, 8, 2048, 24));
  g.submit(2, range(200, 60), 2);
  g.submit(3, range(300, 60), 2);
  CHECK(g.step() == B{2, 3});
  CHECK(g.last_extends() == std::vector<int32_t>{24, 24});
  g.drain();
}

namespace {

SchedulerConfig with_priorities(SchedulerConfig c, int32_t threshold = 10) {
  c.queue.priorities = true;
  c.queue.preemption_threshold = threshold;
  return c;
}

}  // namespace

TEST_CASE("Priorities order the queue before the prefix policy, in either sense, and count for nothing when off", "[scheduler][policy][priority]") {
  enum class Mode { off, high_first, low_first };
  const Mode mode = GENERATE(Mode::off, Mode::high_first, Mode::low_first);
  SchedulerConfig c = config(SchedulePolicy::lpm, 1, 2048, 0);
  if (mode != Mode::off) c = with_priorities(c, 1'000'000);  // no preemption here: order only
  c.queue.low_values_first = mode == Mode::low_first;
  Harness h(1024, 1, c);
  Ids shared = range(1, 32);
  h.submit(100, shared, 1);
  CHECK(h.step() == B{100});  // `shared` is cached now
  Ids matching = shared;
  matching.push_back(500);
  h.submit(1, range(200, 10), 1, 0);
  h.submit(2, matching, 1, 0);  // lpm's choice among equals
  h.submit(3, range(300, 10), 1, 7);
  h.submit(4, range(400, 10), 1, -3);
  std::vector<uint64_t> order;
  while (!h.scheduler.idle()) {
    for (uint64_t id : h.step()) order.push_back(id);
  }
  switch (mode) {
    case Mode::off: CHECK(order == B{2, 1, 3, 4}); break;
    case Mode::high_first: CHECK(order == B{3, 2, 1, 4}); break;
    case Mode::low_first: CHECK(order == B{4, 2, 1, 3}); break;
  }
  CHECK(h.scheduler.stats().preemptions == 0);
  h.drain();
}

TEST_CASE("An urgent request takes a running one's place when none is free, and the one sent back resumes with its output", "[scheduler][policy][priority]") {
  SECTION("the running limit is reached") {
    Harness h(1024, 1, with_priorities(config(SchedulePolicy::fcfs, 1, 2048, 0)));
    h.submit(1, range(100, 10), 6, 0);
    CHECK(h.step() == B{1});
    CHECK(h.step() == B{1});
    h.submit(2, range(200, 10), 2, 10);  // exactly the threshold above
    CHECK(h.step() == B{2});             // 1 went back to wait; 2 prefills
    CHECK(h.scheduler.stats().preemptions == 1);
    CHECK(h.scheduler.stats().retractions == 1);
    CHECK(h.step() == B{2});  // 2's second token ends it
    CHECK(h.finish[2] == FinishReason::length);
    h.drain();
    CHECK(h.outputs[1] == Ids(6, kToken));  // nothing lost or repeated
    CHECK(h.outputs[2] == Ids(2, kToken));
    CHECK(h.scheduler.stats().preemptions == 1);
  }
  SECTION("a gap below the threshold waits its turn") {
    Harness h(1024, 1, with_priorities(config(SchedulePolicy::fcfs, 1, 2048, 0)));
    h.submit(1, range(100, 10), 4, 0);
    CHECK(h.step() == B{1});
    h.submit(2, range(200, 10), 2, 9);
    for (int i = 0; i < 3; ++i) CHECK(h.step() == B{1});
    CHECK(h.step() == B{2});
    CHECK(h.scheduler.stats().preemptions == 0);
    h.drain();
  }
  SECTION("the KV pool is short") {
    // 40 rows: a 30-token prompt decoding leaves no room for a 20-token one.
    Harness h(40, 1, with_priorities(config(SchedulePolicy::fcfs, 8, 2048, 0)));
    h.submit(1, range(100, 30), 8, -5);
    CHECK(h.step() == B{1});
    h.submit(2, range(200, 20), 3, 50);
    CHECK(h.step() == B{1});  // 2 is admitted but its rows do not fit: 1 decodes
    CHECK(h.step() == B{2});  // then 1 goes back to wait and 2 prefills into its cache's rows
    CHECK(h.scheduler.stats().preemptions == 1);
    h.drain();
    CHECK(h.outputs[1] == Ids(8, kToken));
    CHECK(h.outputs[2] == Ids(3, kToken));
  }
}

TEST_CASE("Short of rows, the least urgent request goes back to wait, not the newest", "[scheduler][policy][priority]") {
  Harness h(24, 1, with_priorities(config(SchedulePolicy::fcfs, 8, 2048, 0)));
  h.submit(1, range(100, 10), 10, -1);  // older but less urgent
  h.submit(2, range(200, 10), 10, 0);
  CHECK(h.step() == B{2, 1});  // admitted by priority
  CHECK(h.step() == B{2, 1});
  CHECK(h.step() == B{2, 1});
  CHECK(h.step() == B{2});  // the pool is full: 1 is retracted
  CHECK(h.scheduler.stats().retractions == 1);
  CHECK(h.scheduler.stats().preemptions == 0);  // a retraction for rows, not for a waiting request
  h.drain();
  CHECK(h.outputs[1] == Ids(10, kToken));
  CHECK(h.outputs[2] == Ids(10, kToken));
}

TEST_CASE("An urgent request's prefill runs without the less urgent prompts in progress or waiting", "[scheduler][policy][priority]") {
  const bool on = GENERATE(false, true);
  SchedulerConfig c = config(SchedulePolicy::fcfs, 4, 2048, 16);
  if (on) c = with_priorities(c);
  Harness h(1024, 1, c);
  h.submit(1, range(100, 64), 2, 0);  // four chunks of 16
  CHECK(h.step() == B{1});
  h.submit(2, range(300, 10), 2, 50);
  h.submit(3, range(400, 10), 2, 0);
  if (on) {
    CHECK(h.step() == B{2});             // alone: 1's next chunk and 3 wait a step
    CHECK(h.last_extends() == std::vector<int32_t>{10});
    CHECK(h.step() == B{1, 2});          // then 1 goes on beside 2's decode
  } else {
    CHECK(h.step() == B{1, 2, 3});  // one chunk in all: 1's 16 tokens, then the others as budget allows
  }
  h.drain();
  CHECK(h.outputs[1].size() == 2);
  CHECK(h.outputs[3].size() == 2);
}

TEST_CASE("An urgent prompt goes on first through all its chunks, not cut to the streams' latency target", "[scheduler][policy][priority]") {
  const bool on = GENERATE(false, true);
  SchedulerConfig c = config(SchedulePolicy::fcfs, 4, 2048, 32);
  c.itl_target_seconds = 0.010;
  if (on) c = with_priorities(c);
  double clock = 0;
  c.clock = [&clock] { return clock; };
  Harness h(2048, 1, c);
  // Every token of a step costs 1 ms, prompt or decoded: a mixed step
  // beside one stream fits 9 prompt tokens in the 10 ms target, raised to
  // the budget's floor of 16; the chunk size is 32.
  h.worker.on_run = [&clock](const ForwardBatch& b) {
    for (const auto& r : b.reqs) clock += 0.001 * r.extend_len;
  };
  h.submit(1, range(100, 10), 60, 0);  // a stream
  CHECK(h.step() == B{1});
  CHECK(h.step() == B{1});
  h.submit(2, range(200, 150), 1, 0);  // a long prompt, part way through when 3 comes
  std::vector<int32_t> before;
  for (int i = 0; i < 6; ++i) {
    CHECK(h.step() == B{2, 1});
    before.push_back(h.last_extends().front());
  }
  INFO("2's chunks " << Catch::Detail::stringify(before));
  CHECK(before.back() == 16);
  h.submit(3, range(400, 40), 1, 50);
  if (on) {
    // Admitted at once, then every chunk of it before 2 goes on: 32 + 8
    // tokens, the chunk size and not the streams' target.
    std::vector<int32_t> chunks;
    for (int i = 0; i < 2; ++i) {
      CHECK(h.step() == B{3, 1});
      chunks.push_back(h.last_extends().front());
    }
    CHECK(chunks == std::vector<int32_t>{32, 8});
    CHECK(h.step() == B{2, 1});
  } else {
    // Fcfs: 3 waits for 2's prompt, cut to the target.
    CHECK(h.step() == B{2, 1});
    CHECK(h.last_extends().front() == 16);
  }
  h.drain();
  CHECK(h.outputs[2].size() == 1);
  CHECK(h.outputs[3].size() == 1);
}

TEST_CASE("Priority eviction keeps an urgent request's prefix through a flood of less urgent ones, which lru does not", "[scheduler][policy][priority]") {
  const EvictionPolicy eviction = GENERATE(EvictionPolicy::lru, EvictionPolicy::priority);
  Harness h(256, 1, with_priorities(config(SchedulePolicy::lpm, 4, 2048, 0)), eviction);
  const Ids urgent = range(1000, 64);
  h.submit(1, urgent, 1, 50);
  h.drain();
  // Six less urgent prompts of 64 tokens, one after another: 390 tokens to
  // cache in a pool of 256, so older prefixes must go.
  for (uint64_t k = 0; k < 6; ++k) {
    h.submit(10 + k, range(2000 + 100 * static_cast<int32_t>(k), 64), 1, 0);
    h.drain();
  }
  // The urgent prompt again (a new id, its prompt known to the worker).
  h.submit(2, urgent, 1, 50);
  CHECK(h.step() == B{2});
  const int32_t computed = h.last_extends()[0];
  if (eviction == EvictionPolicy::priority) {
    CHECK(computed == 1);  // all but the last token was still cached
  } else {
    CHECK(computed == 64);  // the oldest prefix went first
  }
  h.drain();
}

TEST_CASE("lpm's starvation bound: a request that N later arrivals overtook goes next", "[scheduler][policy][priority]") {
  const int32_t bound = GENERATE(0, 3);
  INFO("max_overtakes " << bound);
  SchedulerConfig c = config(SchedulePolicy::lpm, 1, 2048, 0);
  c.queue.max_overtakes = bound;
  Harness h(4096, 1, c);
  Ids shared = range(1, 40);
  h.submit(100, shared, 1);
  CHECK(h.step() == B{100});
  h.submit(7, range(900, 12), 1);  // matches nothing in the cache
  // A stream of better-matching requests, one more arriving every step.
  int admitted_at = -1;
  for (int s = 0; s < 12; ++s) {
    Ids p = shared;
    p.push_back(1000 + s);
    h.submit(static_cast<uint64_t>(200 + s), p, 1);
    const B batch = h.step();
    if (batch == B{7}) {
      admitted_at = s;
      break;
    }
  }
  if (bound == 0) {
    CHECK(admitted_at == -1);  // passed over every time
  } else {
    CHECK(admitted_at == bound);  // overtaken `bound` times, then first
  }
  h.drain();
}

TEST_CASE("Under a flood from one tenant, another takes its weight's share of the places as they free up", "[scheduler][policy][tenants]") {
  // Tenant 1 floods 20 requests into 4 places; tenant 2 sends 8 once the
  // flood runs. weights: none (no fair share: tenant 2 waits for the whole
  // flood), equal, or 1:3; the last 1:3 carried by the requests
  // themselves, as a cluster's head sends them to a node without the table.
  const std::vector<double> weights = GENERATE(std::vector<double>{}, std::vector<double>{1, 1, 1},
                                               std::vector<double>{1, 1, 3}, std::vector<double>{0, 1, 3});
  const bool carried = !weights.empty() && weights[0] == 0;
  INFO("weights " << weights.size() << (carried ? ", carried by the requests" : ""));
  SchedulerConfig c = config(SchedulePolicy::fcfs, 4, 4096, 0);
  if (!carried) c.queue.tenant_weights = weights;
  Harness h(4096, 1, c);
  const double w1 = carried ? weights[1] : 0, w2 = carried ? weights[2] : 0;
  for (uint64_t i = 1; i <= 20; ++i) {
    REQUIRE_FALSE(h.try_submit(i, range(static_cast<int32_t>(50 * i), 6), 4, 0, 1, w1));
  }
  CHECK(h.step() == B{1, 2, 3, 4});
  for (uint64_t i = 101; i <= 108; ++i) {
    REQUIRE_FALSE(h.try_submit(i, range(static_cast<int32_t>(50 * i), 6), 4, 0, 2, w2));
  }
  // The first batch with new admissions after the flood's first four end.
  std::vector<uint64_t> batch;
  for (int guard = 0; guard < 20; ++guard) {
    batch = h.step();
    if (std::find(batch.begin(), batch.end(), uint64_t{1}) == batch.end()) break;
  }
  const auto second = std::count_if(batch.begin(), batch.end(), [](uint64_t id) { return id > 100; });
  CHECK(batch.size() == 4);
  if (weights.empty()) {
    CHECK(second == 0);  // first come, first served: the flood first
  } else if (weights[2] == 1) {
    CHECK(second == 2);
  } else {
    CHECK(second == 3);
  }
  // Tenant 2's last request ends well before the flood's when the share holds.
  h.drain();
  // A weight out of range is refused, naming it.
  auto bad = h.try_submit(200, range(9000, 6), 4, 0, 3, 1001);
  REQUIRE(bad);
  CHECK(bad->find("tenant's weight") != std::string::npos);
  CHECK(h.outputs[108].size() == 4);
  CHECK(h.outputs[20].size() == 4);
}

TEST_CASE("With tenant preemption, a tenant below its share takes places from a running flood at once, never a more urgent one's", "[scheduler][policy][tenants]") {
  const bool on = GENERATE(false, true);
  const bool urgent_flood = GENERATE(false, true);
  INFO((on ? "tenant preemption on" : "off") << (urgent_flood ? ", the flood more urgent" : ""));
  SchedulerConfig c = config(SchedulePolicy::fcfs, 4, 4096, 0);
  c.queue.tenant_weights = {1, 1, 1};
  c.queue.share_preemption = on;
  if (urgent_flood) c = with_priorities(c);
  Harness h(4096, 1, c);
  // Tenant 1: four long requests, every place; tenant 2 two short ones.
  for (uint64_t i = 1; i <= 4; ++i) {
    REQUIRE_FALSE(h.try_submit(i, range(static_cast<int32_t>(50 * i), 6), 30, urgent_flood ? 5 : 0, 1));
  }
  CHECK(h.step() == B{1, 2, 3, 4});
  REQUIRE_FALSE(h.try_submit(101, range(5000, 6), 4, 0, 2));
  REQUIRE_FALSE(h.try_submit(102, range(5100, 6), 4, 0, 2));
  int first_in = -1, both_in = -1;
  std::set<uint64_t> seen;
  for (int s = 0; s < 40 && both_in < 0; ++s) {
    for (uint64_t id : h.step()) seen.insert(id);
    if (first_in < 0 && (seen.count(101) || seen.count(102))) first_in = s;
    if (seen.count(101) && seen.count(102)) both_in = s;
  }
  if (on && !urgent_flood) {
    // One place a step, the flood's newest first: tenant 2 runs at its
    // share (2 of 4) two steps after it came.
    CHECK(first_in == 0);
    CHECK(both_in == 1);
    CHECK(h.scheduler.stats().share_preemptions == 2);
  } else {
    // Its turn comes when the flood's first requests end (30 tokens).
    CHECK(first_in >= 28);
    CHECK(h.scheduler.stats().share_preemptions == 0);
  }
  h.drain();
  // Places never trade back: no more preemptions after tenant 2 had its share.
  if (on && !urgent_flood) CHECK(h.scheduler.stats().share_preemptions == 2);
  for (uint64_t i = 1; i <= 4; ++i) CHECK(h.outputs[i].size() == 30);
  CHECK(h.outputs[101].size() == 4);
  CHECK(h.outputs[102].size() == 4);
}

namespace {

// What the running requests' KV holds: each its rows and the one token it
// computes next, never more than a quota they are all held to.
int64_t rows_and_next(const Scheduler& s) {
  int64_t n = 0;
  for (const RequestKv* k : s.running_kv()) n += static_cast<int64_t>(k->tokens.size()) + 1;
  return n;
}

}  // namespace

TEST_CASE("A tenant's KV quota bounds what its running requests hold, and other tenants pass its waiting ones", "[scheduler][policy][tenants]") {
  const bool carried = GENERATE(false, true);
  INFO((carried ? "quota carried by the requests" : "quota in the engine's table"));
  SchedulerConfig c = config(SchedulePolicy::fcfs, 8, 4096, 0);
  if (!carried) c.queue.tenant_kv_quotas = {0, 40, 0};
  Harness h(4096, 1, c);
  const int64_t quota = carried ? 40 : 0;
  // Tenant 1: six requests claiming 10 + 1 tokens each at admission (the
  // prompt and its first token), growing a token a step to 15; tenant 2,
  // after them, two that end at their prefill.
  for (uint64_t i = 1; i <= 6; ++i) {
    REQUIRE_FALSE(h.try_submit(i, range(static_cast<int32_t>(50 * i), 10), 5, 0, 1, 0, quota));
  }
  for (uint64_t i = 101; i <= 102; ++i) {
    REQUIRE_FALSE(h.try_submit(i, range(static_cast<int32_t>(50 * i), 10), 1, 0, 2, 0, 0));
  }
  // Three of tenant 1 fit in 40 (33); the fourth would not, nor do the
  // ones after it; tenant 2's go past them.
  CHECK(h.step() == B{1, 2, 3, 101, 102});
  CHECK(rows_and_next(h.scheduler) <= 40);
  // At 14 tokens each (after the third step) the three claim 42: the
  // newest goes back to wait, its output kept, and the fourth does not
  // pass it.
  std::vector<std::vector<uint64_t>> batches;
  for (int guard = 0; guard < 60 && !h.scheduler.idle(); ++guard) {
    batches.push_back(h.step());
    INFO("step " << batches.size());
    REQUIRE(rows_and_next(h.scheduler) <= 40);
  }
  REQUIRE(h.scheduler.idle());
  CHECK(h.kv.check_idle() == "");
  CHECK(batches.at(0) == B{1, 2, 3});
  CHECK(batches.at(1) == B{1, 2, 3});
  CHECK(batches.at(2) == B{1, 2});  // 3 went back at 42
  CHECK(batches.at(3) == B{1, 2});  // and waits for them: 28 + 14 > 40
  CHECK(batches.at(4) == B{3, 4, 5});
  CHECK(h.scheduler.stats().kv_quota_retractions >= 1);
  CHECK(h.scheduler.stats().kv_quota_finishes == 0);
  for (uint64_t i = 1; i <= 6; ++i) {
    INFO("request " << i);
    CHECK(h.outputs[i] == Ids(5, kToken));
    CHECK(h.finish[i] == FinishReason::length);
  }
  // Never more than three of tenant 1 at once.
  for (const auto& b : batches) CHECK(std::count_if(b.begin(), b.end(), [](uint64_t id) { return id < 100; }) <= 3);
}

TEST_CASE("A request that alone fills its tenant's KV quota ends there as if at max_tokens, drafts included", "[scheduler][policy][tenants]") {
  const bool speculate = GENERATE(false, true);
  // Prompts of three lengths: whichever steps DraftCost spends on measuring
  // plain decoding, some verify meets the quota with drafts to trim.
  const int32_t prompt_len = GENERATE(10, 11, 12);
  INFO((speculate ? "n-gram speculation" : "plain decoding") << ", a prompt of " << prompt_len);
  SchedulerConfig c = config(SchedulePolicy::fcfs, 8, 4096, 0);
  c.queue.tenant_kv_quotas = {0, 30};
  double clock = 0;
  if (speculate) {
    // Every sampled token is kToken, and so is the prompt: every draft is kept.
    c.speculative.algorithm = SpeculativeAlgorithm::ngram;
    c.speculative.num_draft_tokens = 5;
    c.speculative.ngram_min = 1;
    c.clock = [&clock] { return clock; };
  }
  Harness h(4096, 1, c);
  h.worker.on_run = [&clock](const ForwardBatch&) { clock += 0.005; };
  REQUIRE_FALSE(h.try_submit(1, Ids(static_cast<size_t>(prompt_len), kToken), 100, 0, 1));
  for (int guard = 0; guard < 60 && !h.scheduler.idle(); ++guard) {
    h.step();
    REQUIRE(rows_and_next(h.scheduler) <= 30);
  }
  REQUIRE(h.scheduler.idle());
  CHECK(h.kv.check_idle() == "");
  // The prompt and output fill the quota exactly.
  CHECK(h.outputs[1].size() == static_cast<size_t>(30 - prompt_len));
  CHECK(h.finish[1] == FinishReason::length);
  CHECK(h.scheduler.stats().kv_quota_finishes == 1);
  if (speculate) CHECK(h.scheduler.stats().spec_accepted > 0);

  // A prompt the quota cannot hold with a token more is refused, naming it.
  const Ids long_prompt = range(500, 30);
  auto refused = h.try_submit(2, long_prompt, 4, 0, 1);
  REQUIRE(refused);
  CHECK(refused->find("KV quota of 30 tokens") != std::string::npos);
  // So is a quota out of range carried by a request.
  auto bad = h.try_submit(3, range(600, 4), 4, 0, 3, 0, -1);
  REQUIRE(bad);
  CHECK(bad->find("KV quota must be in") != std::string::npos);
  // Tenant 0 and tenants without a quota are not held.
  REQUIRE_FALSE(h.try_submit(4, long_prompt, 4));
  h.drain();
  CHECK(h.outputs[4].size() == 4);
}

TEST_CASE("A full queue refuses new requests as overloaded, and one that waits past the queue timeout fails as timed out", "[scheduler][policy][priority]") {
  SECTION("max_queued") {
    SchedulerConfig c = config(SchedulePolicy::fcfs, 1, 2048, 0);
    c.queue.max_queued = 2;
    Harness h(1024, 1, c);
    h.submit(1, range(100, 10), 5);
    CHECK(h.step() == B{1});  // running: the queue is empty again
    h.submit(2, range(200, 10), 1);
    h.submit(3, range(300, 10), 1);
    auto refused = h.try_submit(4, range(400, 10), 1);
    REQUIRE(refused);
    CHECK(refused->find("queue is full") != std::string::npos);
    CHECK(h.scheduler.stats().queue_rejections == 1);
    h.drain();
    h.submit(4, range(400, 10), 1);  // room again
    h.drain();
    CHECK(h.outputs[4] == Ids(1, kToken));
  }
  SECTION("queue timeout") {
    double clock = 0;
    SchedulerConfig c = config(SchedulePolicy::fcfs, 1, 2048, 0);
    c.queue.timeout_seconds = 1.0;
    c.clock = [&clock] { return clock; };
    Harness h(1024, 1, c);
    h.submit(1, range(100, 10), 6);
    CHECK(h.step() == B{1});
    h.submit(2, range(200, 10), 1);
    clock = 0.9;
    CHECK(h.step() == B{1});
    CHECK(h.finish.count(2) == 0);
    clock = 1.1;
    CHECK(h.step() == B{1});
    CHECK(h.finish[2] == FinishReason::error);
    CHECK(h.kinds[2] == ErrorKind::timeout);
    CHECK(h.outputs.count(2) == 0);
    CHECK(h.scheduler.stats().queue_timeouts == 1);
    // A running request never times out, however long it takes.
    clock = 100;
    h.drain();
    CHECK(h.outputs[1] == Ids(6, kToken));
  }
}

TEST_CASE("With an inter-token latency target, a mixed step prefills what the measured costs fit in it", "[scheduler][policy][priority]") {
  const double target = GENERATE(0.0, 0.050, 0.200);
  INFO("itl target " << target << " s");
  SchedulerConfig c = config(SchedulePolicy::fcfs, 8, 4096, 512);
  c.max_context = 4096;
  c.itl_target_seconds = target;
  double clock = 0;
  c.clock = [&clock] { return clock; };
  Harness h(8192, 1, c);
  // Every token of a step costs 1 ms, prompt or decoded.
  h.worker.on_run = [&clock](const ForwardBatch& b) {
    for (const auto& r : b.reqs) clock += 0.001 * r.extend_len;
  };
  h.submit(1, range(100, 10), 300);
  h.submit(2, range(200, 10), 300);
  CHECK(h.step() == B{1, 2});
  for (int i = 0; i < 3; ++i) CHECK(h.step() == B{1, 2});  // decode-only steps: the cost per row
  h.submit(3, range(1000, 2000), 1);
  std::vector<int32_t> chunks;
  for (int i = 0; i < 8 && !h.finish.count(3); ++i) {
    const B batch = h.step();
    INFO("mixed step " << i << ": " << Catch::Detail::stringify(batch));
    REQUIRE(batch.size() == 3);
    REQUIRE(batch.front() == 3);
    chunks.push_back(h.last_extends().front());
  }
  if (h.finish.count(3)) chunks.pop_back();  // the prompt's remainder
  INFO("chunks " << Catch::Detail::stringify(chunks));
  // The first mixed step prefills the probe's 64 tokens at most; from the
  // second the prompt's cost per token is measured.
  REQUIRE(chunks.size() >= 3);
  for (size_t i = 1; i < chunks.size(); ++i) {
    if (target == 0) {
      CHECK(chunks[i] == 512);  // one chunk in all, whatever it costs
    } else {
      // (target - 2 decode rows' 2 ms) at 1 ms a token, give or take rounding.
      const auto want = static_cast<int32_t>(target * 1000) - 2;
      CHECK(chunks[i] >= want - 2);
      CHECK(chunks[i] <= want);
    }
  }
  h.drain();
}

namespace {

// A target model whose next-token distribution is known: the same logits
// at every position, each row sampled by the real sampler at its row's seed
// counter, as a model runner samples.
struct FixedDistributionWorker final : Worker {
  std::vector<float> logits;
  std::function<void()> on_run;
  std::vector<SampleResult> run(const ForwardBatch&, std::span<const SampleRequest> sampling) override {
    if (on_run) on_run();
    std::vector<SampleResult> out;
    for (const auto& s : sampling) out.push_back(sample_token(logits, s.params, s.prompt, s.output, s.step, 0, s.allowed));
    return out;
  }
};

}  // namespace

TEST_CASE("Speculative sampling keeps the target's distribution: a chi-square test over 8,000 tokens", "[scheduler][speculative]") {
  const std::vector<double> p{0.30, 0.05, 0.10, 0.25, 0.05, 0.10, 0.10, 0.05};
  FixedDistributionWorker worker;
  for (double q : p) worker.logits.push_back(static_cast<float>(std::log(q)));
  auto run = [&](bool speculate) {
    SchedulerConfig c = config(SchedulePolicy::fcfs, 16, 4096, 0);
    if (speculate) {
      c.speculative.algorithm = SpeculativeAlgorithm::ngram;
      c.speculative.num_draft_tokens = 5;
      c.speculative.ngram_min = 1;  // a draft at every step: what followed the last token in the prompt
    }
    // Steps of 5 ms whatever their rows: drafts cost nothing measurable,
    // so DraftCost keeps them all and every step verifies.
    double clock = 0;
    c.clock = [&clock] { return clock; };
    worker.on_run = [&clock] { clock += 0.005; };
    LocalKvService kv({4096, 1, 20, c.max_context, false});
    Scheduler s(c, kv, worker);
    Ids prompt;
    for (int rep = 0; rep < 4; ++rep) {
      for (int32_t t = 0; t < 8; ++t) prompt.push_back(t);
    }
    for (uint64_t id = 0; id < 400; ++id) {
      Request r;
      r.id = id;
      r.prompt = prompt;
      r.sampling.temperature = 1.0f;
      r.sampling.seed = id;
      r.sampling.has_seed = true;
      r.stop.max_new_tokens = 21;
      REQUIRE_FALSE(s.submit(std::move(r)));
    }
    std::map<uint64_t, Ids> out;
    std::set<uint64_t> done;
    while (!s.idle()) {
      for (const auto& e : s.step()) {
        if (e.token >= 0) out[e.id].push_back(e.token);
        if (e.finish != FinishReason::none) done.insert(e.id);
      }
      REQUIRE(kv.check_running(s.running_kv()).empty());
      // Every running request's KV covers exactly its prompt and the output
      // it kept but the newest token: no row of a rejected draft is left.
      std::set<Ids> kept;
      for (const auto& [id, tokens] : out) {
        if (done.count(id)) continue;
        Ids covered = prompt;
        covered.insert(covered.end(), tokens.begin(), tokens.end() - 1);
        kept.insert(std::move(covered));
      }
      for (const RequestKv* k : s.running_kv()) REQUIRE(kept.count(k->tokens) == 1);
    }
    REQUIRE(kv.check_idle().empty());
    return std::make_pair(out, s.stats());
  };
  auto [plain, plain_stats] = run(false);
  auto [fast, stats] = run(true);
  CHECK(fast == plain);  // the same tokens, not only the same distribution
  // Every token after the first came from a verify step (the first is the
  // prefill's). Their frequencies against p:
  std::vector<double> seen(p.size(), 0.0);
  double n = 0;
  for (const auto& [id, tokens] : fast) {
    REQUIRE(tokens.size() == 21);
    for (size_t i = 1; i < tokens.size(); ++i, ++n) seen[static_cast<size_t>(tokens[i])] += 1;
  }
  double chi2 = 0;
  for (size_t t = 0; t < p.size(); ++t) chi2 += (seen[t] - n * p[t]) * (seen[t] - n * p[t]) / (n * p[t]);
  INFO("chi-square " << chi2 << " over " << n << " tokens; drafted " << stats.spec_drafted << ", kept "
                     << stats.spec_accepted << " in " << stats.spec_verifies() << " verifies");
  // 7 degrees of freedom: 29.9 is exceeded by chance once in 10,000 runs.
  // Accepting every draft would give drafts' frequencies (what follows a
  // token in the prompt, roughly uniform here): a chi-square in the
  // thousands.
  CHECK(chi2 < 29.9);
  CHECK(n == 8000);
  CHECK(stats.spec_verifies() > 400);
  CHECK(stats.spec_accepted > 100);
  CHECK(stats.spec_accepted < stats.spec_drafted / 2);
  CHECK(stats.decode_steps < plain_stats.decode_steps);
}
