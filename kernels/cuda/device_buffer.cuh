#pragma once
// An owning, typed device allocation (cudaMalloc, never managed memory).
// grow() keeps the buffer when it is already large enough, so per-step
// scratch is allocated once at its high-water mark.

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/cuda_check.cuh"

namespace actorlm::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { grow(n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  // Contents are not preserved when the buffer has to grow. Returns whether
  // it moved (captured CUDA graphs hold the old address).
  bool grow(size_t n) {
    if (n <= size_) return false;
    release();
    void* p = nullptr;
    ACTORLM_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    ptr_ = static_cast<T*>(p);
    size_ = n;
    return true;
  }
  T* get() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);  // no throw from a destructor; a failed free leaks at worst
    ptr_ = nullptr;
    size_ = 0;
  }
  T* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace actorlm::cuda
