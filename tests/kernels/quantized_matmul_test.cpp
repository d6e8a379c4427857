// Products straight from every weight format the CPU backend reads, against
// references in double: the weights widened by dequantize_row (itself
// checked against the gguf package in ggml_type_test and gguf_file_test), on
// random blocks (random f16 scales, every other byte random, so every
// nibble, fifth bit, 6-bit scale and Q8_0's -128 occur), on every ISA this
// CPU has.
//
// Tolerances, per output element:
//   - against W x~ (x~ = d q, the kernel's int8 copy of x; x itself for the
//     float formats): the arithmetic is exact up to float32 summation, so
//     2e-5 * sum_j |W_j x~_j| + 1e-6;
//   - against W x: the activation rounding bound, sum over blocks of
//     sum_j |W_j| * 0.57 d (half a step, plus q8_0/q8_1's f16 rounding of d:
//     127 * 2^-11 steps at most), plus the same allowance.

#include "kernels/cpu/quantized_matmul.hpp"

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/packed_matrix.hpp"
#include "kernels/cpu/quantized_matmul_isa.hpp"
#include "kernels/ggml_type.hpp"
#include "kernels/half.hpp"

using namespace actorlm;
using V = std::vector<float>;

namespace {

constexpr GgmlType all_types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                  GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                  GgmlType::F16,  GgmlType::BF16, GgmlType::F32};

std::vector<cpu::Isa> available_isas() {
  std::vector<cpu::Isa> out;
  for (cpu::Isa isa : {cpu::Isa::portable, cpu::Isa::avx2, cpu::Isa::avx_vnni, cpu::Isa::avx512_vnni}) {
    if (cpu::isa_available(isa)) out.push_back(isa);
  }
  return out;
}

struct Matrix {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  V dequantized;  // rows * cols, by dequantize_rows
  std::shared_ptr<const cpu::PackedMatrix> packed;  // the SIMD kernels' tiles (block types)

  // With the packed tiles, as CpuBackend::prepare_weights gives it.
  MatrixView view() const { return {bytes.data(), rows, cols, type, packed.get()}; }
  MatrixView file_view() const { return {bytes.data(), rows, cols, type}; }
};

void put_half(uint8_t* p, float v) {
  uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, sizeof h);
}

// Where each block keeps its f16 scale (and min): random bytes there could
// be inf or NaN, so those fields get sane random values.
std::vector<size_t> half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0: return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

