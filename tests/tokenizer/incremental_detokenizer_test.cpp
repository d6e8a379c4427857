#include "tokenizer/incremental_detokenizer.hpp"

#include <catch2/catch.hpp>

#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
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
