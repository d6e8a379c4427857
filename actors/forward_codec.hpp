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
  // Per sampled row (ForwardBatch::sampled_rows: one per request, or a
  // verifying request's logit_rows): its request's id, what it generated so
  // far (penalties; a verifying row's includes the drafts before it), its
  // structured output mask (or empty), its SampleRequest (spans into params,
  // outputs and allowed), and false for a mid-prefill chunk.
  std::vector<uint64_t> request_ids;
  std::vector<SamplingParams> params;  // per request
  std::vector<std::vector<int32_t>> outputs;
  std::vector<std::vector<uint32_t>> allowed;
  std::vector<SampleRequest> sampling;
  std::vector<bool> sample;
};

// Empty optional and *error set when the message is malformed.
std::optional<DecodedForward> decode_forward(std::span<const uint8_t> bytes, std::string* error);

// request_ids: one per request; sampling: one per sampled row.
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
