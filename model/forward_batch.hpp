#pragma once
// What the worker receives for one forward pass (the plain C++ form of the
// ForwardBatch message). A batch may mix extend (prefill, possibly on top of a
// cached prefix) and decode (extend_len == 1) requests.

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/sampling_params.hpp"

namespace actorlm {

struct ForwardRequest {
  int32_t slot = 0;        // row of req_to_token
  int32_t prefix_len = 0;  // positions that already have KV
  int32_t extend_len = 0;  // new tokens in this pass (>= 1)
  // Echo with logprobs: score each new token but the first against the
  // logits of the position before it, and the last against next_token (the
  // prompt's token after this pass; -1 when sampling follows), with
  // prompt_top_n alternatives each.
  bool prompt_logprobs = false;
  int32_t prompt_top_n = 0;
  int32_t next_token = -1;
  // Speculative decoding's verification: the last logit_rows tokens of this
  // pass each get logits and are sampled (one SampleRequest each, in
  // position order), not only the last. 1..extend_len; 1 with
  // prompt_logprobs.
  int32_t logit_rows = 1;
  // Drafts from the worker's draft model (model/draft_model.hpp): the last
  // model_drafts tokens (logit_rows - 1 of them, a decode only) are proposed
  // by it before the pass; their token_ids entries are placeholders (-1)
  // until then.
  int32_t model_drafts = 0;
  // With a draft model, for a decoding request: the token at prefix_len - 1,
  // which the draft model runs again so its KV there is its own (the
  // previous step's last draft is one it proposed but never ran). -1: none.
  int32_t draft_prev_token = -1;
  // The LoRA adapter this request runs with (ModelRunner::add_adapter's
  // id); 0: the base model. adapter_scale multiplies the scale the adapter
  // was loaded with (llama-server's per-request scale).
  int32_t adapter = 0;
  float adapter_scale = 1.0f;
  // Further adapters (id, scale), each applied after the one before it.
  std::vector<std::pair<int32_t, float>> stacked_adapters{};
};

// The rows of a pass that run with one LoRA adapter: token rows
// [row_begin, row_begin + rows) and, of the rows that get logits,
// [logit_begin, logit_begin + logit_count). Rows no entry names run the
// base model alone.
struct LoraRows {
  int32_t adapter = 0;  // LlamaModel::add_adapter's id
  int32_t row_begin = 0, rows = 0;
  int32_t logit_begin = 0, logit_count = 0;
  float scale = 1.0f;  // ForwardRequest::adapter_scale
  // Which of a request's adapters this is (0: its first; k: its k-th
  // stacked one). The updates of one layer go pass by pass, so a row's
  // sums are taken in the same order alone or in any batch.
  int32_t pass = 0;
};

// req_to_token[slot][start .. start + kv.size()) = kv, applied before the pass.
struct ReqToTokenWrite {
  int32_t slot = 0;
  int32_t start = 0;
  std::vector<int32_t> kv;
};

struct ForwardBatch {
  std::vector<ForwardRequest> reqs;
  std::vector<int32_t> token_ids;      // all new tokens, request by request
  std::vector<int32_t> out_cache_loc;  // KV row of each new token
  std::vector<ReqToTokenWrite> writes;
  bool all_logits = false;             // logits of every token, not only each request's last
  // The scheduler's step number (increasing; 0: none): the worker reports
  // this pass's stored KV layers under it (model/kv_layer_clock.hpp).
  uint64_t step = 0;

  // Rows sampled after this pass: one per request, logit_rows for a
  // verifying one. The worker answers one SampleResult per row.
  size_t sampled_rows() const {
    size_t n = 0;
    for (const auto& r : reqs) n += static_cast<size_t>(r.logit_rows);
    return n;
  }
};

struct ForwardOutput {
  int32_t vocab = 0;
  // all_logits: one row per token; otherwise one row per request (its last
  // token), or logit_rows for a verifying request.
  // Empty when a device executor kept them on the device (device_rows rows
  // there, for its sampler).
  std::vector<float> logits;
  size_t device_rows = 0;
  // Per sampled row (ForwardBatch::sampled_rows): its request's
  // prompt_logprobs scores (empty when not asked for).
  std::vector<std::vector<SampleResult>> prompt;
  // The logits are on the host and must be sampled there (a device executor
  // copied them out for prompt scoring).
  bool sample_on_host = false;
  const float* row(size_t i) const { return logits.data() + i * static_cast<size_t>(vocab); }
  size_t rows() const { return !logits.empty() && vocab ? logits.size() / static_cast<size_t>(vocab) : device_rows; }
};

}  // namespace actorlm
