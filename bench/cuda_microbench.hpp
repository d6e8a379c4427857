#pragma once
// Kernel-level timings for bench/cuda_bench (CUDA events around the launches,
// median of many runs after a warm-up, fresh random inputs). Plain C++ API.

#include <cstddef>
#include <cstdint>

namespace actorlm::cuda {

struct KernelTiming {
  double ms = 0;        // median per launch
  double bytes = 0;     // the fewest bytes the launch must move
  double gb_per_s() const { return bytes / (ms * 1e6); }
};

// Decode attention (one query token per request) over `context` cached
// positions per request in a paged pool with shuffled pages; bytes = the
// K and V rows read plus q and the output.
KernelTiming time_decode_attention(int batch, int context, int n_heads, int n_kv_heads, int head_dim, int page_size,
                                   int reps);

// A device-to-device copy of `bytes`, counting bytes read and written: the
// memory bandwidth this card actually reaches.
KernelTiming time_device_copy(size_t bytes, int reps);

}  // namespace actorlm::cuda
