// activation_math's two copies (the AVX2 one every x86 ISA takes, and the
// one compiled with the build's own flags) against scalar references, and
// against each other bit for bit: a -DACTORLM_NATIVE=OFF build runs the first
// on any AVX2 CPU, so the two must agree wherever they are both used.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/activation_math.hpp"

using namespace actorlm;

namespace {

std::vector<float> random_scores(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 6.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp wants real pointers even for no bytes, and an empty vector's
  // data() may be null (UBSan's nonnull-attribute check).
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<const cpu::activation_math::Kernels*> copies() {
  std::vector<const cpu::activation_math::Kernels*> out{&cpu::activation_math::for_isa(cpu::Isa::portable)};
  if (cpu::isa_available(cpu::Isa::avx2)) out.push_back(&cpu::activation_math::for_isa(cpu::Isa::avx2));
  return out;
}

}  // namespace

TEST_CASE("scale_max scales in place and returns the exact max, every length and copy") {
  for (const auto* k : copies()) {
    for (int32_t n : {0, 1, 7, 8, 9, 16, 63, 64, 65, 200}) {
      auto x = random_scores(static_cast<size_t>(n), 7u + static_cast<uint32_t>(n));
      std::vector<float> want = x;
      float want_max = -std::numeric_limits<float>::infinity();
      for (float& v : want) {
        v *= 0.125f * 1.3f;
        want_max = std::max(want_max, v);
      }
      const float got = k->scale_max(x.data(), n, 0.125f * 1.3f);
      CHECK(same_bits(x, want));
      CHECK(got == want_max);
    }
  }
}

TEST_CASE("scale_max reports a non-finite value wherever it sits") {
  for (const auto* k : copies()) {
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      for (int32_t at : {0, 5, 8, 17, 20}) {  // in a whole group of 8 and in the tail
        auto x = random_scores(21, 3);
        x[static_cast<size_t>(at)] = bad;
        CHECK(std::isnan(k->scale_max(x.data(), 21, 0.5f)));
      }
    }
    // A finite score that the scale makes infinite is caught too.
    std::vector<float> big{3e38f, 1.0f};
    CHECK(std::isnan(k->scale_max(big.data(), 2, 4.0f)));
  }
}

// scale_max is exact arithmetic, so its copies agree bit for bit; exp_sum
// and SwiGLU agree to rounding only (the build's own copy may be compiled
// without FMA, -DACTORLM_NATIVE=OFF, where the AVX2 copy contracts).
TEST_CASE("the AVX2 copy and the build's own copy agree") {
  const auto all = copies();
  if (all.size() < 2) return;  // no AVX2 on this CPU: one copy only
  const auto& a = *all[0];
  const auto& b = *all[1];
  auto near = [](float u, float v) { return std::fabs(u - v) <= 1e-6f * std::max(std::fabs(u), std::fabs(v)); };
  for (int32_t n : {1, 8, 13, 64, 100}) {
    auto x = random_scores(static_cast<size_t>(n), 11);
    auto y = x;
    const float ma = a.scale_max(x.data(), n, 0.17f), mb = b.scale_max(y.data(), n, 0.17f);
    REQUIRE(ma == mb);
    REQUIRE(same_bits(x, y));
    CHECK(near(a.exp_sum(x.data(), n, ma), b.exp_sum(y.data(), n, mb)));
    for (size_t j = 0; j < x.size(); ++j) CHECK(near(x[j], y[j]));
    std::vector<float> gate = random_scores(static_cast<size_t>(n), 5), up = random_scores(static_cast<size_t>(n), 6);
    std::vector<float> oa(gate.size()), ob(gate.size());
    a.swiglu(gate.data(), up.data(), oa.data(), n);
    b.swiglu(gate.data(), up.data(), ob.data(), n);
    for (size_t j = 0; j < oa.size(); ++j) CHECK(near(oa[j], ob[j]));
  }
}
