#include "model/gguf_file.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <vector>

#include "model/default_model.hpp"
#include "tests/model/gguf_builder.hpp"
#include "tests/test_paths.hpp"

using namespace actorlm;
using test::GgufBuilder;
namespace fs = std::filesystem;

namespace {

nlohmann::json fixture() {
  std::ifstream in(test::fixture_path("gguf/dequant.json"));
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<uint8_t> read_head(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> data(limit);
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(limit));
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("actorlm_gguf_file_test_" + name + ".gguf")).string();
}

std::string write_temp(const std::vector<uint8_t>& bytes, const std::string& name) {
  return GgufBuilder::write_bytes(temp_path(name), bytes);
}

// The error GgufFile::open throws, or "" when it opens.
std::string error_of(const std::string& path) {
  try {
    GgufFile::open(path);
  } catch (const ModelError& e) {
    return e.what();
  }
  return {};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A small file holding every metadata value type and two tensors.
GgufBuilder every_type_file(uint32_t version, uint32_t alignment) {
  GgufBuilder b(version);
  b.alignment(alignment)
      .scalar<uint8_t>("t.u8", GgufBuilder::U8, 200)
      .scalar<int8_t>("t.i8", GgufBuilder::I8, -100)
      .scalar<uint16_t>("t.u16", GgufBuilder::U16, 60000)
      .scalar<int16_t>("t.i16", GgufBuilder::I16, -30000)
      .u32("t.u32", 4000000000u)
      .i32("t.i32", -2000000000)
      .f32("t.f32", 0.1f)
      .scalar<uint8_t>("t.bool", GgufBuilder::BOOL, 1)
      .str("t.string", "héllo")
      .u64("t.u64", uint64_t{1} << 40)
      .scalar<int64_t>("t.i64", GgufBuilder::I64, -(int64_t{1} << 50))
      .scalar<double>("t.f64", GgufBuilder::F64, 1e-300)
      .strings("t.strings", {"a", "", "ccc"})
      .array<int16_t>("t.i16s", GgufBuilder::I16, {-1, 2, -3})
      .array<float>("t.f32s", GgufBuilder::F32, {1.5f, -2.25f})
      .array<uint8_t>("t.bools", GgufBuilder::BOOL, {1, 0, 1})
      .nested("t.nested", 3, 4)
      .u64("t.huge", ~uint64_t{0});
  std::vector<float> a(6), c(32);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) - 2.5f;
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i * i);
  b.f32_tensor("a", {3, 2}, a).f32_tensor("c", {32}, c);
  return b;
}

}  // namespace

TEST_CASE("The default model's metadata and tensor table match the gguf package", "[model][gguf]") {
  auto fx = fixture()["model"];
  GgufFile f = GgufFile::open(default_model_path());
  CHECK(f.version() == fx["version"]);
  for (const auto& [key, want] : fx["metadata"].items()) {
    INFO("metadata " << key);
    if (want.is_string()) {
      CHECK(f.get_string(key) == want.get<std::string>());
    } else if (want.is_number_integer()) {
      CHECK(f.get_int(key) == want.get<int64_t>());
    } else {
      CHECK(f.get_float(key) == want.get<double>());  // an f32 widened: exact
    }
  }
  CHECK(f.get_string_array("tokenizer.ggml.tokens")->size() == fx["token_count"]);
  CHECK_FALSE(f.get_int("no.such.key"));
  CHECK_FALSE(f.has_key("no.such.key"));
  CHECK(f.has_key("llama.block_count"));

  REQUIRE(f.tensors().size() == fx["tensors"].size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& want = fx["tensors"][i];
    const auto& got = f.tensors()[i];
    CHECK(got.name == want["name"]);
    CHECK(ggml_type_name(got.type) == want["type"]);
    CHECK(got.shape == want["shape"].get<std::vector<uint64_t>>());
    CHECK(f.find_tensor(got.name) == &got);
  }
}

