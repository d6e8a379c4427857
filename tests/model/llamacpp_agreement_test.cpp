// The CPU forward pass agrees with llama.cpp on the default model
// (fixture: scripts/reference/llamacpp_greedy_fixture.py).
//
// llama.cpp multiplies Q4_1 weights by activations quantized to 8 bits; we
// dequantize weights to float32 and multiply in float32. Logits therefore
// differ slightly, and where llama.cpp's top two tokens are nearly tied the
// argmax can flip. The rules:
//   - greedy: the continuation equals llama.cpp's up to the first position
//     where they differ; there llama.cpp's own top-1/top-2 gap must be below
//     near_tie (a real disagreement on a clear winner fails);
//   - teacher forcing over prompt + llama.cpp's continuation: our argmax
//     equals llama.cpp's at >= 97.5% of all positions, and every disagreement is
//     a near tie.

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/host_executor.hpp"
#include "tests/model/model_test_support.hpp"
#include "tests/test_paths.hpp"

using namespace actorlm;

namespace {
// llama.cpp disagrees with itself by this much: for "The capital of France is"
// its one-token decode gives a top-1/top-2 gap of 0.267 at continuation token
// 5 where its batched pass over the same tokens gives 0.017 (both in the
// fixture). A flip inside that band says nothing about correctness; a real
// bug (RoPE, GQA, norm) flips clear winners with gaps of whole logits.
constexpr double near_tie = 0.35;
}  // namespace

// Greedy continuations and teacher-forced top-1 against the fixture on
// runner r; returns the teacher-forced agreement rate.
double agreement(ModelRunner& r, const char* label) {
  std::ifstream in(test::fixture_path("llamacpp/greedy.json"));
  REQUIRE(in);
  auto fx = nlohmann::json::parse(in);
  REQUIRE(fx["cases"].size() >= 20);

  int identical = 0, positions = 0, agree = 0;
  double worst_disagreement_gap = 0;
  for (const auto& c : fx["cases"]) {
    auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    auto want = c["greedy_ids"].get<std::vector<int32_t>>();
    auto gaps = c["greedy_gap"].get<std::vector<double>>();
    INFO("prompt: " << c["prompt"].get<std::string>());

    auto got = test::greedy(r, prompt, static_cast<int>(want.size()));
    size_t j = 0;
    while (j < want.size() && got[j] == want[j]) ++j;
    if (j == want.size()) {
      ++identical;
    } else {
      std::printf("diverges at token %zu of %zu: llama.cpp %d (gap %.4f), actorlm %d\n", j, want.size(), want[j],
                  gaps[j], got[j]);
      CHECK(gaps[j] < near_tie);
    }

    std::vector<int32_t> seq = prompt;
    seq.insert(seq.end(), want.begin(), want.end());
    std::vector<int32_t> rows(seq.size());
    std::iota(rows.begin(), rows.end(), 1);
    auto logits = test::run_request(r, 0, rows, 0, seq, /*all_logits=*/true);
    REQUIRE(logits.rows() == seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      int32_t ours = test::argmax(logits.row(i), logits.vocab);
      int32_t theirs = c["top1"][i];
      ++positions;
      if (ours == theirs) {
        ++agree;
      } else {
        double gap = c["gap"][i];
        worst_disagreement_gap = std::max(worst_disagreement_gap, gap);
        CHECK(gap < near_tie);
      }
    }
  }
  double rate = double(agree) / positions;
  std::printf("%s: greedy: %d of %zu continuations identical; teacher forcing: %d/%d top-1 agree (%.2f%%), "
              "largest gap at a disagreement %.4f\n",
              label, identical, fx["cases"].size(), agree, positions, 100 * rate, worst_disagreement_gap);
  return rate;
}

// The rate moves by whole positions with any change of float rounding that
// is equally right: the same source built without -march=native gave 97.63%
// against the native build's 98.08% (2026-11-27, the same Xeon), and summing
// the softmax's exponentials in one fixed order gave 97.99%, every
// disagreement inside the near-tie band each time. So the floor sits below
// that band of rounding choices; what a real bug does (a clear winner
// flipped) the near-tie checks above catch at the first position.
TEST_CASE("Greedy decoding and teacher-forced top-1 agree with llama.cpp", "[model][llamacpp]") {
  CHECK(agreement(test::default_runner(), "float32 KV") >= 0.975);
}

// llama.cpp's own cache is f16 by default, but it also rounds the queries
// and the softmax weights to f16 where we keep float32, so an f16 cache here
// does not bring the two closer: it rounds K and V once more on our side.
// Measured 97.63% against 98.08% with float32 (every flip still inside the
// near-tie band).
TEST_CASE("With an f16 KV cache, decoding still agrees with llama.cpp", "[model][llamacpp]") {
  ModelRunner r(std::make_unique<HostExecutor>(load_llama_weights(default_model_path()),
                                               std::make_unique<cpu::CpuBackend>(0), /*f16_kv=*/true),
                {.kv_pool_rows = 4096, .max_requests = 8, .max_context = 1024});
  CHECK(agreement(r, "f16 KV") >= 0.97);
}
