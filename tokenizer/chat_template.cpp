#include "tokenizer/chat_template.hpp"

namespace actorlm {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

}  // namespace

ChatTemplate::ChatTemplate(Format format, std::optional<std::string> default_system)
    : format_(format), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::from_source(const std::string& jinja, std::string* warning) {
  if (jinja.find("<|start_header_id|>") != std::string::npos) return ChatTemplate(Format::llama3);
  if (jinja.find("<|im_start|>") != std::string::npos) {
    // A literal "<|im_start|>system\n...<|im_end|>" inside a branch taken when
    // the first message is not a system message is the default system prompt.
    std::optional<std::string> system;
    const std::string open = "<|im_start|>system\n";
    size_t at = jinja.find(open);
    if (at != std::string::npos && jinja.find("!= 'system'") != std::string::npos) {
      size_t end = jinja.find("<|im_end|>", at);
      if (end != std::string::npos) system = jinja.substr(at + open.size(), end - at - open.size());
    }
    return ChatTemplate(Format::chatml, system);
  }
  if (warning) {
    *warning = jinja.empty() ? "the model has no chat template; using ChatML"
                             : "unrecognised chat template; using ChatML";
  }
  return ChatTemplate(Format::chatml);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  if (format_ == Format::llama3) {
    out = "<|begin_of_text|>";
    for (const auto& m : messages) {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  if (default_system_ && (messages.empty() || messages.front().role != "system")) {
    out += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
  }
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string ChatTemplate::end_of_turn() const { return format_ == Format::llama3 ? "<|eot_id|>" : "<|im_end|>"; }

}  // namespace actorlm
