#include "kernels/ggml_type.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/gguf_file.hpp"
#include "kernels/half.hpp"
#include "tests/test_paths.hpp"

using namespace actorlm;

namespace {

nlohmann::json fixture() {
  std::ifstream in(test::fixture_path("gguf/dequant.json"));
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

GgmlType type_named(const std::string& name) {
  for (uint32_t id = 0; id < 40; ++id) {
    if (ggml_type_name(id) == name) return static_cast<GgmlType>(id);
  }
  FAIL("no ggml type named " << name);
  return GgmlType::F32;
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

}  // namespace

// Tolerance: the reference (numpy) and we both compute in float32 from the
// same f16 scales; we accept 1 ulp-scale differences from a different order of
// the multiply-add (|a-b| <= 1e-6 * max(1, |a|)). Most values match exactly.
TEST_CASE("Dequantization of every supported type matches the gguf package", "[model][gguf]") {
  auto fx = fixture();
  for (const auto& s : fx["synthetic"]) {
    std::string name = s["type"];
    INFO("type " << name);
    GgmlType t = type_named(name);
    auto raw = from_hex(s["hex"]);
    int64_t n = s["n"];
    REQUIRE(ggml_row_bytes(t, n) == raw.size());
    std::vector<float> out(static_cast<size_t>(n));
    dequantize_row(t, raw.data(), out.data(), n);
    int exact = 0;
    for (int64_t i = 0; i < n; ++i) {
      double want = s["values"][static_cast<size_t>(i)];
      INFO("element " << i);
      REQUIRE(std::abs(out[static_cast<size_t>(i)] - want) <= 1e-6 * std::max(1.0, std::abs(want)));
      exact += out[static_cast<size_t>(i)] == static_cast<float>(want);
    }
    CHECK(exact > n * 9 / 10);
  }
}

TEST_CASE("Unsupported types are errors that name the type", "[kernels][gguf]") {
  std::vector<uint8_t> block(84, 0);
  float out[256];
  try {
    dequantize_row(GgmlType::Q2_K, block.data(), out, 256);
    FAIL("expected an error");
  } catch (const WeightFormatError& e) {
    CHECK(std::string(e.what()).find("Q2_K") != std::string::npos);
  }
  CHECK(ggml_type_name(99) == "type#99");
  CHECK_FALSE(ggml_type_supported(99));
  CHECK_THROWS_AS(ggml_row_bytes(GgmlType::Q4_0, 33), WeightFormatError);  // not whole blocks
}

TEST_CASE("Half conversions are exact", "[model]") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_f16(f) == h);
  }
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
}

// The exhaustive round trip above only feeds exact halves back in; these are
// the floats in between, where rounding decides.
TEST_CASE("Float to half rounds to nearest even, through subnormals, to inf and NaN", "[model]") {
  const float ulp1 = std::ldexp(1.0f, -10);  // half spacing in [1, 2)
  // Ties go to the even mantissa, anything past the tie goes up.
  CHECK(f32_to_f16(1.0f + ulp1 / 2) == 0x3c00);
  CHECK(f32_to_f16(1.0f + 3 * ulp1 / 2) == 0x3c02);
  CHECK(f32_to_f16(std::nextafter(1.0f + ulp1 / 2, 2.0f)) == 0x3c01);
  CHECK(f32_to_f16(std::nextafter(1.0f + ulp1 / 2, 0.0f)) == 0x3c00);
  CHECK(f32_to_f16(-(1.0f + 3 * ulp1 / 2)) == 0xbc02);
  // Subnormals (spacing 2^-24): ties to even there too, and half the smallest
  // one rounds to zero while anything above it rounds up to it.
  const float sub = std::ldexp(1.0f, -24);
  CHECK(f32_to_f16(sub / 2) == 0x0000);
  CHECK(f32_to_f16(std::nextafter(sub / 2, 1.0f)) == 0x0001);
  CHECK(f32_to_f16(3 * sub / 2) == 0x0002);
  CHECK(f32_to_f16(5 * sub / 2) == 0x0002);
  CHECK(f32_to_f16(-sub / 4) == 0x8000);
  CHECK(f32_to_f16(std::ldexp(1.0f, -40)) == 0x0000);
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  // The largest subnormal plus half a step carries into the smallest normal.
  CHECK(f32_to_f16(1023.5f * sub) == 0x0400);
  CHECK(f32_to_f16(1022.5f * sub) == 0x03fe);
  // 65504 is the largest half; from the tie with 65536 on, the result is inf.
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65519.0f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);
  CHECK(f32_to_f16(-1e10f) == 0xfc00);
  CHECK(f32_to_f16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(f32_to_f16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  // NaN stays NaN (all-ones exponent, nonzero mantissa), never inf.
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::signaling_NaN()}) {
    uint16_t h = f32_to_f16(nan);
    CHECK((h & 0x7c00) == 0x7c00);
    CHECK((h & 0x03ff) != 0);
  }
  // A float NaN whose payload lies only in the low 13 bits must not become inf.
  uint32_t low_payload = 0x7f800001u;
  float tiny_nan;
  std::memcpy(&tiny_nan, &low_payload, sizeof tiny_nan);
  CHECK((f32_to_f16(tiny_nan) & 0x03ff) != 0);
}
