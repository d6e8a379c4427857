#include "tokenizer/incremental_detokenizer.hpp"

#include <algorithm>

#include "tokenizer/unicode.hpp"

namespace actorlm {

std::string sanitize_utf8(std::string_view s) { return unicode::sanitize_utf8(s); }

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                                               bool render_special, int32_t min_tokens)
    : tokenizer_(tokenizer), render_special_(render_special), min_tokens_(min_tokens) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

IncrementalDetokenizer::Delta IncrementalDetokenizer::push(int32_t token_id) {
  Delta d;
  if (stopped_) {
    d.stopped = true;
    return d;
  }
  const size_t old = pending_.size();
  pending_ += tokenizer_.token_to_piece(token_id, render_special_);

  // Only matches that end in this token's bytes: before min_tokens nothing
  // matched, so pending_ may hold a whole stop string from then (a prefix of
  // a longer one, held back), which must not count now.
  const bool armed = ++pushed_ > min_tokens_;
  size_t stop_at = std::string::npos;
  for (size_t k = 0; armed && k < stops_.size(); ++k) {
    const std::string& s = stops_[k];
    size_t at = pending_.find(s, old >= s.size() ? old - s.size() + 1 : 0);
    if (at < stop_at) {
      stop_at = at;
      d.matched_stop = s;
    }
  }
  if (stop_at != std::string::npos) {
    d.text = unicode::sanitize_utf8(std::string_view(pending_).substr(0, stop_at));
    d.stopped = stopped_ = true;
    pending_.clear();
    emitted_ += d.text;
    return d;
  }

  // Emit what is certain: whole characters that cannot be the start of a
  // stop string. hold = the longest tail of the ready bytes that is a proper
  // prefix of some stop string.
  const size_t ready = unicode::complete_utf8_prefix(pending_);
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, ready); k > hold; --k) {
      if (pending_.compare(ready - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  const size_t emit = ready - hold;
  d.text = unicode::sanitize_utf8(std::string_view(pending_).substr(0, emit));
  pending_.erase(0, emit);
  emitted_ += d.text;
  return d;
}

std::string IncrementalDetokenizer::flush() {
  if (stopped_) return {};
  std::string rest = unicode::sanitize_utf8(pending_);
  pending_.clear();
  emitted_ += rest;
  return rest;
}

}  // namespace actorlm
