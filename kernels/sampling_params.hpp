#pragma once
// Per-request sampling parameters, shared by the sampler (every backend), the
// scheduler and the messages that carry them. validate() is the one place
// their ranges are checked; everything downstream may assume valid values.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actorlm {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int32_t top_k = 0;                // 0 or negative = disabled
  float top_p = 1.0f;               // 1 = disabled
  float min_p = 0.0f;               // 0 = disabled
  float repetition_penalty = 1.0f;  // 1 = disabled; >1 discourages tokens already seen
  float frequency_penalty = 0.0f;   // OpenAI semantics, per occurrence in the output
  float presence_penalty = 0.0f;    // OpenAI semantics, once per token present in the output
  uint64_t seed = 0;                // used when has_seed; otherwise the engine picks one
  bool has_seed = false;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]), ids ascending and
  // distinct, at most kMaxLogitBias of them. Ids must be in the vocabulary
  // (checked where the vocabulary is known: the scheduler's admission).
  static constexpr size_t kMaxLogitBias = 1024;
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }

  // Returns an error message naming the first out-of-range field, or nullopt.
  // Ranges: temperature in [0, 100]; top_p in (0, 1]; min_p in [0, 1];
  // top_k >= -1; repetition_penalty in (0, 10]; frequency and presence
  // penalties in [-2, 2]. NaN is never valid.
  std::optional<std::string> validate() const {
    auto bad = [](float v, float lo, float hi) { return !(v >= lo && v <= hi); };
    if (bad(temperature, 0.0f, 100.0f)) return "temperature must be in [0, 100]";
    if (!(top_p > 0.0f && top_p <= 1.0f)) return "top_p must be in (0, 1]";
    if (bad(min_p, 0.0f, 1.0f)) return "min_p must be in [0, 1]";
    if (top_k < -1) return "top_k must be -1, 0 (disabled) or positive";
    if (!(repetition_penalty > 0.0f && repetition_penalty <= 10.0f))
      return "repetition_penalty must be in (0, 10]";
    if (bad(frequency_penalty, -2.0f, 2.0f)) return "frequency_penalty must be in [-2, 2]";
    if (bad(presence_penalty, -2.0f, 2.0f)) return "presence_penalty must be in [-2, 2]";
    if (logit_bias.size() > kMaxLogitBias) return "logit_bias may hold at most 1024 tokens";
    for (size_t i = 0; i < logit_bias.size(); ++i) {
      if (logit_bias[i].first < 0 || (i > 0 && logit_bias[i].first <= logit_bias[i - 1].first))
        return "logit_bias token ids must be distinct and non-negative";
      if (bad(logit_bias[i].second, -100.0f, 100.0f)) return "logit_bias values must be in [-100, 100]";
    }
    return std::nullopt;
  }
};

// One sampled token. logprob is the log-softmax of the raw logits (the
// model's distribution) at the chosen token; top holds the top_n
// alternatives as (token, logprob), best first.
struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
  // Echo with logprobs: the prompt tokens of this pass scored against the
  // logits before each (token, logprob, top), when the pass asked for it.
  std::vector<SampleResult> prompt;
  // Speculative decoding with a draft model: the token the worker's draft
  // model proposed for the position this row samples (-1: none), which the
  // scheduler keeps if the sample equals it.
  int32_t draft = -1;
};

}  // namespace actorlm
