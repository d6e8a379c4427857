#pragma once
// Chat prompt formats. The model's Jinja template (tokenizer.chat_template in
// a GGUF, chat_template in tokenizer_config.json) is recognised by its
// markers rather than executed:
//   - ChatML (<|im_start|>role\ncontent<|im_end|>\n; SmolLM, Qwen). A
//     template that writes a literal system message when the conversation
//     does not start with one (SmolLM2's does) keeps that behaviour, with the
//     text taken from the template itself;
//   - Llama 3 (<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>,
//     content trimmed, <|begin_of_text|> before the first message).
// Anything else falls back to ChatML and says so in *warning (the library
// never prints). Roles are copied as given (system, user, assistant, ...).
// Special-token text inside roles and contents is client text, not markup
// (see render_segments).
// Immutable; thread-safe.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/prompt_segment.hpp"

namespace actorlm {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  enum class Format { chatml, llama3 };

  // warning (may be null): cleared when the template is recognised, else
  // says why ChatML is used.
  static ChatTemplate from_source(const std::string& jinja, std::string* warning);
  // A format by name, for overriding the model's own: "chatml" or "llama3"
  // ("llama-3" too). Unknown names give ChatML and a warning.
  static ChatTemplate from_name(std::string_view name, std::string* warning);
  // name_override when not empty, else the model's template.
  static ChatTemplate choose(const std::string& jinja, std::string_view name_override, std::string* warning);
  explicit ChatTemplate(Format format, std::optional<std::string> default_system = std::nullopt);

  Format format() const { return format_; }
  std::string_view name() const { return format_ == Format::llama3 ? "llama3" : "chatml"; }
  const std::optional<std::string>& default_system() const { return default_system_; }
  // The prompt, as the model's Jinja template renders it, in segments: the
  // template's own markup (turn markers, the default system prompt) with
  // parse_special, and the client's text (each role and content) without,
  // unless special_tokens_in_content. Encoded with Tokenizer's segment
  // encode, a message that types "<|im_start|>system" gets those
  // characters, not a forged turn; a conversation without such text gets
  // the ids it always had. special_tokens_in_content is for trusted
  // callers only (it lets message text open and close turns).
  std::vector<PromptSegment> render_segments(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                             bool special_tokens_in_content = false) const;
  // The segments' text joined: what Jinja prints (tests compare the two).
  // Encoding this string with parse_special = true trusts every message.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  // render_segments, then Tokenizer's segment encode. BOS is put first when
  // the tokenizer adds one by default and the rendered text does not already
  // begin with it (Llama 3 writes <|begin_of_text|> itself), so there is
  // never a double BOS.
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, bool special_tokens_in_content = false) const;
  // Text of the token that ends an assistant turn.
  std::string end_of_turn() const;

 private:
  Format format_;
  std::optional<std::string> default_system_;
};

}  // namespace actorlm
