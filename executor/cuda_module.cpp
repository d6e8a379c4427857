// The entry point of libactorlm_cuda.so (cuda_module.hpp). Built into the
// module only: tests and benchmarks link actorlm_cuda directly and call
// CudaExecutor themselves.

#include "executor/cuda_module.hpp"

#include <exception>
#include <stdexcept>

#include "actorlm/version.hpp"
#include "executor/cuda_executor.hpp"

namespace actorlm::cuda {
namespace {

bool create_executor(const CudaExecutorRequest& req, CudaExecutorMade& made, CudaModuleError& error) {
  // Every exception stops here: the caller rethrows it as its own type.
  try {
    if (!req.weights) throw std::invalid_argument("CUDA module: no weights");
    if (std::string why; !cuda_device_usable(&why)) {
      error = {CudaModuleError::no_device, why};
      return false;
    }
    auto ex = CudaExecutor::create(*req.weights, req.device);
    made.rows_that_fit = ex->kv_rows_that_fit(req.mem_fraction_static, req.max_requests, req.max_context);
    made.device_name = ex->device_name();
    made.executor = ex.release();
    return true;
  } catch (const std::invalid_argument& e) {
    error = {CudaModuleError::invalid_argument, e.what()};
  } catch (const std::exception& e) {
    error = {CudaModuleError::runtime, e.what()};
  } catch (...) {
    error = {CudaModuleError::runtime, "unknown exception in the CUDA module"};
  }
  return false;
}

void probe(DeviceReport& report) { report = probe_devices(); }

constexpr CudaModuleTable table{module_abi, version_string, &create_executor, &probe};

}  // namespace
}  // namespace actorlm::cuda

extern "C" __attribute__((visibility("default"))) const actorlm::cuda::CudaModuleTable* actorlm_cuda_module() {
  return &actorlm::cuda::table;
}
