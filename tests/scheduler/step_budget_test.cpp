// The step time budget (scheduler/step_budget.hpp): its estimates from
// measured steps, the prefill it allows, and the scheduler keeping to it on
// the real model with a fake clock (outputs unchanged, no step far over the
// target, where without a budget one step holds every prompt).

#include "scheduler/step_budget.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "scheduler/scheduler.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

TEST_CASE("Without a target the budget limits nothing", "[scheduler][step_budget]") {
  StepBudget b;
  CHECK_FALSE(b.enabled());
  b.observe(100, 0, 1.0);
  CHECK_FALSE(b.prefill_tokens(0).has_value());
  CHECK_FALSE(b.prefill_tokens(50).has_value());
}

TEST_CASE("Before any measurement a step prefills the probe", "[scheduler][step_budget]") {
  StepBudget b({.target_seconds = 2.0, .probe_tokens = 48});
  REQUIRE(b.prefill_tokens(0));
  CHECK(*b.prefill_tokens(0) == 48);
  CHECK(*b.prefill_tokens(10) == 48);
  // Decode-only steps teach the per-row cost, not the per-token one.
  b.observe(0, 4, 0.04);
  CHECK(*b.prefill_tokens(0) == 48);
  REQUIRE(b.seconds_per_decode_row());
  CHECK(*b.seconds_per_decode_row() == Approx(0.01));
}

TEST_CASE("The prefill fits the target at the measured cost per token", "[scheduler][step_budget]") {
  StepBudget b({.target_seconds = 1.0, .min_prefill_tokens = 8});
  b.observe(100, 0, 0.5);  // 5 ms a token
  REQUIRE(b.seconds_per_prefill_token());
  CHECK(*b.seconds_per_prefill_token() == Approx(0.005));
  CHECK(*b.prefill_tokens(0) == 200);
  // Decode rows riding along take their share of the target first.
  b.observe(0, 10, 0.1);  // 10 ms a row
  CHECK(*b.prefill_tokens(20) == 160);  // (1.0 - 0.2) / 0.005
  // Rows that fill the target alone still leave the floor for prefill.
  CHECK(*b.prefill_tokens(1000) == 8);
}

TEST_CASE("A mixed step charges its decode rows at their own cost", "[scheduler][step_budget]") {
  StepBudget b({.target_seconds = 1.0, .smoothing = 1.0});
  b.observe(0, 10, 0.1);          // 10 ms a row
  b.observe(100, 10, 0.1 + 0.4);  // the prefill's part: 0.4 s for 100 tokens
  CHECK(*b.seconds_per_prefill_token() == Approx(0.004));
  // Rows costing more than the whole step leave the prefill a tenth of it,
  // never a zero or negative cost.
  b.observe(100, 50, 0.2);
  CHECK(*b.seconds_per_prefill_token() > 0);
  CHECK(*b.prefill_tokens(0) < (int64_t{1} << 40));
}

TEST_CASE("The estimate follows a slower model within a few steps", "[scheduler][step_budget]") {
  StepBudget b({.target_seconds = 1.0, .smoothing = 0.5});
  b.observe(100, 0, 0.1);  // 1 ms a token
  CHECK(*b.prefill_tokens(0) == 1000);
  for (int i = 0; i < 8; ++i) b.observe(100, 0, 2.0);  // now 20 ms a token
  CHECK(*b.seconds_per_prefill_token() == Approx(0.02).epsilon(0.01));
  CHECK(*b.prefill_tokens(0) == Approx(50).margin(1));
}

TEST_CASE("Nonsense measurements are ignored and nonsense settings refused", "[scheduler][step_budget]") {
  StepBudget b({.target_seconds = 1.0});
  b.observe(100, 0, 0.0);
  b.observe(100, 0, -1.0);
  b.observe(100, 0, std::numeric_limits<double>::quiet_NaN());
  b.observe(100, 0, std::numeric_limits<double>::infinity());
  b.observe(0, 0, 1.0);
  CHECK_FALSE(b.seconds_per_prefill_token());
  CHECK_FALSE(b.seconds_per_decode_row());
  CHECK_THROWS_AS(StepBudget({.target_seconds = -1.0}), std::invalid_argument);
  CHECK_THROWS_AS(StepBudget({.target_seconds = std::nan("")}), std::invalid_argument);
  CHECK_THROWS_AS(StepBudget({.target_seconds = 1.0, .probe_tokens = 0}), std::invalid_argument);
  CHECK_THROWS_AS(StepBudget({.target_seconds = 1.0, .smoothing = 0.0}), std::invalid_argument);
}

