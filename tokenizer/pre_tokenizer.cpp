#include "tokenizer/pre_tokenizer.hpp"

#include "tokenizer/unicode.hpp"

namespace actorlm {
namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

bool is_other(char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }
bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }
char32_t lower(char32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// Length (in code points) of a contraction at cp[pos], or 0.
size_t contraction(const std::vector<char32_t>& cp, size_t pos, size_t end, bool any_case) {
  if (cp[pos] != '\'' || pos + 1 >= end) return 0;
  auto f = [&](char32_t c) { return any_case ? lower(c) : c; };
  char32_t a = f(cp[pos + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 < end) {
    char32_t b = f(cp[pos + 2]);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// \s+(?!\S) then \s+: a whitespace run, leaving its last character to the
// next piece when a non-space follows (so " word" keeps its space).
size_t whitespace_run(const std::vector<char32_t>& cp, size_t pos, size_t end) {
  size_t i = pos;
  while (i < end && is_whitespace(cp[i])) ++i;
  if (i < end && i - pos > 1) return i - pos - 1;
  return i - pos;
}

size_t gpt2_piece(const std::vector<char32_t>& cp, size_t pos, size_t end) {
  if (size_t n = contraction(cp, pos, end, false)) return n;
  size_t off = (cp[pos] == ' ' && pos + 1 < end) ? 1 : 0;
  char32_t c = cp[pos + off];
  size_t i = pos + off;
  if (is_letter(c)) {
    while (i < end && is_letter(cp[i])) ++i;
    return i - pos;
  }
  if (is_number(c)) {
    while (i < end && is_number(cp[i])) ++i;
    return i - pos;
  }
  if (is_other(c)) {
    while (i < end && is_other(cp[i])) ++i;
    return i - pos;
  }
  return whitespace_run(cp, pos, end);
}

size_t llama3_piece(const std::vector<char32_t>& cp, size_t pos, size_t end, size_t max_digits) {
  if (size_t n = contraction(cp, pos, end, true)) return n;
  char32_t c = cp[pos];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t i = pos;
    if (!is_newline(c) && !is_letter(c) && !is_number(c) && pos + 1 < end && is_letter(cp[pos + 1])) ++i;
    if (is_letter(cp[i])) {
      while (i < end && is_letter(cp[i])) ++i;
      return i - pos;
    }
  }
  if (is_number(c)) {
    size_t i = pos;
    while (i < end && i - pos < max_digits && is_number(cp[i])) ++i;
    return i - pos;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  {
    size_t i = pos + ((c == ' ' && pos + 1 < end && is_other(cp[pos + 1])) ? 1 : 0);
    if (is_other(cp[i])) {
      while (i < end && is_other(cp[i])) ++i;
      while (i < end && is_newline(cp[i])) ++i;
      return i - pos;
    }
  }
  // \s*[\r\n]+ : the whitespace run up to its last newline.
  size_t last_nl = 0;
  bool has_nl = false;
  for (size_t i = pos; i < end && is_whitespace(cp[i]); ++i) {
    if (is_newline(cp[i])) {
      last_nl = i;
      has_nl = true;
    }
  }
  if (has_nl) return last_nl + 1 - pos;
  return whitespace_run(cp, pos, end);
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(const std::string& name, bool* known) {
  if (known) *known = true;
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "codeshell") return PreTokenizer::smollm;
  if (name == "llama3" || name == "llama-bpe" || name == "llama-v3" || name == "dbrx" || name == "smaug-bpe")
    return PreTokenizer::llama3;
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::qwen2;
  if (name == "gpt2" || name == "gpt-2" || name == "default" || name.empty()) return PreTokenizer::gpt2;
  if (known) *known = false;
  return PreTokenizer::gpt2;
}

std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text) {
  std::vector<char32_t> cp = unicode::decode_utf8(text);
  std::vector<size_t> off = unicode::utf8_offsets(text);
  std::vector<std::string_view> pieces;
  auto emit = [&](size_t from, size_t to) { pieces.push_back(text.substr(off[from], off[to] - off[from])); };

  // Segments the main rule runs within: smollm first isolates every digit.
  std::vector<std::pair<size_t, size_t>> segments;
  if (kind == PreTokenizer::smollm) {
    size_t start = 0;
    for (size_t i = 0; i < cp.size(); ++i) {
      if (is_number(cp[i])) {
        if (start < i) segments.emplace_back(start, i);
        segments.emplace_back(i, i + 1);
        start = i + 1;
      }
    }
    if (start < cp.size()) segments.emplace_back(start, cp.size());
  } else {
    segments.emplace_back(0, cp.size());
  }

  for (auto [begin, end] : segments) {
    size_t pos = begin;
    while (pos < end) {
      size_t n;
      switch (kind) {
        case PreTokenizer::llama3: n = llama3_piece(cp, pos, end, 3); break;
        case PreTokenizer::qwen2: n = llama3_piece(cp, pos, end, 1); break;
        default: n = gpt2_piece(cp, pos, end); break;
      }
      if (n == 0) n = 1;  // cannot happen; guarantees progress
      emit(pos, pos + n);
      pos += n;
    }
  }
  return pieces;
}

}  // namespace actorlm
