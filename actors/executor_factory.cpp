#include "actors/executor_factory.hpp"

#include <stdexcept>

#include "actorlm/config.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/host_executor.hpp"
#if ACTORLM_HAVE_CUDA
#include "kernels/cuda/cuda_executor.hpp"
#endif

namespace actorlm {

bool cuda_backend_built() { return ACTORLM_HAVE_CUDA != 0; }

MadeExecutor make_executor(LlamaWeights weights, const ExecutorChoice& c, int64_t kv_tokens,
                           [[maybe_unused]] int32_t page_size,  // sizes the GPU pool only
                           int32_t max_requests, int32_t max_context) {
  if (kv_tokens < 0) throw std::invalid_argument("kv_tokens must be >= 0");
  if (c.kv_cache_dtype != "auto" && c.kv_cache_dtype != "bf16" && c.kv_cache_dtype != "f16") {
    throw std::invalid_argument("kv_cache_dtype must be auto, f16 (cpu) or bf16 (cuda), not '" + c.kv_cache_dtype + "'");
  }
  MadeExecutor made;
  if (c.device == "cpu") {
    if (c.kv_cache_dtype == "bf16") throw std::invalid_argument("the CPU backend keeps its KV cache in float32 or f16, not bf16");
    made.kv_tokens = kv_tokens > 0 ? kv_tokens : 16384;
    const bool f16 = c.kv_cache_dtype == "f16";
    const std::shared_ptr<const MappedFile> file = weights.file;
    made.executor =
        std::make_unique<HostExecutor>(std::move(weights), std::make_unique<cpu::CpuBackend>(c.threads), f16);
    // The backend has its packed copies now; what it still reads from the
    // file (embedding rows, unpacked formats) faults back in as used.
    if (file) file->drop_resident();
    made.description = f16 ? "cpu, f16 KV cache" : "cpu";
  } else if (c.device == "cuda") {
    if (c.kv_cache_dtype == "f16") throw std::invalid_argument("the CUDA backend keeps its KV cache in float32 or bf16, not f16");
#if ACTORLM_HAVE_CUDA
    if (!(c.mem_fraction_static > 0.0 && c.mem_fraction_static < 1.0)) {
      throw std::invalid_argument("mem_fraction_static must be in (0, 1)");
    }
    auto ex = cuda::CudaExecutor::create(weights);
    weights = LlamaWeights{};  // the host copy is no longer needed
    if (kv_tokens > 0) {
      made.kv_tokens = kv_tokens;
    } else {
      int64_t rows = ex->kv_rows_that_fit(c.mem_fraction_static, max_requests, max_context);
      made.kv_tokens = (rows - page_size) / page_size * page_size;  // one page is the allocator's dummy
      if (made.kv_tokens < page_size * 16) {
        throw std::runtime_error("GPU memory left for the KV cache holds only " + std::to_string(std::max<int64_t>(rows, 0)) +
                                 " tokens at --mem-fraction-static " + std::to_string(c.mem_fraction_static) +
                                 "; raise it or free the device");
      }
    }
    made.description = "cuda: " + ex->device_name();
    made.executor = std::move(ex);
#else
    (void)page_size;  // only the CUDA branch sizes the pool from free memory
    (void)max_requests;
    (void)max_context;
    throw std::invalid_argument("this actorlm was built without the CUDA backend (nvcc was not found at build time)");
#endif
  } else {
    throw std::invalid_argument("device must be cpu or cuda, not '" + c.device + "'");
  }
  return made;
}

}  // namespace actorlm
