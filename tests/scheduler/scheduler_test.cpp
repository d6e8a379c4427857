// Continuous batching on the real model, in-process (LocalKvService +
// LocalWorker): concurrency with a shared prefix, retraction under memory
// pressure, chunked prefill, aborts — outputs equal solo runs, no KV leaks.

#include "scheduler/scheduler.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <limits>
#include <tuple>

#include "grammar/token_bytes.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/draft_model.hpp"
#include "model/gguf_file.hpp"
#include "model/host_executor.hpp"
#include "model/model_fingerprint.hpp"
#include "tokenizer/chat_template.hpp"
#include "tests/model/lora_file.hpp"
#include "tests/model/tiny_llama_gguf.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

const LlamaWeights& weights() {
  static LlamaWeights w = load_llama_weights(default_model_path());
  return w;
}

const Tokenizer& tokenizer() {
  static Tokenizer t = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  return t;
}

// The KV cache's tiers below the pool, blocks of 16 tokens: a disk tier with
// a disk_dir, a host tier with host_bytes.
struct Tiers {
  std::string disk_dir = "";
  int64_t host_bytes = 0;
  KvHostDtype dtype = KvHostDtype::same;
  HiCacheWritePolicy policy = HiCacheWritePolicy::write_through;
};

struct Engine {
  KvStoreConfig kv_config;
  LocalKvService kv;
  ModelRunner runner;
  LocalWorker worker;
  std::shared_ptr<KvDiskStore> disk;
  std::shared_ptr<KvHostStore> host;
  std::shared_ptr<KvTiers> tiers;
  Scheduler scheduler;

  // draft: the worker's draft model, for SpeculativeAlgorithm::draft.
  Engine(int64_t pool_tokens, int32_t page, SchedulerConfig sc, int32_t max_requests = 40, const Tiers& tiers = {},
         const LlamaWeights* draft = nullptr)
      : kv_config{pool_tokens, page, max_requests, sc.max_context, false},
        kv(kv_config),
        runner(LlamaWeights(weights()), std::make_unique<cpu::CpuBackend>(2), runner_config(max_requests, sc)),
        worker(runner),
        scheduler(with_tiers(sc, tiers), kv, worker) {
    if (draft) {
      runner.attach_draft(std::make_unique<DraftModel>(std::make_unique<ModelRunner>(
          LlamaWeights(*draft), std::make_unique<cpu::CpuBackend>(2), runner_config(max_requests, sc))));
    }
    // The default model's packed matrices, kept for the engines after this
    // one (a runner packs them once for all the runners alive beside it):
    // most cases make several engines, one after another.
    static const std::shared_ptr<PreparedWeights> packed = prepared_weights_of(weights());
  }

  ModelRunnerConfig runner_config(int32_t max_requests, const SchedulerConfig& sc) const {
    return {.kv_pool_rows = kv.store().allocator().pool_rows(), .max_requests = max_requests,
            .max_context = sc.max_context};
  }

  SchedulerConfig with_tiers(SchedulerConfig sc, const Tiers& t) {
    KvBlockLayout layout{"test model", runner.kv_dtype(), runner.model_config().n_layers, runner.kv_token_bytes(), 16};
    if (!t.disk_dir.empty()) disk = std::make_shared<KvDiskStore>(t.disk_dir, layout, int64_t{1} << 30);
    if (t.host_bytes > 0) host = std::make_shared<KvHostStore>(layout, t.host_bytes, t.dtype);
    if (disk || host) sc.tiers = tiers = std::make_shared<KvTiers>(host, disk, t.policy);
    return sc;
  }

  // Steps until idle; returns each request's tokens and finish reason.
  std::map<uint64_t, std::pair<Ids, FinishReason>> drain(const std::function<void(int)>& each_step = {}) {
    std::map<uint64_t, std::pair<Ids, FinishReason>> out;
    for (int s = 0; !scheduler.idle(); ++s) {
      if (each_step) each_step(s);
      for (const auto& e : scheduler.step()) {
        if (e.token >= 0) out[e.id].first.push_back(e.token);
        if (e.finish != FinishReason::none) out[e.id].second = e.finish;
      }
    }
    // And the tiers' stores, which finish on their own thread, so that a
    // test reads the stores' figures at rest.
    if (tiers) tiers->drain();
    return out;
  }
};

SchedulerConfig config(int32_t chunk = 0) {
  SchedulerConfig c;
  c.max_running_requests = 32;
  c.max_prefill_tokens = 1024;
  c.chunked_prefill_size = chunk;
  c.max_context = 512;
  c.eos_id = tokenizer().eos_id();
  return c;
}

// 32 chat prompts that share a long system prompt.
std::vector<Ids> shared_prefix_prompts(int n) {
  std::string system =
      "You are a meticulous assistant for a library. Answer in one short sentence. Be accurate, polite and "
      "concise; never invent facts; if unsure, say so. Prefer plain words over jargon, and give numbers when "
      "they help.";
  ChatTemplate tpl = ChatTemplate::for_model(tokenizer(), nullptr);
  std::vector<Ids> prompts;
  const char* topics[] = {"the sun", "rivers", "owls", "bread", "glass", "chess", "rain", "copper"};
  for (int i = 0; i < n; ++i) {
    std::vector<ChatMessage> m{{"system", system},
                               {"user", std::string("Tell me one fact about ") + topics[i % 8] + " (#" + std::to_string(i) + ")."}};
    prompts.push_back(tokenizer().encode(tpl.render(m), false, true));
  }
  return prompts;
}

Request make(uint64_t id, const Ids& prompt, int max_new) {
  Request r;
  r.id = id;
  r.prompt = prompt;
  r.sampling.temperature = 0;
  r.stop.max_new_tokens = max_new;
  return r;
}

std::map<uint64_t, Ids> solo_outputs(const std::vector<Ids>& prompts, int max_new) {
  static std::map<std::pair<Ids, int>, Ids> memo;
  Engine e(4096, 1, config());
  std::map<uint64_t, Ids> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto key = std::make_pair(prompts[i], max_new);
    if (!memo.count(key)) {
      REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], max_new)));
      memo[key] = e.drain()[i].first;
    }
    out[i] = memo[key];
  }
  return out;
}

void require_no_leak(Engine& e) {
  CHECK(e.kv.check_idle().empty());
  e.kv.flush_cache();
  KvUsage u = e.kv.usage();
  CHECK(u.free == u.capacity);
  CHECK(u.free_slots == e.kv_config.max_requests);
  CHECK(e.kv.check_idle().empty());
}

}  // namespace

TEST_CASE("32 concurrent requests sharing a system prompt each get their solo greedy output", "[scheduler]") {
  auto prompts = shared_prefix_prompts(32);
  auto solo = solo_outputs(prompts, 12);
  int32_t chunk = GENERATE(0, 48);
  INFO("chunked_prefill_size " << chunk);
  Engine e(8192, 1, config(chunk));
  for (size_t i = 0; i < prompts.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], 12)));
  auto got = e.drain();
  REQUIRE(got.size() == prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(got[i].first == solo[i]);
    CHECK((got[i].second == FinishReason::length || got[i].second == FinishReason::stop));
  }
  const auto& st = e.scheduler.stats();
  INFO("cache hit rate " << st.cache_hit_rate());
  CHECK(st.cache_hit_rate() > 0.0);
  CHECK(st.decode_steps < 32 * 12);  // decoding really was batched
  require_no_leak(e);
}

TEST_CASE("A pool too small for everyone forces retraction and outputs stay identical", "[scheduler]") {
  auto prompts = shared_prefix_prompts(8);
  auto solo = solo_outputs(prompts, 24);
  int32_t page = GENERATE(1, 16);
  INFO("page size " << page);
  // Each request needs ~100-odd rows; 8 of them cannot all fit in 512.
  Engine e(512, page, config());
  for (size_t i = 0; i < prompts.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], 24)));
  auto got = e.drain();
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(got[i].first == solo[i]);
  }
  CHECK(e.scheduler.stats().retractions > 0);
  require_no_leak(e);
}

TEST_CASE("Urgent requests take less urgent ones' places and every output stays identical", "[scheduler][priority]") {
  auto prompts = shared_prefix_prompts(12);
  auto solo = solo_outputs(prompts, 16);
  // Places only, and places and KV rows (four requests need ~350 rows).
  const int64_t pool = GENERATE(8192, 300);
  INFO("pool " << pool);
  // Eight requests of priority 0 start; four of priority 100 arrive at step
  // 3. Returns each urgent request's finishing step.
  auto run = [&](bool priorities) {
    SchedulerConfig c = config(32);
    c.max_running_requests = 4;
    c.queue.priorities = priorities;
    Engine e(pool, 1, c);
    for (size_t i = 0; i < 8; ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], 16)));
    std::map<uint64_t, Ids> out;
    std::map<uint64_t, int> done_at;
    for (int step = 0; !e.scheduler.idle(); ++step) {
      if (step == 3) {
        for (size_t i = 8; i < 12; ++i) {
          Request r = make(i, prompts[i], 16);
          r.priority = 100;
          REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
        }
      }
      for (const auto& ev : e.scheduler.step()) {
        if (ev.token >= 0) out[ev.id].push_back(ev.token);
        if (ev.finish != FinishReason::none) done_at[ev.id] = step;
      }
      REQUIRE(e.kv.check_running(e.scheduler.running_kv()).empty());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("request " << i << (priorities ? ", priorities on" : ", priorities off"));
      CHECK(out[i] == solo[i]);
    }
    if (priorities) CHECK(e.scheduler.stats().preemptions > 0);
    if (!priorities) CHECK(e.scheduler.stats().preemptions == 0);
    require_no_leak(e);
    int last = 0;
    for (size_t i = 8; i < 12; ++i) last = std::max(last, done_at[i]);
    return last;
  };
  const int with = run(true), without = run(false);
  INFO("the last urgent request finished at step " << with << " with priorities, " << without << " without");
  CHECK(with < without);
}

TEST_CASE("Aborting 100 requests at random points leaks nothing", "[scheduler]") {
  Engine e(1024, 4, config(32));
  std::mt19937 rng(5);
  auto prompts = shared_prefix_prompts(8);
  for (uint64_t i = 0; i < 100; ++i) {
    Ids p = prompts[i % 8];
    p.resize(20 + rng() % (p.size() - 20));  // different lengths, shared prefixes
    REQUIRE_FALSE(e.scheduler.submit(make(i, p, 1 + static_cast<int>(rng() % 6))));
  }
  std::vector<uint64_t> order(100);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  size_t next = 0;
  auto got = e.drain([&](int s) {
    // Every lock belongs to a running request at every step, so a lock an
    // abort failed to release is caught at the step it happened.
    auto running = e.scheduler.running_kv();
    INFO("before step " << s);
    REQUIRE(e.kv.check_running(running) == "");
    for (int k = 0; k < 8 && next < order.size(); ++k) e.scheduler.abort(order[next++]);
  });
  int aborted = 0;
  for (auto& [id, r] : got) aborted += r.second == FinishReason::abort;
  CHECK(aborted > 30);
  CHECK(got.size() == 100);  // every request reported its end
  require_no_leak(e);
}

TEST_CASE("Requests that can never run are refused with a reason", "[scheduler]") {
  Engine e(256, 1, config());
  CHECK(e.scheduler.submit(make(1, {}, 4)));
  auto long_prompt = Ids(600, 42);
  auto err = e.scheduler.submit(make(2, long_prompt, 4));
  REQUIRE(err);
  CHECK(err->find("context") != std::string::npos);
  CHECK(e.scheduler.submit(make(3, {1, 2}, 0)));
  Request bad = make(4, {1, 2}, 4);
  bad.sampling.top_p = 0;
  CHECK(e.scheduler.submit(bad));
  // Token ids and top_logprobs are checked here, the one place every route
  // (HTTP, the Engine API, a head's node) reaches; without the vocabulary
  // size, only the worker's own check would catch an id.
  SchedulerConfig sized = config();
  sized.vocab_size = weights().config.vocab_size;
  Engine checked(256, 1, sized);
  const std::string vocab = std::to_string(sized.vocab_size);
  Request beyond = make(7, {1, sized.vocab_size}, 4);
  REQUIRE(checked.scheduler.submit(beyond));
  CHECK(*checked.scheduler.submit(beyond) ==
        "the prompt holds token id " + vocab + ", outside the vocabulary of " + vocab);
  beyond.prompt = {1, -1};
  CHECK(checked.scheduler.submit(beyond));
  Request biased = make(8, {1, 2}, 4);
  biased.sampling.logit_bias = {{sized.vocab_size + 5, 1.0f}};
  CHECK(checked.scheduler.submit(biased));
  Request alternatives = make(9, {1, 2}, 4);
  alternatives.top_logprobs = 21;
  CHECK(*checked.scheduler.submit(alternatives) == "top_logprobs must be in [0, 20]");
  alternatives.top_logprobs = 20;
  CHECK_FALSE(checked.scheduler.submit(alternatives));
  checked.drain();
  require_no_leak(checked);
  REQUIRE_FALSE(e.scheduler.submit(make(5, {1, 2}, 4)));
  CHECK(e.scheduler.submit(make(5, {1, 2}, 4)));  // id in use
  // A prompt bigger than the whole pool ends with an error, not a hang.
  REQUIRE_FALSE(e.scheduler.submit(make(6, Ids(300, 7), 4)));
  auto got = e.drain();
  CHECK(got[6].second == FinishReason::error);
  CHECK(got[5].first.size() == 4);
  require_no_leak(e);
}

