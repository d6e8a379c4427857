#include "kernels/cpu/float_rows.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/half.hpp"

using namespace actorlm;

namespace {

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE("dot_rows sums each product as double does to float rounding, and adds to what is there when asked", "[kernels]") {
  // Column counts around the 32- and 8-lane steps and their tails.
  for (int64_t cols : {1, 7, 8, 31, 32, 33, 100, 576, 1536}) {
    INFO("cols " << cols);
    const std::vector<float> w = uniform(static_cast<size_t>(cols), 1), x = uniform(static_cast<size_t>(3 * cols), 2);
    std::vector<float> out(6, 0.5f);
    cpu::dot_rows(w.data(), x.data(), 3, cols, out.data(), 2, false);
    for (int t = 0; t < 3; ++t) {
      double ref = 0;
      for (int64_t j = 0; j < cols; ++j) ref += double(w[size_t(j)]) * x[size_t(t * cols + j)];
      CHECK(std::abs(out[size_t(2 * t)] - ref) <= 1e-5 * (1 + std::sqrt(double(cols))));
      CHECK(out[size_t(2 * t + 1)] == 0.5f);  // the stride skips it
    }
    std::vector<float> again = out;
    cpu::dot_rows(w.data(), x.data(), 3, cols, again.data(), 2, true);
    for (int t = 0; t < 3; ++t) CHECK(again[size_t(2 * t)] == out[size_t(2 * t)] + out[size_t(2 * t)]);
  }
}

TEST_CASE("A float32 or f16 matrix gives a token the same bits in a step of any size up to the few-row limit", "[kernels]") {
  cpu::CpuBackend backend(2);
  const int64_t rows = 75, cols = 200;
  const std::vector<float> values = uniform(static_cast<size_t>(rows * cols), 3);
  std::vector<uint16_t> halves(values.size());
  for (size_t i = 0; i < values.size(); ++i) halves[i] = f32_to_f16(values[i]);
  const std::vector<float> x = uniform(static_cast<size_t>(cpu::few_rows * cols), 4);
  for (const MatrixView& w : {MatrixView{values.data(), rows, cols, GgmlType::F32},
                              MatrixView{halves.data(), rows, cols, GgmlType::F16}}) {
    INFO(ggml_type_name(w.type));
    // Token 0 alone, then as the first of every larger step.
    std::vector<float> alone(static_cast<size_t>(rows));
    backend.matmul(x.data(), 1, w, alone.data(), false);
    for (int64_t n = 2; n <= cpu::few_rows; ++n) {
      std::vector<float> out(static_cast<size_t>(n * rows));
      backend.matmul(x.data(), n, w, out.data(), false);
      INFO("rows " << n);
      CHECK(std::vector<float>(out.begin(), out.begin() + rows) == alone);
    }
  }
}
