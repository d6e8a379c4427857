#include "actors/executor_factory.hpp"

#include <stdexcept>

#include "actorlm/config.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/host_executor.hpp"
#if ACTORLM_HAVE_CUDA
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "actorlm/version.hpp"
#include "executor/cuda_module.hpp"
// Set for this file by actors/CMakeLists.txt; these are the defaults of a
// /usr/local install.
#ifndef ACTORLM_CUDA_MODULE_FROM_BIN
#define ACTORLM_CUDA_MODULE_FROM_BIN "../lib/actorlm"
#endif
#ifndef ACTORLM_CUDA_MODULE_INSTALL_DIR
#define ACTORLM_CUDA_MODULE_INSTALL_DIR "/usr/local/lib/actorlm"
#endif
#endif

namespace actorlm {

bool cuda_backend_built() { return ACTORLM_HAVE_CUDA != 0; }

#if ACTORLM_HAVE_CUDA
namespace {

struct CudaModule {
  const cuda::CudaModuleTable* table = nullptr;
  std::string path;
};

// The search order of executor_factory.hpp. ACTORLM_CUDA_MODULE_FROM_BIN and
// ACTORLM_CUDA_MODULE_INSTALL_DIR come from actors/CMakeLists.txt.
std::vector<std::filesystem::path> module_candidates() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("ACTORLM_CUDA_MODULE"); env && *env) return {fs::path(env)};
  std::vector<fs::path> out;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / ACTORLM_CUDA_MODULE_FROM_BIN / cuda::module_file_name).lexically_normal());
    out.push_back(exe.parent_path() / cuda::module_file_name);
  }
  out.push_back(fs::path(ACTORLM_CUDA_MODULE_INSTALL_DIR) / cuda::module_file_name);
  return out;
}

// dlopens the first candidate that loads. The handle is never closed: the
// executors it makes run its code for as long as the process lives, and a
// second call gets the same handle back from the loader.
CudaModule load_cuda_module() {
  std::string tried;
  for (const auto& path : module_candidates()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tried += "\n  " + path.string() + ": no such file";
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {  // e.g. cuBLAS not found
      tried += "\n  " + path.string() + ": " + dlerror();
      continue;
    }
    using Entry = const cuda::CudaModuleTable* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, cuda::module_entry_symbol));
    if (!entry) {
      throw BackendUnavailable(path.string() + " is not an actorlm CUDA module (no " + cuda::module_entry_symbol + ")");
    }
    const cuda::CudaModuleTable* table = entry();
    if (!table || table->abi != cuda::module_abi || !table->version || std::strcmp(table->version, version_string) != 0) {
      throw BackendUnavailable(path.string() + " comes from another actorlm build (module " +
                               (table && table->version ? table->version : "?") + ", abi " +
                               std::to_string(table ? table->abi : 0) + "; this binary " + version_string + ", abi " +
                               std::to_string(cuda::module_abi) + ")");
    }
    return {table, path.string()};
  }
  throw BackendUnavailable(std::string("the CUDA backend module ") + cuda::module_file_name +
                           " could not be loaded; looked at:" + tried +
                           "\n(install it in <the binary's folder>/../lib/actorlm or set ACTORLM_CUDA_MODULE to its path)");
}

}  // namespace
#endif

CudaBackendReport probe_cuda_backend() {
  CudaBackendReport r;
  r.built = cuda_backend_built();
#if ACTORLM_HAVE_CUDA
  try {
    const CudaModule m = load_cuda_module();
    cuda::DeviceReport d;
    m.table->probe_devices(d);
    r.module_path = m.path;
    r.device_count = d.device_count;
    r.first_device_name = d.first_device_name;
    r.compute_major = d.compute_major;
    r.compute_minor = d.compute_minor;
    r.total_memory_bytes = d.total_memory_bytes;
    r.error = d.error;
  } catch (const BackendUnavailable& e) {
    r.error = e.what();
  }
#else
  r.error = "not built";
#endif
  return r;
}

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
    const CudaModule module = load_cuda_module();
    cuda::CudaExecutorRequest request;
    request.weights = &weights;
    request.mem_fraction_static = c.mem_fraction_static;
    request.max_requests = max_requests;
    request.max_context = max_context;
    cuda::CudaExecutorMade out;
    cuda::CudaModuleError error;
    if (!module.table->create_executor(request, out, error)) {
      switch (error.kind) {
        case cuda::CudaModuleError::invalid_argument: throw std::invalid_argument(error.message);
        case cuda::CudaModuleError::no_device:
          throw BackendUnavailable("CUDA backend loaded from " + module.path + ", but " + error.message);
        default: throw std::runtime_error(error.message);
      }
    }
    std::unique_ptr<ModelExecutor> ex(out.executor);
    weights = LlamaWeights{};  // the host copy is no longer needed
    if (kv_tokens > 0) {
      made.kv_tokens = kv_tokens;
    } else {
      const int64_t rows = out.rows_that_fit;
      made.kv_tokens = (rows - page_size) / page_size * page_size;  // one page is the allocator's dummy
      if (made.kv_tokens < page_size * 16) {
        throw std::runtime_error("GPU memory left for the KV cache holds only " + std::to_string(std::max<int64_t>(rows, 0)) +
                                 " tokens at --mem-fraction-static " + std::to_string(c.mem_fraction_static) +
                                 "; raise it or free the device");
      }
    }
    made.description = "cuda: " + out.device_name;
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
