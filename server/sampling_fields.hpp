#pragma once
// The generation fields the OpenAI routes take at the top level of the body
// and SGLang's /generate takes inside "sampling_params": one table, so both
// routes type- and range-check them alike.

#include <optional>

#include "actors/engine.hpp"
#include "server/json_reader.hpp"

namespace actorlm::api {

// The two spellings differ only in the name of the output-length field:
// OpenAI's "max_tokens" (or the newer "max_completion_tokens"; the later
// one read wins) and SGLang's "max_new_tokens".
enum class SamplingDialect { openai, sglang };

// Reads temperature, top_p, top_k, min_p, frequency_penalty,
// presence_penalty, repetition_penalty, seed, n, the output length and its
// minimum, stop and ignore_eos into `o` and `n` (fields left out keep their values). Ranges:
//   temperature [0, 2]; top_p (0, 1]; top_k [-1, 2^20] (-1 and 0 disable);
//   min_p [0, 1]; frequency/presence_penalty [-2, 2];
//   repetition_penalty [0.001, 10]; max tokens [1, 2^20]; n [1, 16];
//   min_tokens (OpenAI routes) / min_new_tokens (/generate) [0, max tokens];
//   stop: a string or a list of at most 4 strings (OpenAI's limit; 16 on
//   /generate);
//   seed: any integer in [-2^63, 2^64 - 1]: OpenAI's int64 range, negative
//   seeds taken as their two's complement, plus the rest of the sampler's
//   64-bit seeds;
//   logit_bias (OpenAI routes): an object of at most 1024 token ids, written
//   as decimal strings, to numbers in [-100, 100]; ids outside the
//   vocabulary are refused when the request is tokenized.
// Integer fields take JSON integers only: 5.0, 5e0 and "5" are refused.
std::optional<ApiError> read_sampling_fields(const FieldReader& fields, SamplingDialect dialect,
                                             GenerateOptions& o, int& n);

}  // namespace actorlm::api