Matrix random_matrix(GgmlType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  Matrix m{t, rows, cols, std::vector<uint8_t>(ggml_row_bytes(t, cols) * static_cast<size_t>(rows)), {}, nullptr};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f), value(-1.0f, 1.0f);
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = value(rng);
      if (t == GgmlType::F32) {
        std::memcpy(m.bytes.data() + 4 * i, &v, 4);
      } else {
        uint16_t h = t == GgmlType::F16 ? f32_to_f16(v) : static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
        std::memcpy(m.bytes.data() + 2 * i, &h, 2);
      }
    }
  } else {
    for (auto& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
    const size_t block = ggml_block_bytes(t);
    for (size_t at = 0; at < m.bytes.size(); at += block) {
      for (size_t field : half_fields(t)) put_half(m.bytes.data() + at + field, scale(rng));
    }
  }
  m.dequantized.resize(static_cast<size_t>(rows * cols));
  dequantize_rows(t, m.bytes.data(), m.dequantized.data(), rows, cols);
  if (cpu::packed_layout(t) != nullptr) m.packed = cpu::pack_matrix(m.file_view());
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

cpu::Activations prepare(const V& x, int64_t rows, int64_t cols, GgmlType t) {
  cpu::Activations a;
  cpu::prepare_activations(x.data(), rows, cols, t, a);
  cpu::quantize_rows(0, rows, a);
  return a;
}

struct Expected {
  std::vector<double> exact, exact_tol, f32, f32_tol;
};

// The product of every weight row with x row t, on top of init.
Expected reference(const Matrix& m, const V& x, const cpu::Activations& a, int64_t t, const V& init) {
  Expected e;
  const bool integer = a.scheme != cpu::ActivationScheme::none;
  const int64_t n_blocks = m.cols / 32;
  for (int64_t r = 0; r < m.rows; ++r) {
    const double old = init[static_cast<size_t>(r)];
    double exact = old, exact_abs = std::abs(old), f32 = old, f32_abs = std::abs(old), bound = 0;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const double d = integer ? a.d[static_cast<size_t>(t * n_blocks + b)] : 0.0;
      double w_abs = 0;
      for (int64_t j = b * 32; j < b * 32 + 32; ++j) {
        const double w = m.dequantized[static_cast<size_t>(r * m.cols + j)];
        const double xj = x[static_cast<size_t>(t * m.cols + j)];
        const double rounded = integer ? d * a.q[static_cast<size_t>(t * m.cols + j)] : xj;
        exact += w * rounded;
        exact_abs += std::abs(w * rounded);
        f32 += w * xj;
        f32_abs += std::abs(w * xj);
        w_abs += std::abs(w);
      }
      bound += w_abs * std::abs(d) * 0.57;
      if (a.scheme == cpu::ActivationScheme::q8_1) {
        // q8_1 keeps the block sum s = d * sum q as an f16 of its own, which
        // the kernels multiply by the block's min (the f16 after its scale).
        double q_sum = 0;
        for (int64_t j = b * 32; j < b * 32 + 32; ++j) q_sum += a.q[static_cast<size_t>(t * m.cols + j)];
        uint16_t h;
        std::memcpy(&h, m.bytes.data() + r * ggml_row_bytes(m.type, m.cols) + b * ggml_block_bytes(m.type) + 2, 2);
        const double s = a.s[static_cast<size_t>(t * n_blocks + b)];
        exact += f16_to_f32(h) * (s - d * q_sum);
        exact_abs += std::abs(f16_to_f32(h) * s);
      }
    }
    e.exact.push_back(exact);
    e.exact_tol.push_back(2e-5 * exact_abs + 1e-6);
    e.f32.push_back(f32);
    e.f32_tol.push_back(bound + 2e-5 * (exact_abs + f32_abs) + 1e-6);
  }
  return e;
}

void require_within(const float* got, const std::vector<double>& want, const std::vector<double>& tol) {
  for (size_t r = 0; r < want.size(); ++r) {
    INFO("weight row " << r << ": got " << got[r] << ", want " << want[r] << " +- " << tol[r]);
    REQUIRE(std::abs(got[r] - want[r]) <= tol[r]);
  }
}

// Columns: an odd number of blocks (and of K-quant super-blocks).
int64_t odd_cols(GgmlType t) { return ggml_block_elements(t) == 256 ? 3 * 256 : 7 * 32; }

}  // namespace

