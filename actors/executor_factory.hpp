#pragma once
// Picks the executor a worker runs on ("cpu" or "cuda") and sizes its KV
// pool. Lives with the engine because it is the one place that reaches the
// CUDA backend when the build has it; the rest of the engine only sees
// ModelExecutor. The CUDA backend is a module (libactorlm_cuda.so,
// executor/cuda_module.hpp) loaded on the first CUDA request, so a CPU
// run never maps cudart or cuBLAS. It is looked for, in order:
//   1. $ACTORLM_CUDA_MODULE (a file path), when set: there and nowhere else;
//   2. <folder of the running executable>/<bin-to-lib path>/actorlm/
//      (build/lib/actorlm from build/apps or build/bench; <prefix>/lib/actorlm
//      from <prefix>/bin);
//   3. the folder of the running executable;
//   4. <install prefix>/lib/actorlm as configured (embedding applications).

#include <memory>
#include <stdexcept>
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

// The CUDA backend could not be used: its module is missing or from another
// build, or it found no usable GPU. what() says which, and where it looked.
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// kv_tokens > 0 fixes the pool; 0 lets the device decide (cpu: 16384 tokens;
// cuda: what mem_fraction_static leaves after the weights). Throws
// std::invalid_argument for an unknown device or dtype, or cuda in a build
// without it; BackendUnavailable when the CUDA module cannot be loaded or
// has no usable device; std::runtime_error when the device cannot be used.
MadeExecutor make_executor(LlamaWeights weights, const ExecutorChoice& choice, int64_t kv_tokens, int32_t page_size,
                           int32_t max_requests, int32_t max_context);

// Whether this build has the CUDA backend.
bool cuda_backend_built();

// What `actorlm version` prints about CUDA. Loads the module (mapping the
// CUDA libraries) in a build that has it.
struct CudaBackendReport {
  bool built = false;
  std::string module_path;  // empty when not loaded
  int device_count = 0;
  std::string first_device_name;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
  std::string error;  // why no device is usable (or the module did not load)
};
CudaBackendReport probe_cuda_backend();

}  // namespace actorlm
