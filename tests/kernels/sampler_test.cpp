#include "kernels/cpu/sampler.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>
#include <vector>

using namespace actorlm;
using V = std::vector<float>;
using Ids = std::vector<int32_t>;

namespace {

SamplingParams random_params(float temperature = 1.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = 1234;
  p.has_seed = true;
  return p;
}

std::map<int32_t, int> histogram(const V& logits, const SamplingParams& p, int n) {
  std::map<int32_t, int> h;
  for (int s = 0; s < n; ++s) ++h[sample_token(logits, p, {}, {}, static_cast<uint64_t>(s)).token];
  return h;
}

}  // namespace

TEST_CASE("Greedy picks the argmax and top_k = 1 is greedy", "[sampler]") {
  V logits{0.1f, 2.0f, -1.0f, 1.9f};
  SamplingParams p;
  p.temperature = 0;
  CHECK(sample_token(logits, p, {}, {}, 0).token == 1);
  SamplingParams k1 = random_params();
  k1.top_k = 1;
  for (int s = 0; s < 50; ++s) CHECK(sample_token(logits, k1, {}, {}, static_cast<uint64_t>(s)).token == 1);
}

TEST_CASE("Sampling follows the softmax at temperature 1", "[sampler]") {
  // p = softmax(log([0.5, 0.3, 0.2])) = [0.5, 0.3, 0.2].
  V logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  auto h = histogram(logits, random_params(), 20000);
  CHECK(h[0] / 20000.0 == Approx(0.5).margin(0.015));
  CHECK(h[1] / 20000.0 == Approx(0.3).margin(0.015));
  CHECK(h[2] / 20000.0 == Approx(0.2).margin(0.015));
}

TEST_CASE("Top-k, top-p and min-p restrict the support", "[sampler]") {
  V logits{std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  SamplingParams k2 = random_params();
  k2.top_k = 2;
  auto h = histogram(logits, k2, 5000);
  CHECK(h.size() == 2);
  CHECK(h.count(0) + h.count(1) == 2);
  CHECK(h[0] / 5000.0 == Approx(0.4 / 0.7).margin(0.03));  // renormalised over the two kept

  SamplingParams tp = random_params();
  tp.top_p = 0.65f;  // 0.4 + 0.3 reaches it: {0, 1}
  h = histogram(logits, tp, 5000);
  CHECK(std::set<int32_t>{0, 1} == std::set<int32_t>{h.begin()->first, h.rbegin()->first});
  CHECK(h.size() == 2);

  SamplingParams mp = random_params();
  mp.min_p = 0.6f;  // keep p >= 0.24: {0, 1}
  h = histogram(logits, mp, 5000);
  CHECK(h.size() == 2);
  CHECK(h.count(2) == 0);
}

TEST_CASE("Low temperature concentrates on the best token", "[sampler]") {
  V logits{1.0f, 1.5f, 0.0f};
  auto h = histogram(logits, random_params(0.05f), 2000);
  CHECK(h[1] >= 1990);
}

TEST_CASE("Penalties change the logits exactly as specified", "[sampler]") {
  // Token 0 leads by 0.5; it appeared twice in the output.
  V logits{2.0f, 1.5f, -1.0f};
  SamplingParams p;
  p.temperature = 0;
  Ids out{0, 0};
  p.frequency_penalty = 0.3f;  // 2.0 - 0.6 = 1.4 < 1.5
  CHECK(sample_token(logits, p, {}, out, 0).token == 1);
  p.frequency_penalty = 0.2f;  // 2.0 - 0.4 = 1.6 > 1.5
  CHECK(sample_token(logits, p, {}, out, 0).token == 0);
  p.frequency_penalty = 0;
  p.presence_penalty = 0.6f;  // once, not per occurrence: 1.4
  CHECK(sample_token(logits, p, {}, out, 0).token == 1);
  p.presence_penalty = 0;
  p.repetition_penalty = 1.5f;  // 2.0 / 1.5 = 1.33 < 1.5, and it counts prompt tokens too
  CHECK(sample_token(logits, p, Ids{0}, {}, 0).token == 1);
  // A negative logit is multiplied: token 2 goes further down, never up.
  V neg{-1.0f, -1.2f};
  CHECK(sample_token(neg, p, Ids{0}, {}, 0).token == 1);  // -1.5 < -1.2
}

TEST_CASE("Same seed and step give the same token, other seeds differ", "[sampler]") {
  V logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.7));
  SamplingParams a = random_params();
  Ids first, again, other;
  SamplingParams b = a;
  b.seed = 99;
  for (uint64_t s = 0; s < 64; ++s) {
    first.push_back(sample_token(logits, a, {}, {}, s).token);
    again.push_back(sample_token(logits, a, {}, {}, s).token);
    other.push_back(sample_token(logits, b, {}, {}, s).token);
  }
  CHECK(first == again);
  CHECK(first != other);
}