TEST_CASE("Activations quantize to int8 as llama.cpp does for each weight type", "[kernels][quantized]") {
  std::mt19937 rng(11);
  const int64_t rows = 3, cols = 1536, n_blocks = rows * cols / 32;
  V x = random_x(rows * cols, rng);
  // x [0, 32) is 100x the rest and [32, 64) zeros (random_x).
  SECTION("q8_0 and q8_1: per 32 values, d rounded to f16") {
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_1}) {
      cpu::Activations a = prepare(x, rows, cols, t);
      REQUIRE(a.q.size() == size_t(rows * cols));
      REQUIRE(a.d.size() == size_t(n_blocks));
      for (int64_t b = 0; b < n_blocks; ++b) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[size_t(b * 32 + j)]));
        const float scale = amax / 127.0f;
        CHECK(a.d[size_t(b)] == f16_to_f32(f32_to_f16(scale)));
        int q_sum = 0, extreme = 0;
        for (int j = 0; j < 32; ++j) {
          const int q = a.q[size_t(b * 32 + j)];
          q_sum += q;
          extreme = std::max(extreme, std::abs(q));
          REQUIRE(q == (amax > 0 ? int(std::nearbyint(x[size_t(b * 32 + j)] * (1.0f / scale))) : 0));
        }
        if (t == GgmlType::Q4_1) {
          CHECK(a.s[size_t(b)] == f16_to_f32(f32_to_f16(scale * float(q_sum))));
        } else {
          CHECK(a.s[size_t(b)] == a.d[size_t(b)] * float(q_sum));
        }
        if (amax > 0) CHECK(extreme == 127);  // the block's largest value uses the whole range
      }
      CHECK(a.d[1] == 0.0f);  // the all-zero block
    }
  }
  SECTION("q8_K: per 256 values, the largest magnitude maps to -127") {
    cpu::Activations a = prepare(x, rows, cols, GgmlType::Q4_K);
    for (int64_t sb = 0; sb < rows * cols / 256; ++sb) {
      float max = 0;
      for (int j = 0; j < 256; ++j) {
        if (std::abs(x[size_t(sb * 256 + j)]) > std::abs(max)) max = x[size_t(sb * 256 + j)];
      }
      const float inv = -127.0f / max;
      for (int j = 0; j < 256; ++j) {
        REQUIRE(a.q[size_t(sb * 256 + j)] == std::min(127, int(std::nearbyint(inv * x[size_t(sb * 256 + j)]))));
      }
      for (int64_t b = sb * 8; b < sb * 8 + 8; ++b) {
        CHECK(a.d[size_t(b)] == 1.0f / inv);
        int q_sum = 0;
        for (int j = 0; j < 32; ++j) q_sum += a.q[size_t(b * 32 + j)];
        CHECK(a.s[size_t(b)] == a.d[size_t(b)] * float(q_sum));
      }
    }
  }
  SECTION("q8_K: of two values of the largest magnitude, the first gives d its sign") {
    for (float first : {-3.0f, 3.0f}) {
      V tie(256, 0.25f);
      tie[5] = first;
      tie[200] = -first;
      cpu::Activations a = prepare(tie, 1, 256, GgmlType::Q4_K);
      CHECK(a.q[5] == -127);
      CHECK(a.q[200] == 127);
      CHECK(a.d[0] == 1.0f / (-127.0f / first));
    }
  }
  SECTION("rows quantized in pieces (as threads do) give the same bytes") {
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q6_K}) {
      cpu::Activations whole = prepare(x, rows, cols, t), pieces;
      cpu::prepare_activations(x.data(), rows, cols, t, pieces);
      cpu::quantize_rows(2, 3, pieces);
      cpu::quantize_rows(0, 2, pieces);
      CHECK(pieces.q == whole.q);
      CHECK(pieces.d == whole.d);
      CHECK(pieces.s == whole.s);
    }
  }
}

TEST_CASE("Every format's product equals the dequantized product in double, on every ISA", "[kernels][quantized]") {
  std::mt19937 rng(12);
  const auto isas = available_isas();
  REQUIRE(isas.front() == cpu::Isa::portable);
  int compared = 0;
  for (GgmlType t : all_types) {
    for (int64_t cols : {odd_cols(t), int64_t{1536}}) {
      for (int64_t rows : {1, 7, 37}) {
        for (int64_t tokens : {1, 3, 11}) {  // one, a partial group, a group of eight and a partial one
          const bool accumulate = tokens != 3;
          INFO(ggml_type_name(t) << " " << rows << " x " << cols << ", " << tokens << " x rows"
                                 << (accumulate ? ", accumulate" : ""));
          Matrix m = random_matrix(t, rows, cols, rng);
          REQUIRE(cpu::matmul_supported(m.view()));
          V x = random_x(tokens * cols, rng);
          cpu::Activations a = prepare(x, tokens, cols, t);
          V init(static_cast<size_t>(tokens * rows), accumulate ? 0.25f : -99.0f);
          for (cpu::Isa isa : isas) {
            INFO("ISA " << cpu::isa_name(isa));
            V y = init;
            cpu::matmul_rows(m.view(), a, y.data(), 0, rows, accumulate, isa);
            for (int64_t tk = 0; tk < tokens; ++tk) {
              INFO("x row " << tk);
              V old(init.begin() + tk * rows, init.begin() + (tk + 1) * rows);
              if (!accumulate) std::fill(old.begin(), old.end(), 0.0f);
              Expected e = reference(m, x, a, tk, old);
              require_within(y.data() + tk * rows, e.exact, e.exact_tol);
              require_within(y.data() + tk * rows, e.f32, e.f32_tol);
              compared += static_cast<int>(rows);
            }
          }
        }
      }
    }
  }
  // 11 formats x 2 widths x (1 + 7 + 37 rows) x (1 + 3 + 11 tokens) per ISA.
  CHECK(compared == static_cast<int>(11 * 2 * 45 * 15 * isas.size()));
}

