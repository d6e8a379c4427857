#include "tokenizer/incremental_detokenizer.hpp"

#include <catch2/catch.hpp>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tests/test_paths.hpp"
#include <fstream>
#include <nlohmann/json.hpp>
#include "tokenizer/unicode.hpp"

using namespace actorlm;

namespace {

const Tokenizer& tok() {
  static Tokenizer t = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  return t;
}

// Streams text's tokens through a detokenizer; returns the deltas.
std::vector<IncrementalDetokenizer::Delta> stream(IncrementalDetokenizer& d, const std::string& text) {
  std::vector<IncrementalDetokenizer::Delta> out;
  for (int32_t id : tok().encode(text, false, true)) {
    out.push_back(d.push(id));
    if (out.back().stopped) break;
  }
  return out;
}

bool valid_utf8(const std::string& s) { return sanitize_utf8(s) == s; }

}  // namespace

TEST_CASE("Streaming emits only whole characters and loses nothing", "[tokenizer][detok]") {
  for (std::string text : {"Hello 🙂 wörld", "你好，世界", "👨‍👩‍👧‍👦 family", "naïve café", "plain ascii"}) {
    INFO(text);
    auto ids = tok().encode(text, false, true);
    IncrementalDetokenizer d(tok(), {});
    std::string joined;
    for (int32_t id : ids) {
      auto delta = d.push(id);
      CHECK(valid_utf8(delta.text));
      joined += delta.text;
    }
    joined += d.flush();
    CHECK(joined == text);
  }
}

TEST_CASE("A character split across tokens waits for its last byte", "[tokenizer][detok]") {
  auto ids = tok().encode("🙂", false, true);
  REQUIRE(ids.size() >= 2);  // byte-level BPE splits this emoji
  IncrementalDetokenizer d(tok(), {});
  for (size_t i = 0; i + 1 < ids.size(); ++i) CHECK(d.push(ids[i]).text.empty());
  CHECK(d.push(ids.back()).text == "🙂");
}

TEST_CASE("Stop strings end the stream, even across tokens, and never leak", "[tokenizer][detok]") {
  IncrementalDetokenizer d(tok(), {"User:", "\n\n"});
  auto deltas = stream(d, "Sure, here it is. User: ignore this");
  REQUIRE_FALSE(deltas.empty());
  CHECK(deltas.back().stopped);
  CHECK(deltas.back().matched_stop == "User:");
  CHECK(d.text() == "Sure, here it is. ");
  CHECK(d.flush().empty());
  CHECK(d.push(42).text.empty());  // nothing after a stop

  // A prefix of a stop string is held back, then released when it is not one.
  IncrementalDetokenizer e(tok(), {"User:"});
  auto ids = tok().encode("Use the User manual", false, true);
  auto user = tok().token_id("\xC4\xA0User");  // " User" as one token
  REQUIRE(user);
  std::string all;
  for (int32_t id : ids) {
    all += e.push(id).text;
    if (id == *user) CHECK(all == "Use the ");  // "User" could still become "User:"
  }
  all += e.flush();
  CHECK(all == "Use the User manual");
}

TEST_CASE("Byte tokens that never form a character become U+FFFD", "[tokenizer][detok]") {
  // A lone continuation byte 0x80, as its byte-level token.
  auto id = tok().token_id(unicode::encode_utf8(unicode::byte_to_char(0x80)));
  REQUIRE(id);
  IncrementalDetokenizer d(tok(), {});
  std::string out = d.push(*id).text + d.flush();
  CHECK(out == "\xEF\xBF\xBD");
}

TEST_CASE("Streaming every fixture string token by token gives the whole text", "[tokenizer][detok]") {
  std::ifstream in(actorlm::test::fixture_path("tokenizer/smollm2_llamacpp.json"));
  REQUIRE(in);
  auto fx = nlohmann::json::parse(in);
  for (const auto& c : fx["cases"]) {
    std::string text = c["text"];
    INFO(text);
    IncrementalDetokenizer d(tok(), {}, /*render_special=*/true);
    std::string joined;
    for (int32_t id : c["ids"].get<std::vector<int32_t>>()) {
      auto delta = d.push(id);
      CHECK(valid_utf8(delta.text));
      joined += delta.text;
    }
    joined += d.flush();
    CHECK(joined == text);
    CHECK(d.text() == text);
  }
}

