#pragma once
// Host-side queries about the CUDA devices this process can see. Safe to call
// on a machine with the toolkit but no GPU: they report zero devices and the
// driver's reason instead of failing.

#include <string>

namespace actorlm::cuda {

struct DeviceReport {
  int device_count = 0;
  std::string first_device_name;  // empty when device_count == 0
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
  std::string error;  // why no device is usable, from the CUDA runtime
};

DeviceReport probe_devices();

}  // namespace actorlm::cuda
