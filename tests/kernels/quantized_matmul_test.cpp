// Products from Q4_1 / Q8_0 blocks against references in double,
// the weights dequantized by model/ggml_type's dequantize_row (itself checked
// against the gguf package), on random blocks: random f16 scales and mins,
// every nibble / int8 value (Q8_0 including -128).
//
// Tolerances, per output element:
//   - against W x~, x~ being the kernel's int16 copy of x (scale * q): the
//     kernel's arithmetic is exact up to float32 summation, so
//     1e-5 * sum_j |W_j x~_j| + 1e-6;
//   - against the float32 product W x: the activation rounding bound of
//     quantized_matmul.hpp, sum_j |W_j| * max|x_block(j)| / 65534, plus the
//     same float32 allowance.

#include "kernels/cpu/quantized_matmul.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "model/ggml_type.hpp"
#include "model/half.hpp"

using namespace actorlm;
using V = std::vector<float>;

namespace {

struct BlockMatrix {
  BlockFormat format;
  int64_t rows, cols;
  std::vector<uint8_t> blocks;
  V dequantized;  // rows * cols, by dequantize_row

  MatrixView view() const { return {dequantized.data(), rows, cols, blocks.data(), format}; }
};

void put_half(uint8_t* p, float v) {
  uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, sizeof h);
}

BlockMatrix random_blocks(BlockFormat f, int64_t rows, int64_t cols, std::mt19937& rng) {
  BlockMatrix m{f, rows, cols, {}, {}};
  const int64_t n_blocks = rows * cols / 32;
  const auto bytes = static_cast<size_t>(cpu::block_bytes(f));
  m.blocks.resize(static_cast<size_t>(n_blocks) * bytes);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f), min(-0.8f, 0.2f);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* p = m.blocks.data() + static_cast<size_t>(b) * bytes;
    put_half(p, scale(rng));
    if (f == BlockFormat::q4_1) put_half(p + 2, min(rng));
    for (size_t i = f == BlockFormat::q4_1 ? 4 : 2; i < bytes; ++i) p[i] = static_cast<uint8_t>(byte(rng));
  }
  const GgmlType t = f == BlockFormat::q4_1 ? GgmlType::Q4_1 : GgmlType::Q8_0;
  m.dequantized.resize(static_cast<size_t>(rows * cols));
  dequantize_row(t, m.blocks.data(), m.dequantized.data(), rows * cols);
  return m;
}

V random_x(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  V x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  // Block scales vary in real activations: one block 100x, one all zero.
  if (n >= 64) {
    for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] *= 100.0f;
    for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;
  }
  return x;
}

struct Expected {
  std::vector<double> exact, exact_tol, f32, f32_tol;
};

// x quantized as the backend does it.
cpu::BlockActivations quantize(const V& x, int64_t rows, int64_t cols) {
  cpu::BlockActivations a;
  cpu::prepare_activations(rows, cols, a);
  cpu::quantize_rows(x.data(), 0, rows, a);
  return a;
}

// The product of every weight row with x row t; init: what the outputs held
// before (the accumulate case adds to it).
Expected reference(const BlockMatrix& m, const V& x, const cpu::BlockActivations& a, int64_t t, const V& init) {
  Expected e;
  const int64_t n_blocks = m.cols / 32;
  for (int64_t r = 0; r < m.rows; ++r) {
    const double old = init[static_cast<size_t>(r)];
    double exact = old, exact_abs = std::abs(old), f32 = old, f32_abs = std::abs(old), bound = 0;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const double scale = a.scale[static_cast<size_t>(t * n_blocks + b)];
      double amax = 0, w_abs = 0;
      for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
        const double w = m.dequantized[static_cast<size_t>(r * m.cols + j)];
        const double xj = x[static_cast<size_t>(t * m.cols + j)];
        const double rounded = scale * a.q[static_cast<size_t>(t * m.cols + j)];
        exact += w * rounded;
        exact_abs += std::abs(w * rounded);
        f32 += w * xj;
        f32_abs += std::abs(w * xj);
        w_abs += std::abs(w);
        amax = std::max(amax, std::abs(xj));
      }
      bound += w_abs * amax / 65534.0;
    }
    e.exact.push_back(exact);
    e.exact_tol.push_back(1e-5 * exact_abs + 1e-6);
    e.f32.push_back(f32);
    e.f32_tol.push_back(bound + 1e-5 * (exact_abs + f32_abs) + 1e-6);
  }
  return e;
}

void require_within(const float* got, const std::vector<double>& want, const std::vector<double>& tol,
                    const char* what) {
  for (size_t r = 0; r < want.size(); ++r) {
    INFO(what << ", row " << r << ": got " << got[r] << ", want " << want[r] << " +- " << tol[r]);
    REQUIRE(std::abs(got[r] - want[r]) <= tol[r]);
  }
}

const char* name(BlockFormat f) { return f == BlockFormat::q4_1 ? "Q4_1" : "Q8_0"; }

}  // namespace

