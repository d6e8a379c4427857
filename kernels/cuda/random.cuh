#pragma once
// Counter-based randomness on the device: splitmix64, the same mixer the CPU
// sampler uses (kernels/cpu/sampler.cpp), so a (seed, step) draw is the same
// number on both.

#include <cstdint>

namespace actorlm::cuda {

__device__ inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace actorlm::cuda