namespace {
// A worker whose forward pass fails, as a dead device or node would.
struct FailingWorker final : Worker {
  bool lost = false;  // throw WorkerLost (gone for good) instead of a failed step
  std::vector<SampleResult> run(const ForwardBatch&, std::span<const SampleRequest>) override {
    if (lost) throw WorkerLost("device lost");
    throw std::runtime_error("device lost");
  }
};
}  // namespace

TEST_CASE("A worker that fails every step fails each request alone, and a lost one fails all, leaking nothing", "[scheduler]") {
  LocalKvService kv({512, 1, 8, 128, false});
  FailingWorker worker;
  Scheduler s(config(), kv, worker);
  s.submit(make(1, {1, 2, 3}, 4));
  s.submit(make(2, {1, 2, 4}, 4));
  std::vector<TokenEvent> events;
  for (int i = 0; i < 10 && !s.idle(); ++i) {
    auto e = s.step();
    events.insert(events.end(), e.begin(), e.end());
  }
  REQUIRE(events.size() == 2);
  for (const auto& e : events) {
    CHECK(e.finish == FinishReason::error);
    CHECK(e.error.find("device lost") != std::string::npos);
    CHECK(e.error.find("failed alone") != std::string::npos);
  }
  CHECK(s.stats().failed_steps == 3);  // both together, then each alone
  CHECK(s.stats().poisoned == 2);
  CHECK(s.idle());
  CHECK(kv.check_idle().empty());
  // Gone for good: the step throws, and the caller fails everything at once.
  worker.lost = true;
  s.submit(make(3, {1, 2, 3}, 4));
  s.submit(make(4, {1, 2, 4}, 4));
  CHECK_THROWS_AS(s.step(), WorkerLost);
  events = s.fail_all("engine failure: device lost", ErrorKind::unavailable);
  REQUIRE(events.size() == 2);
  for (const auto& e : events) CHECK(e.error_kind == ErrorKind::unavailable);
  CHECK(s.idle());
  CHECK(kv.check_idle().empty());
  kv.flush_cache();
  CHECK(kv.usage().free == kv.usage().capacity);
}

TEST_CASE("Chunked prefill at page 16 with 50-token chunks gives solo outputs and an abort between chunks frees all", "[scheduler]") {
  // 50 is not a multiple of 16: every chunk boundary leaves a partial page
  // that the next chunk continues, and cache_unfinished shares only the
  // whole pages in between.
  auto prompts = shared_prefix_prompts(6);
  for (const auto& p : prompts) REQUIRE(p.size() > 50);  // at least two chunks
  auto solo = solo_outputs(prompts, 8);
  SECTION("outputs equal solo runs, locks tied to running requests after every step") {
    Engine e(2048, 16, config(50));
    for (size_t i = 0; i < prompts.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], 8)));
    auto got = e.drain([&](int s) {
      auto running = e.scheduler.running_kv();
      INFO("before step " << s);
      REQUIRE(e.kv.check_running(running) == "");
    });
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("request " << i);
      CHECK(got[i].first == solo[i]);
    }
    require_no_leak(e);
  }
  SECTION("aborted after its first chunk, a request leaves zero locks and a whole pool") {
    Engine e(2048, 16, config(50));
    REQUIRE_FALSE(e.scheduler.submit(make(1, prompts[0], 8)));
    CHECK(e.scheduler.step().empty());  // first chunk: nothing sampled
    REQUIRE(e.kv.store().radix().protected_size() == 48);  // its whole pages, shared and locked
    e.scheduler.abort(1);
    auto events = e.scheduler.step();
    REQUIRE(events.size() == 1);
    CHECK(events[0].finish == FinishReason::abort);
    CHECK(e.scheduler.idle());
    CHECK(e.kv.store().radix().protected_size() == 0);
    require_no_leak(e);
    // The engine still serves the same prompt correctly afterwards.
    REQUIRE_FALSE(e.scheduler.submit(make(2, prompts[0], 8)));
    CHECK(e.drain()[2].first == solo[0]);
    require_no_leak(e);
  }
}

TEST_CASE("Prompt logprobs score every prompt token whatever the cache holds and however the prompt is chunked", "[scheduler]") {
  const Ids prompt = shared_prefix_prompts(1)[0];
  REQUIRE(prompt.size() > 60);  // two 50-token chunks at least
  // Reference: one pass over the whole prompt with every row's logits.
  std::vector<double> ref(prompt.size(), NAN);
  {
    Engine e(1024, 1, config());
    ForwardBatch b;
    const auto n = static_cast<int32_t>(prompt.size());
    b.reqs.push_back({0, 0, n});
    b.token_ids = prompt;
    Ids rows(prompt.size());
    std::iota(rows.begin(), rows.end(), 1);
    b.out_cache_loc = rows;
    b.writes.push_back({0, 0, rows});
    b.all_logits = true;
    ForwardOutput out = e.runner.forward(b);
    for (size_t j = 0; j + 1 < prompt.size(); ++j) {
      const float* row = out.row(j);
      double mx = -INFINITY, sum = 0;
      for (int32_t v = 0; v < out.vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (int32_t v = 0; v < out.vocab; ++v) sum += std::exp(row[v] - mx);
      ref[j + 1] = row[prompt[j + 1]] - mx - std::log(sum);
    }
  }
  auto scored = [&](int32_t chunk, int32_t page, bool cache_first) {
    Engine e(2048, page, config(chunk));
    auto solo = solo_outputs({prompt}, 6)[0];
    if (cache_first) {  // the prompt is in the radix cache before the request
      REQUIRE_FALSE(e.scheduler.submit(make(7, prompt, 2)));
      e.drain();
      REQUIRE(e.kv.match_lengths(std::vector<Ids>{prompt})[0] >= 48);
    }
    Request r = make(1, prompt, 6);
    r.prompt_logprobs = true;
    r.top_logprobs = 3;
    REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
    std::vector<TokenEvent> events;
    while (!e.scheduler.idle()) {
      for (auto& ev : e.scheduler.step()) events.push_back(std::move(ev));
    }
    REQUIRE(!events.empty());
    CHECK(events.front().cached_tokens == 0);  // nothing was matched
    Ids out;
    for (const auto& ev : events) {
      if (ev.token >= 0) out.push_back(ev.token);
      if (&ev != &events.front()) CHECK(ev.prompt_logprobs.empty());  // once, with the first token
    }
    CHECK(out == solo);  // scoring does not change the output
    require_no_leak(e);
    return events.front().prompt_logprobs;
  };
  for (auto [chunk, page, cache_first] : {std::tuple{0, 1, false}, std::tuple{50, 16, true}, std::tuple{0, 4, true}, std::tuple{37, 1, false}}) {
    INFO("chunk " << chunk << " page " << page << " cached first " << cache_first);
    auto got = scored(chunk, page, cache_first);
    REQUIRE(got.size() == prompt.size());
    CHECK(got[0].token == prompt[0]);
    CHECK(std::isnan(got[0].logprob));
    CHECK(got[0].top.empty());
    for (size_t j = 1; j < got.size(); ++j) {
      INFO("prompt token " << j);
      CHECK(got[j].token == prompt[j]);
      CHECK(got[j].logprob == Approx(ref[j]).margin(1e-4));
      REQUIRE(got[j].top.size() == 3);
      CHECK(got[j].top[0].second >= got[j].logprob - 1e-6f);  // the best alternative is at least as likely
    }
  }
}

TEST_CASE("Disaggregated: prefill on one engine, KV rows moved, decode on another gives the solo output", "[scheduler]") {
  // Shared-prefix prompts: the decode engine reuses its own cache for the prefix.
  auto prompts = shared_prefix_prompts(6);
  auto solo = solo_outputs(prompts, 8);
  Engine a(2048, 4, config(50)), b(2048, 4, config());
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r = make(i, prompts[i], 8);
    r.hold_after_prefill = true;
    REQUIRE_FALSE(a.scheduler.submit(std::move(r)));
  }
  std::map<uint64_t, Ids> out;
  size_t moved = 0;
  int64_t reused = 0;
  while (!a.scheduler.idle()) {
    for (const auto& e : a.scheduler.step()) {
      REQUIRE(e.finish == FinishReason::none);
      REQUIRE(e.held);
      const RequestKv* kv = a.scheduler.held(e.id);
      REQUIRE(kv);
      REQUIRE(kv->kv.size() == prompts[e.id].size());
      CHECK(e.held_rows == kv->kv);
      Scheduler::Reserved rows = b.scheduler.reserve(make(e.id, prompts[e.id], 8));
      REQUIRE(rows.error.empty());
      REQUIRE(rows.rows.size() == kv->kv.size());
      // The decode engine's cache holds the shared prefix once the first
      // request is in: only the rows after it move.
      if (moved > 0) CHECK(rows.cached >= 32);
      REQUIRE(rows.cached < static_cast<int32_t>(rows.rows.size()));
      const auto c = static_cast<ptrdiff_t>(rows.cached);
      const std::vector<int32_t> from(kv->kv.begin() + c, kv->kv.end()), to(rows.rows.begin() + c, rows.rows.end());
      const int32_t layers = a.runner.model_config().n_layers;
      b.runner.write_kv(to, 0, layers, a.runner.read_kv(from, 0, layers));
      a.scheduler.release(e.id);
      REQUIRE(b.scheduler.activate(e.id, e.token, e.logprob));
      reused += rows.cached;
      ++moved;
    }
    REQUIRE(a.kv.check_running(a.scheduler.running_kv()) == "");
  }
  CHECK(moved == prompts.size());
  CHECK(reused >= 32 * static_cast<int64_t>(prompts.size() - 1));
  CHECK(a.scheduler.held_count() == 0);
  // The prefill engine keeps the prompts cached for later requests.
  CHECK(a.kv.match_lengths(prompts)[0] >= 48);
  auto got = b.drain([&](int) { REQUIRE(b.kv.check_running(b.scheduler.running_kv()) == ""); });
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(got[i].first == solo[i]);
  }
  require_no_leak(a);
  require_no_leak(b);
}

