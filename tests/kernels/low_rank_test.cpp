// LoRA's low-rank updates on the host (kernels/low_rank.hpp): against a
// float64 reference, the same bits on the CPU backend's pool as on one
// thread, and a row's result whatever other rows and slices share the call.

#include "kernels/low_rank.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/half.hpp"

using namespace actorlm;

namespace {

struct Update {
  std::vector<uint16_t> a, bt;  // half precision: [rank][in], [rank][out]
  int32_t rank;
  float scale;
  double a_at(size_t i) const { return f16_to_f32(a[i]); }
  double bt_at(size_t i) const { return f16_to_f32(bt[i]); }
};

Update random_update(int32_t rank, int64_t in, int64_t out, float scale, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.5f);
  Update u{std::vector<uint16_t>(static_cast<size_t>(rank * in)), std::vector<uint16_t>(static_cast<size_t>(rank * out)),
           rank, scale};
  for (uint16_t& v : u.a) v = f32_to_f16(d(rng));
  for (uint16_t& v : u.bt) v = f32_to_f16(d(rng));
  return u;
}

}  // namespace

TEST_CASE("Low-rank updates match float64, and every row's bits are the same on one thread, on the pool and in any company",
          "[kernels][lora]") {
  std::mt19937 rng(3);
  // in not a multiple of 16 (the dot's tail), ranks below and above the stack buffer.
  const int64_t in = 203, out = 77, rows = 40, ld_out = 80;
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * in));
  for (float& v : x) v = d(rng);
  const Update u1 = random_update(4, in, out, 0.75f, rng), u2 = random_update(300, in, out, 2.0f, rng);
  const std::vector<LowRankSlice> slices{{u1.a.data(), u1.bt.data(), u1.scale, 4, 0, 7},
                                         {u2.a.data(), u2.bt.data(), u2.scale, 300, 7, 20},
                                         {u1.a.data(), u1.bt.data(), u1.scale, 4, 30, 10}};
  std::vector<float> base(static_cast<size_t>(rows * ld_out));
  for (float& v : base) v = d(rng);

  std::vector<float> serial = base, pooled = base;
  cpu::CpuBackend one(1), two(2);
  one.low_rank_add(x.data(), in, in, serial.data(), ld_out, out, slices);
  two.low_rank_add(x.data(), in, in, pooled.data(), ld_out, out, slices);
  CHECK(serial == pooled);

  // float64: rows 27..29 are in no slice and keep their values.
  auto owner = [&](int64_t r) -> const Update* {
    if (r < 7 || (r >= 30 && r < 40)) return &u1;
    if (r < 27) return &u2;
    return nullptr;
  };
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const Update* u = owner(r);
    for (int64_t o = 0; o < out; ++o) {
      double want = base[static_cast<size_t>(r * ld_out + o)];
      if (u) {
        for (int32_t k = 0; k < u->rank; ++k) {
          double t = 0;
          for (int64_t i = 0; i < in; ++i) t += double(x[static_cast<size_t>(r * in + i)]) * u->a_at(static_cast<size_t>(k * in + i));
          want += u->scale * t * u->bt_at(static_cast<size_t>(k * out + o));
        }
      }
      const double got = serial[static_cast<size_t>(r * ld_out + o)];
      worst = std::max(worst, std::abs(got - want) / std::max(1.0, std::abs(want)));
      if (!u) CHECK(got == base[static_cast<size_t>(r * ld_out + o)]);
    }
    // Columns past out_cols are never touched.
    for (int64_t o = out; o < ld_out; ++o) CHECK(serial[static_cast<size_t>(r * ld_out + o)] == base[static_cast<size_t>(r * ld_out + o)]);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 1e-4);

  // Row 32 alone (a slice of one row) gives the bits it got among 40.
  std::vector<float> alone = base;
  const LowRankSlice single{u1.a.data(), u1.bt.data(), u1.scale, 4, 32, 1};
  two.low_rank_add(x.data(), in, in, alone.data(), ld_out, out, {&single, 1});
  for (int64_t o = 0; o < out; ++o) CHECK(alone[static_cast<size_t>(32 * ld_out + o)] == serial[static_cast<size_t>(32 * ld_out + o)]);
}