TEST_CASE("Activations quantize per block to int16 within half a step", "[kernels][quantized]") {
  std::mt19937 rng(11);
  const int64_t rows = 3, cols = 1536, n_blocks = rows * cols / 32;
  V x = random_x(rows * cols, rng);
  cpu::BlockActivations a = quantize(x, rows, cols);
  REQUIRE(a.q.size() == size_t(rows * cols));
  REQUIRE(a.scale.size() == size_t(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b) {
    float amax = 0, sum = 0;
    for (int j = 0; j < 32; ++j) {
      amax = std::max(amax, std::abs(x[size_t(b * 32 + j)]));
      sum += x[size_t(b * 32 + j)];
    }
    CHECK(a.scale[size_t(b)] == amax / 32767.0f);
    int q_sum = 0;
    for (int j = 0; j < 32; ++j) {
      int q = a.q[size_t(b * 32 + j)];
      q_sum += q;
      REQUIRE(std::abs(q) <= 32767);
      // Rounded to nearest, ties to even: within half a step (plus the float
      // rounding of x * (32767 / amax), ~0.004 steps).
      REQUIRE(q == (amax > 0 ? int(std::nearbyint(x[size_t(b * 32 + j)] * (32767.0f / amax))) : 0));
      REQUIRE(std::abs(x[size_t(b * 32 + j)] - a.scale[size_t(b)] * q) <= a.scale[size_t(b)] * 0.505f);
    }
    CHECK(a.sum[size_t(b)] == a.scale[size_t(b)] * float(q_sum));
    // The sum of x itself is off by at most 32 half steps.
    CHECK(std::abs(a.sum[size_t(b)] - sum) <= 32 * 0.505f * a.scale[size_t(b)] + 1e-5f);
  }
  CHECK(a.scale[1] == 0.0f);  // the all-zero block

  // Rows quantized in pieces (as threads do) give the same bytes.
  cpu::BlockActivations pieces;
  cpu::prepare_activations(rows, cols, pieces);
  cpu::quantize_rows(x.data(), 2, 3, pieces);
  cpu::quantize_rows(x.data(), 0, 2, pieces);
  CHECK(pieces.q == a.q);
  CHECK(pieces.scale == a.scale);
  CHECK(pieces.sum == a.sum);
}

TEST_CASE("Block matmul equals the dequantized product, AVX2 and scalar", "[kernels][quantized]") {
  std::mt19937 rng(12);
  for (BlockFormat f : {BlockFormat::q4_1, BlockFormat::q8_0}) {
    for (int64_t cols : {32, 576, 1536}) {
      for (int64_t rows : {1, 7, 33, 192}) {
        for (int64_t tokens : {1, 3}) {
          for (bool accumulate : {false, true}) {
            INFO(name(f) << " " << rows << " x " << cols << ", " << tokens << " x rows"
                         << (accumulate ? ", accumulate" : ""));
            BlockMatrix m = random_blocks(f, rows, cols, rng);
            REQUIRE(cpu::block_matmul_supported(m.view()));
            V x = random_x(tokens * cols, rng);
            cpu::BlockActivations a = quantize(x, tokens, cols);
            V init(static_cast<size_t>(tokens * rows), accumulate ? 0.25f : -99.0f);
            for (cpu::MatmulImpl impl : {cpu::MatmulImpl::best, cpu::MatmulImpl::scalar}) {
              const char* what = impl == cpu::MatmulImpl::best ? "best" : "scalar";
              V y = init;
              cpu::block_matmul_rows(m.view(), a, y.data(), 0, rows, accumulate, impl);
              for (int64_t t = 0; t < tokens; ++t) {
                INFO("x row " << t);
                V old(init.begin() + t * rows, init.begin() + (t + 1) * rows);
                if (!accumulate) std::fill(old.begin(), old.end(), 0.0f);
                Expected e = reference(m, x, a, t, old);
                require_within(y.data() + t * rows, e.exact, e.exact_tol, what);
                require_within(y.data() + t * rows, e.f32, e.f32_tol, what);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("A token's product is bit for bit the same alone, in a batch, under any row split",
          "[kernels][quantized]") {
  cpu::CpuBackend backend(2);
  std::mt19937 rng(13);
  for (BlockFormat f : {BlockFormat::q4_1, BlockFormat::q8_0}) {
    // Weight row counts not a multiple of the two threads or of the tile.
    for (int64_t rows : {1, 3, 577}) {
      const int64_t cols = 576, tokens = 5;
      INFO(name(f) << " " << rows << " rows");
      BlockMatrix m = random_blocks(f, rows, cols, rng);
      V x = random_x(tokens * cols, rng);
      cpu::BlockActivations a = quantize(x, tokens, cols);

      V batch(static_cast<size_t>(tokens * rows), 0.5f);
      backend.matmul(x.data(), tokens, m.view(), batch.data(), /*accumulate=*/true);
      for (int64_t t = 0; t < tokens; ++t) {
        INFO("x row " << t);
        V old(static_cast<size_t>(rows), 0.5f);
        Expected e = reference(m, x, a, t, old);
        require_within(batch.data() + t * rows, e.exact, e.exact_tol, "batch");

        V alone = old;
        backend.matmul(x.data() + t * cols, 1, m.view(), alone.data(), true);
        REQUIRE(std::equal(alone.begin(), alone.end(), batch.begin() + t * rows));
      }
      // One thread, weight rows split unevenly.
      V split(static_cast<size_t>(tokens * rows), 0.5f);
      const int64_t k = rows / 3;
      cpu::block_matmul_rows(m.view(), a, split.data(), k, rows, true);
      cpu::block_matmul_rows(m.view(), a, split.data(), 0, k, true);
      REQUIRE(split == batch);
    }
  }
}

TEST_CASE("NaN or infinity in x makes every output NaN", "[kernels][quantized]") {
  std::mt19937 rng(14);
  for (BlockFormat f : {BlockFormat::q4_1, BlockFormat::q8_0}) {
    BlockMatrix m = random_blocks(f, 5, 64, rng);
    for (float bad : {NAN, INFINITY}) {
      V x = random_x(64, rng);
      x[40] = bad;
      cpu::BlockActivations a = quantize(x, 1, 64);
      for (cpu::MatmulImpl impl : {cpu::MatmulImpl::best, cpu::MatmulImpl::scalar}) {
        V y(5);
        cpu::block_matmul_rows(m.view(), a, y.data(), 0, 5, false, impl);
        for (float v : y) CHECK(std::isnan(v));
      }
    }
  }
}
