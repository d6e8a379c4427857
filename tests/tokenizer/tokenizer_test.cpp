#include "tokenizer/tokenizer.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

const Tokenizer& smollm() {
  static Tokenizer t = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  return t;
}

}  // namespace

TEST_CASE("SmolLM2 tokenization is identical to llama.cpp's on 250 strings", "[tokenizer][llamacpp]") {
  std::ifstream in(test::fixture_path("tokenizer/smollm2_llamacpp.json"));
  REQUIRE(in);
  auto fx = nlohmann::json::parse(in);
  REQUIRE(fx["cases"].size() >= 200);
  const Tokenizer& t = smollm();
  CHECK(t.warnings().empty());
  int n = 0;
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    INFO("text: " << text);
    CHECK(t.encode(text, false, true) == c["ids"].get<Ids>());
    CHECK(t.encode(text, false, false) == c["ids_plain"].get<Ids>());
    CHECK(t.decode(c["ids"].get<Ids>()) == c["decoded"].get<std::string>());
    CHECK(t.decode(t.encode(text, false, true)) == text);
    ++n;
  }
  CHECK(n >= 200);
}

TEST_CASE("Special tokens are matched only when asked", "[tokenizer]") {
  const Tokenizer& t = smollm();
  auto im_start = t.token_id("<|im_start|>");
  REQUIRE(im_start);
  CHECK(t.is_control(*im_start));
  CHECK(t.encode("<|im_start|>", false, true) == Ids{*im_start});
  CHECK(t.encode("<|im_start|>", false, false).size() > 1);
  CHECK(t.decode(Ids{*im_start}, /*render_special=*/false).empty());
  CHECK(t.eos_id() == 2);
  CHECK(t.bos_id() == 1);
  CHECK_FALSE(t.add_bos_by_default());
  CHECK(t.encode("hi", true, false).front() == 1);
}

TEST_CASE("Out-of-range ids decode to nothing instead of crashing", "[tokenizer]") {
  const Tokenizer& t = smollm();
  CHECK(t.decode(Ids{-1, 1 << 30}).empty());
}

TEST_CASE("SentencePiece vocabularies merge by score and fall back to bytes", "[tokenizer]") {
  // A hand-made Llama-2-style vocabulary: byte tokens, characters and merges
  // with scores. Expected ids were worked out by hand from the scores.
  VocabData d;
  d.kind = VocabData::Kind::spm;
  d.add_space_prefix = true;
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.types = {TokenType::unknown, TokenType::control, TokenType::control};
  d.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    d.tokens.push_back(name);
    d.types.push_back(TokenType::byte);
    d.scores.push_back(0);
  }
  auto add = [&](const std::string& s, float score) {
    d.tokens.push_back(s);
    d.types.push_back(TokenType::normal);
    d.scores.push_back(score);
    return static_cast<int32_t>(d.tokens.size() - 1);
  };
  const std::string sp = "\xE2\x96\x81";
  int32_t t_sp = add(sp, -1), t_h = add("h", -2), t_i = add("i", -2), t_hi = add("hi", -0.5f);
  int32_t t_sphi = add(sp + "hi", -0.1f);
  (void)t_h;
  (void)t_i;
  (void)t_hi;
  d.bos = 1;
  d.eos = 2;
  d.unk = 0;
  Tokenizer t(std::move(d));
  // " hi" -> "▁hi": "h"+"i" (-0.5) merges before "▁"+"h" is even a token, then "▁"+"hi" (-0.1).
  CHECK(t.encode("hi", false, false) == Ids{t_sphi});
  CHECK(t.encode("hi hi", true, false) == Ids{1, t_sphi, t_sphi});
  // "é" is not in the vocabulary: its two UTF-8 bytes become byte tokens.
  CHECK(t.encode("é", false, false) == Ids{t_sp, 3 + 0xC3, 3 + 0xA9});
  CHECK(t.decode(t.encode("hi é", false, false)) == " hi é");
}
