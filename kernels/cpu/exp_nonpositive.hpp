#pragma once
// A fast exp for the softmax (attention's exponentials and the fold of its
// partial sums), in an anonymous namespace: each translation unit that
// includes it gets its own copy compiled with its own flags (a shared inline
// copy could be the AVX2 one in a portable caller).

#include <bit>
#include <cmath>
#include <cstdint>

namespace actorlm::cpu {
namespace {

// exp(x) for finite x <= 0 (a score minus the running max): x = n ln2 + r
// with n = round(x / ln2) and r = x - n ln2 in two steps (ln2 split in a
// high part whose product with n is exact and a low part), then 2^n into the
// exponent bits times e^r, |r| <= 0.35, by a degree-7 Taylor polynomial:
// within 1e-7 relative of exp (measured 7.5e-8 over [-87, 0]). A cruder
// version (2^(x log2 e) with the product rounded first, 1.2e-6) cost 0.6% of
// teacher-forced agreement with llama.cpp. Inputs below -87 give ~1e-38,
// which changes nothing it is added to. Written so that loops over it
// vectorize (std::exp does not).
inline float exp_nonpositive(float x) {
  x = x > -87.0f ? x : -87.0f;
  // Round to nearest by the 1.5 * 2^23 trick (|x / ln2| < 2^22 here).
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  float r = std::fma(n, -0.693145752f, x);
  r = std::fma(n, -1.42860677e-6f, r);
  const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                                                                   r * (1.0f / 720 + r * (1.0f / 5040)))))));
  // n in [-126, 0]: adding n to the exponent field (in unsigned arithmetic,
  // so a negative n wraps instead of shifting a negative value).
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p) + (static_cast<uint32_t>(static_cast<int32_t>(n)) << 23));
}

}  // namespace
}  // namespace actorlm::cpu