TEST_CASE("A streamed held prompt reports each chunk's rows before the step that computes them, and what would end it keeps them until aborted",
          "[scheduler][pd_stream]") {
  const Ids prompt = shared_prefix_prompts(1)[0];
  REQUIRE(prompt.size() > 48);
  auto streamed = [&](uint64_t id, int max_new) {
    Request r = make(id, prompt, max_new);
    r.hold_after_prefill = true;
    r.stream_held_kv = true;
    return r;
  };
  SECTION("each chunk's rows as its step begins, layer by layer on the clock; moved in those pieces, it decodes as alone") {
    const auto solo = solo_outputs({prompt}, 8);
    Engine a(1024, 4, config(16)), b(1024, 4, config());
    auto clock = std::make_shared<KvLayerClock>();
    a.runner.set_kv_clock(clock);
    const int32_t layers = a.runner.model_config().n_layers;
    std::vector<std::vector<int32_t>> progress;
    std::vector<uint64_t> steps;
    a.scheduler.set_plan_listener([&](std::vector<TokenEvent> early) {
      for (auto& e : early) {
        REQUIRE(e.held_progress);
        CHECK(e.token == -1);
        // Told before the worker runs the step: not one layer stored yet.
        CHECK_FALSE(clock->wait(e.held_step, 1, std::chrono::milliseconds(0)));
        progress.push_back(e.held_rows);
        steps.push_back(e.held_step);
      }
    });
    REQUIRE_FALSE(a.scheduler.submit(streamed(0, 8)));
    std::optional<TokenEvent> held;
    while (!held) {
      REQUIRE_FALSE(a.scheduler.idle());
      for (auto& e : a.scheduler.step()) {
        REQUIRE(e.finish == FinishReason::none);
        REQUIRE_FALSE(e.held_progress);  // those went to the listener
        REQUIRE(e.held);
        held = e;
      }
      REQUIRE(a.kv.check_running(a.scheduler.running_kv()) == "");
      // After the step, every layer of it is stored.
      REQUIRE_FALSE(steps.empty());
      CHECK(clock->wait(steps.back(), layers, std::chrono::milliseconds(0)));
    }
    // A report for every chunk, the last one included, each the rows of that
    // chunk's tokens under its own step, and none of its rows moved after:
    // what went out early is what the request holds at the end.
    REQUIRE(progress.size() == (prompt.size() + 15) / 16);
    CHECK(clock->layers_reported() == static_cast<int64_t>(progress.size()) * layers);
    std::vector<int32_t> reported;
    for (size_t i = 0; i < progress.size(); ++i) {
      CHECK(progress[i].size() == (i + 1 < progress.size() ? 16 : prompt.size() - 16 * i));
      if (i > 0) CHECK(steps[i] > steps[i - 1]);
      reported.insert(reported.end(), progress[i].begin(), progress[i].end());
    }
    CHECK(reported == held->held_rows);
    CHECK(held->held_rows == a.scheduler.held(0)->kv);
    // Not cached while its rows may be read (caching could swap one for the
    // tree's copy and free it); cached once released.
    CHECK(a.kv.match_lengths(std::vector<Ids>{prompt})[0] == 0);
    // Moved piece by piece, as a streamed transfer sends them.
    Scheduler::Reserved rows = b.scheduler.reserve(make(0, prompt, 8));
    REQUIRE(rows.error.empty());
    REQUIRE(rows.cached == 0);
    size_t sent = 0;
    for (const auto& from : progress) {
      const std::vector<int32_t> to(rows.rows.begin() + static_cast<ptrdiff_t>(sent),
                                    rows.rows.begin() + static_cast<ptrdiff_t>(sent + from.size()));
      b.runner.write_kv(to, 0, layers, a.runner.read_kv(from, 0, layers));
      sent += from.size();
    }
    REQUIRE(sent == prompt.size());
    a.scheduler.release(0);
    CHECK(a.kv.match_lengths(std::vector<Ids>{prompt})[0] >= 48);
    REQUIRE(b.scheduler.activate(0, held->token, held->logprob));
    CHECK(b.drain()[0].first == solo.at(0));
    require_no_leak(a);
    require_no_leak(b);
  }
  SECTION("finished at its first token, it keeps its rows until aborted") {
    Engine a(1024, 4, config(16));
    REQUIRE_FALSE(a.scheduler.submit(streamed(1, 1)));
    std::optional<TokenEvent> last;
    while (!last) {
      for (auto& e : a.scheduler.step()) {
        if (e.finish != FinishReason::none) last = e;
      }
    }
    CHECK(last->finish == FinishReason::length);
    CHECK(last->token >= 0);
    REQUIRE(a.scheduler.held(1) != nullptr);  // a transfer may still be reading them
    CHECK(a.scheduler.held(1)->kv.size() == prompt.size());
    a.scheduler.abort(1);
    auto ev = a.scheduler.step();
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].finish == FinishReason::abort);
    CHECK(a.scheduler.held(1) == nullptr);
    require_no_leak(a);
  }
  SECTION("the pool too small for it: failed, its rows kept until aborted") {
    Engine a(40, 4, config(16));
    REQUIRE_FALSE(a.scheduler.submit(streamed(2, 8)));
    std::optional<TokenEvent> last;
    int reports = 0;
    for (int step = 0; step < 20 && !last; ++step) {
      for (auto& e : a.scheduler.step()) {
        if (e.held_progress) ++reports;
        if (e.finish != FinishReason::none) last = e;
      }
    }
    REQUIRE(last);
    CHECK(reports > 0);
    CHECK(last->finish == FinishReason::error);
    CHECK(last->error_kind == ErrorKind::invalid_request);
    REQUIRE(a.scheduler.held(2) != nullptr);
    a.scheduler.abort(2);
    (void)a.scheduler.step();
    CHECK(a.scheduler.held(2) == nullptr);
    require_no_leak(a);
  }
}

TEST_CASE("Held and reserved requests free everything when aborted, refused or cancelled", "[scheduler]") {
  const Ids prompt = shared_prefix_prompts(1)[0];
  Engine a(1024, 1, config()), b(256, 1, config());
  SECTION("a held request aborted on the prefill side") {
    Request r = make(1, prompt, 8);
    r.hold_after_prefill = true;
    REQUIRE_FALSE(a.scheduler.submit(std::move(r)));
    auto ev = a.scheduler.step();
    REQUIRE((ev.size() == 1 && ev[0].held));
    CHECK(a.kv.store().radix().protected_size() > 0);
    a.scheduler.abort(1);
    ev = a.scheduler.step();
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].finish == FinishReason::abort);
    CHECK(a.scheduler.held(1) == nullptr);
    require_no_leak(a);
  }
  SECTION("a reservation cancelled or aborted on the decode side") {
    Request r = make(2, prompt, 8);
    REQUIRE(b.scheduler.reserve(r).error.empty());
    CHECK(b.scheduler.reserve(r).error.find("in use") != std::string::npos);
    b.scheduler.cancel_reserved(2);
    require_no_leak(b);
    REQUIRE(b.scheduler.reserve(r).error.empty());
    b.scheduler.abort(2);
    auto ev = b.scheduler.step();
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].finish == FinishReason::abort);
    CHECK_FALSE(b.scheduler.activate(2, 1000, 0.0f));
    require_no_leak(b);
  }
  SECTION("no room on the decode side is said early and takes nothing") {
    Ids longer = prompt;
    while (longer.size() < 300) longer.insert(longer.end(), prompt.begin(), prompt.end());
    longer.resize(300);  // more than the 256-row pool
    Request r = make(3, longer, 8);
    auto res = b.scheduler.reserve(r);
    CHECK(res.no_room);
    CHECK(res.rows.empty());
    require_no_leak(b);
    Request bad = make(4, prompt, 8);
    bad.output = Ids(8, 1000);  // a migration with nothing left to generate
    CHECK(b.scheduler.reserve(bad).error.find("leaves nothing to generate") != std::string::npos);
    CHECK(b.scheduler.reserved_count() == 0);
  }
  SECTION("a first token that already ends the request finishes at activation") {
    Request r = make(5, prompt, 1);
    REQUIRE(b.scheduler.reserve(r).error.empty());
    CHECK_FALSE(b.scheduler.activate(5, -1, 0.0f));  // not a token: stays reserved
    REQUIRE(b.scheduler.activate(5, 1000, 0.0f));
    auto ev = b.scheduler.step();
    REQUIRE(ev.size() == 1);
    CHECK(ev[0].token == 1000);
    CHECK(ev[0].finish == FinishReason::length);
    CHECK(b.scheduler.idle());
    require_no_leak(b);
  }
}

TEST_CASE("A prompt loaded from the disk tier decodes exactly as when it was computed", "[scheduler]") {
  // The KV of a prompt is written through to disk once its prefill ends; a
  // fresh engine (new pool, new store on the same folder: a restart) loads
  // it instead of computing it, from whatever its own cache already holds,
  // mid-block included, under any page size and chunking.
  const auto dir = std::filesystem::temp_directory_path() / ("actorlm-sched-disk-" + std::to_string(std::random_device{}()));
  Ids prompt = shared_prefix_prompts(1)[0];
  const Ids more = tokenizer().encode(" And after that, tell me about the history of printing in Europe.", false, false);
  prompt.insert(prompt.end(), more.begin(), more.end());
  REQUIRE(prompt.size() > 80);
  auto [page, chunk] = GENERATE(std::pair{1, 0}, std::pair{4, 37}, std::pair{16, 50});
  INFO("page " << page << ", chunk " << chunk);
  auto run = [&](Engine& e, uint64_t id, const Ids& p) {
    REQUIRE_FALSE(e.scheduler.submit(make(id, p, 6)));
    std::pair<Ids, float> out{{}, 0.0f};
    while (!e.scheduler.idle()) {
      for (const auto& ev : e.scheduler.step()) {
        if (ev.id != id || ev.token < 0) continue;
        if (out.first.empty()) out.second = ev.logprob;
        out.first.push_back(ev.token);
      }
    }
    if (e.tiers) e.tiers->drain();  // its stores, done on the tiers' thread
    return out;
  };
  const int64_t whole_blocks = static_cast<int64_t>(prompt.size() / 16);
  const int64_t loadable = static_cast<int64_t>((prompt.size() - 1) / 16 * 16);  // the last token is computed
  std::pair<Ids, float> computed;
  {
    Engine e(4096, page, config(chunk));
    computed = run(e, 1, prompt);
  }
  {
    Engine e(4096, page, config(chunk), 40, {.disk_dir = dir.string()});
    CHECK(run(e, 1, prompt).first == computed.first);
    CHECK(e.disk->stats().stored == whole_blocks);
    CHECK(e.scheduler.stats().disk_hit_tokens == 0);
    require_no_leak(e);
  }
  SECTION("a fresh engine loads all but the last partial block") {
    Engine e(4096, page, config(chunk), 40, {.disk_dir = dir.string()});
    auto got = run(e, 2, prompt);
    CHECK(got.first == computed.first);
    CHECK(got.second == computed.second);  // bit for bit: the tier is lossless
    CHECK(e.scheduler.stats().disk_hit_tokens == loadable);
    CHECK(e.disk->stats().loaded == loadable / 16);
    require_no_leak(e);
  }
  SECTION("a fresh engine whose own cache ends inside a block loads from there on") {
    Engine e(4096, page, config(chunk), 40, {.disk_dir = dir.string()});
    // The first 40 tokens: 32 from disk, 8 computed; the pool then caches
    // its whole pages of them, which end inside the third block.
    run(e, 3, Ids(prompt.begin(), prompt.begin() + 40));
    const int64_t before = e.scheduler.stats().disk_hit_tokens;
    CHECK(before == 32);
    auto got = run(e, 4, prompt);
    CHECK(got.first == computed.first);
    CHECK(got.second == computed.second);
    const int64_t cached_here = 40 / page * page;
    CHECK(e.scheduler.stats().disk_hit_tokens - before == loadable - cached_here);
    require_no_leak(e);
  }
  std::filesystem::remove_all(dir);
}

namespace {

// Runs one greedy request to the end: its tokens, its first token's logprob
// and the cached_tokens it reports.
struct Outcome {
  Ids tokens;
  float first_logprob = 0.0f;
  int32_t cached = 0;
};

Outcome run_one(Engine& e, uint64_t id, const Ids& prompt, int max_new = 6, int32_t adapter = 0) {
  Request r = make(id, prompt, max_new);
  r.stop.ignore_eos = true;
  r.adapter = adapter;
  REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
  Outcome out;
  while (!e.scheduler.idle()) {
    for (const auto& ev : e.scheduler.step()) {
      if (ev.id != id || ev.token < 0) continue;
      if (out.tokens.empty()) out.first_logprob = ev.logprob;
      out.tokens.push_back(ev.token);
      out.cached = ev.cached_tokens;
    }
  }
  return out;
}

// A prompt of ~90 tokens, and another sharing none of it, to push the first
// out of a pool that holds only one of them.
Ids tier_prompt() {
  Ids p = shared_prefix_prompts(1)[0];
  const Ids more = tokenizer().encode(" And after that, tell me about the history of printing in Europe.", false, false);
  p.insert(p.end(), more.begin(), more.end());
  return p;
}

Ids other_prompt() {
  return tokenizer().encode(
      "Write a list of twelve rivers of South America with their lengths in kilometres, sorted from the longest to "
      "the shortest, and after each one name a city it passes through and the ocean it finally reaches. Then do "
      "the same for twelve rivers of Africa, and say which of all of them carries the most water to the sea. "
      "Finally, explain in three short paragraphs how river deltas form, why some rivers never reach an ocean, "
      "and what happens to the sediment they carry when a dam is built upstream of a large coastal city.",
      true, false);
}

}  // namespace

TEST_CASE("A prompt the pool let go of comes back from the host tier exactly as computed", "[scheduler]") {
  // The pool holds one prompt; a second pushes the first out. With
  // write-through the host tier had it since its prefill, with write-back
  // it gets it as the radix cache evicts it. Run again, the first prompt
  // loads every whole block it can from the host tier and decodes bit for bit
  // as when it was computed, under any page size and chunking.
  const Ids prompt = tier_prompt(), other = other_prompt();
  REQUIRE(prompt.size() > 80);
  REQUIRE(other.size() > 90);
  auto [page, chunk] = GENERATE(std::pair{1, 0}, std::pair{4, 37}, std::pair{16, 50});
  const auto policy = GENERATE(HiCacheWritePolicy::write_through, HiCacheWritePolicy::write_back);
  INFO("page " << page << ", chunk " << chunk << ", " << write_policy_name(policy));
  const int32_t loadable = static_cast<int32_t>((prompt.size() - 1) / 16 * 16);
  Outcome computed;
  {
    Engine e(4096, page, config(chunk));
    computed = run_one(e, 1, prompt);
  }
  Engine e(160, page, config(chunk), 40, {.host_bytes = int64_t{1} << 28, .policy = policy});
  CHECK(run_one(e, 1, prompt).tokens == computed.tokens);
  const int64_t written = e.host->stats().stored;
  CHECK(written == (policy == HiCacheWritePolicy::write_through ? int64_t(prompt.size() / 16) : 0));
  CHECK(run_one(e, 2, other).tokens.size() == 6);
  // Write-back: only what the pool evicted (with chunking, part of the prompt).
  if (policy == HiCacheWritePolicy::write_back) CHECK(e.host->stats().stored > 0);
  auto again = run_one(e, 3, prompt);
  CHECK(again.tokens == computed.tokens);
  CHECK(again.first_logprob == computed.first_logprob);  // bit for bit: the tier is lossless
  CHECK(again.cached == loadable);
  CHECK(e.scheduler.stats().host_hit_tokens > 0);
  CHECK(e.host->check().empty());
  require_no_leak(e);
}

