#pragma once
// The worker's model state: weights, the KV pool buffers (one K and one V
// buffer per layer, pool_rows rows each), and the device-side req_to_token
// table. forward() applies a batch's req_to_token writes, plans attention from
// the table, runs the model and returns logits. Single-threaded use (the
// worker actor); the backend parallelises inside each op.

#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/llama_model.hpp"

namespace actorlm {

struct ModelRunnerConfig {
  int64_t kv_pool_rows = 0;   // TokenToKVPoolAllocator::pool_rows()
  int32_t max_requests = 0;   // rows of req_to_token
  int32_t max_context = 0;    // columns of req_to_token; 0 = the model's context length
};

class ModelRunner {
 public:
  ModelRunner(LlamaWeights weights, std::unique_ptr<Backend> backend, const ModelRunnerConfig& config);

  const ModelConfig& model_config() const { return model_.config(); }
  int32_t max_context() const { return max_context_; }
  int64_t kv_bytes() const;

  // Throws std::invalid_argument (naming the field) for an inconsistent batch:
  // sizes that disagree, slots or positions out of range, a request whose KV
  // rows are not all written. Nothing is modified in that case.
  ForwardOutput forward(const ForwardBatch& batch);

  void write_req_to_token(int32_t slot, int32_t start, std::span<const int32_t> kv);

  // One token per row of out (in request order), on the backend.
  std::vector<SampleResult> sample(const ForwardOutput& out, std::span<const SampleRequest> reqs);

 private:
  void validate(const ForwardBatch& batch) const;

  std::unique_ptr<Backend> backend_;
  LlamaModel model_;
  ModelRunnerConfig config_;
  int32_t max_context_;
  std::vector<float> k_cache_, v_cache_;   // [layers][pool_rows][kv_heads][head_dim]
  std::vector<int32_t> req_to_token_;      // [max_requests][max_context]
};

}  // namespace actorlm