namespace {

const LlamaWeights& weights() {
  static LlamaWeights w = load_llama_weights(default_model_path());
  return w;
}

const Tokenizer& tokenizer() {
  static Tokenizer t = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  return t;
}

// The real model's worker, timed by a fake clock: a prefill token costs 1
// ms, a decode row 2 ms (any request of one new token counts as a row).
struct FakeTimedWorker final : Worker {
  explicit FakeTimedWorker(Worker& inner) : inner(inner) {}
  std::vector<SampleResult> run(const ForwardBatch& batch, std::span<const SampleRequest> sampling) override {
    auto out = inner.run(batch, sampling);
    double cost = 0;
    for (const auto& r : batch.reqs) cost += r.extend_len == 1 ? 0.002 : 0.001 * r.extend_len;
    now += cost;
    steps.push_back(cost);
    tokens += static_cast<int64_t>(batch.token_ids.size());
    return out;
  }
  Worker& inner;
  double now = 0;
  std::vector<double> steps;  // each step's fake seconds
  int64_t tokens = 0;         // tokens computed so far
};

struct Run {
  std::map<uint64_t, Ids> outputs;
  std::vector<double> steps;
};

Run run_all(const std::vector<Ids>& prompts, double target_seconds) {
  SchedulerConfig c;
  c.max_running_requests = 16;
  c.max_prefill_tokens = 4096;
  c.chunked_prefill_size = 512;
  c.max_context = 512;
  c.eos_id = tokenizer().eos_id();
  c.max_step_seconds = target_seconds;
  LocalKvService kv({8192, 1, 24, c.max_context, false});
  ModelRunner runner(LlamaWeights(weights()), std::make_unique<cpu::CpuBackend>(2),
                     {.kv_pool_rows = kv.store().allocator().pool_rows(), .max_requests = 24, .max_context = c.max_context});
  LocalWorker local(runner);
  FakeTimedWorker timed(local);
  c.clock = [&timed] { return timed.now; };
  Scheduler s(c, kv, timed);
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request r;
    r.id = i;
    r.prompt = prompts[i];
    r.sampling.temperature = 0;
    r.stop.max_new_tokens = 8;
    REQUIRE_FALSE(s.submit(std::move(r)));
  }
  Run out;
  while (!s.idle()) {
    for (const auto& e : s.step()) {
      if (e.token >= 0) out.outputs[e.id].push_back(e.token);
    }
  }
  out.steps = timed.steps;
  CHECK(kv.check_idle().empty());
  return out;
}

}  // namespace

TEST_CASE("The scheduler keeps steps near the time budget and outputs unchanged", "[scheduler][step_budget]") {
  ChatTemplate tpl = ChatTemplate::for_model(tokenizer(), nullptr);
  std::vector<Ids> prompts;
  for (int i = 0; i < 8; ++i) {
    std::vector<ChatMessage> m{{"system", "You are a careful assistant for a harbour office; answer briefly and plainly."},
                               {"user", "Describe ship number " + std::to_string(i * 13) + " and its cargo in detail."}};
    prompts.push_back(tokenizer().encode(tpl.render(m), false, true));
  }
  const Run free = run_all(prompts, 0);
  const Run budgeted = run_all(prompts, 0.040);
  CHECK(budgeted.outputs == free.outputs);
  // Without a budget the first step prefills every prompt at once: far over
  // 40 ms at 1 ms a token (what makes this test able to fail).
  REQUIRE_FALSE(free.steps.empty());
  CHECK(free.steps.front() > 0.2);
  // With it, the first step is the probe (64 tokens, nothing measured yet),
  // and no later step goes over the target by more than the decode rows
  // that ride along before a decode-only step has priced them (8 rows, 2 ms).
  REQUIRE(budgeted.steps.size() > 1);
  CHECK(budgeted.steps.front() == Approx(0.064));
  double longest = 0;
  for (size_t i = 1; i < budgeted.steps.size(); ++i) longest = std::max(longest, budgeted.steps[i]);
  INFO("longest budgeted step " << longest << " s over " << budgeted.steps.size() << " steps");
  CHECK(longest <= 0.040 + 8 * 0.002 + 1e-9);
  CHECK(budgeted.steps.size() > free.steps.size());
}

TEST_CASE("An aborted prompt's remaining prefill is never computed", "[scheduler][step_budget]") {
  SchedulerConfig c;
  c.max_prefill_tokens = 4096;
  c.chunked_prefill_size = 512;
  c.max_context = 512;
  c.eos_id = tokenizer().eos_id();
  c.max_step_seconds = 0.040;  // ~40 tokens a step at the fake 1 ms a token
  LocalKvService kv({4096, 1, 8, c.max_context, false});
  ModelRunner runner(LlamaWeights(weights()), std::make_unique<cpu::CpuBackend>(2),
                     {.kv_pool_rows = kv.store().allocator().pool_rows(), .max_requests = 8, .max_context = c.max_context});
  LocalWorker local(runner);
  FakeTimedWorker timed(local);
  c.clock = [&timed] { return timed.now; };
  Scheduler s(c, kv, timed);
  Request r;
  r.id = 7;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "The harbour log lists ship " + std::to_string(i) + ". ";
  r.prompt = tokenizer().encode(text, true, false);
  REQUIRE(r.prompt.size() > 300);
  r.stop.max_new_tokens = 4;
  REQUIRE_FALSE(s.submit(std::move(r)));
  for (int i = 0; i < 3; ++i) CHECK(s.step().empty());  // mid-prefill: no token yet
  const int64_t computed = timed.tokens;
  CHECK(computed < 300);
  s.abort(7);
  auto events = s.step();
  REQUIRE(events.size() == 1);
  CHECK(events[0].finish == FinishReason::abort);
  CHECK(s.idle());
  CHECK(timed.tokens == computed);  // nothing of it ran after the abort
  CHECK(kv.check_idle().empty());
}
