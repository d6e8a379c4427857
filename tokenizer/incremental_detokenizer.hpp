#pragma once
// Turns one request's token stream into text deltas for streaming:
//   - only complete UTF-8 leaves: a character split over several tokens
//     (byte-level pieces of an emoji or CJK character, or SentencePiece
//     <0xNN> byte-fallback tokens) waits until its last byte arrives; bytes
//     that can never form a character are replaced by U+FFFD (one per
//     ill-formed subpart);
//   - stop strings: text that might be the start of a stop string is held
//     back until decided; when one matches (also across tokens) the text
//     before it is emitted and nothing from it on ever is. The earliest match
//     wins; among matches at the same place, the first listed. With
//     min_tokens (vLLM's), only a match that ends in the text of token
//     min_tokens + 1 or later counts.
// One instance per request; not thread-safe. The Tokenizer must outlive it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace actorlm {

class IncrementalDetokenizer {
 public:
  struct Delta {
    std::string text;         // new text, valid UTF-8 (may be empty)
    bool stopped = false;     // a stop string matched (now or before); the request is done
    std::string matched_stop;  // the stop string, on the push that matched
  };

  // Empty stop strings are ignored. render_special: show the text of control
  // tokens (e.g. "<|im_end|>") instead of nothing.
  IncrementalDetokenizer(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                         bool render_special = false, int32_t min_tokens = 0);

  Delta push(int32_t token_id);
  // End of the stream (not by stop string): whatever is held back, with an
  // unfinished character as U+FFFD. Empty after a stop.
  std::string flush();
  bool stopped() const { return stopped_; }
  // All text emitted so far (deltas and flush, concatenated).
  const std::string& text() const { return emitted_; }

 private:
  const Tokenizer& tokenizer_;
  std::vector<std::string> stops_;
  bool render_special_;
  int32_t min_tokens_;
  int32_t pushed_ = 0;
  std::string pending_;  // bytes received but not yet emitted
  std::string emitted_;
  bool stopped_ = false;
};

// Replaces ill-formed UTF-8 with U+FFFD (see unicode::sanitize_utf8).
std::string sanitize_utf8(std::string_view s);

}  // namespace actorlm
