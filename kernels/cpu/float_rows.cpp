#include "kernels/cpu/float_rows.hpp"

#include <cstring>

namespace actorlm::cpu {
namespace {

// Eight floats: one AVX register, two SSE ones in a portable build (the same
// sums either way).
typedef float V8 __attribute__((vector_size(32)));

inline V8 load(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float dot(const float* a, const float* b, int64_t n) {
  V8 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 += load(a + i) * load(b + i);
    s1 += load(a + i + 8) * load(b + i + 8);
    s2 += load(a + i + 16) * load(b + i + 16);
    s3 += load(a + i + 24) * load(b + i + 24);
  }
  for (; i + 8 <= n; i += 8) s0 += load(a + i) * load(b + i);
  const V8 s = (s0 + s1) + (s2 + s3);
  float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) r += a[i] * b[i];
  return r;
}

}  // namespace

void dot_rows(const float* w, const float* x, int64_t x_rows, int64_t cols, float* out, int64_t out_stride,
              bool accumulate) {
  for (int64_t t = 0; t < x_rows; ++t) {
    const float y = dot(w, x + t * cols, cols);
    float& o = out[t * out_stride];
    o = accumulate ? o + y : y;
  }
}

}  // namespace actorlm::cpu
