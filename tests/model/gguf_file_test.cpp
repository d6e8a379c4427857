#include "model/gguf_file.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/default_model.hpp"
#include "tests/test_paths.hpp"

using namespace actorlm;

namespace {

nlohmann::json fixture() {
  std::ifstream in(test::fixture_path("gguf/dequant.json"));
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

std::vector<char> read_file(const std::string& path, size_t limit = SIZE_MAX) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> data(limit == SIZE_MAX ? 0 : limit);
  if (limit == SIZE_MAX) {
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } else {
    in.read(data.data(), static_cast<std::streamsize>(limit));
    data.resize(static_cast<size_t>(in.gcount()));
  }
  return data;
}

std::string write_temp(const std::vector<char>& bytes, const std::string& name) {
  std::string path = "/tmp/actorlm_test_" + name + ".gguf";
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string error_of(const std::string& path) {
  try {
    GgufFile::open(path);
  } catch (const ModelError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("The default model's metadata and tensor table match the gguf package", "[model][gguf]") {
  auto fx = fixture()["model"];
  GgufFile f = GgufFile::open(default_model_path());
  CHECK(f.version() == fx["version"]);
  const auto& meta = fx["metadata"];
  CHECK(*f.get_string("general.architecture") == meta["general.architecture"]);
  CHECK(*f.get_int("llama.block_count") == meta["llama.block_count"]);
  CHECK(*f.get_int("llama.embedding_length") == meta["llama.embedding_length"]);
  CHECK(*f.get_int("llama.attention.head_count_kv") == meta["llama.attention.head_count_kv"]);
  CHECK(*f.get_float("llama.rope.freq_base") == Approx(double(meta["llama.rope.freq_base"])));
  CHECK(*f.get_string("tokenizer.ggml.pre") == meta["tokenizer.ggml.pre"]);
  CHECK(f.get_string_array("tokenizer.ggml.tokens")->size() == fx["token_count"]);
  CHECK_FALSE(f.get_int("no.such.key"));

  REQUIRE(f.tensors().size() == fx["tensors"].size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& want = fx["tensors"][i];
    const auto& got = f.tensors()[i];
    CHECK(got.name == want["name"]);
    CHECK(ggml_type_name(got.type) == want["type"]);
    CHECK(got.shape == want["shape"].get<std::vector<uint64_t>>());
  }
}

TEST_CASE("Tensors of the default model dequantize as the gguf package does", "[model][gguf]") {
  auto fx = fixture();
  GgufFile f = GgufFile::open(default_model_path());
  for (const auto& t : fx["tensors"]) {
    std::string name = t["name"];
    INFO("tensor " << name);
    const GgufTensorInfo& info = f.tensor(name);
    int64_t row = static_cast<int64_t>(info.shape[0]);
    size_t row_bytes = ggml_row_bytes(info.type, row);
    uint64_t rows = info.element_count() / info.shape[0];
    std::vector<float> buf(static_cast<size_t>(row));
    double sum = 0, sumsq = 0;
    for (uint64_t r = 0; r < rows; ++r) {
      dequantize_row(info.type, info.data + r * row_bytes, buf.data(), row);
      if (r < t["rows"].size()) {
        const auto& want = t["rows"][r];
        for (size_t i = 0; i < want.size(); ++i) {
          REQUIRE(buf[i] == Approx(double(want[i])).margin(1e-7).epsilon(1e-6));
        }
      }
      for (float v : buf) {
        sum += v;
        sumsq += double(v) * v;
      }
    }
    CHECK(sum == Approx(double(t["sum"])).epsilon(1e-9).margin(1e-6));
    CHECK(sumsq == Approx(double(t["sumsq"])).epsilon(1e-9));
  }
}

TEST_CASE("Broken files are errors that name the file and the problem", "[model][gguf]") {
  std::vector<char> head = read_file(default_model_path(), 4 << 20);

  SECTION("missing file") {
    CHECK(error_of("/nonexistent/model.gguf").find("/nonexistent/model.gguf") != std::string::npos);
  }
  SECTION("wrong magic") {
    auto bad = head;
    bad[0] = 'X';
    std::string path = write_temp(bad, "magic");
    std::string err = error_of(path);
    CHECK(err.find(path) != std::string::npos);
    CHECK(err.find("magic") != std::string::npos);
  }
  SECTION("unsupported version") {
    auto bad = head;
    bad[4] = 9;
    CHECK(error_of(write_temp(bad, "version")).find("version 9") != std::string::npos);
  }
  SECTION("truncated at many points") {
    for (size_t cut : {size_t{10}, size_t{30}, size_t{1000}, size_t{200000}, size_t{2000000}, head.size()}) {
      std::vector<char> part(head.begin(), head.begin() + static_cast<ptrdiff_t>(cut));
      std::string err = error_of(write_temp(part, "trunc"));
      INFO("cut at " << cut << ": " << err);
      CHECK(!err.empty());
      CHECK((err.find("truncated") != std::string::npos || err.find("too small") != std::string::npos ||
             err.find("corrupt") != std::string::npos));
    }
  }
  SECTION("absurd counts are refused before allocation") {
    auto bad = head;
    for (int i = 8; i < 16; ++i) bad[static_cast<size_t>(i)] = static_cast<char>(0xff);  // tensor count
    CHECK(error_of(write_temp(bad, "count")).find("corrupt") != std::string::npos);
  }
}

TEST_CASE("Missing tensors and mistyped metadata are named", "[model][gguf]") {
  GgufFile f = GgufFile::open(default_model_path());
  CHECK(f.find_tensor("blk.99.attn_q.weight") == nullptr);
  try {
    f.tensor("blk.99.attn_q.weight");
    FAIL("expected an error");
  } catch (const ModelError& e) {
    CHECK(std::string(e.what()).find("blk.99.attn_q.weight") != std::string::npos);
  }
  try {
    f.get_int("general.architecture");
    FAIL("expected an error");
  } catch (const ModelError& e) {
    CHECK(std::string(e.what()).find("general.architecture is string") != std::string::npos);
  }
}
