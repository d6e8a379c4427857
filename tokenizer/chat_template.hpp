#pragma once
// Chat prompt formats. The model's Jinja template (tokenizer.chat_template)
// is recognised by its markers rather than executed: ChatML (<|im_start|>,
// SmolLM, Qwen) and Llama 3 (<|start_header_id|>). A ChatML template that
// inserts a default system message when the conversation has none (SmolLM2
// does) keeps that behaviour, with the text taken from the template itself.
// Anything else falls back to ChatML with a warning.

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace actorlm {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class ChatTemplate {
 public:
  enum class Format { chatml, llama3 };

  // warning: set when the template was not recognised.
  static ChatTemplate from_source(const std::string& jinja, std::string* warning);
  explicit ChatTemplate(Format format, std::optional<std::string> default_system = std::nullopt);

  Format format() const { return format_; }
  const std::optional<std::string>& default_system() const { return default_system_; }
  // The prompt text; special tokens appear as their text, so encode it with
  // parse_special = true.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  // Text of the token that ends an assistant turn.
  std::string end_of_turn() const;

 private:
  Format format_;
  std::optional<std::string> default_system_;
};

}  // namespace actorlm
