#include "grammar/constraint.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/token_bytes.hpp"
#include "model/default_model.hpp"
#include "model/gguf_file.hpp"
#include "tokenizer/tokenizer.hpp"

using namespace actorlm;

namespace {

const Tokenizer& tokenizer() {
  static Tokenizer t = Tokenizer::from_gguf(GgufFile::open(default_model_path()));
  return t;
}

ConstraintCompiler& compiler() {
  static auto c = make_constraint_compiler(tokenizer(), tokenizer().vocab_size(), 2);
  return *c;
}

std::vector<uint32_t> mask_of(ConstraintState& s) {
  std::vector<uint32_t> m(mask_words(compiler().vocab_size()));
  s.allowed(m);
  return m;
}

std::vector<int32_t> allowed_ids(ConstraintState& s) {
  const auto m = mask_of(s);
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < compiler().vocab_size(); ++t) {
    if (mask_allows(m, t)) ids.push_back(t);
  }
  return ids;
}

// Feeds `text`'s tokens one by one, checking each is allowed before it is
// accepted; returns how many were.
size_t feed(ConstraintState& s, const std::string& text) {
  const auto ids = tokenizer().encode(text, false, false);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!mask_allows(mask_of(s), ids[i])) return i;
    REQUIRE(s.accept(ids[i]));
  }
  return ids.size();
}

int32_t end_token() { return tokenizer().end_of_generation_ids().front(); }

// A deterministic "decoding" that ends as soon as it can: an end token when
// one is allowed, else the first allowed of a few closing characters, else
// the lowest allowed id. It exercises masks far from any text a model would
// write.
std::string walk(ConstraintState& s, int max_steps) {
  std::string out;
  for (int i = 0; i < max_steps && !s.complete(); ++i) {
    const auto ids = allowed_ids(s);
    REQUIRE_FALSE(ids.empty());
    int32_t pick = ids.front();
    bool chosen = false;
    for (int32_t id : ids) {
      if (tokenizer().is_end_of_generation(id)) {
        pick = id;
        chosen = true;
        break;
      }
    }
    for (const char* closing : {"}", "]", "\"", "0"}) {
      if (chosen) break;
      const int32_t id = tokenizer().encode(closing, false, false).front();
      if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
        pick = id;
        chosen = true;
      }
    }
    REQUIRE(s.accept(pick));
    if (!tokenizer().is_end_of_generation(pick)) out += tokenizer().token_to_piece(pick, false);
  }
  return out;
}

}  // namespace

TEST_CASE("a JSON schema admits exactly the documents it describes", "[grammar]") {
  const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": "integer", "minimum": 0}}, "required": ["name", "age"], "additionalProperties": false})";
  auto s = compiler().start({ConstraintKind::json_schema, schema});
  const std::string doc = R"({"name": "Ada", "age": 36})";
  CHECK(feed(*s, doc) == tokenizer().encode(doc, false, false).size());
  CHECK_FALSE(s->complete());
  // Only an end token may follow a complete document.
  const auto after = allowed_ids(*s);
  REQUIRE_FALSE(after.empty());
  for (int32_t id : after) CHECK(tokenizer().is_end_of_generation(id));
  REQUIRE(s->accept(end_token()));
  CHECK(s->complete());

  // A document that breaks the schema is stopped at the first bad token.
  auto bad = compiler().start({ConstraintKind::json_schema, schema});
  const std::string wrong = R"({"name": "Ada", "age": "old"})";
  CHECK(feed(*bad, wrong) < tokenizer().encode(wrong, false, false).size());
}

TEST_CASE("a JSON schema that does not mention additionalProperties still admits only its own keys", "[grammar]") {
  // Strict mode: a model constrained to {"city"} cannot append keys of its
  // own, so a client's parser never meets fields it did not ask for.
  const std::string schema = R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})";
  auto s = compiler().start({ConstraintKind::json_schema, schema});
  const std::string extra = R"({"city": "Paris", "country": "FR"})";
  const size_t taken = feed(*s, extra);
  CHECK(taken < tokenizer().encode(extra, false, false).size());
  auto ok = compiler().start({ConstraintKind::json_schema, schema});
  const std::string doc = R"({"city": "Paris"})";
  CHECK(feed(*ok, doc) == tokenizer().encode(doc, false, false).size());
}

