#pragma once
// A string that remembers which of its bytes a client supplied. A chat
// template mixes its own markup ("<|im_start|>", which must become a special
// token) with message text (in which the same characters must stay plain, or
// a user could forge turns). Every string the template engine builds carries
// the byte ranges that came from client data; concatenation, slicing,
// stripping and splitting keep them exact, and any other transformation of a
// string with client bytes in it marks its whole result as client text (the
// safe side).

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actorlm::jinja {

// Byte offset of every code point's start in s, then s.size() (Python
// counts, indexes and slices strings by code point).
std::vector<size_t> code_points(std::string_view s);

class Text {
 public:
  Text() = default;
  // All markup (template literals, numbers, bos_token...).
  explicit Text(std::string s) : s_(std::move(s)) {}
  static Text client(std::string s);

  const std::string& str() const { return s_; }
  size_t size() const { return s_.size(); }
  bool empty() const { return s_.empty(); }
  bool has_client() const { return !client_.empty(); }
  // Marked safe (Jinja's Markup, from the safe and escape filters): what is
  // added to it with + is HTML-escaped first.
  bool safe() const { return safe_; }
  void set_safe(bool safe) { safe_ = safe; }
  // Client byte ranges [begin, end), sorted, disjoint, not adjacent.
  const std::vector<std::pair<size_t, size_t>>& client_ranges() const { return client_; }

  void append(const Text& other);
  void append(std::string_view markup);
  // Bytes [begin, end) with their marks.
  Text substr(size_t begin, size_t end) const;
  // s, marked as client text in full if any byte of *this is (for results of
  // transformations that do not keep byte positions).
  Text derived(std::string s) const;

 private:
  void mark(size_t begin, size_t end);
  std::string s_;
  std::vector<std::pair<size_t, size_t>> client_;
  bool safe_ = false;
};

}  // namespace actorlm::jinja
