#pragma once
// actorlm::SamplingParams <-> its FlatBuffers table. Values from a message are
// not trusted: callers run SamplingParams::validate() on the result.

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
  return p;
}

}  // namespace actorlm::msg