TEST_CASE("a token the mask forbids is refused and leaves the state as it was", "[grammar]") {
  auto s = compiler().start({ConstraintKind::regex, "[0-9]{3}"});
  const int32_t letter = tokenizer().encode("a", false, false).front();
  CHECK_FALSE(mask_allows(mask_of(*s), letter));
  CHECK_FALSE(s->accept(letter));
  CHECK_FALSE(s->accept(-1));
  CHECK_FALSE(s->accept(compiler().vocab_size()));
  CHECK(feed(*s, "123") == tokenizer().encode("123", false, false).size());
}

TEST_CASE("every token a regex mask allows keeps the output inside the language", "[grammar]") {
  auto s = compiler().start({ConstraintKind::regex, "(yes|no)-[0-9]+"});
  for (int32_t id : allowed_ids(*s)) {
    const std::string piece = tokenizer().token_to_piece(id, false);
    CHECK((std::string("yes-").rfind(piece, 0) == 0 || std::string("no-").rfind(piece, 0) == 0 ||
           piece.rfind("yes-", 0) == 0 || piece.rfind("no-", 0) == 0));
  }
  const std::string out = walk(*s, 32);
  CHECK(s->complete());
  INFO(out);
  CHECK((out.rfind("yes-", 0) == 0 || out.rfind("no-", 0) == 0));
}

TEST_CASE("json_object walks to a complete JSON value", "[grammar]") {
  auto s = compiler().start({ConstraintKind::json_object, ""});
  const std::string out = walk(*s, 256);
  INFO(out);
  REQUIRE(s->complete());
  CHECK(nlohmann::json::accept(out));
}

TEST_CASE("an EBNF grammar constrains to its language", "[grammar]") {
  auto s = compiler().start({ConstraintKind::ebnf, R"(root ::= "The answer is " ("A" | "B") ".")"});
  const std::string out = walk(*s, 32);
  CHECK(s->complete());
  CHECK((out == "The answer is A." || out == "The answer is B."));
}

TEST_CASE("a schema, regex or grammar that does not compile is a ConstraintError", "[grammar]") {
  CHECK_THROWS_AS(compiler().start({ConstraintKind::json_schema, "{not json"}), ConstraintError);
  CHECK_THROWS_AS(compiler().start({ConstraintKind::json_schema, R"({"type": "frobnicate"})"}), ConstraintError);
  CHECK_THROWS_AS(compiler().start({ConstraintKind::regex, "(unclosed"}), ConstraintError);
  CHECK_THROWS_AS(compiler().start({ConstraintKind::ebnf, "root ::= undefined_rule"}), ConstraintError);
  CHECK_THROWS_AS(compiler().start({ConstraintKind::none, ""}), ConstraintError);
}

TEST_CASE("a JSON schema framed by literal text admits the frame and nothing else", "[grammar]") {
  const std::string schema = R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})";
  const ConstraintSpec spec{ConstraintKind::json_schema, schema, "<tool_call>\n", "\n</tool_call>"};
  auto s = compiler().start(spec);
  const std::string call = "<tool_call>\n{\"city\": \"Paris\"}\n</tool_call>";
  CHECK(feed(*s, call) == tokenizer().encode(call, false, false).size());
  REQUIRE(s->accept(end_token()));
  CHECK(s->complete());
  auto bare = compiler().start(spec);
  CHECK(feed(*bare, "{\"city\": \"Paris\"}") == 0);
  // Quotes, backslashes and control characters in the frame are literal.
  auto odd = compiler().start({ConstraintKind::json_schema, schema, "say \"\\\t", ""});
  const std::string text = "say \"\\\t{\"city\": \"x\"}";
  CHECK(feed(*odd, text) == tokenizer().encode(text, false, false).size());
}

