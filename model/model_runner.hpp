#pragma once
// The worker's model state, whichever device runs it: an executor (weights,
// the KV pool, the device's req_to_token) plus a host mirror of req_to_token.
// forward() validates a batch against the mirror, applies its req_to_token
// writes, plans attention and hands the batch to the executor. Single-threaded
// use (the worker actor); executors parallelise inside each op.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/llama_model.hpp"
#include "model/lora_adapter.hpp"
#include "model/model_executor.hpp"

namespace actorlm {

struct ModelRunnerConfig {
  int64_t kv_pool_rows = 0;   // TokenToKVPoolAllocator::pool_rows()
  int32_t max_requests = 0;   // rows of req_to_token
  int32_t max_context = 0;    // columns of req_to_token; 0 = the model's context length
};

// A runner's kv_spans, for code that copies KV rows off the worker's thread
// (the KV data plane) and must not hold the runner itself. Empty where the
// pool is not in this process's memory.
using KvRowSpans = std::function<bool(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                                      std::vector<std::span<uint8_t>>& out)>;

class DraftModel;

class ModelRunner {
 public:
  // The host path: the model over `backend` with the KV pool in host memory.
  ModelRunner(LlamaWeights weights, std::unique_ptr<Backend> backend, const ModelRunnerConfig& config);
  // Any executor (e.g. executor/'s CudaExecutor); allocates its KV pool.
  ModelRunner(std::unique_ptr<ModelExecutor> executor, const ModelRunnerConfig& config);
  ~ModelRunner();

  const ModelConfig& model_config() const { return executor_->config(); }
  int32_t max_context() const { return max_context_; }
  int64_t kv_bytes() const;

  // Throws std::invalid_argument (naming the field) for an inconsistent batch:
  // sizes that disagree, slots or positions out of range, a request whose KV
  // rows are not all written. Nothing is modified in that case.
  ForwardOutput forward(const ForwardBatch& batch);

  void write_req_to_token(int32_t slot, int32_t start, std::span<const int32_t> kv);

  // From now on each forward() with a step number (ForwardBatch::step)
  // reports it to `clock`: begin, each layer stored (on an executor whose
  // stores are synchronous), end when it returns or throws.
  void set_kv_clock(std::shared_ptr<KvLayerClock> clock) { clock_ = std::move(clock); }

  // LoRA adapters (model/lora_adapter.hpp): requests whose
  // ForwardRequest::adapter is `id` run with it from the next batch on; a
  // batch naming an id that is not loaded is refused. std::invalid_argument
  // for an id in use or not positive, an unknown id to drop, or an executor
  // that does not run adapters. The draft model never runs the adapter
  // (its drafts are then only worse guesses, checked like any other).
  void add_adapter(int32_t id, const LoraAdapter& adapter);
  void drop_adapter(int32_t id);
  bool has_adapter(int32_t id) const;
  int64_t adapter_bytes() const;

  // Speculative decoding with a draft model (model/draft_model.hpp): from
  // now on every step also runs it. std::invalid_argument unless it has this
  // runner's vocabulary, pool rows, request slots and context.
  void attach_draft(std::unique_ptr<DraftModel> draft);
  bool has_draft() const { return draft_ != nullptr; }
  // The draft model's KV pool (0 without one).
  int64_t draft_kv_bytes() const;
  // One step: drafts from the draft model where the batch asks for them,
  // then forward() and sample(); each result carries the draft its row is
  // compared with. std::invalid_argument for a batch that asks for drafts
  // this runner has no model for.
  std::vector<SampleResult> step(ForwardBatch batch, std::vector<SampleRequest> sampling);

  // The KV row of (slot, pos) as req_to_token will hold it once `batch`'s
  // writes are applied. slot and pos must be in range.
  int32_t table_row(const ForwardBatch& batch, int32_t slot, int32_t pos) const;

  // A request's KV moved between engines (ModelExecutor::read_kv): the K and
  // V of pool rows `rows` for layers [first_layer, last_layer), in the
  // pool's element type. std::invalid_argument for a row outside the pool, a
  // layer range outside the model or (write) a size that does not match;
  // std::logic_error when the executor cannot copy KV.
  int64_t kv_token_bytes() const { return executor_->kv_token_bytes(); }
  std::string kv_dtype() const { return executor_->kv_dtype(); }
  std::vector<uint8_t> read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer) const;
  void write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer, std::span<const uint8_t> bytes);
  // The same bytes in place (ModelExecutor::kv_spans), checked as read_kv
  // checks; false when the executor's pool is not in this process's memory.
  // For a copy made off the worker's thread: the caller must make sure no
  // step writes those rows meanwhile (they belong to a request that is not
  // running, or to layers the KvLayerClock reported stored) and that the
  // runner outlives the copy.
  bool kv_spans(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                std::vector<std::span<uint8_t>>& out);

  // One token per row of out (in request order), on the backend (on the
  // host when the pass scored prompt tokens); each result carries its
  // request's prompt scores from out.
  std::vector<SampleResult> sample(const ForwardOutput& out, std::span<const SampleRequest> reqs);

 private:
  // drafts_pending: model_drafts tokens may still be placeholders.
  void validate(const ForwardBatch& batch, bool drafts_pending = false) const;
  size_t kv_copy_bytes(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer) const;
  void score_prompts(const ForwardBatch& batch, ForwardOutput& out) const;

  std::unique_ptr<ModelExecutor> executor_;
  ModelRunnerConfig config_;
  int32_t max_context_;
  std::vector<int32_t> req_to_token_;      // host mirror, [max_requests][max_context]
  std::unique_ptr<DraftModel> draft_;
  std::shared_ptr<KvLayerClock> clock_;
};

}  // namespace actorlm