TEST_CASE("A token's product is bit for bit the same alone, in a batch, under any row split",
          "[kernels][quantized]") {
  cpu::CpuBackend backend(2);
  std::mt19937 rng(13);
  for (GgmlType t : all_types) {
    if (t == GgmlType::F32) continue;  // float32 matrices go through BLAS (sgemv alone, sgemm in a batch)
    // Weight row counts not a multiple of the two threads or of the tile.
    for (int64_t rows : {1, 3, 577}) {
      const int64_t cols = 768, tokens = 5;
      INFO(ggml_type_name(t) << " " << rows << " rows");
      Matrix m = random_matrix(t, rows, cols, rng);
      V x = random_x(tokens * cols, rng);
      cpu::Activations a = prepare(x, tokens, cols, t);

      V batch(static_cast<size_t>(tokens * rows), 0.5f);
      backend.matmul(x.data(), tokens, m.view(), batch.data(), /*accumulate=*/true);
      for (int64_t tk = 0; tk < tokens; ++tk) {
        INFO("x row " << tk);
        V old(static_cast<size_t>(rows), 0.5f);
        Expected e = reference(m, x, a, tk, old);
        require_within(batch.data() + tk * rows, e.exact, e.exact_tol);

        V alone = old;
        backend.matmul(x.data() + tk * cols, 1, m.view(), alone.data(), true);
        REQUIRE(std::equal(alone.begin(), alone.end(), batch.begin() + tk * rows));
      }
      // A view that did not go through prepare_weights is packed on the fly:
      // the same numbers.
      V unprepared(static_cast<size_t>(tokens * rows), 0.5f);
      backend.matmul(x.data(), tokens, m.file_view(), unprepared.data(), true);
      REQUIRE(unprepared == batch);
      // One thread, weight rows split unevenly.
      V split(static_cast<size_t>(tokens * rows), 0.5f);
      const int64_t k = rows / 3;
      cpu::matmul_rows(m.view(), a, split.data(), k, rows, true);
      cpu::matmul_rows(m.view(), a, split.data(), 0, k, true);
      REQUIRE(split == batch);
    }
  }
}

TEST_CASE("The AVX2, AVX-VNNI and AVX-512 kernels give the same bits, in tile pairs and single tiles",
          "[kernels][quantized]") {
  const cpu::Isa isa = GENERATE(cpu::Isa::avx_vnni, cpu::Isa::avx512_vnni);
  if (!cpu::isa_available(isa)) {
    WARN("this CPU has no " << cpu::isa_name(isa) << ": nothing to compare with AVX2");
    return;
  }
  std::mt19937 rng(15);
  for (GgmlType t : all_types) {
    if (cpu::packed_layout(t) == nullptr) continue;
    // 37 rows: two pairs of tiles and an odd one; 577 from row 8: pairs that
    // start on an odd tile, then a last tile with one row.
    for (auto [rows, begin] : {std::pair<int64_t, int64_t>{37, 0}, {577, 8}}) {
      for (int64_t tokens : {1, 3, 11}) {
        INFO(cpu::isa_name(isa) << ": " << ggml_type_name(t) << " " << rows << " rows from " << begin << ", " << tokens
                                << " x rows");
        Matrix m = random_matrix(t, rows, 512, rng);
        V x = random_x(tokens * 512, rng);
        cpu::Activations a = prepare(x, tokens, 512, t);
        V narrow(static_cast<size_t>(tokens * rows), 0.5f), wide = narrow;
        cpu::matmul_rows(m.view(), a, narrow.data(), begin, rows, true, cpu::Isa::avx2);
        cpu::matmul_rows(m.view(), a, wide.data(), begin, rows, true, isa);
        REQUIRE(std::memcmp(narrow.data(), wide.data(), narrow.size() * sizeof(float)) == 0);
        // And the rows before `begin` were left alone.
        REQUIRE(std::all_of(wide.begin(), wide.begin() + begin, [](float v) { return v == 0.5f; }));
      }
    }
  }
}

