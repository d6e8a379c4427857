#include "tokenizer/incremental_detokenizer.hpp"

#include <utf8proc.h>

#include "tokenizer/unicode.hpp"

namespace actorlm {

std::string sanitize_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                              static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                                               bool render_special)
    : tokenizer_(tokenizer), render_special_(render_special) {
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
  pending_ += tokenizer_.token_bytes(token_id, render_special_);

  // Earliest complete stop string wins.
  size_t stop_at = std::string::npos;
  for (const auto& s : stops_) {
    size_t at = pending_.find(s);
    if (at != std::string::npos && at < stop_at) {
      stop_at = at;
      d.matched_stop = s;
    }
  }
  if (stop_at != std::string::npos) {
    d.text = sanitize_utf8(pending_.substr(0, stop_at));
    d.stopped = stopped_ = true;
    pending_.clear();
    emitted_ += d.text;
    return d;
  }

  // Emit what is certain: complete characters that cannot begin a stop string.
  size_t ready = unicode::complete_utf8_prefix(pending_);
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, ready); k > hold; --k) {
      if (pending_.compare(ready - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  size_t emit = ready - hold;
  d.text = sanitize_utf8(pending_.substr(0, emit));
  pending_.erase(0, emit);
  emitted_ += d.text;
  return d;
}

std::string IncrementalDetokenizer::flush() {
  if (stopped_) return {};
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  emitted_ += rest;
  return rest;
}

}  // namespace actorlm
