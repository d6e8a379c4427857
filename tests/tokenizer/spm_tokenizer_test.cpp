// SentencePiece-style (Llama 2) tokenization: a hand-made vocabulary with
// expectations worked out by hand, and a trained one checked against
// llama.cpp (scripts/reference/tokenizer_spm_fixture.py). No real Llama 2
// vocabulary is available offline.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"
#include "tokenizer/incremental_detokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;
using Ids = std::vector<int32_t>;

namespace {

const std::string sp = "\xE2\x96\x81";  // ▁

std::string hex(const std::string& bytes) {
  std::string out;
  char buf[3];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

// <unk> <s> </s>, the 256 byte tokens (ids 3..258), then normal pieces.
struct HandVocab {
  VocabData d;
  int32_t add(const std::string& s, float score, TokenType type = TokenType::normal) {
    d.tokens.push_back(s);
    d.types.push_back(type);
    d.scores.push_back(score);
    return static_cast<int32_t>(d.tokens.size() - 1);
  }
  HandVocab() {
    d.kind = VocabData::Kind::spm;
    d.add_space_prefix = true;
    d.add_bos = true;
    add("<unk>", 0, TokenType::unknown);
    add("<s>", 0, TokenType::control);
    add("</s>", 0, TokenType::control);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      add(name, 0, TokenType::byte);
    }
    d.bos = 1;
    d.eos = 2;
    d.unk = 0;
  }
};

int32_t byte_id(int b) { return 3 + b; }

}  // namespace

TEST_CASE("SentencePiece merges the best-scoring pair first and falls back to bytes", "[tokenizer][spm]") {
  // " hi" -> symbols ▁ h i. Which of "▁h" and "hi" merges first decides the
  // result, since "▁hi" is not a token.
  for (bool space_first : {true, false}) {
    HandVocab v;
    int32_t t_sp = v.add(sp, -1);
    int32_t t_h = v.add("h", -2);
    int32_t t_i = v.add("i", -2);
    int32_t t_sph = v.add(sp + "h", space_first ? -0.3f : -0.7f);
    int32_t t_hi = v.add("hi", -0.5f);
    Tokenizer t(std::move(v.d));
    CHECK(t.encode("hi", false, false) == (space_first ? Ids{t_sph, t_i} : Ids{t_sp, t_hi}));
    (void)t_h;
    // "é" is not in the vocabulary: its two UTF-8 bytes become byte tokens.
    CHECK(t.encode("é", false, false) == Ids{t_sp, byte_id(0xC3), byte_id(0xA9)});
    CHECK(t.decode(t.encode("hi é", false, false)) == " hi é");
    CHECK(t.encode("hi", true, false).front() == 1);
  }
  // A merge that makes a longer token keeps going: ▁h + i -> ▁hi.
  HandVocab v;
  v.add(sp, -1);
  v.add("h", -2);
  v.add("i", -2);
  v.add(sp + "h", -0.3f);
  int32_t t_sphi = v.add(sp + "hi", -0.9f);
  Tokenizer t(std::move(v.d));
  CHECK(t.encode("hi", false, false) == Ids{t_sphi});
}

TEST_CASE("SentencePiece ties go to the leftmost pair", "[tokenizer][spm]") {
  HandVocab v;
  v.add("a", -5);
  int32_t t_aa = v.add("aa", -1);
  v.d.add_space_prefix = false;
  Tokenizer t(std::move(v.d));
  // "aaa": pairs (0,1) and (1,2) both spell "aa"; the left one merges.
  CHECK(t.encode("aaa", false, false) == Ids{t_aa, *t.token_id("a")});
  CHECK(t.encode("aaaa", false, false) == Ids{t_aa, t_aa});
}

TEST_CASE("The space prefix goes at the start and after every special token", "[tokenizer][spm]") {
  HandVocab v;
  int32_t t_sp = v.add(sp, -1);
  int32_t t_x = v.add("x", -2);
  int32_t t_spx = v.add(sp + "x", -0.5f);
  int32_t t_user = v.add("<|user|>", 0, TokenType::user_defined);
  Tokenizer t(std::move(v.d));
  CHECK(t.encode("x", false, true) == Ids{t_spx});
  CHECK(t.encode("x<s>x", false, true) == Ids{t_spx, 1, t_spx});
  CHECK(t.encode("x<|user|>x", false, false) == Ids{t_spx, t_user, t_spx});  // user-defined: always matched
  CHECK(t.encode("x<s>x", false, false) != Ids{t_spx, 1, t_spx});           // control: only when asked
  CHECK(t.encode(" ", false, false) == Ids{t_sp, t_sp});
  (void)t_x;
}

TEST_CASE("Byte-fallback tokens stream as whole characters", "[tokenizer][spm][detok]") {
  HandVocab v;
  v.add(sp, -1);
  Tokenizer t(std::move(v.d));
  // 🙂 (F0 9F 99 82) exists only as four byte tokens.
  Ids ids = t.encode("🙂", false, false);
  REQUIRE(ids.size() == 5);
  IncrementalDetokenizer d(t, {});
  CHECK(d.push(ids[0]).text == " ");
  for (size_t i = 1; i + 1 < ids.size(); ++i) CHECK(d.push(ids[i]).text.empty());
  CHECK(d.push(ids.back()).text == "🙂");
}

TEST_CASE("A trained SentencePiece GGUF tokenizes exactly as llama.cpp does", "[tokenizer][spm][llamacpp]") {
  std::ifstream in(test::fixture_path("tokenizer/spm_tiny_llamacpp.json"));
  REQUIRE(in);
  auto fx = nlohmann::json::parse(in);
  Tokenizer t = Tokenizer::from_gguf(GgufFile::open(test::fixture_path("tokenizer/spm_tiny.gguf")));
  CHECK(t.kind() == VocabData::Kind::spm);
  CHECK(t.warnings().empty());
  CHECK(t.add_bos_by_default());
  CHECK(t.bos_id() == fx["bos"].get<int32_t>());
  CHECK(t.end_of_generation_ids() == fx["eog_ids"].get<Ids>());
  REQUIRE(fx["cases"].size() >= 250);
  size_t byte_fallbacks = 0;
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    INFO("text: " << text);
    Ids ids = t.encode(text, true, true);
    CHECK(ids == c["ids"].get<Ids>());
    CHECK(t.encode(text, true, false) == c["ids_plain"].get<Ids>());
    CHECK(t.encode(text, false, true) == c["ids_nobos"].get<Ids>());
    CHECK(sanitize_utf8(t.decode(c["ids"].get<Ids>())) == c["decoded"].get<std::string>());
    for (int32_t id : ids) byte_fallbacks += t.token_type(id) == TokenType::byte;
  }
  CHECK(byte_fallbacks > 100);  // CJK, emoji and accents really went through <0xNN>
  for (const auto& p : fx["pieces"]) {
    int32_t id = p["id"];
    INFO("id " << id);
    CHECK(hex(t.token_to_piece(id, true)) == p["special"].get<std::string>());
    CHECK(hex(t.token_to_piece(id, false)) == p["plain"].get<std::string>());
  }
}
