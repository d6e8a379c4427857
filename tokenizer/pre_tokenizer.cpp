#include "tokenizer/pre_tokenizer.hpp"

#include <utf8proc.h>

#include <span>

#include "tokenizer/unicode.hpp"

namespace actorlm {
namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

bool is_other(char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }
bool is_newline(char32_t c) { return c == '\r' || c == '\n'; }
bool is_punct(char32_t c) {  // \p{P}
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}
bool is_mark(char32_t c) {  // \p{M}
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME;
}
// Letters with case (Lu, Ll, Lt): the explicit Latin/Greek/Cyrillic/...
// ranges of DeepSeek LLM's letter class are these.
bool is_cased_letter(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
// Han (U+4E00-U+9FA5), the blocks below it from Samaritan on (U+0800-U+4E00)
// and Hangul syllables and jamo (U+AC00-U+D7FF), as the DeepSeek tokenizers
// group them.
bool is_cjk(char32_t c) { return (c >= 0x0800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF); }

using Cp = std::vector<char32_t>;
// A matcher returns the length of its match at pos within [pos, end), or 0.
using Matcher = size_t (*)(const Cp&, size_t pos, size_t end);

// Runs of class members, optionally after one whitespace character.
template <bool (*member)(char32_t), bool leading_space>
size_t run(const Cp& cp, size_t pos, size_t end) {
  size_t i = pos;
  if (leading_space && is_whitespace(cp[i]) && i + 1 < end && member(cp[i + 1])) ++i;
  while (i < end && member(cp[i])) ++i;
  return i > pos && member(cp[i - 1]) ? i - pos : 0;
}
size_t one_newline(const Cp& cp, size_t pos, size_t) { return is_newline(cp[pos]) ? 1 : 0; }
size_t one_number(const Cp& cp, size_t pos, size_t) { return is_number(cp[pos]) ? 1 : 0; }
size_t three_digits(const Cp& cp, size_t pos, size_t end) {
  auto digit = [&](size_t i) { return i < end && cp[i] >= '0' && cp[i] <= '9'; };
  return digit(pos) && digit(pos + 1) && digit(pos + 2) ? 3 : 0;
}
// [\p{P}\$\+<=>\^~\|]+ (falcon adds the backtick).
bool punct_or_symbol(char32_t c) { return is_punct(c) || (c < 128 && std::string_view("$+<=>^~|").find(static_cast<char>(c)) != std::string_view::npos); }
bool punct_or_symbol_tick(char32_t c) { return c == '`' || punct_or_symbol(c); }
// DeepSeek LLM's punctuation: ASCII ! to / and : to ~, their full-width forms,
// quotation marks U+2018-U+201F and the ideographic space, comma and stop.
bool deepseek_punct(char32_t c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '~') || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}
size_t trailing_whitespace(const Cp& cp, size_t pos, size_t end) {
  for (size_t i = pos; i < end; ++i) {
    if (!is_whitespace(cp[i])) return 0;
  }
  return end - pos;
}
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

// marks: Qwen 3.5 counts combining marks as letters ([\p{L}\p{M}]+).
size_t llama3_piece(const std::vector<char32_t>& cp, size_t pos, size_t end, size_t max_digits, bool marks = false) {
  if (size_t n = contraction(cp, pos, end, true)) return n;
  char32_t c = cp[pos];
  auto letter = [&](char32_t x) { return is_letter(x) || (marks && is_mark(x)); };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t i = pos;
    if (!is_newline(c) && !letter(c) && !is_number(c) && pos + 1 < end && letter(cp[pos + 1])) ++i;
    if (letter(cp[i])) {
      while (i < end && letter(cp[i])) ++i;
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
    auto other = [&](char32_t x) { return is_other(x) && !(marks && is_mark(x)); };
    size_t i = pos + ((c == ' ' && pos + 1 < end && other(cp[pos + 1])) ? 1 : 0);
    if (other(cp[i])) {
      while (i < end && other(cp[i])) ++i;
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

size_t gpt2_all(const Cp& cp, size_t pos, size_t end) { return gpt2_piece(cp, pos, end); }
size_t llama3_all(const Cp& cp, size_t pos, size_t end) { return llama3_piece(cp, pos, end, 3); }
size_t qwen2_all(const Cp& cp, size_t pos, size_t end) { return llama3_piece(cp, pos, end, 1); }
size_t qwen35_all(const Cp& cp, size_t pos, size_t end) { return llama3_piece(cp, pos, end, 1, true); }

// Each family's rules as llama.cpp applies them: one pattern after another,
// each splitting every piece the previous left into its matches and the
// stretches between them.
std::span<const Matcher> stages(PreTokenizer kind) {
  static constexpr Matcher gpt2[] = {gpt2_all};
  static constexpr Matcher smollm[] = {one_number, gpt2_all};
  static constexpr Matcher llama3[] = {llama3_all};
  static constexpr Matcher qwen2[] = {qwen2_all};
  static constexpr Matcher qwen35[] = {qwen35_all};
  static constexpr Matcher default_bpe[] = {run<punct_or_symbol, false>, gpt2_all, run<is_number, false>, three_digits};
  static constexpr Matcher falcon[] = {run<punct_or_symbol_tick, false>, gpt2_all, three_digits};
  static constexpr Matcher deepseek_llm[] = {one_newline,         run<is_cased_letter, true>, run<deepseek_punct, true>,
                                             trailing_whitespace, run<is_cjk, false>,         run<is_number, false>};
  static constexpr Matcher deepseek_coder[] = {one_newline, run<is_letter, true>, run<is_punct, true>, run<is_cjk, false>,
                                               one_number};
  switch (kind) {
    case PreTokenizer::smollm: return smollm;
    case PreTokenizer::llama3: return llama3;
    case PreTokenizer::qwen2: return qwen2;
    case PreTokenizer::qwen35: return qwen35;
    case PreTokenizer::default_bpe: return default_bpe;
    case PreTokenizer::falcon: return falcon;
    case PreTokenizer::deepseek_llm: return deepseek_llm;
    case PreTokenizer::deepseek_coder: return deepseek_coder;
    case PreTokenizer::gpt2: break;
  }
  return gpt2;
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(const std::string& name, bool* known) {
  if (known) *known = true;
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "codeshell" || name == "command-r") {
    return PreTokenizer::smollm;
  }
  if (name == "llama3" || name == "llama-bpe" || name == "llama-v3" || name == "dbrx" || name == "smaug-bpe")
    return PreTokenizer::llama3;
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::qwen2;
  if (name == "qwen35") return PreTokenizer::qwen35;
  if (name == "falcon") return PreTokenizer::falcon;
  if (name == "deepseek-llm") return PreTokenizer::deepseek_llm;
  if (name == "deepseek-coder") return PreTokenizer::deepseek_coder;
  // No name at all: llama.cpp's default rules (GPT-NeoX, Aquila...).
  if (name == "default" || name.empty()) return PreTokenizer::default_bpe;
  if (name == "gpt2" || name == "gpt-2" || name == "mpt" || name == "olmo" || name == "jais") return PreTokenizer::gpt2;
  if (known) *known = false;
  return PreTokenizer::gpt2;
}

std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text) {
  const Cp cp = unicode::decode_utf8(text);
  const std::vector<size_t> off = unicode::utf8_offsets(text);
  std::vector<std::pair<size_t, size_t>> pieces{{0, cp.size()}}, next;
  if (cp.empty()) pieces.clear();
  for (Matcher match : stages(kind)) {
    next.clear();
    for (auto [begin, end] : pieces) {
      size_t gap = begin, pos = begin;
      while (pos < end) {
        const size_t n = match(cp, pos, end);
        if (n == 0) {
          ++pos;
          continue;
        }
        if (gap < pos) next.emplace_back(gap, pos);
        next.emplace_back(pos, pos + n);
        pos += n;
        gap = pos;
      }
      if (gap < end) next.emplace_back(gap, end);
    }
    pieces.swap(next);
  }
  std::vector<std::string_view> out;
  out.reserve(pieces.size());
  for (auto [b, e] : pieces) out.push_back(text.substr(off[b], off[e] - off[b]));
  return out;
}

}  // namespace actorlm