TEST_CASE("Tensors of the default model dequantize as the gguf package does", "[model][gguf]") {
  auto fx = fixture();
  GgufFile f = GgufFile::open(default_model_path());
  std::set<std::string> types_in_file, types_checked;
  for (const auto& t : f.tensors()) types_in_file.insert(ggml_type_name(t.type));
  for (const auto& t : fx["tensors"]) {
    std::string name = t["name"];
    INFO("tensor " << name);
    const GgufTensorInfo& info = f.tensor(name);
    types_checked.insert(ggml_type_name(info.type));
    int64_t row = static_cast<int64_t>(info.shape[0]);
    size_t row_bytes = ggml_row_bytes(info.type, row);
    CHECK(info.byte_size == row_bytes * (info.element_count() / info.shape[0]));
    uint64_t rows = info.element_count() / info.shape[0];
    std::vector<float> buf(static_cast<size_t>(row));
    double sum = 0, sumsq = 0;
    for (uint64_t r = 0; r < rows; ++r) {
      dequantize_row(info.type, info.data + r * row_bytes, buf.data(), row);
      if (r < t["rows"].size()) {
        const auto& want = t["rows"][r];
        // Same float32 operations in the same order as numpy: bit-exact (see ggml_type_test).
        for (size_t i = 0; i < want.size(); ++i) REQUIRE(buf[i] == static_cast<float>(want[i].get<double>()));
      }
      for (float v : buf) {
        sum += v;
        sumsq += double(v) * v;
      }
    }
    // float64 sums over ~28M values in a different order than numpy's pairwise sum.
    CHECK(sum == Approx(double(t["sum"])).epsilon(1e-9).margin(1e-6));
    CHECK(sumsq == Approx(double(t["sumsq"])).epsilon(1e-9));
  }
  CHECK(types_checked == types_in_file);
}

TEST_CASE("Every metadata value type reads back, in v2 and v3", "[model][gguf]") {
  uint32_t version = GENERATE(2u, 3u);
  uint32_t alignment = GENERATE(32u, 64u, 1u);
  INFO("version " << version << " alignment " << alignment);
  GgufFile f = GgufFile::open(every_type_file(version, alignment).write(temp_path("types")));
  CHECK(f.version() == version);
  CHECK(f.get_int("t.u8") == 200);
  CHECK(f.get_int("t.i8") == -100);
  CHECK(f.get_int("t.u16") == 60000);
  CHECK(f.get_int("t.i16") == -30000);
  CHECK(f.get_int("t.u32") == 4000000000);
  CHECK(f.get_int("t.i32") == -2000000000);
  CHECK(f.get_float("t.f32") == double(0.1f));
  CHECK(f.get_bool("t.bool") == true);
  CHECK(f.get_string("t.string") == "héllo");
  CHECK(f.get_int("t.u64") == int64_t{1} << 40);
  CHECK(f.get_int("t.i64") == -(int64_t{1} << 50));
  CHECK(f.get_float("t.f64") == 1e-300);
  CHECK(f.get_float("t.u32") == 4e9);  // integers widen to double
  CHECK(f.get_string_array("t.strings") == std::vector<std::string>{"a", "", "ccc"});
  CHECK(f.get_int_array("t.i16s") == std::vector<int64_t>{-1, 2, -3});
  CHECK(f.get_float_array("t.f32s") == std::vector<double>{1.5, -2.25});
  CHECK(f.get_int_array("t.bools") == std::vector<int64_t>{1, 0, 1});
  CHECK(f.keys().size() == 19);
  CHECK_THROWS_WITH(f.get_int_array("t.nested"), Catch::Contains("t.nested is array of array"));
  // A u64 beyond int64 does not stop the file from opening; reading it as an integer does.
  CHECK_THROWS_WITH(f.get_int("t.huge"), Catch::Contains("t.huge") && Catch::Contains("beyond int64"));

  REQUIRE(f.tensors().size() == 2);
  const GgufTensorInfo& a = f.tensor("a");
  const GgufTensorInfo& c = f.tensor("c");
  CHECK(a.shape == std::vector<uint64_t>{3, 2});
  CHECK(a.element_count() == 6);
  CHECK(a.byte_size == 24);
  CHECK(c.offset % alignment == 0);
  CHECK(c.offset >= 24);
  CHECK((c.data - a.data) == static_cast<ptrdiff_t>(c.offset));
  float v[32];
  dequantize_row(GgmlType::F32, a.data, v, 6);
  CHECK(v[0] == -2.5f);
  CHECK(v[5] == 2.5f);
  dequantize_row(GgmlType::F32, c.data, v, 32);
  CHECK(v[31] == 961.0f);
}