TEST_CASE("Logprobs are the raw model distribution", "[sampler]") {
  V logits{std::log(0.5f), std::log(0.25f), std::log(0.25f)};
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 1.0f;  // processing must not change the reported logprob
  auto r = sample_token(logits, p, {}, {}, 0, 2);
  CHECK(r.token == 0);
  CHECK(r.logprob == Approx(std::log(0.5)).margin(1e-5));
  REQUIRE(r.top.size() == 2);
  CHECK(r.top[0].first == 0);
  CHECK(r.top[1].second == Approx(std::log(0.25)).margin(1e-5));
}

TEST_CASE("NaN and infinite logits are handled without undefined behaviour", "[sampler]") {
  V logits{NAN, 1.0f, -INFINITY};
  SamplingParams p = random_params();
  for (uint64_t s = 0; s < 100; ++s) CHECK(sample_token(logits, p, {}, {}, s).token == 1);
  V dead{NAN, -INFINITY};
  CHECK_THROWS_AS(sample_token(dead, p, {}, {}, 0), std::domain_error);
  CHECK_THROWS_AS(sample_token(V{}, p, {}, {}, 0), std::invalid_argument);
}

TEST_CASE("Out-of-range parameters are rejected by validate", "[sampler]") {
  SamplingParams p;
  CHECK_FALSE(p.validate());
  p.top_p = 0;
  CHECK(p.validate());
  p = SamplingParams{};
  p.temperature = NAN;
  CHECK(p.validate());
  p = SamplingParams{};
  p.temperature = -1;
  CHECK(p.validate());
  p = SamplingParams{};
  p.repetition_penalty = 0;
  CHECK(p.validate());
  p = SamplingParams{};
  p.frequency_penalty = 3;
  CHECK(p.validate());
  p = SamplingParams{};
  p.top_k = -5;
  CHECK(p.validate());
}

#include "kernels/cpu/cpu_backend.hpp"

TEST_CASE("The backend samples each row as the sampler does, in request order", "[sampler]") {
  cpu::CpuBackend backend(2);
  const int32_t vocab = 50, rows = 9;
  std::vector<float> logits(static_cast<size_t>(vocab * rows));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.37));
  std::vector<SampleRequest> reqs;
  Ids outputs{3, 4, 3};
  for (int32_t r = 0; r < rows; ++r) {
    SamplingParams p = random_params(0.8f);
    p.seed = static_cast<uint64_t>(r);
    p.frequency_penalty = 0.5f;
    reqs.push_back({p, {}, outputs, static_cast<uint64_t>(r * 3), 2, {}});
  }
  auto got = backend.sample(logits.data(), vocab, reqs);
  REQUIRE(got.size() == static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) {
    auto want = sample_token(std::span<const float>(logits.data() + r * vocab, static_cast<size_t>(vocab)),
                             reqs[static_cast<size_t>(r)].params, {}, outputs, static_cast<uint64_t>(r * 3), 2);
    CHECK(got[static_cast<size_t>(r)].token == want.token);
    CHECK(got[static_cast<size_t>(r)].logprob == want.logprob);
    CHECK(got[static_cast<size_t>(r)].top == want.top);
  }
}

TEST_CASE("score_token reports a given token's log-softmax and the top alternatives", "[sampler]") {
  const V logits = {1.0f, 3.0f, -2.0f, 0.5f, NAN};
  double z = 0;
  for (float v : {1.0f, 3.0f, -2.0f, 0.5f}) z += std::exp(static_cast<double>(v));
  SampleResult r = score_token(logits, 3, 2);
  CHECK(r.token == 3);
  CHECK(r.logprob == Approx(0.5 - std::log(z)).epsilon(1e-6));
  REQUIRE(r.top.size() == 2);
  CHECK(r.top[0].first == 1);
  CHECK(r.top[1].first == 0);
  CHECK(r.top[0].second == Approx(3.0 - std::log(z)).epsilon(1e-6));
  // The same figures sampling reports for the token it picks.
  SamplingParams greedy;
  greedy.temperature = 0;
  SampleResult s = sample_token(logits, greedy, {}, {}, 0, 2);
  SampleResult scored = score_token(logits, s.token, 2);
  CHECK(s.logprob == scored.logprob);
  CHECK(s.top == scored.top);
  CHECK(score_token(logits, 4, 0).logprob == -INFINITY);  // NaN counts as -inf
  CHECK_THROWS_AS(score_token(logits, 5, 0), std::invalid_argument);
  CHECK_THROWS_AS(score_token(logits, -1, 0), std::invalid_argument);
}
