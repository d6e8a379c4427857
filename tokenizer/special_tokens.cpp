// Tokenizer::encode: where special tokens are recognised in a text, then
// BPE over the raw stretches between them. The merging itself lives in
// tokenizer.cpp.

#include <algorithm>
#include <stdexcept>

#include "tokenizer/tokenizer.hpp"

namespace actorlm {
namespace {

constexpr size_t max_text_bytes = size_t{1} << 30;

void check_size(size_t bytes) {
  if (bytes > max_text_bytes) {
    throw std::invalid_argument("tokenizer: text of " + std::to_string(bytes) + " bytes is over the 1 GiB limit");
  }
}

}  // namespace

// Splits text at special tokens: each special (longest first) is cut out of
// every raw stretch left by the ones before it. Same order as llama.cpp, so
// overlapping candidates resolve the same way. A control token's text seen
// outside the trusted ranges is skipped over (the search goes on one byte
// later, so an overlapping match that does lie inside a trusted range is
// still found) and stays part of the raw stretch around it.
std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special,
                                                      const std::vector<TrustedRange>* trusted) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({0, text.size(), -1});
  bool possible = false;
  for (char c : text) {
    if (special_first_byte_[static_cast<uint8_t>(c)]) {
      possible = true;
      break;
    }
  }
  if (!possible) return frags;

  auto inside_trusted = [trusted](size_t at, size_t len) {
    // The first range ending after `at` is the only one that can hold it.
    auto r = std::upper_bound(trusted->begin(), trusted->end(), at,
                              [](size_t pos, const TrustedRange& range) { return pos < range.end; });
    return r != trusted->end() && r->begin <= at && at + len <= r->end;
  };
  std::vector<Fragment> next;
  for (int32_t id : specials_) {
    TokenType type = data_.types[static_cast<size_t>(id)];
    // User-defined tokens are vocabulary words, not turn markers: matched
    // everywhere, as llama.cpp does even without parse_special.
    const bool control = type == TokenType::control || type == TokenType::unknown;
    const bool checked = control && trusted != nullptr;
    if (control && !trusted && !parse_special) continue;
    if (checked && trusted->empty()) continue;
    const std::string& s = data_.tokens[static_cast<size_t>(id)];
    if (text.find(s) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const size_t end = f.start + f.len;
      const std::string_view window = text.substr(0, end);
      size_t pos = f.start;   // raw text before here has been emitted
      size_t from = f.start;  // the next search starts here
      for (size_t at = window.find(s, from); at != std::string_view::npos; at = window.find(s, from)) {
        if (checked && !inside_trusted(at, s.size())) {
          from = at + 1;
          continue;
        }
        if (at > pos) next.push_back({pos, at - pos, -1});
        next.push_back({at, s.size(), id});
        pos = from = at + s.size();
      }
      if (pos < end) next.push_back({pos, end - pos, -1});
    }
    frags.swap(next);
  }
  return frags;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  check_size(text.size());
  return encode_fragments(text, partition(text, parse_special, nullptr), add_bos);
}

std::vector<int32_t> Tokenizer::encode(std::span<const PromptSegment> segments, bool add_bos) const {
  size_t bytes = 0;
  for (const PromptSegment& s : segments) bytes += s.text.size();
  check_size(bytes);
  std::string text;
  text.reserve(bytes);
  std::vector<TrustedRange> trusted;
  for (const PromptSegment& s : segments) {
    const size_t at = text.size();
    text += s.text;
    if (!s.parse_special || s.text.empty()) continue;
    if (!trusted.empty() && trusted.back().end == at) {
      trusted.back().end = text.size();
    } else {
      trusted.push_back({at, text.size()});
    }
  }
  return encode_fragments(text, partition(text, true, &trusted), add_bos);
}

std::vector<int32_t> Tokenizer::encode_fragments(std::string_view text, const std::vector<Fragment>& frags,
                                                 bool add_bos) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && data_.bos) out.push_back(*data_.bos);
  bool after_special = true;  // SentencePiece puts its space prefix here
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    std::string_view raw = text.substr(f.start, f.len);
    if (data_.kind == VocabData::Kind::spm) {
      spm_fragment(raw, data_.add_space_prefix && after_special, out);
    } else {
      for (std::string_view piece : pre_tokenize(data_.pre, raw)) bpe_piece(piece, out);
    }
    after_special = false;
  }
  return out;
}

}  // namespace actorlm
