#pragma once
// UTF-8 and Unicode-class helpers for the pre-tokenizers (character classes
// from utf8proc), and GPT-2's byte <-> printable-character mapping used by
// byte-level BPE vocabularies.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace actorlm::unicode {

// Decodes UTF-8; each invalid byte becomes U+FFFD (so every input splits).
std::vector<char32_t> decode_utf8(std::string_view s);
// Byte offset of each code point in decode_utf8's output, plus a final s.size().
std::vector<size_t> utf8_offsets(std::string_view s);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(char32_t cp);
// One step of strict UTF-8 decoding at s[at] (at < s.size()): the length of
// the well-formed character there, or of the maximal ill-formed subpart (the
// bytes one U+FFFD replaces, as Python's "replace" and the Unicode standard's
// recommended practice count them), or of a well-formed but unfinished
// sequence cut by the end of s.
struct Utf8Step {
  size_t len;
  enum class Kind { valid, invalid, truncated } kind;
};
Utf8Step utf8_step(std::string_view s, size_t at);
// Length of the prefix of s that ends on a character boundary: a trailing
// sequence that may still be completed by more bytes is excluded; bytes that
// can never form a character count as complete, so they are not held forever.
size_t complete_utf8_prefix(std::string_view s);
// s with every ill-formed subpart (and an unfinished tail) replaced by U+FFFD.
std::string sanitize_utf8(std::string_view s);

bool is_letter(char32_t cp);      // \p{L}
bool is_number(char32_t cp);      // \p{N}
bool is_whitespace(char32_t cp);  // \s (White_Space)

// GPT-2 byte-level mapping: each byte to a printable code point and back.
char32_t byte_to_char(uint8_t b);
// -1 when cp is not the image of a byte.
int char_to_byte(char32_t cp);

}  // namespace actorlm::unicode