TEST_CASE("NaN or infinity in x makes every output NaN", "[kernels][quantized]") {
  std::mt19937 rng(14);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q6_K}) {
    Matrix m = random_matrix(t, 5, 256, rng);
    for (float bad : {NAN, INFINITY}) {
      V x = random_x(256, rng);
      x[40] = bad;
      cpu::Activations a = prepare(x, 1, 256, t);
      for (cpu::Isa isa : available_isas()) {
        INFO(ggml_type_name(t) << " on " << cpu::isa_name(isa) << ", x holds " << bad);
        V y(5);
        cpu::matmul_rows(m.view(), a, y.data(), 0, 5, false, isa);
        for (float v : y) CHECK(std::isnan(v));
      }
    }
  }
}

TEST_CASE("Shapes the kernels cannot read are refused", "[kernels][quantized]") {
  std::vector<uint8_t> bytes(4096);
  CHECK_FALSE(cpu::matmul_supported({bytes.data(), 2, 288, GgmlType::Q4_K}));  // not whole super-blocks
  CHECK(cpu::matmul_supported({bytes.data(), 2, 40, GgmlType::F16}));          // float formats: any width
  CHECK_FALSE(cpu::matmul_supported({bytes.data(), 2, 256, GgmlType::Q2_K}));  // no dequantizer
  CHECK_FALSE(cpu::matmul_supported({nullptr, 2, 256, GgmlType::Q4_K}));
  CHECK(cpu::matmul_supported({bytes.data(), 2, 256, GgmlType::Q4_K}));
  cpu::CpuBackend backend(1);
  V x(256), y(2);
  CHECK_THROWS_AS(backend.matmul(x.data(), 1, {bytes.data(), 2, 256, GgmlType::Q2_K}, y.data(), false),
                  std::invalid_argument);
  // An F16 matrix 40 wide (no 32-value blocks) against the dequantized product.
  std::mt19937 rng(16);
  Matrix m = random_matrix(GgmlType::F16, 3, 40, rng);
  V x40 = random_x(40, rng), y3(3);
  backend.matmul(x40.data(), 1, m.view(), y3.data(), false);
  for (int r = 0; r < 3; ++r) {
    double want = 0;
    for (int j = 0; j < 40; ++j) want += double(m.dequantized[size_t(r * 40 + j)]) * x40[size_t(j)];
    CHECK(std::abs(y3[size_t(r)] - want) <= 1e-5 * (1 + std::abs(want)));
  }
}

TEST_CASE("The embedding lookup widens the token's row from any format", "[kernels][quantized]") {
  std::mt19937 rng(15);
  cpu::CpuBackend backend(1);
  for (GgmlType t : all_types) {
    INFO(ggml_type_name(t));
    Matrix m = random_matrix(t, 9, 256, rng);
    const std::vector<int32_t> tokens = {8, 0, 3, 3};
    V out(tokens.size() * 256);
    backend.embed(m.view(), tokens, out.data());
    for (size_t i = 0; i < tokens.size(); ++i) {
      REQUIRE(std::equal(out.begin() + static_cast<int64_t>(i) * 256, out.begin() + static_cast<int64_t>(i + 1) * 256,
                         m.dequantized.begin() + tokens[i] * 256));
    }
    const std::vector<int32_t> bad = {9};
    CHECK_THROWS_AS(backend.embed(m.view(), bad, out.data()), std::out_of_range);
  }
}

TEST_CASE("prepare_weights packs block types and leaves the matrix's own bytes intact", "[kernels][quantized]") {
  std::mt19937 rng(17);
  cpu::CpuBackend backend(2);
  for (GgmlType t : all_types) {
    INFO(ggml_type_name(t));
    // 1,000 rows of 768: several megabytes, so pages are released while packing.
    Matrix m = random_matrix(t, 1000, 768, rng);
    const std::vector<uint8_t> before = m.bytes;
    PreparedMatrix p = backend.prepare_weights(m.file_view());
    const bool expect_packed = cpu::best_isa() != cpu::Isa::portable && cpu::packed_layout(t) != nullptr;
    CHECK((p.view.packed != nullptr) == expect_packed);
    CHECK((p.storage != nullptr) == expect_packed);
    CHECK(p.view.data == m.bytes.data());
    // Released pages of anonymous memory keep their contents (MADV_PAGEOUT,
    // never MADV_DONTNEED).
    REQUIRE(m.bytes == before);
    V x = random_x(2 * 768, rng), a(2 * 1000), b(2 * 1000);
    backend.matmul(x.data(), 2, p.view, a.data(), false);
    backend.matmul(x.data(), 2, m.view(), b.data(), false);
    CHECK(a == b);
  }
}

