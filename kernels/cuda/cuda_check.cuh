#pragma once
// Every CUDA and cuBLAS call goes through these: a failure becomes a
// std::runtime_error naming the call site, never a silent wrong answer.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace actorlm::cuda {

[[noreturn]] inline void cuda_fail(const char* what, const char* file, int line, const std::string& why) {
  throw std::runtime_error(std::string("CUDA error: ") + what + " at " + file + ":" + std::to_string(line) + ": " + why);
}

#define ACTORLM_CUDA_CHECK(call)                                                           \
  do {                                                                                     \
    cudaError_t actorlm_err_ = (call);                                                     \
    if (actorlm_err_ != cudaSuccess)                                                       \
      ::actorlm::cuda::cuda_fail(#call, __FILE__, __LINE__, cudaGetErrorString(actorlm_err_)); \
  } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define ACTORLM_CUDA_LAUNCHED() ACTORLM_CUDA_CHECK(cudaGetLastError())

#define ACTORLM_CUBLAS_CHECK(call)                                                          \
  do {                                                                                      \
    cublasStatus_t actorlm_st_ = (call);                                                    \
    if (actorlm_st_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::actorlm::cuda::cuda_fail(#call, __FILE__, __LINE__, cublasGetStatusString(actorlm_st_)); \
  } while (0)

}  // namespace actorlm::cuda
