#pragma once
// What runs a ModelRunner's forward passes: the host path (HostExecutor:
// LlamaModel over HostTensorOps over a Backend, KV in host memory) or a
// device one (executor/'s CudaExecutor: the same LlamaModel over
// CudaTensorOps, with weights, KV pool, req_to_token and logits in device
// memory). ModelRunner validates every batch and plans it before an
// executor sees it, so executors may assume a consistent batch.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "model/forward_batch.hpp"
#include "model/kv_layer_clock.hpp"
#include "model/lora_adapter.hpp"
#include "model/model_config.hpp"

namespace actorlm {

// The host-side plan of one validated batch.
struct StepPlan {
  AttentionPlan attention;           // kv_indices only when wants_kv_indices()
  std::vector<int32_t> slots;        // per request
  std::vector<int32_t> positions;    // per new token
  std::vector<int32_t> logit_rows;   // token rows that get logits, in order
  std::vector<LoraRows> lora;        // rows that run with an adapter
  // The logits must reach the host (all_logits, or prompt rows to score)
  // even on an executor that would keep them on the device.
  bool host_logits = false;
  // Told as each layer's KV is stored, by an executor whose stores are done
  // when they return (the host's); others leave it to ModelRunner's end().
  KvLayerClock* clock = nullptr;
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;

  virtual const ModelConfig& config() const = 0;
  // Called once, by ModelRunner, before any other call below.
  virtual void allocate(int64_t kv_pool_rows, int32_t max_requests, int32_t max_context) = 0;
  virtual int64_t kv_bytes() const = 0;
  // A device executor keeps its own req_to_token and reads KV rows from it;
  // the host one takes them from the plan.
  virtual bool wants_kv_indices() const = 0;
  // Range-checked by the caller.
  virtual void write_req_to_token(int32_t slot, int32_t start, std::span<const int32_t> kv) = 0;
  // Applies batch.writes to the executor's table, then runs the pass. A
  // device executor may leave the logits on the device (ForwardOutput::
  // device_rows) unless plan.host_logits asks for them.
  virtual ForwardOutput forward(const ForwardBatch& batch, const StepPlan& plan) = 0;
  // One token per row of `out`, which must come from this executor's latest
  // forward().
  virtual std::vector<SampleResult> sample(const ForwardOutput& out, std::span<const SampleRequest> reqs) = 0;

  // LoRA adapters (ModelRunner::add_adapter). The defaults refuse: an
  // executor without adapter kernels throws std::invalid_argument.
  virtual void add_adapter(int32_t id, const LoraAdapter& adapter);
  virtual void drop_adapter(int32_t id);
  virtual bool has_adapter(int32_t) const { return false; }
  virtual int64_t adapter_bytes() const { return 0; }

  // Copying KV rows out of and into the pool, for moving a request's KV to
  // another engine (prefill/decode disaggregation) or another tier. Bytes
  // are in the pool's element type (kv_dtype()), laid out per layer of
  // [first_layer, last_layer): every row's K, then every row's V.
  // kv_token_bytes() is one row's K plus V in one layer. Range-checked by
  // the caller. An executor that cannot copy KV reports 0 bytes and throws
  // std::logic_error.
  virtual int64_t kv_token_bytes() const { return 0; }
  virtual std::string kv_dtype() const { return "none"; }
  virtual void read_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                       std::span<uint8_t> out) const;
  virtual void write_kv(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                        std::span<const uint8_t> in);
  // Where those bytes live, for a copy that skips the executor: the pool's
  // own memory as spans in read_kv's order (a run of consecutive rows is one
  // span). False when the pool is not in this process's memory (a device
  // executor's), so there is nothing to point at.
  virtual bool kv_spans(std::span<const int32_t> rows, int32_t first_layer, int32_t last_layer,
                        std::vector<std::span<uint8_t>>& out);
};

}  // namespace actorlm
