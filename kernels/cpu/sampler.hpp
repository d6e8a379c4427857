#pragma once
// Picks the next token from one request's logits.
//
// Order of processing: repetition penalty (HF/llama.cpp: a seen token's
// positive logit is divided by the penalty, a negative one multiplied),
// frequency and presence penalties (OpenAI: minus frequency * count and minus
// presence once, over the generated tokens), then greedy argmax if
// temperature == 0 or top_k == 1; otherwise temperature, top-k, top-p
// (smallest set with mass >= top_p), min-p (drop p < min_p * p_max), sample.
//
// Randomness is per request and counter-based: the draw for step s of a
// request with seed k depends only on (k, s), so a request gives the same
// output whatever it is batched with.
//
// logprob is the log-softmax of the RAW logits (the model's distribution, as
// OpenAI reports it), for the chosen token and for the top_n alternatives.
// NaN logits count as -inf; if every logit is -inf or NaN, sampling throws
// std::domain_error.

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kernels/sampling_params.hpp"

namespace actorlm {

// history_prompt: prompt tokens (repetition penalty only); history_output:
// generated tokens (all penalties). step: tokens this request sampled before.
// allowed: empty, or a bitmask of the tokens that may be picked (bit t % 32
// of word t / 32; structured output), applied before everything else;
// std::invalid_argument when its size does not fit the logits.
SampleResult sample_token(std::span<const float> logits, const SamplingParams& params,
                          std::span<const int32_t> history_prompt, std::span<const int32_t> history_output,
                          uint64_t step, int top_n = 0, std::span<const uint32_t> allowed = {});

// `token`'s logprob under the raw logits and the top_n most likely tokens
// (as sample_token reports them, without sampling): how a prompt token is
// scored for echo with logprobs. std::invalid_argument for a token outside
// the logits.
SampleResult score_token(std::span<const float> logits, int32_t token, int top_n);

// The uniform draw in [0, 1) used for (seed, step); exposed for tests.
double sample_uniform(uint64_t seed, uint64_t step);

}  // namespace actorlm