TEST_CASE("Metadata of the wrong type is an error naming key and types", "[model][gguf]") {
  GgufFile f = GgufFile::open(every_type_file(3, 32).write(temp_path("mistyped")));
  CHECK_THROWS_WITH(f.get_int("t.string"), Catch::Contains("t.string is string, expected an integer"));
  CHECK_THROWS_WITH(f.get_string("t.u32"), Catch::Contains("t.u32 is u32, expected a string"));
  CHECK_THROWS_WITH(f.get_float("t.bool"), Catch::Contains("t.bool is bool"));
  CHECK_THROWS_WITH(f.get_bool("t.i8"), Catch::Contains("expected a bool"));
  CHECK_THROWS_WITH(f.get_string_array("t.i16s"), Catch::Contains("t.i16s is array of i16"));
  CHECK_THROWS_WITH(f.get_float_array("t.strings"), Catch::Contains("array of string"));
  CHECK_THROWS_WITH(f.get_int_array("t.f32s"), Catch::Contains("expected an array of integers"));
  CHECK_THROWS_WITH(f.get_int("t.strings"), Catch::Contains(temp_path("mistyped")));

  GgufFile real = GgufFile::open(default_model_path());
  CHECK_THROWS_WITH(real.get_int("general.architecture"), Catch::Contains("general.architecture is string"));
}

TEST_CASE("Missing tensors are named with the file", "[model][gguf]") {
  GgufFile f = GgufFile::open(default_model_path());
  CHECK(f.find_tensor("blk.99.attn_q.weight") == nullptr);
  CHECK_THROWS_WITH(f.tensor("blk.99.attn_q.weight"),
                    Catch::Contains(default_model_path()) && Catch::Contains("missing tensor blk.99.attn_q.weight"));
}

TEST_CASE("Broken headers are errors that name the file and the problem", "[model][gguf]") {
  std::vector<uint8_t> head = read_head(default_model_path(), 4 << 20);
  REQUIRE(head.size() == 4 << 20);

  SECTION("missing file") { CHECK(contains(error_of("/nonexistent/model.gguf"), "/nonexistent/model.gguf")); }
  SECTION("a folder") { CHECK(contains(error_of(fs::temp_directory_path().string()), "not a regular file")); }
  SECTION("wrong magic") {
    auto bad = head;
    bad[0] = 'X';
    std::string path = write_temp(bad, "magic");
    std::string err = error_of(path);
    CHECK(contains(err, path));
    CHECK(contains(err, "bad magic"));
  }
  SECTION("unsupported and big-endian versions") {
    auto bad = head;
    bad[4] = 9;
    CHECK(contains(error_of(write_temp(bad, "version")), "unsupported GGUF version 9"));
    bad[4] = 1;
    CHECK(contains(error_of(write_temp(bad, "version")), "unsupported GGUF version 1"));
    bad[4] = 0;
    bad[7] = 3;
    CHECK(contains(error_of(write_temp(bad, "version")), "big-endian"));
  }
  SECTION("the real file truncated at several points") {
    // Inside the magic, the counts, a key, the token list, the tensor table,
    // and the tensor data.
    for (size_t cut : {size_t{0}, size_t{3}, size_t{10}, size_t{30}, size_t{1000}, size_t{200000},
                       size_t{2000000}, head.size()}) {
      std::vector<uint8_t> part(head.begin(), head.begin() + static_cast<ptrdiff_t>(cut));
      std::string path = write_temp(part, "trunc");
      std::string err = error_of(path);
      INFO("cut at " << cut << ": " << err);
      CHECK(contains(err, path));
      CHECK((contains(err, "truncated") || contains(err, "too small")));
    }
  }
  SECTION("absurd counts are refused before allocation") {
    auto bad = head;
    for (size_t i = 8; i < 16; ++i) bad[i] = 0xff;  // tensor count
    CHECK(contains(error_of(write_temp(bad, "count")), "truncated or corrupt GGUF header"));
  }
}