TEST_CASE("matmul_many gives each matrix exactly what matmul gives it", "[kernels][quantized]") {
  std::mt19937 rng(18);
  cpu::CpuBackend backend(2);
  const int64_t cols = 768, tokens = 5;
  // Mixed schemes (q8_0, q8_1, q8_K) in one call, row counts off the tile;
  // then a set with a float matrix, which goes one at a time.
  for (auto types : {std::vector<GgmlType>{GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q6_K, GgmlType::Q8_0},
                     std::vector<GgmlType>{GgmlType::Q4_K, GgmlType::F16}}) {
    std::vector<Matrix> ms;
    for (size_t i = 0; i < types.size(); ++i) ms.push_back(random_matrix(types[i], 37 + 8 * int64_t(i), cols, rng));
    V x = random_x(tokens * cols, rng);
    std::vector<MatrixView> views;
    std::vector<V> together, alone;
    std::vector<float*> outs;
    for (const Matrix& m : ms) {
      views.push_back(m.view());
      together.emplace_back(static_cast<size_t>(tokens * m.rows), -7.0f);
      alone.emplace_back(static_cast<size_t>(tokens * m.rows), -7.0f);
    }
    for (V& o : together) outs.push_back(o.data());
    backend.matmul_many(x.data(), tokens, views, outs);
    for (size_t i = 0; i < ms.size(); ++i) {
      INFO(ggml_type_name(ms[i].type));
      backend.matmul(x.data(), tokens, views[i], alone[i].data(), false);
      CHECK(together[i] == alone[i]);
    }
  }
}

// quantize_rows takes the copy of the widest ISA (which the tests above check
// against references), so the AVX2 copies of the block quantizers are
// checked here against the AVX-512 ones where the CPU has both: the same
// bytes for ordinary, tied, all-zero and non-finite blocks.
TEST_CASE("Every ISA's copy of the activation block quantizers gives the same bytes", "[kernels][quantized]") {
#if defined(__x86_64__)
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<V> blocks;
  for (int i = 0; i < 20; ++i) {
    V x(256);
    for (float& v : x) v = dist(rng);
    blocks.push_back(x);
  }
  V tie(256, 0.5f);
  tie[9] = -4.0f;
  tie[100] = 4.0f;
  blocks.push_back(tie);
  blocks.push_back(V(256, 0.0f));
  V bad = blocks[0];
  bad[77] = NAN;
  blocks.push_back(bad);
  struct Out {
    std::vector<int8_t> q = std::vector<int8_t>(256);
    float d[8] = {}, s[8] = {};
    int32_t sum32[8] = {}, pairs[12] = {};
    bool operator==(const Out& o) const {
      return q == o.q && std::memcmp(d, o.d, sizeof d) == 0 && std::memcmp(s, o.s, sizeof s) == 0 &&
             std::memcmp(sum32, o.sum32, sizeof sum32) == 0 && std::memcmp(pairs, o.pairs, sizeof pairs) == 0;
    }
  };
  if (!cpu::isa_available(cpu::Isa::avx2) || !cpu::isa_available(cpu::Isa::avx512_vnni)) return;
  for (const V& x : blocks) {
    Out want, got;
    cpu::quantize_block_256_avx512(x.data(), want.q.data(), want.d, want.s, want.sum32, want.pairs);
    cpu::quantize_block_256_avx2(x.data(), got.q.data(), got.d, got.s, got.sum32, got.pairs);
    CHECK(got == want);
    for (bool f16_sum : {false, true}) {
      Out a, c;
      const int32_t sa = cpu::quantize_block_32_avx512(x.data(), f16_sum, a.q.data(), a.d, a.s);
      const int32_t sc = cpu::quantize_block_32_avx2(x.data(), f16_sum, c.q.data(), c.d, c.s);
      CHECK(sa == sc);
      CHECK(c == a);
    }
  }
#endif
}
