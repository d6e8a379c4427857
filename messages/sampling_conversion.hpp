#pragma once
// actorlm::SamplingParams <-> its FlatBuffers table. Values from a message are
// not trusted: callers run SamplingParams::validate() on the result.

#include <algorithm>
#include <memory>

#include "kernels/sampling_params.hpp"
#include "messages/common_generated.h"

namespace actorlm::msg {

inline std::unique_ptr<fb::SamplingParamsT> to_fb(const SamplingParams& p) {
  auto t = std::make_unique<fb::SamplingParamsT>();
  t->temperature = p.temperature;
  t->top_k = p.top_k;
  t->top_p = p.top_p;
  t->min_p = p.min_p;
  t->repetition_penalty = p.repetition_penalty;
  t->frequency_penalty = p.frequency_penalty;
  t->presence_penalty = p.presence_penalty;
  t->seed = p.seed;
  t->has_seed = p.has_seed;
  for (const auto& [id, bias] : p.logit_bias) {
    t->logit_bias_ids.push_back(id);
    t->logit_bias_values.push_back(bias);
  }
  return t;
}

// A missing table gives the defaults.
inline SamplingParams from_fb(const fb::SamplingParams* t) {
  SamplingParams p;
  if (!t) return p;
  p.temperature = t->temperature();
  p.top_k = t->top_k();
  p.top_p = t->top_p();
  p.min_p = t->min_p();
  p.repetition_penalty = t->repetition_penalty();
  p.frequency_penalty = t->frequency_penalty();
  p.presence_penalty = t->presence_penalty();
  p.seed = t->seed();
  p.has_seed = t->has_seed();
  // Lists of unequal length are kept as they come, cut to the shorter; the
  // caller's validate() checks what is left.
  if (t->logit_bias_ids() && t->logit_bias_values()) {
    const auto n = std::min(t->logit_bias_ids()->size(), t->logit_bias_values()->size());
    for (flatbuffers::uoffset_t i = 0; i < n; ++i) {
      p.logit_bias.emplace_back(t->logit_bias_ids()->Get(i), t->logit_bias_values()->Get(i));
    }
  }
  return p;
}

}  // namespace actorlm::msg