TEST_CASE("a schema refused below us without a message is refused with one", "[grammar]") {
  // constraint_fuzz's input (tests/fuzz/corpus/constraint_fuzz/schema-refused-without-a-message):
  // compiling it threw an exception whose what() was empty, and the client got an empty error.
  const std::string text = std::string("666666666666E66666666666\\U0ws666666s[\\0U\\0Uw \x00" "\x00" "\x00" "\x00" "6666\x02" "]\",\" ict666666", 68);
  try {
    (void)compiler().start({ConstraintKind::json_schema, text});
    FAIL("compiled");
  } catch (const ConstraintError& e) {
    CHECK(std::string(e.what()).size() > 10);
  }
}

TEST_CASE("an 8-digit U escape beyond U+10FFFF is refused before xgrammar parses it", "[grammar]") {
  // xgrammar 0.2.8 overflows a signed int on such an escape (constraint_fuzz's finding,
  // tests/fuzz/known_crashes/); a real code point's escape still compiles.
  CHECK_THROWS_WITH(compiler().start({ConstraintKind::regex, "ws[ \\UAAAAAAAA]"}), Catch::Contains("beyond U+10FFFF"));
  CHECK_THROWS_WITH(compiler().start({ConstraintKind::ebnf, "root ::= [\\UFFFFFFFF]"}), Catch::Contains("beyond U+10FFFF"));
  CHECK_THROWS_WITH(compiler().start({ConstraintKind::json_schema, R"({"type": "string", "pattern": "[\\U80000000]"})"}),
                    Catch::Contains("beyond U+10FFFF"));
  CHECK_NOTHROW(compiler().start({ConstraintKind::regex, "a[\\U0001F600]b"}));
}

TEST_CASE("a backslash-x escape beyond U+10FFFF is refused before xgrammar parses it, however many digits", "[grammar]") {
  // xgrammar 0.2.8 takes every hex digit after \x into a signed int
  // (constraint_fuzz's second finding, 2026-12-06: "\xfbbbbbbb..." in a regex).
  CHECK_THROWS_WITH(compiler().start({ConstraintKind::regex, "(tru\\xfbbbbbbbbbbbbbbbbbbbbbbbbbL)"}),
                    Catch::Contains("a \\x escape beyond U+10FFFF"));
  CHECK_THROWS_WITH(compiler().start({ConstraintKind::regex, "[\\x110000]"}), Catch::Contains("beyond U+10FFFF"));
  CHECK_THROWS_WITH(compiler().start({ConstraintKind::ebnf, "root ::= [\\x7FFFFFFF0]"}), Catch::Contains("beyond U+10FFFF"));
  CHECK_THROWS_WITH(compiler().start({ConstraintKind::json_schema, R"({"type": "string", "pattern": "a\\xFFFFFFFFFF"})"}),
                    Catch::Contains("beyond U+10FFFF"));
  // Leading zeros are no code point's excess; a real one still compiles.
  CHECK_NOTHROW(compiler().start({ConstraintKind::regex, "a[\\x00000041-\\x5A]b"}));
  CHECK_NOTHROW(compiler().start({ConstraintKind::regex, "\\x10FFFF?"}));
}

TEST_CASE("a control character escaped before hex digits in a regex class stays itself, not a longer escape", "[grammar]") {
  // xgrammar 0.2.8's regex converter wrote an escaped control character (\cU, or a
  // backslash before the raw byte) into the EBNF it generates as "\x15", whose reader
  // took the "a" after it as well: the class became U+015A alone (constraint_fuzz's third
  // finding). scripts/patches/ makes it "\u0015".
  for (const std::string regex : {"[\\cUa]+", "[\\\x15" "a]+"}) {
    INFO(regex);
    CHECK(feed(*compiler().start({ConstraintKind::regex, regex}), "aa") == tokenizer().encode("aa", false, false).size());
    CHECK(feed(*compiler().start({ConstraintKind::regex, regex}), "\x15") == 1);
    CHECK(feed(*compiler().start({ConstraintKind::regex, regex}), "\u015a") == 0);
  }
  // A long run of digits overflowed the reader (UBSan); they are the class's own members now.
  const std::string pattern = R"({"type": "string", "pattern": "^[\\cU)" + std::string(40, 'E') + R"(]+$"})";
  CHECK(feed(*compiler().start({ConstraintKind::json_schema, pattern}), "\"EE\"") == tokenizer().encode("\"EE\"", false, false).size());
}