TEST_CASE("Every strict prefix of a small file is refused as truncated", "[model][gguf]") {
  auto bytes = every_type_file(3, 32).bytes();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(cut));
    std::string err = error_of(write_temp(part, "prefix"));
    INFO("cut at " << cut << " of " << bytes.size() << ": " << err);
    REQUIRE((contains(err, "truncated") || contains(err, "too small")));
  }
  CHECK(error_of(write_temp(bytes, "prefix")).empty());
}

TEST_CASE("Corrupt tensor tables are named", "[model][gguf]") {
  std::vector<uint8_t> q2k(84, 0);
  std::vector<float> one(32, 1.0f);
  SECTION("unknown tensor type") {
    GgufBuilder b;
    b.tensor("w", {32}, 99, std::vector<uint8_t>(128));
    std::string err = error_of(b.write(temp_path("type99")));
    CHECK(contains(err, "tensor w has unsupported type type#99"));
  }
  SECTION("a known type without a dequantizer opens; dequantizing it names the type") {
    GgufBuilder b;
    b.tensor("w", {256}, static_cast<uint32_t>(GgmlType::Q2_K), q2k);
    GgufFile f = GgufFile::open(b.write(temp_path("q2k")));
    CHECK(f.tensor("w").type == GgmlType::Q2_K);
    float out[256];
    CHECK_THROWS_WITH(dequantize_row(GgmlType::Q2_K, f.tensor("w").data, out, 256), Catch::Contains("Q2_K"));
  }
  SECTION("rows that are not whole blocks") {
    GgufBuilder b;
    b.tensor("w", {33}, static_cast<uint32_t>(GgmlType::Q4_0), std::vector<uint8_t>(18));
    CHECK(contains(error_of(b.write(temp_path("blocks"))), "tensor w: a row of 33 elements"));
  }
  SECTION("too many dimensions or a zero dimension") {
    GgufBuilder b;
    b.f32_tensor("w", {1, 1, 1, 1, 32}, one);
    CHECK(contains(error_of(b.write(temp_path("dims"))), "tensor w has 5 dimensions"));
    GgufBuilder z;
    z.f32_tensor("w", {32, 0}, one);
    CHECK(contains(error_of(z.write(temp_path("dims"))), "tensor w has an invalid shape"));
  }
  SECTION("a shape whose byte size would overflow") {
    GgufBuilder b;
    b.f32_tensor("w", {uint64_t{1} << 40, uint64_t{1} << 30}, one);
    CHECK(contains(error_of(b.write(temp_path("huge"))), "tensor w has an invalid shape"));
  }
  SECTION("data past the end of the file") {
    GgufBuilder b;
    b.f32_tensor("w", {64}, one);  // 256 bytes claimed, 128 present
    std::string err = error_of(b.write(temp_path("short")));
    CHECK(contains(err, "tensor w data"));
    CHECK(contains(err, "past the end"));
  }
  SECTION("a duplicate tensor name") {
    GgufBuilder b;
    b.f32_tensor("w", {32}, one).f32_tensor("w", {32}, one);
    CHECK(contains(error_of(b.write(temp_path("dup"))), "tensor w appears twice"));
  }
  SECTION("a bad or unmet alignment") {
    GgufBuilder b;
    b.alignment(24).f32_tensor("w", {32}, one);
    CHECK(contains(error_of(b.write(temp_path("align"))), "general.alignment must be a positive power of two"));
    GgufBuilder m;
    m.alignment(8).f32_tensor("x", {1}, {1.0f}).f32_tensor("w", {32}, one);  // w at offset 8
    auto bytes = m.bytes();
    GgufBuilder::write_bytes(temp_path("align"), bytes);
    REQUIRE(GgufFile::open(temp_path("align")).tensor("w").offset == 8);
    // Re-declare the alignment as 16 in place: offset 8 is now misaligned.
    const std::string key = "general.alignment";
    auto at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end()) + static_cast<ptrdiff_t>(key.size()) + 4;
    *at = 16;
    CHECK(contains(error_of(write_temp(bytes, "align")), "tensor w offset is not aligned to 16"));
  }
  SECTION("arrays nested too deeply, or claiming more elements than the file holds") {
    GgufBuilder ok, deep;
    ok.nested("n", 3, 2);
    CHECK(error_of(ok.write(temp_path("nest"))).empty());
    deep.nested("n", 4, 2);
    CHECK(contains(error_of(deep.write(temp_path("nest"))), "n nests arrays too deeply"));
    GgufBuilder big;
    big.array<uint32_t>("n", GgufBuilder::U32, {1, 2, 3});
    auto bytes = big.bytes();
    bytes[24 + 8 + 1 + 4 + 4 + 4] = 0x7f;  // the array length's 5th byte: ~2^38 elements
    CHECK(contains(error_of(write_temp(bytes, "nest")), "array n claims"));
  }
}

