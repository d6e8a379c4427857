#pragma once
// A fast exp for the softmax (attention's exponentials and the fold of its
// partial sums), in an anonymous namespace: each translation unit that
// includes it gets its own copy compiled with its own flags (a shared inline
// copy could be the AVX2 one in a portable caller).
//
// exp(x) for finite x <= 0 (a score minus the running max): x = n ln2 + r
// with n = round(x / ln2) and r = x - n ln2 in two steps (ln2 split in a
// high part whose product with n is exact and a low part), then 2^n into the
// exponent bits times e^r, |r| <= 0.35, by a degree-7 Taylor polynomial:
// within 1e-7 relative of exp (measured 7.5e-8 over [-87, 0]). A cruder
// version (2^(x log2 e) with the product rounded first, 1.2e-6) cost 0.6% of
// teacher-forced agreement with llama.cpp. Inputs below -87 give ~1e-38,
// which changes nothing it is added to.
//
// Written once, on 8 lanes of GCC's generic vectors, so that it is
// vectorized in every build (the compiler left a scalar loop over a scalar
// version scalar when compiled for AVX2 alone); a * b + c is fused where the
// unit has FMA. One value goes through lane 0.

#include <cstdint>
#include <cstring>

namespace actorlm::cpu {
namespace {

using exp_f8 = float __attribute__((vector_size(32)));
using exp_i8 = int32_t __attribute__((vector_size(32)));

inline exp_f8 exp_nonpositive8(exp_f8 x) {
  x = x > -87.0f ? x : exp_f8{} - 87.0f;
  // Round to nearest by the 1.5 * 2^23 trick (|x / ln2| < 2^22 here).
  const exp_f8 n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  exp_f8 r = n * -0.693145752f + x;
  r = n * -1.42860677e-6f + r;
  const exp_f8 p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                                                                      r * (1.0f / 720 + r * (1.0f / 5040)))))));
  // n in [-126, 0]: added to the exponent field (integer lanes wrap).
  const exp_i8 e = __builtin_convertvector(n, exp_i8) << 23;
  exp_i8 bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += e;
  exp_f8 out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

inline float exp_nonpositive(float x) { return exp_nonpositive8(exp_f8{} + x)[0]; }

}  // namespace
}  // namespace actorlm::cpu