TEST_CASE("Prefetch policies: wait_complete admits a prompt once the tiers' thread has read its blocks, timeout after the timeout without them", "[scheduler]") {
  const Ids prompt = tier_prompt(), other = other_prompt();
  const int64_t loadable = static_cast<int64_t>((prompt.size() - 1) / 16 * 16);
  Outcome computed;
  {
    Engine e(4096, 1, config());
    computed = run_one(e, 1, prompt);
  }
  const auto policy = GENERATE(HiCachePrefetchPolicy::wait_complete, HiCachePrefetchPolicy::timeout);
  INFO(prefetch_policy_name(policy));
  double clock = 0;
  SchedulerConfig c = config();
  c.prefetch_policy = policy;
  c.prefetch_timeout_seconds = 5;
  c.clock = [&clock] { return clock; };
  Engine e(160, 1, c, 40, {.host_bytes = int64_t{1} << 28});
  CHECK(run_one(e, 1, prompt).tokens == computed.tokens);
  CHECK(run_one(e, 2, other).tokens.size() == 6);  // pushes the first out of the pool
  REQUIRE(e.scheduler.stats().host_hit_tokens == 0);
  REQUIRE(e.tiers->read_threads().empty());
  const int64_t cached_before = e.scheduler.stats().cached_tokens;

  // The tiers' thread held back: the prompt waits for its read-ahead.
  e.tiers->pause_io(true);
  Request r = make(3, prompt, 6);
  r.stop.ignore_eos = true;
  REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
  for (int i = 0; i < 3; ++i) CHECK(e.scheduler.step().empty());
  CHECK(e.scheduler.waiting() == 1);
  CHECK(e.tiers->prefetching(prompt));
  std::map<uint64_t, std::pair<Ids, FinishReason>> got;
  if (policy == HiCachePrefetchPolicy::wait_complete) {
    e.tiers->pause_io(false);
    got = e.drain();
    // Every block came from the host tier, decoded on the tiers' thread.
    const auto readers = e.tiers->read_threads();
    REQUIRE(readers.size() == 1);
    CHECK(*readers.begin() != std::this_thread::get_id());
  } else {
    clock += 6;  // past the timeout: admitted without its read-ahead, read here
    for (const auto& ev : e.scheduler.step()) got[ev.id].first.push_back(ev.token);
    CHECK(e.tiers->read_threads() == std::set<std::thread::id>{std::this_thread::get_id()});
    e.tiers->pause_io(false);
    for (auto& [id, out] : e.drain()) got[id].first.insert(got[id].first.end(), out.first.begin(), out.first.end());
  }
  CHECK(got[3].first == computed.tokens);
  // Every whole block before the last token is cached: what the pool kept of
  // it (a token or so the other prompt shares), the rest from the host tier.
  CHECK(e.scheduler.stats().cached_tokens - cached_before == loadable);
  CHECK(e.scheduler.stats().host_hit_tokens > loadable - 16);
  CHECK(e.tiers->prefetched_blocks() == 0);  // nothing left behind for a prompt admitted
  require_no_leak(e);
}

TEST_CASE("While streams decode, a prompt's blocks load from the host tier a step at a time, and decode as computed", "[scheduler]") {
  const Ids prompt = tier_prompt(), other = other_prompt(), hello = tokenizer().encode("Hello there", false, false);
  const int64_t loadable = static_cast<int64_t>((prompt.size() - 1) / 16 * 16);
  Outcome computed, stream_alone;
  {
    Engine e(4096, 1, config());
    computed = run_one(e, 1, prompt);
    stream_alone = run_one(e, 2, hello, 40);
  }
  // Every reading of this clock is a second later: each step takes as long
  // as each block copy, so a step's load budget (a tenth of a step) is one block.
  double tick = 0;
  SchedulerConfig c = config();
  c.clock = [&tick] { return tick += 1.0; };
  Engine e(160, 1, c, 40, {.host_bytes = int64_t{1} << 28});
  CHECK(run_one(e, 1, prompt).tokens == computed.tokens);
  CHECK(run_one(e, 2, other).tokens.size() == 6);  // pushes the first out of the pool
  const int64_t host_before = e.scheduler.stats().host_hit_tokens;
  Request s = make(10, hello, 40);
  s.stop.ignore_eos = true;
  REQUIRE_FALSE(e.scheduler.submit(std::move(s)));
  std::map<uint64_t, Ids> got;
  auto step = [&] {
    for (const auto& ev : e.scheduler.step()) {
      if (ev.token >= 0) got[ev.id].push_back(ev.token);
    }
  };
  step();
  step();  // the stream decodes
  Request r = make(3, prompt, 6);
  r.stop.ignore_eos = true;
  REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
  int steps = 0;
  while (got[3].empty()) {
    REQUIRE(++steps < 100);
    const size_t before = got[10].size();
    step();
    CHECK(got[10].size() == before + 1);  // the stream gets a token every step meanwhile
  }
  // One block a step (the first partly held by the pool), then its first token.
  CHECK(steps >= static_cast<int>(loadable / 16) - 1);
  while (!e.scheduler.idle()) step();
  CHECK(got[3] == computed.tokens);
  CHECK(got[10] == stream_alone.tokens);
  CHECK(e.scheduler.stats().host_hit_tokens - host_before > loadable - 16);
  if (e.tiers) e.tiers->drain();
  require_no_leak(e);
}

TEST_CASE("A host tier in q8_0 holds a prompt in a quarter of the room and drifts only slightly", "[scheduler]") {
  const Ids prompt = tier_prompt(), other = other_prompt();
  const int32_t loadable = static_cast<int32_t>((prompt.size() - 1) / 16 * 16);
  Outcome computed;
  {
    Engine e(4096, 1, config());
    computed = run_one(e, 1, prompt);
  }
  Engine e(160, 1, config(), 40, {.host_bytes = int64_t{1} << 28, .dtype = KvHostDtype::q8_0});
  run_one(e, 1, prompt);
  run_one(e, 2, other);
  const int64_t pool_block_bytes = 16 * e.runner.kv_token_bytes() * e.runner.model_config().n_layers;
  CHECK(e.host->encoded_block_bytes() * 3 < pool_block_bytes);
  auto again = run_one(e, 3, prompt);
  CHECK(again.cached == loadable);
  CHECK(e.scheduler.stats().host_hit_tokens > 0);
  // Lossy, so not bit for bit; the greedy token holds and its logprob moves
  // by well under 0.05 nats.
  CHECK(again.tokens.front() == computed.tokens.front());
  CHECK(again.first_logprob != computed.first_logprob);
  CHECK(std::fabs(again.first_logprob - computed.first_logprob) < 0.05f);
  require_no_leak(e);
}

TEST_CASE("Write-back hands what the host tier lets go to the disk tier, and a prompt loads from both", "[scheduler]") {
  const auto dir = std::filesystem::temp_directory_path() / ("actorlm-sched-tiers-" + std::to_string(std::random_device{}()));
  const Ids prompt = tier_prompt(), other = other_prompt();
  const int32_t loadable = static_cast<int32_t>((prompt.size() - 1) / 16 * 16);
  const int32_t page = GENERATE(1, 16);
  INFO("page " << page);
  Outcome computed;
  {
    Engine e(4096, page, config());
    computed = run_one(e, 1, prompt);
  }
  {
    // Room in RAM for two blocks of 16 tokens.
    Engine probe(64, 1, config());
    const int64_t block = 16 * probe.runner.kv_token_bytes() * probe.runner.model_config().n_layers;
    Engine e(160, page, config(), 40,
             {.disk_dir = dir.string(), .host_bytes = 2 * block + 4096, .policy = HiCacheWritePolicy::write_back});
    run_one(e, 1, prompt);
    CHECK(e.disk->stats().stored == 0);  // nothing evicted yet
    run_one(e, 2, other);
    CHECK(e.host->stats().evicted > 0);
    CHECK(e.disk->stats().stored > 0);
    auto again = run_one(e, 3, prompt);
    CHECK(again.tokens == computed.tokens);
    CHECK(again.first_logprob == computed.first_logprob);
    CHECK(again.cached == loadable);
    CHECK(e.scheduler.stats().host_hit_tokens > 0);
    CHECK(e.scheduler.stats().disk_hit_tokens > 0);
    CHECK(e.scheduler.stats().host_hit_tokens + e.scheduler.stats().disk_hit_tokens <= loadable);
    CHECK(e.host->check().empty());
    CHECK(e.disk->check().empty());
    require_no_leak(e);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("A decoding request gets a token every step while long prompts prefill beside it", "[scheduler]") {
  // Prefill steps carry the running streams' decode tokens (mixed batches):
  // long prompts arriving never stall a stream for the whole backlog, and
  // what each request produces is what it produces alone.
  const Ids chat = shared_prefix_prompts(1)[0];
  std::vector<Ids> prompts{chat};
  for (int i = 0; i < 3; ++i) {
    Ids p = other_prompt();  // nothing in common with the stream's prompt
    const Ids more = tokenizer().encode(" Then list " + std::to_string(i + 3) + " more facts, one per line.", false, false);
    for (int k = 0; k < 3; ++k) p.insert(p.end(), more.begin(), more.end());
    prompts.push_back(p);
  }
  auto solo = solo_outputs(prompts, 30);
  REQUIRE(solo[0].size() >= 12);  // the stream outlives several prefill steps
  Engine e(4096, 1, config(16));
  std::map<uint64_t, Ids> got;
  std::set<uint64_t> finished;
  auto step = [&] {
    std::map<uint64_t, int> tokens;
    for (const auto& ev : e.scheduler.step()) {
      if (ev.token >= 0) {
        got[ev.id].push_back(ev.token);
        ++tokens[ev.id];
      }
      if (ev.finish != FinishReason::none) finished.insert(ev.id);
    }
    return tokens;
  };
  REQUIRE_FALSE(e.scheduler.submit(make(0, chat, 30)));
  while (got[0].empty()) step();
  for (uint64_t i = 1; i <= 3; ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], 30)));
  int mixed = 0;
  while (!finished.count(0)) {
    const bool prefilling = got[1].empty() || got[2].empty() || got[3].empty();
    auto tokens = step();
    CHECK(tokens[0] == 1);  // a token for the stream on every step
    mixed += prefilling;
  }
  CHECK(mixed >= 4);  // the long prompts took several steps of 16-token chunks, each with a decode in it
  while (!e.scheduler.idle()) step();
  for (uint64_t i = 0; i <= 3; ++i) {
    INFO("request " << i);
    CHECK(got[i] == solo[i]);
  }
  require_no_leak(e);
}

TEST_CASE("min_new_tokens holds back EOS and the stop ids until then, and changes nothing before", "[scheduler]") {
  SchedulerConfig c = config();
  c.vocab_size = weights().config.vocab_size;
  const Ids prompt = shared_prefix_prompts(1)[0];
  Engine e(4096, 1, c);
  REQUIRE_FALSE(e.scheduler.submit(make(1, prompt, 100)));
  auto [free_run, why] = e.drain()[1];
  REQUIRE(why == FinishReason::stop);  // a short answer, ended by EOS
  REQUIRE(free_run.back() == *c.eos_id);
  const auto k = static_cast<int32_t>(free_run.size());
  REQUIRE(k < 60);

  // EOS held back: the same tokens up to where EOS was, then more of them.
  Request r = make(2, prompt, 100);
  r.stop.min_new_tokens = k + 20;
  REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
  auto [held, held_why] = e.drain()[2];
  REQUIRE(static_cast<int32_t>(held.size()) >= k + 20);
  CHECK(Ids(held.begin(), held.begin() + k - 1) == Ids(free_run.begin(), free_run.end() - 1));
  for (int32_t i = 0; i < k + 20; ++i) CHECK(held[i] != *c.eos_id);
  if (held_why == FinishReason::stop) CHECK(held.back() == *c.eos_id);  // past the minimum it stops again

  // A stop id the free run picks second is held back too.
  Request s = make(3, prompt, 100);
  s.stop.stop_token_ids = {free_run[1]};
  s.stop.min_new_tokens = 4;
  REQUIRE_FALSE(e.scheduler.submit(std::move(s)));
  auto [stopped, stopped_why] = e.drain()[3];
  REQUIRE(stopped.size() >= 4);
  CHECK(stopped[0] == free_run[0]);
  for (size_t i = 0; i < 4; ++i) CHECK(stopped[i] != free_run[1]);
  // Without the minimum, that stop id ends the request at once.
  Request t = make(4, prompt, 100);
  t.stop.stop_token_ids = {free_run[1]};
  REQUIRE_FALSE(e.scheduler.submit(std::move(t)));
  CHECK(e.drain()[4].first == Ids(free_run.begin(), free_run.begin() + 2));

  // Out of range, or without the vocabulary size to build the mask from.
  Request bad = make(5, prompt, 10);
  bad.stop.min_new_tokens = 11;
  CHECK(e.scheduler.submit(bad));
  bad.stop.min_new_tokens = -1;
  CHECK(e.scheduler.submit(bad));
  Engine blind(4096, 1, config());
  bad.stop.min_new_tokens = 1;
  CHECK(blind.scheduler.submit(bad));
  require_no_leak(e);
}

