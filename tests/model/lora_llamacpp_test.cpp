// LoRA adapters agree with llama.cpp's: the default model with each of two
// adapters (tests/fixtures/lora, scripts/reference/lora_fixture.py) gives
// llama.cpp's greedy tokens and its largest logits after each prompt. The
// rules are the base model's (llamacpp_agreement_test.cpp): the two engines
// round Q4_1 products differently, so a continuation may part from
// llama.cpp's only where llama.cpp's own top two are nearly tied; logits at
// llama.cpp's 20 largest are within a small share of the row's range.

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "model/lora_adapter.hpp"
#include "tests/model/model_test_support.hpp"
#include "tests/test_paths.hpp"

using namespace actorlm;

namespace {

constexpr double near_tie = 0.35;  // llamacpp_agreement_test.cpp says why

ForwardOutput pass(ModelRunner& r, const std::vector<int32_t>& rows, int32_t prefix, const std::vector<int32_t>& tokens,
                   int32_t adapter) {
  ForwardBatch b;
  ForwardRequest q{0, prefix, static_cast<int32_t>(tokens.size())};
  q.adapter = adapter;
  b.reqs.push_back(q);
  b.token_ids = tokens;
  b.out_cache_loc.assign(rows.begin() + prefix, rows.begin() + prefix + static_cast<ptrdiff_t>(tokens.size()));
  b.writes.push_back({0, 0, std::vector<int32_t>(rows.begin(), rows.begin() + prefix + static_cast<ptrdiff_t>(tokens.size()))});
  return r.forward(b);
}

}  // namespace

TEST_CASE("With a LoRA adapter, greedy tokens and the largest logits agree with llama.cpp's", "[model][lora]") {
  std::ifstream in(test::fixture_path("lora/llamacpp.json"));
  REQUIRE(in);
  const auto fx = nlohmann::json::parse(in);
  ModelRunner& r = test::default_runner();
  const ModelConfig& c = r.model_config();
  r.add_adapter(1, load_lora_adapter(test::fixture_path("lora/smollm2_a.gguf"), c));
  r.add_adapter(2, load_lora_adapter(test::fixture_path("lora/smollm2_b.gguf"), c));
  REQUIRE(fx["cases"].size() == 9);
  int identical = 0;
  double worst_logit = 0;
  std::map<std::string, std::vector<std::vector<int32_t>>> continuations;
  for (const auto& cs : fx["cases"]) {
    const std::string name = cs["adapter"];
    const int32_t adapter = name.empty() ? 0 : name == "a" ? 1 : 2;
    const auto prompt = cs["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = cs["greedy_ids"].get<std::vector<int32_t>>();
    const auto gaps = cs["greedy_gap"].get<std::vector<double>>();
    INFO("adapter '" << name << "', prompt of " << prompt.size() << " tokens");
    std::vector<int32_t> rows(prompt.size() + want.size() + 1);
    std::iota(rows.begin(), rows.end(), 1);
    ForwardOutput out = pass(r, rows, 0, prompt, adapter);

    // llama.cpp's 20 largest logits after the prompt.
    const float* row = out.row(0);
    double lo = 1e30, hi = -1e30;
    for (int32_t t = 0; t < out.vocab; ++t) {
      lo = std::min(lo, static_cast<double>(row[t]));
      hi = std::max(hi, static_cast<double>(row[t]));
    }
    for (const auto& pair : cs["top"]) {
      const double gap = std::abs(row[pair[0].get<int32_t>()] - pair[1].get<double>()) / (hi - lo);
      worst_logit = std::max(worst_logit, gap);
      CHECK(gap < 0.03);
    }

    std::vector<int32_t> got;
    auto pos = static_cast<int32_t>(prompt.size());
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(test::argmax(out.row(0), out.vocab));
      if (got.back() != want[i]) break;
      out = pass(r, rows, pos++, {got.back()}, adapter);
    }
    if (got == want) {
      ++identical;
    } else {
      const size_t j = got.size() - 1;
      INFO("parts from llama.cpp at token " << j << ": llama.cpp " << want[j] << " (gap " << gaps[j] << "), ours " << got[j]);
      CHECK(gaps[j] < near_tie);
    }
    continuations[name].push_back(want);
  }
  // The adapters change what the model says (llama.cpp's own outputs).
  CHECK(continuations["a"] != continuations[""]);
  CHECK(continuations["b"] != continuations[""]);
  std::printf("lora vs llama.cpp: %d of 9 greedy continuations identical, worst logit gap %.4f of the row's range\n",
              identical, worst_logit);
  // Measured: 4 of 9 identical for 16 tokens (the base model parts at its
  // 15th token already); every parting at a gap under 0.22, the largest
  // logits within 1.3% of the row's range. A wrong scale, orientation or
  // row would move logits by whole units and part on clear winners.
  CHECK(identical >= 3);
  r.drop_adapter(1);
  r.drop_adapter(2);
}
