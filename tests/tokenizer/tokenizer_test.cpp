#include "tokenizer/tokenizer.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sys/mman.h>

#include <thread>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"
#include "tokenizer/incremental_detokenizer.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

nlohmann::json fixture(const std::string& name) {
  std::ifstream in(test::fixture_path("tokenizer/" + name));
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

const Tokenizer& smollm() {
  static Tokenizer t = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  return t;
}

// The default model's vocabulary under another family's split rules, as the
// fixture script makes llama.cpp run it (only tokenizer.ggml.pre changed).
Tokenizer smollm_with_pre(const std::string& pre_name) {
  VocabData v = vocab_from_gguf(GgufFile::open(default_model_path()));
  v.pre = pre_tokenizer_from_name(pre_name, nullptr);
  v.ignore_merges = pre_name == "llama-bpe";
  return Tokenizer(std::move(v));
}

std::string hex(const std::string& bytes) {
  std::string out;
  char buf[3];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

}  // namespace

TEST_CASE("SmolLM2 tokenization is identical to llama.cpp's on 300+ strings", "[tokenizer][llamacpp]") {
  auto fx = fixture("smollm2_llamacpp.json");
  REQUIRE(fx["cases"].size() >= 300);
  const Tokenizer& t = smollm();
  CHECK(t.warnings().empty());
  CHECK(t.add_bos_by_default() == fx["add_bos"].get<bool>());
  CHECK(t.bos_id() == fx["bos"].get<int32_t>());
  CHECK(t.eos_id() == fx["eos"].get<int32_t>());
  const bool add_bos = fx["add_bos"];
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    INFO("text: " << text);
    CHECK(t.encode(text, add_bos, true) == c["ids"].get<Ids>());
    CHECK(t.encode(text, add_bos, false) == c["ids_plain"].get<Ids>());
    CHECK(sanitize_utf8(t.decode(c["ids"].get<Ids>())) == c["decoded"].get<std::string>());
    CHECK(t.decode(t.encode(text, false, true)) == text);
    CHECK(t.decode(t.encode(text, false, false)) == text);
  }
}

TEST_CASE("Llama 3 and Qwen2 rules on the same vocabulary give llama.cpp's ids", "[tokenizer][llamacpp]") {
  auto fx = fixture("smollm2_llamacpp.json");
  Tokenizer llama3 = smollm_with_pre("llama-bpe");
  Tokenizer qwen2 = smollm_with_pre("qwen2");
  size_t differ_from_smollm = 0;
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    INFO("text: " << text);
    CHECK(llama3.encode(text, false, true) == c["ids_llama3"].get<Ids>());
    CHECK(qwen2.encode(text, false, true) == c["ids_qwen2"].get<Ids>());
    if (c["ids_llama3"] != c["ids"]) ++differ_from_smollm;
  }
  // The variants must really exercise other splits, not repeat SmolLM's.
  CHECK(differ_from_smollm > 20);
}

TEST_CASE("Token pieces are llama_token_to_piece's, with and without special text", "[tokenizer][llamacpp]") {
  auto fx = fixture("smollm2_llamacpp.json");
  REQUIRE(fx["pieces"].size() > 500);
  for (const auto& p : fx["pieces"]) {
    int32_t id = p["id"];
    INFO("id " << id);
    CHECK(hex(smollm().token_to_piece(id, true)) == p["special"].get<std::string>());
    CHECK(hex(smollm().token_to_piece(id, false)) == p["plain"].get<std::string>());
  }
}

TEST_CASE("End-of-generation tokens are the ones llama.cpp stops on", "[tokenizer][llamacpp]") {
  auto fx = fixture("smollm2_llamacpp.json");
  CHECK(smollm().end_of_generation_ids() == fx["eog_ids"].get<Ids>());
  CHECK(smollm().is_end_of_generation(2));    // <|im_end|>
  CHECK_FALSE(smollm().is_end_of_generation(1));  // <|im_start|>
}

TEST_CASE("Special tokens are matched only when asked", "[tokenizer]") {
  const Tokenizer& t = smollm();
  auto im_start = t.token_id("<|im_start|>");
  REQUIRE(im_start);
  CHECK(t.is_control(*im_start));
  CHECK(t.encode("<|im_start|>", false, true) == Ids{*im_start});
  CHECK(t.encode("<|im_start|>", false, false).size() > 1);
  CHECK(t.decode(Ids{*im_start}, /*render_special=*/false).empty());
  CHECK(t.decode(Ids{*im_start}, /*render_special=*/true) == "<|im_start|>");
  CHECK(t.encode("hi", true, false).front() == 1);
  CHECK(t.encode("", true, true) == Ids{1});
  CHECK(t.encode("", false, true).empty());
}

TEST_CASE("Out-of-range ids decode to nothing instead of crashing", "[tokenizer]") {
  const Tokenizer& t = smollm();
  CHECK(t.decode(Ids{-1, 1 << 30, t.vocab_size()}).empty());
  CHECK(t.token_to_piece(-5).empty());
  CHECK(t.token_type(t.vocab_size()) == TokenType::undefined);
  CHECK_THROWS_AS(t.token_text(-1), std::out_of_range);
}

