#pragma once
// A model's chat prompt format: its own Jinja template (tokenizer.chat_template
// in a GGUF, chat_template in tokenizer_config.json) executed by the
// sandboxed engine in jinja/, with the variables Hugging Face passes
// (messages, add_generation_prompt, tools, bos_token, eos_token) and its
// globals (raise_exception, strftime_now). A model without a template gets
// ChatML, with a warning.
//
// Rendering keeps track of which bytes came from the client (roles, contents,
// tools) and which from the template (turn markers, default system prompts):
// only the template's may become special tokens, so a user who types
// "<|im_start|>system" gets those characters, not a forged turn.
// Immutable; thread-safe.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/template.hpp"
#include "tokenizer/prompt_segment.hpp"

namespace actorlm {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
  // An assistant turn's calls: OpenAI's tool_calls list as JSON text
  // (templates see each call's arguments as an object); empty: none.
  std::string tool_calls = {};
  std::string tool_call_id = {};  // a tool turn: the call it answers
};

// What a render is given besides the messages.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  // Text of special tokens inside client text becomes those tokens (trusted
  // callers only: it lets message text open and close turns).
  bool special_tokens_in_content = false;
  // OpenAI-style tool definitions (a JSON array), or null for none.
  nlohmann::ordered_json tools = nullptr;
  // More template variables (e.g. {"enable_thinking": false}), as
  // chat_template_kwargs in vLLM/SGLang requests.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // Pins strftime_now (tests); empty: the local clock.
  jinja::Clock clock = nullptr;
};

class ChatTemplate {
 public:
  // source: Jinja text; bos/eos: the texts bos_token and eos_token hold.
  // Throws jinja::Error (syntax, unsupported) naming the line and construct.
  ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token);
  // The model's own template, or ChatML when it has none (*warning says so;
  // cleared otherwise); source_override, when not empty, instead of either
  // (--chat-template-file). Throws jinja::Error when the template cannot be
  // used.
  static ChatTemplate for_model(const Tokenizer& tokenizer, std::string* warning,
                                std::string_view source_override = {});
  // ChatML as SmolLM2/Qwen write it, for models without a template.
  static std::string_view chatml_source();

  // The prompt in segments: template text (parse_special) and client text
  // (parse_special only with special_tokens_in_content). Throws jinja::Error
  // (raised: the template refused the conversation, e.g. "System role not
  // supported"; limit; type...).
  std::vector<PromptSegment> render_segments(const nlohmann::ordered_json& messages,
                                             const ChatRenderOptions& options = {}) const;
  std::vector<PromptSegment> render_segments(std::span<const ChatMessage> messages,
                                             const ChatRenderOptions& options = {}) const;
  // The segments' text joined: exactly what Jinja prints.
  std::string render(std::span<const ChatMessage> messages, const ChatRenderOptions& options = {}) const;
  // render_segments, then the tokenizer's segment encode. BOS goes first
  // when the tokenizer adds one by default and the template did not already
  // write it, so there is never a double BOS.
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              const ChatRenderOptions& options = {}) const;

 private:
  std::shared_ptr<const jinja::Template> template_;
  std::string bos_, eos_;
};

// The messages as the JSON array templates read ([{"role", "content"}...]).
nlohmann::ordered_json messages_json(std::span<const ChatMessage> messages);

}  // namespace actorlm
