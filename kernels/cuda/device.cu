#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace actorlm::cuda {

DeviceReport probe_devices() {
  DeviceReport report;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    report.error = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return report;
  }
  report.device_count = count;
  if (count == 0) {
    report.error = "no CUDA device";
    return report;
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    report.error = cudaGetErrorString(err);
    return report;
  }
  report.first_device_name = prop.name;
  report.compute_major = prop.major;
  report.compute_minor = prop.minor;
  report.total_memory_bytes = prop.totalGlobalMem;
  return report;
}

}  // namespace actorlm::cuda
