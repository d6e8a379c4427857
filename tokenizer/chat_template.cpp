#include "tokenizer/chat_template.hpp"

#include "tokenizer/tokenizer.hpp"

namespace actorlm {
namespace {

const char* const whitespace = " \t\n\r\v\f";

// Jinja's trim filter (Python str.strip) on ASCII whitespace.
std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(whitespace);
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(whitespace);
  return s.substr(b, e - b + 1);
}

// The literal default system prompt of a ChatML template, if it has one: a
// "<|im_start|>system\n...<|im_end|>" string inside a branch taken when the
// first message is not a system message. Text with Jinja syntax or quotes in
// it is an expression, not a literal, so it does not count.
std::optional<std::string> literal_default_system(const std::string& jinja) {
  const std::string open = "<|im_start|>system\n";
  if (jinja.find("!= 'system'") == std::string::npos && jinja.find("!= \"system\"") == std::string::npos) {
    return std::nullopt;
  }
  size_t at = jinja.find(open);
  if (at == std::string::npos) return std::nullopt;
  size_t end = jinja.find("<|im_end|>", at);
  if (end == std::string::npos) return std::nullopt;
  std::string text = jinja.substr(at + open.size(), end - at - open.size());
  if (text.find_first_of("{}'\"") != std::string::npos) return std::nullopt;
  return text;
}

}  // namespace

ChatTemplate::ChatTemplate(Format format, std::optional<std::string> default_system)
    : format_(format), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::from_source(const std::string& jinja, std::string* warning) {
  if (warning) warning->clear();
  if (jinja.find("<|start_header_id|>") != std::string::npos) return ChatTemplate(Format::llama3);
  if (jinja.find("<|im_start|>") != std::string::npos) return ChatTemplate(Format::chatml, literal_default_system(jinja));
  if (warning) {
    *warning = jinja.empty() ? "the model has no chat template; using ChatML"
                             : "unrecognised chat template (neither ChatML nor Llama 3); using ChatML";
  }
  return ChatTemplate(Format::chatml);
}

ChatTemplate ChatTemplate::from_name(std::string_view name, std::string* warning) {
  if (warning) warning->clear();
  if (name == "chatml") return ChatTemplate(Format::chatml);
  if (name == "llama3" || name == "llama-3") return ChatTemplate(Format::llama3);
  if (warning) *warning = "unknown chat template name '" + std::string(name) + "' (known: chatml, llama3); using ChatML";
  return ChatTemplate(Format::chatml);
}

ChatTemplate ChatTemplate::choose(const std::string& jinja, std::string_view name_override, std::string* warning) {
  return name_override.empty() ? from_source(jinja, warning) : from_name(name_override, warning);
}

std::vector<PromptSegment> ChatTemplate::render_segments(std::span<const ChatMessage> messages,
                                                         bool add_generation_prompt,
                                                         bool special_tokens_in_content) const {
  std::vector<PromptSegment> out;
  auto markup = [&](std::string text) { out.push_back({std::move(text), true}); };
  auto client = [&](std::string text) { out.push_back({std::move(text), special_tokens_in_content}); };
  if (format_ == Format::llama3) {
    if (!messages.empty()) markup("<|begin_of_text|>");
    for (const auto& m : messages) {
      markup("<|start_header_id|>");
      client(m.role);
      markup("<|end_header_id|>\n\n");
      client(trim(m.content));
      markup("<|eot_id|>");
    }
    if (add_generation_prompt) markup("<|start_header_id|>assistant<|end_header_id|>\n\n");
    return out;
  }
  // As the template's loop does: the default system message goes before the
  // first message, so an empty conversation gets none. Its text comes from
  // the model's template, so it counts as markup.
  if (default_system_ && !messages.empty() && messages.front().role != "system") {
    markup("<|im_start|>system\n" + *default_system_ + "<|im_end|>\n");
  }
  for (const auto& m : messages) {
    markup("<|im_start|>");
    client(m.role);
    markup("\n");
    client(m.content);
    markup("<|im_end|>\n");
  }
  if (add_generation_prompt) markup("<|im_start|>assistant\n");
  return out;
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string out;
  for (const PromptSegment& s : render_segments(messages, add_generation_prompt)) out += s.text;
  return out;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, bool special_tokens_in_content) const {
  std::vector<int32_t> ids =
      tokenizer.encode(render_segments(messages, add_generation_prompt, special_tokens_in_content), false);
  auto bos = tokenizer.bos_id();
  if (tokenizer.add_bos_by_default() && bos && (ids.empty() || ids.front() != *bos)) ids.insert(ids.begin(), *bos);
  return ids;
}

std::string ChatTemplate::end_of_turn() const { return format_ == Format::llama3 ? "<|eot_id|>" : "<|im_end|>"; }

}  // namespace actorlm