TEST_CASE("Random corruption never escapes as anything but ModelError", "[model][gguf]") {
  auto bytes = every_type_file(3, 32).bytes();
  // Where the pristine file's tensor data starts: the builder writes no
  // trailing padding, so the last tensor ends the file.
  const GgufTensorInfo pristine_c = GgufFile::open(write_temp(bytes, "fuzz")).tensor("c");
  const size_t data_start = bytes.size() - pristine_c.offset - pristine_c.byte_size;
  std::mt19937 rng(42);
  int opened = 0, refused = 0, data_only = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    auto bad = bytes;
    int flips = 1 + static_cast<int>(rng() % 4);
    size_t first_flip = bad.size();
    for (int k = 0; k < flips; ++k) {
      size_t at = rng() % bad.size();
      first_flip = std::min(first_flip, at);
      bad[at] = static_cast<uint8_t>(rng());
    }
    // Any other exception escapes the test case, which Catch reports as a failure.
    try {
      GgufFile f = GgufFile::open(write_temp(bad, "fuzz"));
      ++opened;
      // Flips only inside the tensor data leave the layout alone: every tensor
      // must read the (damaged) file bytes at its offset, in place.
      const bool layout_intact = first_flip >= data_start;
      data_only += layout_intact;
      for (const auto& t : f.tensors()) {
        REQUIRE(t.offset + t.byte_size <= bad.size());
        if (layout_intact) {
          INFO("trial " << trial << " tensor " << t.name);
          REQUIRE(std::equal(t.data, t.data + t.byte_size, bad.begin() + static_cast<ptrdiff_t>(data_start + t.offset)));
        }
      }
    } catch (const ModelError&) {
      ++refused;
    }
  }
  // Both outcomes, and damaged data read in place, really happened.
  CHECK(opened > 0);
  CHECK(refused > 0);
  CHECK(data_only > 0);
}

TEST_CASE("An image in memory reads as the same file on disk does", "[model][gguf]") {
  auto bytes = every_type_file(3, 64).bytes();
  GgufFile disk = GgufFile::open(write_temp(bytes, "memory"));
  GgufFile mem = GgufFile::from_memory(bytes, "image.gguf");
  CHECK(mem.path() == "image.gguf");
  CHECK(mem.keys() == disk.keys());
  CHECK(mem.get_string_array("t.strings") == disk.get_string_array("t.strings"));
  REQUIRE(mem.tensors().size() == disk.tensors().size());
  // Tensor data is read in place, from the caller's bytes.
  const GgufTensorInfo& c = mem.tensor("c");
  CHECK(c.data >= bytes.data());
  CHECK(c.data + c.byte_size <= bytes.data() + bytes.size());
  CHECK(std::equal(c.data, c.data + c.byte_size, disk.tensor("c").data));

  // Errors name the stand-in path, as they name a file.
  bytes.resize(bytes.size() - 1);
  CHECK_THROWS_WITH(GgufFile::from_memory(bytes, "image.gguf"),
                    Catch::StartsWith("image.gguf: truncated GGUF file"));
  CHECK_THROWS_WITH(GgufFile::from_memory({}, "empty"), Catch::Contains("empty: too small"));
}