TEST_CASE("A request that waits has its disk blocks read ahead, and decodes exactly as when they were computed", "[scheduler]") {
  const auto dir = std::filesystem::temp_directory_path() / ("actorlm-sched-prefetch-" + std::to_string(std::random_device{}()));
  Ids prompt = shared_prefix_prompts(1)[0];
  const Ids more = tokenizer().encode(" And after that, tell me about the history of printing in Europe.", false, false);
  prompt.insert(prompt.end(), more.begin(), more.end());
  const int64_t loadable = static_cast<int64_t>((prompt.size() - 1) / 16 * 16);
  SchedulerConfig one = config();
  one.max_running_requests = 1;  // the second request waits for the first
  Ids computed;
  {
    Engine e(4096, 1, config(), 40, {.disk_dir = dir.string()});
    REQUIRE_FALSE(e.scheduler.submit(make(1, prompt, 6)));
    computed = e.drain()[1].first;
    REQUIRE(e.disk->stats().stored == static_cast<int64_t>(prompt.size() / 16));
  }
  Engine e(4096, 1, one, 40, {.disk_dir = dir.string()});
  REQUIRE_FALSE(e.scheduler.submit(make(1, tokenizer().encode("Hello there", false, false), 8)));
  REQUIRE_FALSE(e.scheduler.submit(make(2, prompt, 6)));
  e.scheduler.step();  // request 1 runs; request 2 waits, and its blocks are asked for
  REQUIRE(e.scheduler.waiting() == 1);
  e.tiers->drain();
  CHECK(e.tiers->prefetched_blocks() == static_cast<size_t>(loadable / 16));
  auto got = e.drain();
  CHECK(got[2].first == computed);
  CHECK(e.scheduler.stats().disk_hit_tokens == loadable);
  CHECK(e.tiers->prefetched_blocks() == 0);
  CHECK(e.disk->stats().loaded == loadable / 16);  // read once, ahead
  require_no_leak(e);
  std::filesystem::remove_all(dir);
}

namespace {
// Every token a request streams, and its last event's usage.
struct Streamed {
  Ids tokens;
  FinishReason finish = FinishReason::none;
  int32_t prompt_tokens = 0, completion_tokens = 0;
};

Streamed run_alone(Engine& e, Request r) {
  const uint64_t id = r.id;
  REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
  Streamed s;
  while (!e.scheduler.idle()) {
    for (const auto& ev : e.scheduler.step()) {
      REQUIRE(ev.id == id);
      if (ev.token >= 0) s.tokens.push_back(ev.token);
      if (ev.finish == FinishReason::none) continue;
      s.finish = ev.finish;
      s.prompt_tokens = ev.prompt_tokens;
      s.completion_tokens = ev.completion_tokens;
    }
  }
  return s;
}
}  // namespace

namespace {
// What a request moved to another engine (failover, migration) must go on
// with exactly: greedy; sampled with a seed, penalties (which read the
// output) and a minimum length; and a JSON object (the constraint walks the
// output). Id 1 each.
std::vector<Request> requests_that_move(int max_new) {
  const Ids prompt = shared_prefix_prompts(2)[1];
  Request greedy = make(1, prompt, max_new);
  greedy.stop.ignore_eos = true;
  Request sampled = make(1, prompt, max_new);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_p = 0.95f;
  sampled.sampling.seed = 1234;
  sampled.sampling.has_seed = true;
  sampled.sampling.frequency_penalty = 0.5f;
  sampled.sampling.repetition_penalty = 1.1f;
  sampled.stop.min_new_tokens = max_new * 3 / 4;
  Request json = make(1, tokenizer().encode("Describe a cat as JSON:", false, true), max_new);
  json.constraint_spec = {ConstraintKind::json_object, ""};
  return {greedy, sampled, json};
}
}  // namespace

TEST_CASE("A request resumed from part of its output (failover) streams exactly the tokens it had left", "[scheduler]") {
  SchedulerConfig c = config(48);
  c.vocab_size = weights().config.vocab_size;
  c.constraints = make_constraint_compiler(tokenizer(), c.vocab_size, 1);
  for (const Request& asked : requests_that_move(40)) {
    // Where it started: one engine, pages of 1.
    Engine first(4096, 1, c);
    const Streamed whole = run_alone(first, asked);
    REQUIRE(whole.tokens.size() >= 12);
    for (size_t k : {size_t{1}, size_t{5}, whole.tokens.size() - 1}) {
      INFO("resumed after " << k << " of " << whole.tokens.size() << " tokens, temperature " << asked.sampling.temperature);
      // Where it goes on: another engine, pages of 16, chunks of 48, with a
      // cache that has never seen it.
      Engine other(4096, 16, c);
      Request resumed = asked;
      resumed.id = 2;
      resumed.output.assign(whole.tokens.begin(), whole.tokens.begin() + static_cast<ptrdiff_t>(k));
      const Streamed rest = run_alone(other, resumed);
      CHECK(rest.tokens == Ids(whole.tokens.begin() + static_cast<ptrdiff_t>(k), whole.tokens.end()));
      CHECK(rest.finish == whole.finish);
      CHECK(rest.prompt_tokens == whole.prompt_tokens);
      CHECK(rest.completion_tokens == whole.completion_tokens);
      require_no_leak(other);
    }
  }
}

TEST_CASE("A resumed output the request could not have produced is refused with a reason", "[scheduler]") {
  SchedulerConfig c = config();
  c.vocab_size = weights().config.vocab_size;
  c.constraints = make_constraint_compiler(tokenizer(), c.vocab_size, 1);
  Engine e(4096, 1, c);
  const Ids prompt = tokenizer().encode("Describe a cat as JSON:", false, true);
  Request r = make(1, prompt, 8);
  r.output = {5, c.vocab_size};
  CHECK(*e.scheduler.submit(r) == "the output to resume from holds token id " + std::to_string(c.vocab_size) +
                                      ", outside the vocabulary of " + std::to_string(c.vocab_size));
  r.output = Ids(8, 5);  // max_new_tokens already reached
  CHECK(e.scheduler.submit(r)->find("leaves nothing to generate") != std::string::npos);
  r.output = {5};
  r.hold_after_prefill = true;
  CHECK(e.scheduler.submit(r));
  r.hold_after_prefill = false;
  // A JSON object cannot start with what "hello" encodes to.
  r.constraint_spec = {ConstraintKind::json_object, ""};
  r.output = tokenizer().encode("hello", false, false);
  CHECK(e.scheduler.submit(r)->find("does not fit the structured-output constraint at token 0") != std::string::npos);
  // A migration's reservation is refused for the same output, with nothing taken.
  Request reserved = make(2, prompt, 8);
  reserved.constraint_spec = {ConstraintKind::json_object, ""};
  reserved.output = tokenizer().encode("hello", false, false);
  CHECK(e.scheduler.reserve(reserved).error.find("does not fit the structured-output constraint") != std::string::npos);
  CHECK(e.scheduler.reserved_count() == 0);
  require_no_leak(e);
}

TEST_CASE("A decoding request migrated with its KV to another engine goes on exactly, with no token computed twice", "[scheduler]") {
  SchedulerConfig c = config(48);
  c.vocab_size = weights().config.vocab_size;
  c.constraints = make_constraint_compiler(tokenizer(), c.vocab_size, 1);
  for (const Request& asked : requests_that_move(30)) {
    Engine alone(4096, 1, c);
    const std::map<uint64_t, std::pair<Ids, FinishReason>> whole = [&] {
      REQUIRE_FALSE(alone.scheduler.submit(asked));
      return alone.drain();
    }();
    const Ids& expected = whole.at(1).first;
    REQUIRE(expected.size() >= 8);
    for (size_t k : {size_t{1}, size_t{6}, expected.size() - 1}) {
      INFO("migrated after " << k << " of " << expected.size() << " tokens, temperature " << asked.sampling.temperature);
      // From pages of 1 to pages of 16 whose cache holds the system prompt.
      Engine a(4096, 1, c), b(4096, 16, c);
      REQUIRE_FALSE(b.scheduler.submit(make(7, shared_prefix_prompts(3)[0], 2)));
      b.drain();
      const int64_t b_prompt_tokens = b.scheduler.stats().prompt_tokens;
      REQUIRE_FALSE(a.scheduler.submit(asked));
      Ids got;
      while (got.size() < k) {
        for (const auto& e : a.scheduler.step()) got.push_back(e.token);
      }
      // Not yet while it is only waiting elsewhere; a request it does not know.
      CHECK(a.scheduler.freeze(42).state == Scheduler::Frozen::State::unknown);
      Scheduler::Frozen f = a.scheduler.freeze(1);
      REQUIRE(f.state == Scheduler::Frozen::State::frozen);
      CHECK(f.output_tokens == static_cast<int32_t>(k));
      REQUIRE(f.rows.size() == asked.prompt.size() + k - 1);
      // Frozen, it takes no step; thawed it would go on; frozen again, it moves.
      CHECK(a.scheduler.step().empty());
      REQUIRE(a.scheduler.thaw(1));
      f = a.scheduler.freeze(1);
      REQUIRE(f.state == Scheduler::Frozen::State::frozen);
      Request moved = asked;
      moved.output = got;
      Scheduler::Reserved rows = b.scheduler.reserve(moved);
      REQUIRE(rows.error.empty());
      REQUIRE(rows.rows.size() == f.rows.size());
      if (asked.constraint_spec.kind == ConstraintKind::none) CHECK(rows.cached >= 32);
      const auto at = static_cast<ptrdiff_t>(rows.cached);
      const int32_t layers = a.runner.model_config().n_layers;
      b.runner.write_kv(Ids(rows.rows.begin() + at, rows.rows.end()), 0, layers,
                        a.runner.read_kv(Ids(f.rows.begin() + at, f.rows.end()), 0, layers));
      a.scheduler.release(1);
      CHECK_FALSE(b.scheduler.activate(1, 5, 0.0f));  // a migrated request takes no first token
      REQUIRE(b.scheduler.activate(1, -1, 0.0f, f.cached_tokens));
      auto rest = b.drain([&](int) { REQUIRE(b.kv.check_running(b.scheduler.running_kv()) == ""); });
      got.insert(got.end(), rest[1].first.begin(), rest[1].first.end());
      CHECK(got == expected);
      CHECK(rest[1].second == whole.at(1).second);
      CHECK(b.scheduler.stats().prompt_tokens == b_prompt_tokens);  // nothing prefilled for it
      CHECK(b.scheduler.stats().migrated_in == 1);
      CHECK(a.scheduler.stats().migrated_out == 1);
      CHECK(a.scheduler.stats().finished == 0);
      require_no_leak(a);
      require_no_leak(b);
    }
  }
}

TEST_CASE("Freezing a waiting, prefilling or aborted request moves nothing, and a frozen one ends cleanly", "[scheduler]") {
  Engine e(4096, 1, config(16));
  const auto prompts = shared_prefix_prompts(2);
  REQUIRE_FALSE(e.scheduler.submit(make(1, prompts[0], 20)));
  REQUIRE_FALSE(e.scheduler.submit(make(2, prompts[1], 20)));
  // Waiting: handed back with nothing held, and no event ever.
  CHECK(e.scheduler.freeze(2).state == Scheduler::Frozen::State::requeued);
  e.scheduler.step();  // the first 16-token chunk
  CHECK(e.scheduler.freeze(1).state == Scheduler::Frozen::State::busy);
  while (e.scheduler.step().empty()) {
  }
  e.scheduler.abort(1);
  CHECK(e.scheduler.freeze(1).state == Scheduler::Frozen::State::unknown);  // it ends at the next step
  auto out = e.drain();
  CHECK(out.count(2) == 0);
  CHECK(out[1].second == FinishReason::abort);
  // A frozen request aborted, or left frozen and failed, gives back its KV.
  REQUIRE_FALSE(e.scheduler.submit(make(3, prompts[0], 20)));
  while (e.scheduler.step().empty()) {
  }
  REQUIRE(e.scheduler.freeze(3).state == Scheduler::Frozen::State::frozen);
  CHECK_FALSE(e.scheduler.thaw(4));
  e.scheduler.abort(3);
  CHECK(e.scheduler.idle());  // held, it steps only when told to (the actor steps after every message)
  const auto ended = e.scheduler.step();
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].finish == FinishReason::abort);
  require_no_leak(e);
}

