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

TEST_CASE("multiply_rows sums each product as double does to float rounding, and adds to what is there when asked", "[kernels]") {
  // Column counts around the 8-lane step and its tail; weight and x row
  // counts around the 4 x 2 tile.
  for (int64_t cols : {1, 7, 8, 9, 33, 100, 576}) {
    for (int64_t w_rows : {1, 3, 4, 5, 9}) {
      for (int64_t x_rows : {1, 2, 3, 5}) {
        INFO("cols " << cols << ", " << w_rows << " weight rows, " << x_rows << " x rows");
        const std::vector<float> w = uniform(static_cast<size_t>(w_rows * cols), 1);
        const std::vector<float> x = uniform(static_cast<size_t>(x_rows * cols), 2);
        const int64_t stride = w_rows + 1;  // a column the product leaves alone
        std::vector<float> out(static_cast<size_t>(x_rows * stride), 0.5f);
        cpu::multiply_rows(w.data(), w_rows, x.data(), x_rows, cols, out.data(), stride, false);
        for (int64_t t = 0; t < x_rows; ++t) {
          for (int64_t o = 0; o < w_rows; ++o) {
            double ref = 0;
            for (int64_t j = 0; j < cols; ++j) ref += double(w[size_t(o * cols + j)]) * x[size_t(t * cols + j)];
            CHECK(std::abs(out[size_t(t * stride + o)] - ref) <= 1e-5 * (1 + std::sqrt(double(cols))));
          }
          CHECK(out[size_t(t * stride + w_rows)] == 0.5f);
        }
        std::vector<float> again = out;
        cpu::multiply_rows(w.data(), w_rows, x.data(), x_rows, cols, again.data(), stride, true);
        for (int64_t t = 0; t < x_rows; ++t) {
          for (int64_t o = 0; o < w_rows; ++o) {
            const size_t at = size_t(t * stride + o);
            CHECK(again[at] == out[at] + out[at]);
          }
        }
      }
    }
  }
}

TEST_CASE("A product's every entry is the same bits whatever tile, weight rows or x rows computed it", "[kernels]") {
  // 53 weight rows: two whole blocks and 5 rows, so every tile width leaves
  // rows to the one-row tiles; 90 columns: a tail after the last 8. Up to
  // 17 x rows: every pass shape, and two or three passes over each block.
  const int64_t w_rows = 53, cols = 90, most_x = 17;
  const std::vector<float> w = uniform(static_cast<size_t>(w_rows * cols), 5),
                           x = uniform(static_cast<size_t>(most_x * cols), 6);
  // One weight row and one x row at a time.
  std::vector<float> single(static_cast<size_t>(most_x * w_rows));
  for (int64_t o = 0; o < w_rows; ++o) {
    for (int64_t t = 0; t < most_x; ++t) {
      cpu::multiply_rows(w.data() + o * cols, 1, x.data() + t * cols, 1, cols, &single[size_t(t * w_rows + o)], 1,
                         false);
    }
  }
  for (int64_t x_rows = 1; x_rows <= most_x; ++x_rows) {
    INFO("x rows " << x_rows);
    std::vector<float> whole(static_cast<size_t>(x_rows * w_rows));
    cpu::multiply_rows(w.data(), w_rows, x.data(), x_rows, cols, whole.data(), w_rows, false);
    CHECK(whole == std::vector<float>(single.begin(), single.begin() + x_rows * w_rows));
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
