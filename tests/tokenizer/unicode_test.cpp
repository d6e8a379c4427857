#include "tokenizer/unicode.hpp"

#include <catch2/catch.hpp>

using namespace actorlm;

namespace {

const std::string fffd = "\xEF\xBF\xBD";

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

TEST_CASE("Ill-formed UTF-8 gets one U+FFFD per maximal subpart, as Python's 'replace'", "[tokenizer][unicode]") {
  // Expected strings are Python's bytes.decode("utf-8", "replace").
  CHECK(unicode::sanitize_utf8("\xE4\xBD" "a") == fffd + "a");
  CHECK(unicode::sanitize_utf8("\xED\xA0\x80") == repeat(fffd, 3));      // surrogate
  CHECK(unicode::sanitize_utf8("\xF0\x9F\x99") == fffd);                  // cut short
  CHECK(unicode::sanitize_utf8("\xC0\xAF") == repeat(fffd, 2));          // overlong
  CHECK(unicode::sanitize_utf8("\xF4\x90\x80\x80") == repeat(fffd, 4));  // above U+10FFFF
  CHECK(unicode::sanitize_utf8("a\x80" "b") == "a" + fffd + "b");
  CHECK(unicode::sanitize_utf8("\xE0\x80\x80") == repeat(fffd, 3));
  CHECK(unicode::sanitize_utf8("\xF0\x9F\x99\x82\xF0") == "\xF0\x9F\x99\x82" + fffd);
  CHECK(unicode::sanitize_utf8("plain ✓ 你好") == "plain ✓ 你好");
}

TEST_CASE("Only a sequence that more bytes could still complete is held back", "[tokenizer][unicode]") {
  CHECK(unicode::complete_utf8_prefix("ab\xF0\x9F\x99") == 2);
  CHECK(unicode::complete_utf8_prefix("ab\xF0\x9F\x99\x82") == 6);
  CHECK(unicode::complete_utf8_prefix("ab\xE4") == 2);
  CHECK(unicode::complete_utf8_prefix("ab\xED\xA0") == 4);  // a surrogate can never complete
  CHECK(unicode::complete_utf8_prefix("ab\x80") == 3);      // stray continuation byte: done
  CHECK(unicode::complete_utf8_prefix("") == 0);
}

TEST_CASE("GPT-2's byte images map every byte to a printable character and back", "[tokenizer][unicode]") {
  for (int b = 0; b < 256; ++b) {
    char32_t c = unicode::byte_to_char(static_cast<uint8_t>(b));
    CHECK(unicode::char_to_byte(c) == b);
    CHECK_FALSE(unicode::is_whitespace(c));
  }
  CHECK(unicode::byte_to_char(' ') == U'\u0120');  // "Ġ"
  CHECK(unicode::byte_to_char('\n') == U'\u010A');  // "Ċ"
  CHECK(unicode::byte_to_char('a') == U'a');
  CHECK(unicode::char_to_byte(U'\u4F60') == -1);
}

TEST_CASE("Character classes come from Unicode categories", "[tokenizer][unicode]") {
  CHECK(unicode::is_letter(U'é'));
  CHECK(unicode::is_letter(U'你'));
  CHECK(unicode::is_letter(U'ǅ'));
  CHECK_FALSE(unicode::is_letter(U'1'));
  CHECK(unicode::is_number(U'٣'));
  CHECK(unicode::is_number(U'Ⅻ'));
  CHECK(unicode::is_number(U'²'));
  CHECK(unicode::is_whitespace(U'\u3000'));
  CHECK(unicode::is_whitespace(U'\u00A0'));
  CHECK_FALSE(unicode::is_whitespace(U'\u200B'));  // zero-width space is not White_Space
}
