#pragma once
// One stretch of a prompt and where it came from. A chat template renders a
// conversation as a sequence of these: its own markup (turn markers such as
// "<|im_start|>", which must become special tokens) and the text a client
// supplied (roles, message content), in which special-token text must stay
// plain characters so that a user cannot forge turns by typing them.
// Tokenizer::encode(std::span<const PromptSegment>, ...) reads them.

#include <string>

namespace actorlm {

struct PromptSegment {
  std::string text;
  // true: text of control/unknown tokens in this stretch becomes those
  // tokens (template markup, trusted callers); false: it is encoded as the
  // characters it is made of (client-supplied text).
  bool parse_special = false;
};

}  // namespace actorlm
