#pragma once
// ForwardBatch / BatchResult messages <-> the worker's plain structs. Pure
// C++ (no CAF). Decoding checks what the verifier cannot: array lengths that
// must agree and counts that must be in range; the ModelRunner then checks
// slots, rows and token ids against its own sizes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "messages/envelope.hpp"
#include "model/forward_batch.hpp"

namespace actorlm {

struct DecodedForward {
  uint64_t batch_id = 0;
  ForwardBatch batch;
  std::vector<uint64_t> request_ids;
  std::vector<SamplingParams> params;
  std::vector<std::vector<int32_t>> outputs;  // per request: generated so far (penalties)
  std::vector<std::vector<uint32_t>> allowed;  // per request: structured output's mask, or empty
  std::vector<SampleRequest> sampling;        // spans point into params/outputs/allowed
  std::vector<bool> sample;                   // per request: false for a mid-prefill chunk
};

// Empty optional and *error set when the message is malformed.
std::optional<DecodedForward> decode_forward(std::span<const uint8_t> bytes, std::string* error);

std::vector<uint8_t> encode_forward(uint64_t batch_id, const ForwardBatch& batch,
                                    const std::vector<uint64_t>& request_ids,
                                    const std::vector<SampleRequest>& sampling);

std::vector<uint8_t> encode_result(uint64_t batch_id, const std::vector<uint64_t>& request_ids,
                                   const std::vector<SampleResult>& results, const std::vector<bool>& sampled,
                                   int64_t forward_us, const std::string& error);

struct DecodedResult {
  uint64_t batch_id = 0;
  std::vector<uint64_t> request_ids;
  std::vector<SampleResult> results;
  std::string error;
};
std::optional<DecodedResult> decode_result(std::span<const uint8_t> bytes, std::string* error);

}  // namespace actorlm
