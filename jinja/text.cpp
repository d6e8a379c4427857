#include "jinja/text.hpp"

#include <algorithm>

namespace actorlm::jinja {

std::vector<size_t> code_points(std::string_view s) {
  std::vector<size_t> at;
  at.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) at.push_back(i);
  }
  at.push_back(s.size());
  return at;
}

Text Text::client(std::string s) {
  Text t(std::move(s));
  t.mark(0, t.s_.size());
  return t;
}

void Text::mark(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!client_.empty() && client_.back().second >= begin) {
    client_.back().second = std::max(client_.back().second, end);
  } else {
    client_.emplace_back(begin, end);
  }
}

void Text::append(const Text& other) {
  const size_t base = s_.size();
  s_ += other.s_;
  for (const auto& [b, e] : other.client_) mark(base + b, base + e);
}

void Text::append(std::string_view markup) { s_ += markup; }

Text Text::substr(size_t begin, size_t end) const {
  end = std::min(end, s_.size());
  begin = std::min(begin, end);
  Text t(s_.substr(begin, end - begin));
  for (const auto& [b, e] : client_) {
    const size_t lo = std::max(b, begin), hi = std::min(e, end);
    if (lo < hi) t.mark(lo - begin, hi - begin);
  }
  return t;
}

Text Text::derived(std::string s) const { return has_client() ? client(std::move(s)) : Text(std::move(s)); }

}  // namespace actorlm::jinja