namespace {

// Fails the steps `fail_if` picks, and every step whose new tokens hold
// `poison`, as a worker whose backend throws would.
struct FaultyWorker final : Worker {
  explicit FaultyWorker(Worker& w) : inner(w) {}
  Worker& inner;
  int32_t poison = -1;
  std::function<bool(const ForwardBatch&)> fail_if = [](const ForwardBatch&) { return false; };
  std::vector<SampleResult> run(const ForwardBatch& b, std::span<const SampleRequest> s) override {
    if (fail_if(b) || std::find(b.token_ids.begin(), b.token_ids.end(), poison) != b.token_ids.end()) {
      throw std::runtime_error("injected fault");
    }
    return inner.run(b, s);
  }
};

std::map<uint64_t, TokenEvent> run_to_end(Scheduler& s, std::map<uint64_t, Ids>& tokens) {
  std::map<uint64_t, TokenEvent> last;
  for (int guard = 0; !s.idle() && guard < 10000; ++guard) {
    for (const auto& e : s.step()) {
      if (e.token >= 0) tokens[e.id].push_back(e.token);
      if (e.finish != FinishReason::none) last[e.id] = e;
    }
  }
  return last;
}

// Submits the prompts (12 tokens each) to `s`, runs it to the end and checks
// each output and its usage are what the request gives alone.
void check_as_alone(Scheduler& s, const std::vector<Ids>& prompts, const std::map<uint64_t, Ids>& solo) {
  for (size_t i = 0; i < prompts.size(); ++i) REQUIRE_FALSE(s.submit(make(i, prompts[i], 12)));
  std::map<uint64_t, Ids> tokens;
  auto last = run_to_end(s, tokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(tokens[i] == solo.at(i));
    CHECK(last[i].finish == FinishReason::length);
    CHECK(last[i].prompt_tokens == static_cast<int32_t>(prompts[i].size()));
    CHECK(last[i].completion_tokens == 12);
  }
}

}  // namespace

TEST_CASE("A step the worker fails loses no request, and one that fails a step twice fails alone", "[scheduler]") {
  const auto prompts = shared_prefix_prompts(4);
  const auto solo = solo_outputs(prompts, 12);
  Engine e(4096, 1, config(16));
  FaultyWorker w(e.worker);
  SECTION("failed steps (the first prefill chunk, a decode of all four) are computed again with the same outputs") {
    int failed = 0;
    w.fail_if = [&](const ForwardBatch& b) {
      // The first step, and the first one that decodes all four.
      const bool fail = failed == 0 || (failed == 1 && b.reqs.size() == 4 && b.token_ids.size() == 4);
      failed += fail ? 1 : 0;
      return fail;
    };
    Scheduler s(config(16), e.kv, w);
    check_as_alone(s, prompts, solo);
    CHECK(failed == 2);
    CHECK(s.stats().failed_steps == 2);
    CHECK(s.stats().poisoned == 0);
  }
  SECTION("a request every step with it fails is failed alone with the error, the others finish as alone") {
    const Ids bad = tokenizer().encode("Quokka zebra xylophone tangerine", false, true);
    w.poison = bad.back();
    for (size_t i = 0; i < prompts.size(); ++i) {
      REQUIRE(std::find(prompts[i].begin(), prompts[i].end(), w.poison) == prompts[i].end());
      REQUIRE(std::find(solo.at(i).begin(), solo.at(i).end(), w.poison) == solo.at(i).end());
    }
    Scheduler s(config(16), e.kv, w);
    REQUIRE_FALSE(s.submit(make(0, prompts[0], 12)));
    REQUIRE_FALSE(s.submit(make(1, prompts[1], 12)));
    REQUIRE_FALSE(s.submit(make(9, bad, 12)));
    std::map<uint64_t, Ids> tokens;
    s.step();  // one step in: 0 and 1 prefilling
    REQUIRE_FALSE(s.submit(make(2, prompts[2], 12)));
    REQUIRE_FALSE(s.submit(make(3, prompts[3], 12)));
    auto last = run_to_end(s, tokens);
    CHECK(last[9].finish == FinishReason::error);
    CHECK(last[9].error_kind == ErrorKind::internal);
    CHECK(last[9].error.find("injected fault") != std::string::npos);
    CHECK(last[9].error.find("failed alone") != std::string::npos);
    CHECK(tokens[9].empty());
    for (uint64_t i = 0; i < 4; ++i) {
      INFO("request " << i);
      CHECK(last[i].finish == FinishReason::length);
      CHECK(tokens[i] == solo.at(i));
    }
    CHECK(s.stats().poisoned == 1);
  }
  require_no_leak(e);
}

TEST_CASE("A worker that comes back without its KV has every running request computed again from its tokens, outputs as alone", "[scheduler]") {
  const auto prompts = shared_prefix_prompts(4);
  const auto solo = solo_outputs(prompts, 12);
  Engine e(4096, 1, config(16));
  FaultyWorker w(e.worker);
  int resets = 0;
  w.fail_if = [&](const ForwardBatch& b) {
    // The first step that decodes all four, and the step after the first
    // reset's recompute starts: a worker lost twice.
    const bool reset = (resets == 0 && b.reqs.size() == 4 && b.token_ids.size() == 4) || (resets == 1 && b.reqs.size() == 4);
    if (!reset) return false;
    ++resets;
    // What came back holds nothing of what was computed: garbage in every
    // row, so a row the scheduler wrongly trusted would show in the tokens.
    std::vector<int32_t> rows(static_cast<size_t>(e.kv.store().allocator().pool_rows()));
    std::iota(rows.begin(), rows.end(), 0);
    const int32_t layers = e.runner.model_config().n_layers;
    std::vector<uint8_t> junk = e.worker.read_kv(rows, 0, layers - 1);
    std::mt19937 rng(static_cast<uint32_t>(resets));
    for (auto& byte : junk) byte = static_cast<uint8_t>(rng());
    e.worker.write_kv(rows, 0, layers - 1, junk);
    throw WorkerReset("injected: the worker came back empty");
  };
  Scheduler s(config(16), e.kv, w);
  check_as_alone(s, prompts, solo);
  CHECK(resets == 2);
  CHECK(s.stats().worker_resets == 2);
  CHECK(s.stats().reset_requests >= 4);
  CHECK(s.stats().poisoned == 0);
  require_no_leak(e);
}

namespace {

// Prompts whose answers copy from them (a list, code, fields, a sentence
// said twice): where n-gram drafts are kept.
std::vector<Ids> grounded_prompts(int n) {
  ChatTemplate tpl = ChatTemplate::for_model(tokenizer(), nullptr);
  const char* tasks[] = {
      "Repeat this list exactly:\n- red apples\n- green pears\n- yellow lemons\n- purple plums",
      "Copy this code exactly:\nint add(int a, int b) {\n  return a + b;\n}",
      "Repeat the sentence twice: The quick brown fox jumps over the lazy dog.",
      "Write the numbers from one to twelve in words, separated by commas.",
      "Extract the name and the city as JSON from: Maria Lopez lives in Madrid.",
      "Repeat exactly: To be or not to be, that is the question.",
      "Copy this table row: | id | name | price |",
      "Say 'hello world' five times.",
  };
  std::vector<Ids> prompts;
  for (int i = 0; i < n; ++i) {
    std::vector<ChatMessage> m{{"user", std::string(tasks[i % 8]) + (i >= 8 ? " (again)" : "")}};
    prompts.push_back(tokenizer().encode(tpl.render(m), false, true));
  }
  return prompts;
}

SchedulerConfig speculative(SchedulerConfig c, int32_t draft_tokens = 4) {
  c.speculative.algorithm = SpeculativeAlgorithm::ngram;
  c.speculative.num_draft_tokens = draft_tokens;
  // Every step 5 ms on this clock, whatever its rows: DraftCost sees rows
  // cost nothing and keeps every draft, so what these tests draft does not
  // depend on the machine's speed (drafter_test checks the cost model).
  c.clock = [t = 0.0]() mutable { return t += 0.005; };
  return c;
}

// Drafts from the worker's draft model instead of the prompt.
SchedulerConfig drafted(SchedulerConfig c, int32_t draft_tokens = 4) {
  c = speculative(c, draft_tokens);
  c.speculative.algorithm = SpeculativeAlgorithm::draft;
  return c;
}

// A draft model of another shape than the target (2 layers of width 16,
// head_dim 4, deterministic pseudo-random weights) with the default
// model's vocabulary size and a context as long as the tests'.
const LlamaWeights& odd_draft() {
  static LlamaWeights w = [] {
    test::TinyLlamaGguf m;
    m.vocab = m.embd_rows = static_cast<uint32_t>(weights().config.vocab_size);
    m.context = 2048;
    const auto path = (std::filesystem::temp_directory_path() / "actorlm_scheduler_odd_draft.gguf").string();
    return load_llama_weights(m.builder().write(path));
  }();
  return w;
}

// The KV self-check after every step: drafted rows are given back in the
// step that rejects them, or the accounting is off here.
std::function<void(int)> checked(Engine& e) {
  return [&e](int step) {
    const std::string err = e.kv.check_running(e.scheduler.running_kv());
    if (!err.empty()) FAIL("KV invariant before step " << step << ": " << err);
  };
}

// The prompts (24 tokens each) batched, every other one not speculating,
// each checked against its output alone; the engine's stats.
SchedulerStats batched_beside_plain(const std::vector<Ids>& prompts, const std::map<uint64_t, Ids>& solo, int32_t page,
                                    const SchedulerConfig& c, const LlamaWeights* draft = nullptr) {
  Engine e(8192, page, c, 40, {}, draft);
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r = make(i, prompts[i], 24);
    r.max_draft_tokens = i % 2 == 0 ? -1 : 0;
    REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
  }
  auto got = e.drain(checked(e));
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(got[i].first == solo.at(i));
  }
  require_no_leak(e);
  return e.scheduler.stats();
}

}  // namespace

TEST_CASE("With n-gram speculation, greedy outputs are plain decoding's, alone and batched beside requests that do not speculate", "[scheduler][speculative]") {
  std::vector<Ids> prompts = grounded_prompts(16);
  for (const Ids& p : shared_prefix_prompts(16)) prompts.push_back(p);
  const auto solo = solo_outputs(prompts, 24);
  SECTION("alone") {
    Engine e(4096, 1, speculative(config()));
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("request " << i);
      REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], 24)));
      CHECK(e.drain(checked(e))[i].first == solo.at(i));
    }
    const auto& st = e.scheduler.stats();
    INFO("drafted " << st.spec_drafted << ", accepted " << st.spec_accepted << " in " << st.spec_verifies() << " verifies");
    CHECK(st.spec_accepted > 50);
    CHECK(st.spec_accepted < st.spec_drafted);  // some rejected too: both paths ran
    CHECK(st.decode_steps < 32 * 23);           // fewer steps than tokens
    require_no_leak(e);
  }
  SECTION("batched, every other request not speculating, pages of 1 and 16, chunked prefill") {
    const int32_t page = GENERATE(1, 16);
    INFO("page size " << page);
    CHECK(batched_beside_plain(prompts, solo, page, speculative(config(48), 6)).spec_accepted > 20);
  }
}

TEST_CASE("A predicted output drafts for its request with speculation off or on: greedy outputs are plain decoding's, an exact prediction's drafts nearly all kept, none drafted under n_max 0", "[scheduler][speculative][prediction]") {
  std::vector<Ids> prompts = grounded_prompts(8);
  for (const Ids& p : shared_prefix_prompts(8)) prompts.push_back(p);
  const auto solo = solo_outputs(prompts, 24);
  // Request i's prediction: its own output (i % 4 == 0), that output with
  // two tokens edited (1), another request's output (2), none (3).
  auto predicted = [&](uint64_t i) {
    Request r = make(i, prompts[i], 24);
    if (i % 4 == 0) r.prediction = solo.at(i);
    if (i % 4 == 1) {
      r.prediction = solo.at(i);
      r.prediction[8] = r.prediction[3];
      r.prediction[9] = r.prediction[4];
    }
    if (i % 4 == 2) r.prediction = solo.at((i + 5) % prompts.size());
    return r;
  };
  const bool ngram = GENERATE(false, true);
  const int32_t page = GENERATE(1, 16);
  INFO((ngram ? "n-gram speculation" : "speculation off") << ", page size " << page);
  SchedulerConfig c = speculative(config(48), 6);
  if (!ngram) c.speculative.algorithm = SpeculativeAlgorithm::none;
  Engine e(8192, page, c);
  for (size_t i = 0; i < prompts.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(predicted(i)));
  // Request 16: request 0's prediction, but n_max 0.
  Request off = predicted(0);
  off.id = 16;
  off.max_draft_tokens = 0;
  REQUIRE_FALSE(e.scheduler.submit(std::move(off)));
  std::map<uint64_t, Ids> got;
  std::map<uint64_t, std::pair<int32_t, int32_t>> drafts;  // id -> drafted, accepted
  for (int step = 0; !e.scheduler.idle(); ++step) {
    checked(e)(step);
    for (const auto& ev : e.scheduler.step()) {
      if (ev.token >= 0) got[ev.id].push_back(ev.token);
      drafts[ev.id] = {ev.draft_tokens, ev.accepted_draft_tokens};
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i << ": drafted " << drafts[i].first << ", kept " << drafts[i].second);
    CHECK(got[i] == solo.at(i));
    // Every token after the first is in an exact prediction, drafted from
    // its start: every draft kept (but for rounding between batch shapes),
    // most tokens drafted (how many is the steps' business: a decode that
    // rides in a prefill step carries none, and none go past max_tokens).
    if (i % 4 == 0) {
      CHECK(drafts[i].second >= drafts[i].first - 1);
      CHECK(drafts[i].second >= 12);
    }
    if (i % 4 == 1) CHECK(drafts[i].second >= 5);  // the edit costs a draft or two
    if (i % 4 == 3 && !ngram) CHECK(drafts[i].first == 0);
  }
  CHECK(got[16] == solo.at(0));
  CHECK(drafts[16].first == 0);
  require_no_leak(e);
}