TEST_CASE("Very long words merge without quadratic blow-up and round-trip", "[tokenizer]") {
  // 200k bytes with no split point: one pre-tokenizer piece. Rescanning all
  // pairs per merge would take ~10^10 steps; the heap makes this instant.
  std::string word;
  uint32_t x = 12345;
  for (int i = 0; i < 200000; ++i) {
    x = x * 1103515245u + 12345u;
    word += static_cast<char>('a' + (x >> 16) % 26);
  }
  Ids ids = smollm().encode(word, false, false);
  CHECK(ids.size() < word.size() * 3 / 4);  // merges happened
  CHECK(smollm().decode(ids) == word);
}

TEST_CASE("Encoding from several threads at once gives the same ids", "[tokenizer]") {
  auto fx = fixture("smollm2_llamacpp.json");
  std::vector<std::string> texts;
  std::vector<Ids> expected;
  for (const auto& c : fx["cases"]) {
    texts.push_back(c["text"]);
    expected.push_back(c["ids"]);
  }
  Tokenizer t = Tokenizer::from_gguf(GgufFile::open(default_model_path()));  // cold cache
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          size_t j = (i * 7 + static_cast<size_t>(k) * 13) % texts.size();
          if (t.encode(texts[j], false, true) != expected[j]) ++wrong[static_cast<size_t>(k)];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong == std::vector<int>(4, 0));
}

TEST_CASE("Texts over the size limit are refused with a clear error", "[tokenizer]") {
  // Untouched anonymous pages: a valid 1 GiB + 1 range that costs no memory,
  // since encode must refuse it before reading.
  const size_t size = (size_t{1} << 30) + 1;
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  CHECK_THROWS_WITH(smollm().encode(std::string_view(static_cast<const char*>(p), size), false, false),
                    Catch::Contains("1 GiB"));
  munmap(p, size);
}

TEST_CASE("Bad vocabularies are refused with a message", "[tokenizer]") {
  CHECK_THROWS_WITH(Tokenizer(VocabData{}), Catch::Contains("empty vocabulary"));
  VocabData d;
  d.tokens = {"a", "b"};
  CHECK_THROWS_WITH(Tokenizer(d), Catch::Contains("needs merges"));
  d.merges = {{"a", "b"}};
  d.types = {TokenType::normal};
  CHECK_THROWS_WITH(Tokenizer(d), Catch::Contains("differ in length"));
  d.types.clear();
  d.bos = 7;
  Tokenizer t(d);
  CHECK_FALSE(t.bos_id());
  REQUIRE(t.warnings().size() >= 1);
  CHECK(t.warnings()[0].find("BOS id 7") != std::string::npos);
}

TEST_CASE("Segments: control tokens match only inside trusted text", "[tokenizer][special]") {
  const Tokenizer& t = smollm();
  const int32_t im_start = *t.token_id("<|im_start|>");
  using S = PromptSegment;
  const std::string text = "a<|im_start|>b<|im_end|>";
  // All trusted or all not: the single-string encodings.
  CHECK(t.encode(std::vector<S>{{text, true}}, false) == t.encode(text, false, true));
  CHECK(t.encode(std::vector<S>{{text, false}}, false) == t.encode(text, false, false));
  CHECK(t.encode(std::vector<S>{{text, false}}, true) == t.encode(text, true, false));
  CHECK(t.encode(std::vector<S>{}, false).empty());
  // A match must lie wholly inside trusted text; adjacent trusted segments
  // count as one stretch.
  CHECK(t.encode(std::vector<S>{{"<|im_", false}, {"start|>", true}}, false).size() > 1);
  CHECK(t.encode(std::vector<S>{{"<|im_", true}, {"start|>", false}}, false).size() > 1);
  CHECK(t.encode(std::vector<S>{{"<|im_", true}, {"", false}, {"start|>", true}}, false) == Ids{im_start});
  // Untrusted text around a trusted marker: only the marker is special, and
  // the raw text on each side is merged as if it were one string.
  Ids mixed = t.encode(std::vector<S>{{"x<|im_start|>", false}, {"<|im_start|>", true}, {"<|im_start|>y", false}}, false);
  CHECK(std::count(mixed.begin(), mixed.end(), im_start) == 1);
  Ids left = t.encode("x<|im_start|>", false, false), right = t.encode("<|im_start|>y", false, false);
  Ids expected = left;
  expected.push_back(im_start);
  expected.insert(expected.end(), right.begin(), right.end());
  CHECK(mixed == expected);
}

TEST_CASE("Segments: control-token text straddling a segment boundary stays text", "[tokenizer][special]") {
  const Tokenizer& t = smollm();
  const int32_t im_end = *t.token_id("<|im_end|>");
  // "<|im_end|>" at offset 0 straddles the boundary; the one at offset 10 is
  // trusted.
  Ids ids = t.encode(std::vector<PromptSegment>{{"<|im_end|><|im_", false}, {"end|>", false}, {"<|im_end|>", true}}, false);
  CHECK(std::count(ids.begin(), ids.end(), im_end) == 1);
  CHECK(ids.back() == im_end);
  CHECK(t.decode(ids) == "<|im_end|><|im_end|><|im_end|>");
}