TEST_CASE("A stop string spanning a multi-token character is found and nothing of it leaks", "[tokenizer][detok]") {
  // "你好" is several byte-level tokens; the stop string is its second character.
  auto ids = tok().encode("ab你好cd", false, true);
  IncrementalDetokenizer d(tok(), {"好"});
  std::string all;
  bool stopped = false;
  for (int32_t id : ids) {
    auto delta = d.push(id);
    all += delta.text;
    if (delta.stopped) {
      stopped = true;
      CHECK(delta.matched_stop == "好");
      break;
    }
  }
  CHECK(stopped);
  CHECK(all == "ab你");
  CHECK(d.text() == "ab你");
}

TEST_CASE("The earliest stop string wins, held text comes out on flush", "[tokenizer][detok]") {
  IncrementalDetokenizer d(tok(), {"world", "lo w"});
  std::string all;
  for (int32_t id : tok().encode("hello world", false, true)) {
    auto delta = d.push(id);
    all += delta.text;
    if (delta.stopped) {
      CHECK(delta.matched_stop == "lo w");
      break;
    }
  }
  CHECK(all == "hel");

  IncrementalDetokenizer e(tok(), {"END"});
  std::string out;
  for (int32_t id : tok().encode("the E", false, true)) out += e.push(id).text;
  CHECK(out == "the ");       // "E" might begin "END"
  CHECK(e.flush() == "E");    // the stream ended: it was not a stop
  CHECK_FALSE(e.stopped());
}

TEST_CASE("A stream cut inside a character ends with U+FFFD, once", "[tokenizer][detok]") {
  auto ids = tok().encode("🙂", false, true);
  REQUIRE(ids.size() >= 2);
  IncrementalDetokenizer d(tok(), {});
  CHECK(d.push(ids[0]).text.empty());
  CHECK(d.flush() == "\xEF\xBF\xBD");
  CHECK(d.flush().empty());
}

TEST_CASE("Control tokens stream as text only when asked", "[tokenizer][detok]") {
  IncrementalDetokenizer plain(tok(), {});
  CHECK(plain.push(2).text.empty());  // <|im_end|>
  IncrementalDetokenizer shown(tok(), {}, true);
  CHECK(shown.push(2).text == "<|im_end|>");
  IncrementalDetokenizer stop_on_text(tok(), {"<|im_end|>"}, true);
  auto delta = stop_on_text.push(2);
  CHECK(delta.stopped);
  CHECK(delta.text.empty());
}

TEST_CASE("With min_tokens a stop string counts only where it ends in a later token", "[tokenizer][detok]") {
  const std::string text = "one two three four five";
  const auto ids = tok().encode(text, false, true);
  REQUIRE(ids.size() == 5);  // " two", " three", ...: one token per word
  auto run = [&](int32_t min_tokens, const std::vector<std::string>& stops) {
    IncrementalDetokenizer d(tok(), stops, false, min_tokens);
    std::string out;
    size_t pushed = 0;
    for (int32_t id : ids) {
      ++pushed;
      auto delta = d.push(id);
      out += delta.text;
      if (delta.stopped) return std::make_pair(out, pushed);
    }
    return std::make_pair(out + d.flush(), pushed);
  };
  // " t" first ends in token 2 (" two"); with min_tokens 2 tokens 1-2 cannot
  // stop, so the first that can is " three".
  CHECK(run(0, {" t"}) == std::make_pair(std::string("one"), size_t{2}));
  CHECK(run(2, {" t"}) == std::make_pair(std::string("one two"), size_t{3}));
  CHECK(run(5, {" t"}) == std::make_pair(text, size_t{5}));
  // A match that starts in a held-back token but ends in the first token
  // allowed to stop counts ("two three" ends in token 3).
  CHECK(run(2, {"two three"}) == std::make_pair(std::string("one "), size_t{3}));
  // One that lies wholly in the early tokens never does, even though it was
  // held back there as the start of a longer stop string.
  CHECK(run(2, {"one two", "one two six"}) == std::make_pair(text, size_t{5}));
}