TEST_CASE("With a shared n-gram table, a request drafts what earlier ones of its tenant wrote: outputs are plain decoding's and a repeated question's drafts are kept", "[scheduler][speculative][ngram_table]") {
  const std::vector<Ids> prompts = shared_prefix_prompts(8);
  const auto solo = solo_outputs(prompts, 24);
  SchedulerConfig c = speculative(config(), 6);
  c.speculative.ngram_capacity = 1 << 16;
  Engine e(8192, 16, c);
  // Round 1 fills the table; round 2 asks the same questions again (ids
  // 8..15), batched. Their own prompts do not hold the answers: only the
  // table does, and only for the tenant that wrote them.
  const bool same_tenant = GENERATE(true, false);
  INFO((same_tenant ? "round 2 from the same tenant" : "round 2 from another tenant"));
  for (uint64_t round = 0; round < 2; ++round) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      Request r = make(round * 8 + i, prompts[i], 24);
      r.tenant = round == 1 && !same_tenant ? 2 : 1;
      REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
    }
    const int64_t table_before = e.scheduler.stats().spec_table_drafted;
    const int64_t kept_before = e.scheduler.stats().spec_accepted;
    auto got = e.drain(checked(e));
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("round " << round << ", request " << i);
      CHECK(got[round * 8 + i].first == solo.at(i));
    }
    const auto& st = e.scheduler.stats();
    INFO("round " << round << ": table drafted " << st.spec_table_drafted - table_before << ", kept in all "
                  << st.spec_accepted - kept_before);
    if (round == 1 && same_tenant) {
      CHECK(st.spec_table_drafted - table_before > 40);
      CHECK(st.spec_accepted - kept_before > 40);
    }
    if (round == 1 && !same_tenant) CHECK(st.spec_table_drafted - table_before == 0);
  }
  require_no_leak(e);
}

TEST_CASE("A prediction or draft limit out of range is refused, naming it", "[scheduler][speculative][prediction]") {
  SchedulerConfig c = config();
  c.vocab_size = weights().config.vocab_size;
  Engine e(256, 1, c);
  Request r = make(1, Ids{1, 2, 3}, 4);
  r.max_draft_tokens = kMaxDraftTokens + 1;
  CHECK(e.scheduler.submit(r)->find("speculative.n_max") != std::string::npos);
  r.max_draft_tokens = -2;
  CHECK(e.scheduler.submit(r));
  r.max_draft_tokens = kMaxDraftTokens;
  r.prediction = Ids{5, weights().config.vocab_size};
  CHECK(e.scheduler.submit(r)->find("the prediction holds token id") != std::string::npos);
  r.prediction.assign(static_cast<size_t>(kMaxPredictionTokens) + 1, 5);
  CHECK(e.scheduler.submit(r)->find("at most 32768") != std::string::npos);
  r.prediction = Ids{5, 6};
  CHECK_FALSE(e.scheduler.submit(r));
  e.drain();
  require_no_leak(e);
}

TEST_CASE("With speculation, seeded sampling with penalties gives plain decoding's tokens", "[scheduler][speculative]") {
  const std::vector<Ids> prompts = grounded_prompts(8);
  auto sampled = [&](uint64_t id, const Ids& prompt) {
    Request r = make(id, prompt, 32);
    r.sampling.temperature = 0.7f;
    r.sampling.top_p = 0.95f;
    r.sampling.frequency_penalty = 0.3f;
    r.sampling.repetition_penalty = 1.1f;
    r.sampling.seed = 1000 + id;
    r.sampling.has_seed = true;
    return r;
  };
  std::map<uint64_t, Ids> plain;
  {
    Engine e(4096, 1, config());
    for (size_t i = 0; i < prompts.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(sampled(i, prompts[i])));
    for (auto& [id, out] : e.drain()) plain[id] = out.first;
  }
  Engine e(4096, 1, speculative(config()));
  for (size_t i = 0; i < prompts.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(sampled(i, prompts[i])));
  auto got = e.drain(checked(e));
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(got[i].first == plain[i]);
  }
  CHECK(e.scheduler.stats().spec_verifies() > 0);
  require_no_leak(e);
}

TEST_CASE("With speculation, structured output keeps to its schema and to plain decoding's tokens", "[scheduler][speculative]") {
  const int32_t vocab = weights().config.vocab_size;
  auto compiler = std::make_shared<ConstraintCompiler>(token_bytes(tokenizer(), vocab), Ids{*tokenizer().eos_id()}, 1);
  ConstraintSpec spec{ConstraintKind::json_schema,
                      R"({"type":"object","properties":{"name":{"type":"string"},"city":{"type":"string"},)"
                      R"("also_name":{"type":"string"}},"required":["name","city","also_name"]})"};
  ChatTemplate tpl = ChatTemplate::for_model(tokenizer(), nullptr);
  const std::vector<ChatMessage> ask{
      {"user", R"(Copy this JSON exactly: {"name": "Maria Lopez", "city": "Madrid", "also_name": "Maria Lopez"})"}};
  const Ids prompt = tokenizer().encode(tpl.render(ask), false, true);
  auto run = [&](SchedulerConfig c) {
    c.constraints = compiler;
    c.vocab_size = vocab;
    Engine e(4096, 1, c);
    for (uint64_t id = 0; id < 3; ++id) {
      Request r = make(id, prompt, 80);
      r.constraint_spec = spec;
      if (id > 0) {  // two sampled ones beside the greedy one
        r.sampling.temperature = 0.8f;
        r.sampling.seed = id;
        r.sampling.has_seed = true;
      }
      REQUIRE_FALSE(e.scheduler.submit(std::move(r)));
    }
    auto got = e.drain(checked(e));
    require_no_leak(e);
    return std::make_pair(got, e.scheduler.stats());
  };
  auto [plain, plain_stats] = run(config());
  auto [fast, fast_stats] = run(speculative(config()));
  for (uint64_t id = 0; id < 3; ++id) {
    INFO("request " << id);
    CHECK(fast[id].first == plain[id].first);
    CHECK(fast[id].second == plain[id].second);
    if (fast[id].second == FinishReason::stop) {
      const std::string text = tokenizer().decode(fast[id].first);
      CHECK(text.find("\"also_name\"") != std::string::npos);
    }
  }
  INFO("drafted " << fast_stats.spec_drafted << ", accepted " << fast_stats.spec_accepted);
  CHECK(fast_stats.spec_accepted > 0);
}

TEST_CASE("Aborts and retraction in the middle of speculation leak nothing, and the rest decode as alone", "[scheduler][speculative]") {
  const std::vector<Ids> prompts = grounded_prompts(8);
  const auto solo = solo_outputs(prompts, 32);
  const int32_t page = GENERATE(1, 16);
  // N-gram drafts, then the default model drafting for itself.
  const bool by_model = GENERATE(false, true);
  INFO("page size " << page << (by_model ? ", draft model" : ", n-gram"));
  // 40-60 prompt tokens and 32 more each, 8 of them: 320 rows cannot hold
  // them all at once.
  Engine e(320, page, by_model ? drafted(config(), 8) : speculative(config(), 8), 40, {}, by_model ? &weights() : nullptr);
  for (size_t i = 0; i < prompts.size(); ++i) REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], 32)));
  std::mt19937 rng(static_cast<uint32_t>(page));
  std::set<uint64_t> aborted;
  auto check_and_abort = checked(e);
  auto got = e.drain([&](int step) {
    check_and_abort(step);
    // Two requests aborted at random steps once decoding has started.
    if (step > 6 && aborted.size() < 2 && rng() % 5 == 0) {
      const uint64_t id = rng() % prompts.size();
      aborted.insert(id);
      e.scheduler.abort(id);
    }
  });
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (aborted.count(i)) continue;
    INFO("request " << i);
    CHECK(got[i].first == solo.at(i));
  }
  CHECK(e.scheduler.stats().retractions > 0);
  CHECK(e.scheduler.stats().spec_verifies() > 0);
  require_no_leak(e);
}

TEST_CASE("With the default model drafting for itself, greedy outputs are plain decoding's, alone and batched beside requests that do not speculate, and nearly every draft is kept", "[scheduler][speculative][draft]") {
  std::vector<Ids> prompts = grounded_prompts(16);
  for (const Ids& p : shared_prefix_prompts(16)) prompts.push_back(p);
  const auto solo = solo_outputs(prompts, 24);
  SECTION("alone") {
    Engine e(4096, 1, drafted(config()), 40, {}, &weights());
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("request " << i);
      REQUIRE_FALSE(e.scheduler.submit(make(i, prompts[i], 24)));
      CHECK(e.drain(checked(e))[i].first == solo.at(i));
    }
    const auto& st = e.scheduler.stats();
    INFO("drafted " << st.spec_drafted << ", accepted " << st.spec_accepted << " in " << st.spec_verifies() << " verifies");
    // The same weights propose what the target samples, but for rounding
    // between batch shapes.
    CHECK(st.spec_accepted >= st.spec_drafted * 9 / 10);
    CHECK(st.decode_steps < 32 * 23 / 3);
    require_no_leak(e);
  }
  SECTION("batched, every other request not speculating, pages of 1 and 16, chunked prefill") {
    const int32_t page = GENERATE(1, 16);
    INFO("page size " << page);
    const SchedulerStats st = batched_beside_plain(prompts, solo, page, drafted(config(48), 6), &weights());
    INFO("drafted " << st.spec_drafted << ", accepted " << st.spec_accepted);
    CHECK(st.spec_accepted >= st.spec_drafted * 9 / 10);
  }
}

TEST_CASE("A draft model of another shape changes no token: seeded sampling with penalties, greedy and structured output are plain decoding's", "[scheduler][speculative][draft]") {
  const std::vector<Ids> prompts = grounded_prompts(8);
  const int32_t vocab = weights().config.vocab_size;
  auto compiler = std::make_shared<ConstraintCompiler>(token_bytes(tokenizer(), vocab), Ids{*tokenizer().eos_id()}, 1);
  const ConstraintSpec spec{ConstraintKind::json_schema,
                            R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})"};
  // Request i: greedy (i % 3 == 0), seeded with penalties, or greedy under
  // a JSON schema (i % 3 == 2, which the draft model leaves alone).
  auto request = [&](uint64_t id) {
    Request r = make(id, prompts[id % prompts.size()], 32);
    if (id % 3 == 1) {
      r.sampling.temperature = 0.7f;
      r.sampling.top_p = 0.95f;
      r.sampling.frequency_penalty = 0.3f;
      r.sampling.repetition_penalty = 1.1f;
      r.sampling.seed = 1000 + id;
      r.sampling.has_seed = true;
    } else if (id % 3 == 2) {
      r.constraint_spec = spec;
    }
    return r;
  };
  auto run = [&](SchedulerConfig c, const LlamaWeights* draft, std::map<uint64_t, int32_t>* drafted_for = nullptr) {
    c.constraints = compiler;
    c.vocab_size = vocab;
    Engine e(4096, 1, c, 40, {}, draft);
    for (uint64_t id = 0; id < 12; ++id) REQUIRE_FALSE(e.scheduler.submit(request(id)));
    std::map<uint64_t, Ids> out;
    for (int step = 0; !e.scheduler.idle(); ++step) {
      checked(e)(step);
      for (const auto& ev : e.scheduler.step()) {
        if (ev.token >= 0) out[ev.id].push_back(ev.token);
        if (drafted_for) (*drafted_for)[ev.id] = ev.draft_tokens;
      }
    }
    require_no_leak(e);
    return std::make_pair(out, e.scheduler.stats());
  };
  const auto [plain, plain_stats] = run(config(), nullptr);
  std::map<uint64_t, int32_t> drafted_for;
  const auto [fast, fast_stats] = run(drafted(config()), &odd_draft(), &drafted_for);
  for (uint64_t id = 0; id < 12; ++id) {
    INFO("request " << id);
    CHECK(fast.at(id) == plain.at(id));
    if (id % 3 == 2) CHECK(drafted_for[id] == 0);
  }
  INFO("drafted " << fast_stats.spec_drafted << ", accepted " << fast_stats.spec_accepted);
  CHECK(fast_stats.spec_verifies() > 0);
  // Its proposals are noise and nearly all rejected (on this clock rows
  // cost nothing, so the requests go on drafting: every rejection path runs).
  CHECK(fast_stats.spec_drafted > 200);
  CHECK(fast_stats.spec_accepted * 2 < fast_stats.spec_drafted);
}

