#pragma once
// Picks the executor a worker runs on ("cpu" or "cuda") and sizes its KV
// pool. Lives with the engine because it is the one place that links the
// CUDA backend when the build has it; the rest of the engine only sees
// ModelExecutor.

#include <memory>
#include <string>

#include "model/llama_weights.hpp"
#include "model/model_executor.hpp"

namespace actorlm {

struct ExecutorChoice {
  std::string device = "cpu";         // "cpu" or "cuda"
  int threads = 0;                    // cpu: backend threads, 0 = all
  double mem_fraction_static = 0.85;  // cuda: weights + KV pool share of GPU memory when kv_tokens is 0
  std::string kv_cache_dtype = "auto";  // "auto" (float32), "f16" (cpu) or "bf16" (cuda)
};

struct MadeExecutor {
  std::unique_ptr<ModelExecutor> executor;
  int64_t kv_tokens = 0;  // the pool's token capacity (a multiple of page_size)
  std::string description;  // e.g. "cuda: NVIDIA H100 80GB HBM3, 2.1 GiB KV"
};

// kv_tokens > 0 fixes the pool; 0 lets the device decide (cpu: 16384 tokens;
// cuda: what mem_fraction_static leaves after the weights). Throws
// std::invalid_argument for an unknown device or dtype, or cuda in a build
// without it; std::runtime_error when the device cannot be used.
MadeExecutor make_executor(LlamaWeights weights, const ExecutorChoice& choice, int64_t kv_tokens, int32_t page_size,
                           int32_t max_requests, int32_t max_context);

// Whether this build has the CUDA backend.
bool cuda_backend_built();

}  // namespace actorlm
