#pragma once
// The CUDA executor as a loadable module (issue 32). A build with CUDA makes
// it and the kernels of kernels/cuda into libactorlm_cuda.so, which alone
// links cudart and cuBLAS; the engine (actors/executor_factory.cpp) dlopens
// it only when a CUDA device is asked for, so a CPU run maps no CUDA library.
//
// The module exports one C symbol, actorlm_cuda_module(), that returns the
// table below. The table passes C++ objects (LlamaWeights, ModelExecutor,
// std::string) by pointer, so a module is only good for the build that made
// it: the loader compares abi and version and refuses any other. No
// exception crosses the boundary from the entry points (they report errors
// in CudaModuleError); the executor's own methods may throw as any
// ModelExecutor does (one libstdc++ serves both sides).
//
// Plain C++: no CUDA header, so the engine can include it.

#include <cstdint>
#include <string>

#include "kernels/cuda/device.cuh"
#include "model/llama_weights.hpp"
#include "model/model_executor.hpp"

namespace actorlm::cuda {

// Bump whenever the table, its argument structs, or what they point at
// change shape.
inline constexpr int module_abi = 1;
inline constexpr const char* module_entry_symbol = "actorlm_cuda_module";
inline constexpr const char* module_file_name = "libactorlm_cuda.so";

struct CudaModuleError {
  enum Kind { none = 0, invalid_argument = 1, no_device = 2, runtime = 3 };
  Kind kind = none;
  std::string message;
};

struct CudaExecutorRequest {
  const LlamaWeights* weights = nullptr;  // read only; the caller may drop it after the call
  int device = 0;
  // For rows_that_fit (the pool rows that mem_fraction_static leaves).
  double mem_fraction_static = 0.85;
  int32_t max_requests = 0;
  int32_t max_context = 0;
};

struct CudaExecutorMade {
  ModelExecutor* executor = nullptr;  // owned by the caller (delete through ModelExecutor)
  int64_t rows_that_fit = 0;
  std::string device_name;
};

struct CudaModuleTable {
  int abi = 0;
  const char* version = nullptr;  // actorlm::version_string of the build that made the module
  // False with `error` filled when no executor was made.
  bool (*create_executor)(const CudaExecutorRequest& request, CudaExecutorMade& made, CudaModuleError& error) = nullptr;
  // Never fails: a machine without a GPU reports zero devices and why.
  void (*probe_devices)(DeviceReport& report) = nullptr;
};

}  // namespace actorlm::cuda

// The module's one exported symbol (module_entry_symbol). Returns a table
// with static storage duration.
extern "C" const actorlm::cuda::CudaModuleTable* actorlm_cuda_module();
