#pragma once
// Speculative decoding's second model, in the worker beside the target: a
// smaller model with the same vocabulary that guesses the next few tokens of
// a decoding request, which the target then verifies in one pass.
//
// Its KV pool is indexed by the target's rows: row r holds the draft
// model's K/V for the token whose target K/V is in row r. So the allocator,
// the radix cache and every release of rows serve both pools at once, and
// the draft model runs over every token the target runs over (prefill
// chunks included) to keep its pool in step. KV that reached the target's
// pool by a copy (the host and disk tiers, a PD transfer, a migration) is
// not in the draft's: drafts for such a request are worse, never wrong,
// since verification keeps only what the target samples itself.

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"

namespace actorlm {

class ModelRunner;

class DraftModel {
 public:
  explicit DraftModel(std::unique_ptr<ModelRunner> runner);
  ~DraftModel();
  DraftModel(const DraftModel&) = delete;
  DraftModel& operator=(const DraftModel&) = delete;

  ModelRunner& runner() { return *runner_; }

  struct Proposal {
    // Per sampled row of the batch: the draft its sample is compared with
    // (-1: none, e.g. a verify's last row).
    std::vector<int32_t> row_drafts;
    // What the rebound sampling rows' outputs point into.
    std::vector<std::vector<int32_t>> outputs;
  };

  // Runs the draft model over the batch's new tokens, then proposes each
  // request's model_drafts greedily, one position at a time (a pass over
  // just the drafting requests per position). Writes them into
  // batch.token_ids, and rebinds the output of each sampling row after a
  // request's first to that output plus the drafts before it (penalties see
  // them as plain decoding would). `batch` must have passed the target's
  // validation with its drafts pending; std::invalid_argument otherwise.
  Proposal propose(ForwardBatch& batch, std::vector<SampleRequest>& sampling);

 private:
  // The tokens a request's plain decode steps (no drafts) gave the target
  // and not the draft model, by the request's slot: the draft model runs
  // them in one pass before that request's next drafts instead of one pass
  // a step, so a step that drafts nothing costs what it costs without a
  // draft model.
  struct Behind {
    int32_t from = 0;             // the position of tokens[0]
    std::vector<int32_t> tokens;  // consecutive positions from `from`
  };
  std::unique_ptr<ModelRunner> runner_;
  std::unordered_map<int32_t, Behind> behind_;
};

}  // namespace actorlm
