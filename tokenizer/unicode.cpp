#include "tokenizer/unicode.hpp"

#include <utf8proc.h>

#include <array>

namespace actorlm::unicode {

std::vector<char32_t> decode_utf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                              static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(static_cast<char32_t>(cp));
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> off;
  size_t i = 0;
  while (i < s.size()) {
    off.push_back(i);
    utf8proc_int32_t cp;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                              static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    i += n <= 0 ? 1 : static_cast<size_t>(n);
  }
  off.push_back(s.size());
  return off;
}

void append_utf8(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string encode_utf8(char32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

Utf8Step utf8_step(std::string_view s, size_t at) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(at);
  if (b0 < 0x80) return {1, Utf8Step::Kind::valid};
  // Allowed range of the second byte by lead byte; it excludes overlong
  // forms, surrogates and code points above U+10FFFF.
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {1, Utf8Step::Kind::invalid};
  }
  for (size_t k = 1; k < need; ++k) {
    if (at + k >= s.size()) return {k, Utf8Step::Kind::truncated};
    const unsigned char b = byte(at + k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {k, Utf8Step::Kind::invalid};
  }
  return {need, Utf8Step::Kind::valid};
}

size_t complete_utf8_prefix(std::string_view s) {
  size_t at = 0;
  while (at < s.size()) {
    Utf8Step step = utf8_step(s, at);
    if (step.kind == Utf8Step::Kind::truncated) return at;
    at += step.len;
  }
  return at;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t at = 0;
  while (at < s.size()) {
    Utf8Step step = utf8_step(s, at);
    if (step.kind == Utf8Step::Kind::valid) {
      out.append(s.substr(at, step.len));
    } else {
      out += "\xEF\xBF\xBD";
    }
    at += step.len;
  }
  return out;
}

bool is_letter(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool is_number(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

bool is_whitespace(char32_t cp) {
  // The Unicode White_Space property.
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

namespace {
struct ByteMap {
  std::array<char32_t, 256> to_char{};
  ByteMap() {
    // Printable Latin-1 bytes map to themselves; the rest are moved, in
    // order, to U+0100 upwards so every byte has a visible character.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

char32_t byte_to_char(uint8_t b) { return byte_map().to_char[b]; }

int char_to_byte(char32_t cp) {
  if (cp < 256) {
    bool printable = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF);
    return printable ? static_cast<int>(cp) : -1;
  }
  for (int b = 0; b < 256; ++b) {
    if (byte_map().to_char[static_cast<size_t>(b)] == cp) return b;
  }
  return -1;
}

}  // namespace actorlm::unicode
