#pragma once
// Turns one request's token stream into text deltas for streaming:
//   - only complete UTF-8 leaves (a character split over several tokens, or
//     over byte-fallback tokens, waits until its last byte arrives; bytes
//     that can never form a character are replaced by U+FFFD);
//   - stop strings: text that might be the start of a stop string is held
//     back until decided; when one matches (even across tokens) the text
//     before it is emitted and nothing after it ever is.
// One instance per request; not thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace actorlm {

class IncrementalDetokenizer {
 public:
  struct Delta {
    std::string text;         // new text, valid UTF-8 (may be empty)
    bool stopped = false;     // a stop string matched; the request is done
    std::string matched_stop;
  };

  IncrementalDetokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                         bool render_special = false);

  Delta push(int32_t token_id);
  // End of the stream (not by stop string): whatever is held back.
  std::string flush();
  bool stopped() const { return stopped_; }
  // All text emitted so far.
  const std::string& text() const { return emitted_; }

 private:
  const Tokenizer& tokenizer_;
  std::vector<std::string> stops_;
  bool render_special_;
  std::string pending_;
  std::string emitted_;
  bool stopped_ = false;
};

// Replaces invalid UTF-8 sequences with U+FFFD.
std::string sanitize_utf8(const std::string& s);

}  // namespace actorlm