TEST_CASE("Requests with LoRA adapters share prefixes only with their own adapter at its own scale, batch as alone, and an adapter in use cannot leave", "[scheduler][lora]") {
  SchedulerConfig sc = config();
  sc.vocab_size = weights().config.vocab_size;
  const ModelConfig& mc = weights().config;
  const auto dir = std::filesystem::temp_directory_path();
  const std::string pa = (dir / "actorlm_sched_lora_a.gguf").string(), pb = (dir / "actorlm_sched_lora_b.gguf").string();
  test::write_adapter(pa, mc, {0, 2, 6}, 8, 16.0f, 21, false, 0.3f);
  test::write_adapter(pb, mc, {1, 3, 4}, 4, 0.0f, 22, false, 0.1f);
  auto with_adapters = [&](Engine& e) {
    e.runner.add_adapter(1, load_lora_adapter(pa, mc));
    e.runner.add_adapter(2, load_lora_adapter(pb, mc));
    e.scheduler.add_adapter(1);
    e.scheduler.add_adapter(2);
  };
  const int32_t page = GENERATE(1, 16);
  INFO("page size " << page);
  const std::vector<Ids> prompts = shared_prefix_prompts(3);

  // One at a time: what each (prompt, adapter) gives alone, and what it
  // finds cached.
  Engine one(4096, page, sc);
  with_adapters(one);
  // prompt, adapter, its scale, an adapter stacked on it at scale 1 (0: none)
  using Key = std::tuple<size_t, int32_t, float, int32_t>;
  std::map<Key, Ids> alone;
  uint64_t id = 1;
  auto run = [&](size_t p, int32_t adapter, float scale = 1, int32_t stacked = 0) {
    Request r = make(id, prompts[p], 8);
    r.stop.ignore_eos = true;
    r.adapter = adapter;
    r.adapter_scale = scale;
    if (stacked) r.stacked = {{stacked, 1.0f}};
    REQUIRE_FALSE(one.scheduler.submit(std::move(r)));
    Outcome out;
    while (!one.scheduler.idle()) {
      for (const auto& ev : one.scheduler.step()) {
        if (ev.id != id || ev.token < 0) continue;
        out.tokens.push_back(ev.token);
        out.cached = ev.cached_tokens;
      }
    }
    ++id;
    return out;
  };
  const Outcome base = run(0, 0);
  const Outcome first = run(0, 1);  // the base model's rows of the same prompt are not its own
  CHECK(first.cached == 0);
  CHECK(first.tokens != base.tokens);
  const Outcome again = run(0, 1);  // its own are
  CHECK(again.cached >= static_cast<int32_t>(prompts[0].size()) - page);
  CHECK(again.tokens == first.tokens);
  const Outcome other = run(0, 2);
  CHECK(other.cached == 0);
  CHECK(run(0, 0).cached > 0);  // and the base model's prefix is still the base model's
  // At another scale an adapter's KV is its own: it matches nothing (not
  // even the adapter's rows at scale 1) and leaves nothing cached.
  const Outcome scaled = run(0, 1, -2.0f);
  CHECK(scaled.cached == 0);
  CHECK(scaled.tokens != first.tokens);
  const Outcome scaled_again = run(0, 1, -2.0f);
  CHECK(scaled_again.cached == 0);
  CHECK(scaled_again.tokens == scaled.tokens);
  CHECK(run(0, 1).cached >= static_cast<int32_t>(prompts[0].size()) - page);
  // Two adapters stacked: their KV is their own too.
  const Outcome both = run(0, 1, 1, 2);
  CHECK(both.cached == 0);  // (its logits are the model test's business)
  const Outcome both_again = run(0, 1, 1, 2);
  CHECK(both_again.cached == 0);
  CHECK(both_again.tokens == both.tokens);
  {
    Request hold = make(id++, prompts[0], 2);
    hold.adapter = 1;
    hold.stacked = {{2, 1.0f}};
    REQUIRE_FALSE(one.scheduler.submit(std::move(hold)));
    CHECK_FALSE(one.scheduler.remove_adapter(2));  // in use, if only stacked
    while (!one.scheduler.idle()) one.scheduler.step();
  }
  struct Kind {
    int32_t adapter;
    float scale;
    int32_t stacked;
  };
  const std::vector<Kind> kinds{{0, 1.0f, 0}, {1, 1.0f, 0}, {2, 1.0f, 0}, {1, -2.0f, 0}, {2, 0.5f, 0}, {1, 1.0f, 2}};
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (const Kind& k : kinds) alone[{p, k.adapter, k.scale, k.stacked}] = run(p, k.adapter, k.scale, k.stacked).tokens;
  }
  require_no_leak(one);

  // All eighteen at once, adapters, scales and stacks interleaved in the batch.
  Engine all(4096, page, sc);
  with_adapters(all);
  std::map<uint64_t, Key> who;
  for (size_t p = 0; p < prompts.size(); ++p) {
    for (const Kind& k : {kinds[1], kinds[5], kinds[3], kinds[0], kinds[4], kinds[2]}) {
      Request r = make(100 + who.size(), prompts[p], 8);
      r.stop.ignore_eos = true;
      r.adapter = k.adapter;
      r.adapter_scale = k.scale;
      if (k.stacked) r.stacked = {{k.stacked, 1.0f}};
      who[r.id] = {p, k.adapter, k.scale, k.stacked};
      REQUIRE_FALSE(all.scheduler.submit(std::move(r)));
    }
  }
  // An adapter in use cannot leave; an unknown one is refused.
  CHECK_FALSE(all.scheduler.remove_adapter(1));
  Request unknown = make(999, prompts[0], 4);
  unknown.adapter = 3;
  CHECK(*all.scheduler.submit(unknown) == "no LoRA adapter with id 3 is loaded");
  for (float bad : {0.0f, 16.5f, -17.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Request r = make(998, prompts[0], 4);
    r.adapter = 1;
    r.adapter_scale = bad;
    CHECK(*all.scheduler.submit(r) == "an adapter's scale must be non-zero and within [-16, 16]");
  }
  Request no_adapter = make(997, prompts[0], 4);
  no_adapter.adapter_scale = 0.5f;
  CHECK(*all.scheduler.submit(no_adapter) == "an adapter scale or further adapters need an adapter");
  no_adapter.adapter_scale = 1;
  no_adapter.stacked = {{1, 1.0f}};
  CHECK(*all.scheduler.submit(no_adapter) == "an adapter scale or further adapters need an adapter");
  Request twice = make(996, prompts[0], 4);
  twice.adapter = 1;
  twice.stacked = {{2, 1.0f}, {1, 0.5f}};
  CHECK(*all.scheduler.submit(twice) == "adapter 1 is named twice");
  twice.stacked = {{3, 1.0f}};
  CHECK(*all.scheduler.submit(twice) == "no LoRA adapter with id 3 is loaded");
  twice.stacked = {{2, 40.0f}};
  CHECK(*all.scheduler.submit(twice) == "an adapter's scale must be non-zero and within [-16, 16]");
  twice.stacked.assign(kMaxStackedAdapters + 1, {2, 1.0f});
  CHECK(*all.scheduler.submit(twice) == "a request runs with at most 8 adapters");
  auto got = all.drain([&](int) { CHECK(all.kv.check_running(all.scheduler.running_kv()).empty()); });
  for (const auto& [rid, k] : who) {
    INFO("prompt " << std::get<0>(k) << " adapter " << std::get<1>(k) << " scale " << std::get<2>(k) << " stacked "
                   << std::get<3>(k));
    CHECK(got[rid].first == alone[k]);
  }
  CHECK(all.scheduler.remove_adapter(1));
  Request gone = make(1000, prompts[0], 4);
  gone.adapter = 1;
  CHECK(all.scheduler.submit(gone));
  require_no_leak(all);
  std::filesystem::remove(pa);
  std::filesystem::remove(pb);
}

TEST_CASE("An adapter's prompt goes to the KV tiers under its file's lineage and comes back for that adapter only, also in a fresh engine under another id", "[scheduler][lora]") {
  // The tiers below the pool key an adapter's blocks by its file's
  // fingerprint and the scale it was loaded at (kv_adapter_lineage), not by
  // its id, which a restart or a reload changes: the same file at the same
  // scale finds them, in this engine or the next; the base model, another
  // adapter or the same file at another scale never does.
  SchedulerConfig sc = config();
  sc.vocab_size = weights().config.vocab_size;
  const ModelConfig& mc = weights().config;
  const auto tmp = std::filesystem::temp_directory_path();
  const auto dir = tmp / ("actorlm-sched-lora-tiers-" + std::to_string(std::random_device{}()));
  const std::string pa = (tmp / "actorlm_sched_tier_lora_a.gguf").string(), pb = (tmp / "actorlm_sched_tier_lora_b.gguf").string();
  test::write_adapter(pa, mc, {0, 2, 6}, 8, 16.0f, 31, false, 0.3f);
  test::write_adapter(pb, mc, {1, 3, 4}, 4, 0.0f, 32, false, 0.1f);
  const uint64_t la = kv_adapter_lineage(model_fingerprint(pa), 1.0f), lb = kv_adapter_lineage(model_fingerprint(pb), 1.0f);
  const Ids prompt = tier_prompt(), other = other_prompt();
  const int32_t loadable = static_cast<int32_t>((prompt.size() - 1) / 16 * 16);
  // Two of the four pairings (each runs the real model a dozen times).
  auto [page, policy] = GENERATE(std::pair{16, HiCacheWritePolicy::write_through}, std::pair{1, HiCacheWritePolicy::write_back});
  INFO("page " << page << ", " << write_policy_name(policy));
  uint64_t next = 1;
  auto run = [&](Engine& e, const Ids& p, int32_t adapter) {
    Outcome out = run_one(e, next++, p, 6, adapter);
    if (e.tiers) e.tiers->drain();  // its stores, done on the tiers' thread
    return out;
  };
  // What each computes in a pool big enough to keep everything.
  Engine plain(4096, page, sc);
  plain.runner.add_adapter(1, load_lora_adapter(pa, mc));
  plain.runner.add_adapter(2, load_lora_adapter(pb, mc));
  plain.scheduler.add_adapter(1);
  plain.scheduler.add_adapter(2);
  const Outcome base = run(plain, prompt, 0), with_a = run(plain, prompt, 1), with_b = run(plain, prompt, 2);
  REQUIRE(with_a.tokens != base.tokens);
  {
    // A pool of 160 tokens: each prompt pushes the one before out.
    Engine e(160, page, sc, 40, {.disk_dir = dir.string(), .host_bytes = int64_t{1} << 28, .policy = policy});
    e.runner.add_adapter(1, load_lora_adapter(pa, mc));
    e.runner.add_adapter(2, load_lora_adapter(pb, mc));
    e.scheduler.add_adapter(1, la);
    e.scheduler.add_adapter(2, lb);
    CHECK(run(e, prompt, 1).tokens == with_a.tokens);
    run(e, other, 0);
    CHECK(e.host->stats().stored > 0);  // the adapter's blocks, after its prefill or as the pool let them go
    auto tier_hits = [&] { return e.scheduler.stats().host_hit_tokens + e.scheduler.stats().disk_hit_tokens; };
    const Outcome b_model = run(e, prompt, 0);
    CHECK(tier_hits() == 0);  // not the adapter's blocks (at most the pool's match with `other`'s first token)
    CHECK(b_model.tokens == base.tokens);
    const Outcome b_adapter = run(e, prompt, 2);
    CHECK(tier_hits() == 0);
    CHECK(b_adapter.cached == 0);
    CHECK(b_adapter.tokens == with_b.tokens);
    run(e, other, 0);
    const int64_t hits = e.scheduler.stats().host_hit_tokens;
    const Outcome again = run(e, prompt, 1);
    CHECK(again.cached == loadable);
    CHECK(again.tokens == with_a.tokens);
    CHECK(again.first_logprob == with_a.first_logprob);  // bit for bit
    CHECK(e.scheduler.stats().host_hit_tokens > hits);
    CHECK(e.tiers->check().empty());
    require_no_leak(e);
  }
  if (policy == HiCacheWritePolicy::write_through) {
    // Everything was written through to disk. A fresh engine loads a under
    // another id, from its file's lineage; at another scale a's KV is
    // another's; an adapter with no lineage keeps out of the tiers.
    Engine f(4096, page, sc, 40, {.disk_dir = dir.string()});
    f.runner.add_adapter(7, load_lora_adapter(pa, mc));
    f.runner.add_adapter(8, load_lora_adapter(pa, mc, 0.5f));
    f.runner.add_adapter(9, load_lora_adapter(pb, mc));
    f.scheduler.add_adapter(7, la);
    f.scheduler.add_adapter(8, kv_adapter_lineage(model_fingerprint(pa), 0.5f));
    f.scheduler.add_adapter(9);
    const Outcome half = run(f, prompt, 8);
    CHECK(half.cached == 0);
    const int64_t stored = f.disk->stats().stored;
    const Outcome unnamed = run(f, prompt, 9);
    CHECK(unnamed.cached == 0);
    CHECK(unnamed.tokens == with_b.tokens);
    CHECK(f.disk->stats().stored == stored);  // nothing of it written
    const Outcome loaded = run(f, prompt, 7);
    CHECK(loaded.cached == loadable);
    CHECK(loaded.tokens == with_a.tokens);
    CHECK(loaded.first_logprob == with_a.first_logprob);
    CHECK(f.scheduler.stats().disk_hit_tokens == loadable);
    require_no_leak(f);
  }
  std::filesystem::remove_all(dir);
  std::filesystem::remove(pa);
  std::filesystem::remove(pb);
}
